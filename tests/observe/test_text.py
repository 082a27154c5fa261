"""The exposition-format parser, by example and against prometheus_client's own output
and parsers (both the classic text format and OpenMetrics)."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as parse_openmetrics_reference,
)
from prometheus_client.parser import text_string_to_metric_families as parse_text_reference
from prometheus_client.registry import Collector

from tandem.observe.text import ExpositionError, Sample, canonical_name, parse_exposition

PAGE = """\
# HELP vllm:num_requests_waiting Requests waiting, with a "quote" and a \\\\ backslash.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="llama"} 3.0
# a free-form comment
vllm:num_requests_waiting{engine="1",model_name="llama",} 4 1700000000000

weird{path="C:\\\\dir\\"x\\"\\nnext", empty=""} +Inf
nan_metric NaN
neg{a="b"}\t-Inf\t
   padded_metric 1e-3
"""


def test_reads_samples_labels_values_and_timestamps() -> None:
    page = parse_exposition(PAGE)
    names = [s.name for s in page.samples]
    assert names == [
        "vllm:num_requests_waiting",
        "vllm:num_requests_waiting",
        "weird",
        "nan_metric",
        "neg",
        "padded_metric",
    ]
    first, second, weird, nan, neg, padded = page.samples
    assert first == Sample("vllm:num_requests_waiting", {"engine": "0", "model_name": "llama"}, 3)
    assert second.timestamp == 1700000000000 and second.value == 4
    assert weird.labels == {"path": 'C:\\dir"x"\nnext', "empty": ""}
    assert weird.value == math.inf
    assert math.isnan(nan.value)
    assert neg.value == -math.inf
    assert padded.value == 0.001
    assert page.types == {"vllm_num_requests_waiting": "gauge"}


def test_openmetrics_eof_exemplars_and_quoted_names() -> None:
    page = parse_exposition(
        "# TYPE req counter\n"
        "# UNIT req_seconds seconds\n"
        'req_total{code="200"} 7 1700000000.5 # {trace_id="abc"} 0.3 1700000000.1\n'
        '{"my.dotted.metric", "label.with.dots"="v"} 2\n'
        "# EOF\n"
        "after_eof 1\n"
    )
    assert [s.name for s in page.samples] == ["req_total", "my.dotted.metric"]
    assert page.samples[0].value == 7 and page.samples[0].timestamp == 1700000000.5
    assert page.samples[1].labels == {"label.with.dots": "v"}


def test_canonical_name_joins_both_vllm_spellings() -> None:
    page = parse_exposition("vllm:kv_cache_usage_perc 0.5\nvllm_kv_cache_usage_perc 0.25\n")
    assert canonical_name("vllm:kv_cache_usage_perc") == "vllm_kv_cache_usage_perc"
    assert [s.value for s in page.by_name()["vllm_kv_cache_usage_perc"]] == [0.5, 0.25]


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ('m{a="1"', "expected ',' or '}'"),
        ('m{a="1",', "expected a label name"),
        ("m", "expected a value"),
        ("m 1 2 3", "expected a value"),
        ("m abc", "not a number"),
        ("m 1_000", "not a number"),
        ('m{a="x\\q"} 1', "invalid escape"),
        ('m{a="1",a="2"} 1', "duplicate label"),
        ("m{a=1} 1", "quoted value"),
        ('m{a="1"}1', "space before the value"),
        ("{} 1", "no metric name"),
        ('m{a="1" b="2"} 1', "expected ','"),
    ],
)
def test_malformed_lines_name_the_line(line: str, reason: str) -> None:
    with pytest.raises(ExpositionError) as caught:
        parse_exposition("ok 1\n" + line + "\n")
    assert caught.value.line_no == 2
    assert reason in str(caught.value)


class FamiliesCollector(Collector):
    """Gauge families with arbitrary label values, values and timestamps."""

    def __init__(self, rows: list[tuple[str, str, float, float | None]]) -> None:
        self.rows = rows

    def collect(self) -> Iterator[Metric]:
        for i, (name, label_value, value, timestamp) in enumerate(self.rows):
            family = GaugeMetricFamily(f"{name}_{i}", "Help with \\ and\nnewline.", labels=["l"])
            family.add_metric([label_value], value, timestamp=timestamp)
            yield family


metric_names = st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,12}(:[a-z_]{1,6})?", fullmatch=True)
label_values = st.text(max_size=20)
values = st.floats(allow_nan=True, allow_infinity=True)
timestamps = st.none() | st.integers(min_value=0, max_value=4_000_000_000).map(float)
rows = st.lists(st.tuples(metric_names, label_values, values, timestamps), max_size=6)


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


@settings(max_examples=150, deadline=None)
@given(rows=rows)
def test_agrees_with_prometheus_client_on_both_formats(
    rows: list[tuple[str, str, float, float | None]],
) -> None:
    registry = CollectorRegistry()
    registry.register(FamiliesCollector(rows))
    for text, reference in (
        (generate_latest(registry).decode(), parse_text_reference),
        (generate_openmetrics(registry).decode(), parse_openmetrics_reference),  # type: ignore[no-untyped-call]
    ):
        ours = parse_exposition(text).samples
        theirs = [s for family in reference(text) for s in family.samples]
        assert len(ours) == len(theirs) == len(rows)
        for mine, ref in zip(ours, theirs, strict=True):
            assert canonical_name(mine.name) == canonical_name(ref.name)
            assert dict(mine.labels) == dict(ref.labels)
            assert _same(mine.value, ref.value)
            assert (mine.timestamp is None) == (ref.timestamp is None)


def test_only_reads_the_named_metrics_in_either_spelling() -> None:
    page = parse_exposition(
        "vllm_num_requests_waiting 1\n"
        'vllm:num_requests_running{engine="0"} 2\n'
        "vllm:e2e_request_latency_seconds_bucket{this line is not read\n"
        'vllm:time_to_first_token_seconds_bucket{le="+Inf"} 3\n'
        '{"vllm:num_requests_waiting"} 4\n',
        only=[
            "vllm:num_requests_waiting",
            "vllm_num_requests_running",
            "vllm:time_to_first_token_seconds",
        ],
    )
    assert [(s.name, s.value) for s in page.samples] == [
        ("vllm_num_requests_waiting", 1),
        ("vllm:num_requests_running", 2),
        ("vllm:time_to_first_token_seconds_bucket", 3),
        ("vllm:num_requests_waiting", 4),
    ]
