"""``tandem trace generate`` and ``tandem trace describe``: the command line of the family."""

from __future__ import annotations

from pathlib import Path

import pytest

from tandem.cli import main
from tandem.traces.family import FAMILY
from tandem.traces.parse import parse_trace
from tests.sim.factories import CONV


def test_generate_writes_the_trace_the_simulator_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "t.jsonl"
    args = ["trace", "generate", "--kind", "long30", "--seed", "4", "--duration", "5m"]
    assert main([*args, "-o", str(out)]) == 0
    trace = parse_trace(out.read_text(), out.name)
    assert trace and trace[-1].arrival_s < 300.0
    said = capsys.readouterr().out
    assert f"{out}: long30 seed 4: {len(trace)} requests over" in said
    again = tmp_path / "again.jsonl"
    assert main([*args, "-o", str(again)]) == 0
    assert again.read_bytes() == out.read_bytes()
    other = tmp_path / "other.jsonl"
    assert main(["trace", "generate", "--kind", "long30", "--seed", "5", "--duration", "300",
                 "-o", str(other)]) == 0  # fmt: skip
    assert other.read_bytes() != out.read_bytes()


def test_the_rate_flag_scales_the_arrivals(tmp_path: Path) -> None:
    counts = []
    for rate in ("1", "4"):
        out = tmp_path / f"r{rate}.jsonl"
        args = ["trace", "generate", "--kind", "long30", "--duration", "600", "--rate", rate]
        assert main([*args, "-o", str(out)]) == 0
        counts.append(len(out.read_text().splitlines()))
    assert 3.0 <= counts[1] / counts[0] <= 5.0


def test_help_lists_every_kind(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["trace", "generate", "--help"])
    text = capsys.readouterr().out
    for name in FAMILY:
        assert name in text
    for flag in ("--kind", "--seed", "--duration", "-o"):
        assert flag in text


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--kind", "poem"], "unknown trace kind 'poem'; kinds: chat-diurnal"),
        (["--kind", "long30", "--duration", "0"], "--duration must be a length of time > 0"),
        (["--kind", "long30", "--duration", "5q"], "--duration '5q': invalid duration"),
        (["--kind", "long30", "--rate", "-2"], "rate must be a number of requests per second"),
        (["--kind", "long30", "--duration", "1ms"], "draws no request"),
    ],
)
def test_bad_flags_fail_with_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    out = tmp_path / "t.jsonl"
    assert main(["trace", "generate", *flags, "-o", str(out)]) == 1
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_an_unwritable_output_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "missing" / "t.jsonl"
    assert main(["trace", "generate", "--kind", "long30", "--duration", "60", "-o", str(out)]) == 1
    assert str(out) in capsys.readouterr().err


def test_describe_summarizes_any_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["trace", "describe", str(CONV)]) == 0
    said = capsys.readouterr().out
    assert "19366 requests over 58.4 min" in said and "follow-up turns 0%" in said
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 0}\n')
    assert main(["trace", "describe", str(bad)]) == 1
    assert "line 1: missing input_length, output_length" in capsys.readouterr().err
