"""Trace readers: both formats, real files, and bad rows reported with their line."""

from __future__ import annotations

import pytest

from tandem.traces.parse import (
    TraceError,
    parse_azure_csv,
    parse_jsonl,
    parse_timestamp,
    parse_trace,
    slice_trace,
    trace_span_s,
)
from tests.sim.factories import CODE, CONV

AZURE = """TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:15:46.6805900,374,44
2023-11-16 18:15:50.9951690,396,109
2023-11-16 18:15:47.0000000,10,0
"""


def test_azure_rows_become_relative_sorted_arrivals() -> None:
    reqs = parse_azure_csv(AZURE)
    assert [r.prompt_tokens for r in reqs] == [374, 10, 396]
    assert reqs[0].arrival_s == 0.0
    assert reqs[1].arrival_s == pytest.approx(0.31941, abs=1e-6)
    assert reqs[2].arrival_s == pytest.approx(4.314579, abs=1e-6)
    assert reqs[1].output_tokens == 1  # an answer has at least its first token


def test_azure_columns_in_any_order_and_extra_columns() -> None:
    text = "GeneratedTokens,Other,TIMESTAMP,ContextTokens\n5,x,2023-01-01 00:00:00,7\n"
    (req,) = parse_azure_csv(text)
    assert (req.prompt_tokens, req.output_tokens) == (7, 5)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty file"),
        ("TIMESTAMP,ContextTokens\n", "line 1: header lacks GeneratedTokens"),
        (AZURE + "2023-11-16 18:15:51.0,abc,3\n", "line 5: ContextTokens must be an integer"),
        (AZURE + "2023-11-16 18:15:51.0,0,3\n", "line 5: ContextTokens must be an integer >= 1"),
        (AZURE + "2023-11-16 18:15:51.0,4,-1\n", "line 5: GeneratedTokens must be an integer"),
        (AZURE + "yesterday,4,1\n", "line 5: TIMESTAMP 'yesterday' is not"),
        (AZURE + "2023-11-16 18:15:51.0,4\n", "line 5: expected 3 columns, got 2"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n", "no requests"),
    ],
)
def test_bad_azure_rows_name_the_line(text: str, message: str) -> None:
    with pytest.raises(TraceError, match=message):
        parse_azure_csv(text, "t.csv")


def test_jsonl_mooncake_lines() -> None:
    text = (
        '{"timestamp": 1500, "input_length": 100, "output_length": 20, "hash_ids": [1, 2]}\n'
        "\n"
        '{"timestamp": 500, "input_length": 50, "output_length": 0}\n'
    )
    reqs = parse_jsonl(text)
    assert [(r.arrival_s, r.prompt_tokens, r.output_tokens) for r in reqs] == [
        (0.0, 50, 1),
        (1.0, 100, 20),
    ]
    assert parse_trace(text) == reqs


def test_jsonl_sessions_and_shared_prefixes_are_read_when_present() -> None:
    text = (
        '{"timestamp": 0, "input_length": 900, "output_length": 40, "session_id": 3, '
        '"prefix_tokens": 0}\n'
        '{"timestamp": 9000, "input_length": 1100, "output_length": 20, "session_id": 3, '
        '"prefix_tokens": 940}\n'
        '{"timestamp": 9500, "input_length": 50, "output_length": 5}\n'
    )
    a, b, c = parse_jsonl(text)
    assert (a.session_id, a.prefix_tokens) == (3, 0)
    assert (b.session_id, b.prefix_tokens, b.arrival_s) == (3, 940, 9.0)
    assert (c.session_id, c.prefix_tokens) == (None, 0)  # older traces read as before


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "line 2: not JSON"),
        (
            '{"timestamp": 1, "input_length": 3, "output_length": 1, "prefix_tokens": 3}',
            r"line 2: prefix_tokens \(3\) must be less than input_length \(3\)",
        ),
        (
            '{"timestamp": 1, "input_length": 3, "output_length": 1, "session_id": -2}',
            "line 2: session_id must be an integer >= 0",
        ),
        (
            '{"timestamp": 1, "input_length": 3, "output_length": 1, "prefix_tokens": "a"}',
            "line 2: prefix_tokens must be an integer >= 0",
        ),
        ("[1, 2]", "line 2: expected an object"),
        ('{"timestamp": 1, "input_length": 3}', "line 2: missing output_length"),
        ('{"timestamp": -1, "input_length": 3, "output_length": 1}', "line 2: timestamp must be"),
        ('{"timestamp": 1, "input_length": 2.5, "output_length": 1}', "line 2: input_length must"),
        ('{"timestamp": true, "input_length": 2, "output_length": 1}', "line 2: timestamp must"),
    ],
)
def test_bad_jsonl_lines_name_the_line(line: str, message: str) -> None:
    text = '{"timestamp": 0, "input_length": 5, "output_length": 1}\n' + line + "\n"
    with pytest.raises(TraceError, match=message):
        parse_jsonl(text, "t.jsonl")


def test_timestamp_parsing() -> None:
    assert parse_timestamp("1970-01-01 00:01:00") == 60.0
    assert parse_timestamp("1970-01-02T00:00:00.5") == 86400.5
    with pytest.raises(TraceError):
        parse_timestamp("1970-13-01 00:00:00")


@pytest.mark.parametrize(("path", "rows", "span_s"), [(CODE, 8819, 3436.0), (CONV, 19366, 3502.0)])
def test_the_shared_azure_traces_parse_whole(path: object, rows: int, span_s: float) -> None:
    from pathlib import Path

    assert isinstance(path, Path)
    reqs = parse_trace(path.read_text(), path.name)
    assert len(reqs) == rows
    assert trace_span_s(reqs) == pytest.approx(span_s, abs=1.0)


def test_slice_shifts_to_zero() -> None:
    reqs = parse_azure_csv(AZURE)
    part = slice_trace(reqs, 0.3, 10.0)
    assert [r.prompt_tokens for r in part] == [10, 396]
    assert part[0].arrival_s == pytest.approx(0.01941, abs=1e-6)
