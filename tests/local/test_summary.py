"""The summary ``tandem up`` ends with, and its plot's series: pure functions of what the
clients saw, the pods' lives and the decisions."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from tandem.local.summary import (
    UNFINISHED,
    PodLife,
    RequestRecord,
    ScaleEvent,
    build_series,
    compute_peak_replicas,
    compute_summary,
    format_summary,
)
from tandem.policy.config import LatencyTargets

TARGETS = LatencyTargets(ttft_s=1.0, ttft_percentile=90, itl_s=0.05, itl_percentile=90)


def _served(sent_s: float, ttft_s: float, gap_s: float, tokens: int) -> RequestRecord:
    first = sent_s + ttft_s
    times = [first + k * gap_s for k in range(tokens)]
    return RequestRecord(sent_s, 100, tokens, times, finish_reason="length")


def test_counts_causes_and_attainment() -> None:
    records = [
        *(_served(i, 0.2, 0.02, 10) for i in range(7)),  # within both targets
        _served(7, 1.5, 0.02, 10),  # TTFT over its target
        _served(8, 0.2, 0.08, 10),  # ITL over its target
        _served(9, 0.2, 0.02, 1),  # one token: no ITL, meets the TTFT target
        RequestRecord(10, 100, 10, error="HTTP 503"),
        RequestRecord(11, 100, 10, [11.3, 11.32], error="stream cut"),
        RequestRecord(12, 100, 10, [12.3]),  # still running at the end
    ]
    s = compute_summary(records, TARGETS, [], {}, [], fitted=2)
    assert (s.sent, s.served, s.failed, s.fitted) == (13, 10, 3, 2)
    assert s.failures == {"HTTP 503": 1, "stream cut": 1, UNFINISHED: 1}
    assert s.attainment == 8 / 13  # failed requests never meet the targets
    assert s.output_tokens == 7 * 10 + 10 + 10 + 1 + 2 + 1


def test_percentiles_against_the_targets() -> None:
    # TTFTs 0.1 .. 1.0 s and one more 0.1 s; gaps 10 ms except one request's 100 ms.
    records = [_served(i, (i + 1) / 10, 0.01, 5) for i in range(10)]
    records.append(_served(20, 0.1, 0.1, 5))
    s = compute_summary(records, TARGETS, [], {}, [])
    # Nearest rank of 11 values: p50 is the 6th, p90 the 10th, p99 the 11th.
    assert math.isclose(s.ttft.p50_s, 0.5) and math.isclose(s.ttft.at_percentile_s, 0.9)
    assert math.isclose(s.ttft.p99_s, 1.0) and s.ttft.met
    assert math.isclose(s.itl.p50_s, 0.01) and math.isclose(s.itl.p99_s, 0.1)
    assert s.itl.percentile == 90 and s.itl.met
    slow = compute_summary([_served(0, 2.0, 0.01, 3)], TARGETS, [], {}, [])
    assert slow.ttft.met is False and slow.attainment == 0.0


def test_no_requests_and_no_targets() -> None:
    none = LatencyTargets(ttft_s=None, ttft_percentile=90, itl_s=None, itl_percentile=90)
    s = compute_summary([], none, [], {"pool": 1}, [])
    assert s.sent == 0 and math.isnan(s.attainment) and s.ttft.met is None
    assert s.gpu_s == {"pool": 0.0}
    text = "\n".join(format_summary(s, "t"))
    assert "no target" in text and "attainment  -" in text


def test_gpu_seconds_count_every_pod_life_times_its_gpus() -> None:
    lives = [
        PodLife("prefill", 0.0, 60.0),
        PodLife("decode", 0.0, 60.0),
        PodLife("decode", 20.0, 50.0),  # scaled up, then drained and reaped
    ]
    s = compute_summary([], TARGETS, lives, {"prefill": 1, "decode": 2}, [])
    assert s.pod_s == {"prefill": 60.0, "decode": 90.0}
    assert s.gpu_s == {"prefill": 60.0, "decode": 180.0}
    assert s.peak_replicas == {"decode": 2, "prefill": 1}


def test_a_replacement_at_the_same_instant_is_not_a_peak() -> None:
    lives = [PodLife("decode", 0.0, 10.0), PodLife("decode", 10.0, 20.0)]
    assert compute_peak_replicas(lives) == {"decode": 1}


def test_the_text_names_every_figure_and_decision() -> None:
    decisions = [ScaleEvent(31.0, "decode", 1, 2, "decode 1→2: 9 sequences / batch 4")]
    records = [_served(0, 0.3, 0.02, 5), RequestRecord(1, 100, 5, error="HTTP 429")]
    s = compute_summary(records, TARGETS, [PodLife("decode", 0, 10)], {"decode": 1}, decisions)
    text = "\n".join(format_summary(s, "tandem up: chat, 60s"))
    for words in (
        "2 sent, 1 served, 1 failed (HTTP 429: 1)",
        "TTFT        p50 0.3 s",
        "target p90 <= 1 s: met",
        "target p90 <= 50 ms: met",
        "attainment  50.0 %",
        "decode         1      10.0      10.0",
        "scale decisions: 1",
        "t=   31.0s  decode 1→2: 9 sequences / batch 4",
    ):
        assert words in text, (words, text)
    assert ScaleEvent(31.0, "decode", 1, 2, "r").to_dict() == {
        "t": 31.0, "pool": "decode", "from": 1, "to": 2, "reason": "r"
    }  # fmt: skip


def test_the_series_bins_load_and_latency_by_interval() -> None:
    records = [
        _served(0.5, 0.3, 0.02, 3),  # first token at 0.8 s: interval (0, 1]
        _served(1.5, 0.9, 0.02, 3),  # first token at 2.4 s: interval (2, 3]
    ]
    pools = {"decode": [{"t": 0.0, "desired": 1, "ready": 0}, {"t": 2.0, "desired": 2, "ready": 1}]}
    load, run = build_series(records, pools, TARGETS, end_s=3.0, step_s=1.0)
    assert list(load.t_s) == [0.0, 1.0, 2.0, 3.0]
    assert list(load.requests_per_s) == [0.0, 1.0, 1.0, 0.0]
    assert list(load.prompt_tokens_per_s) == [0.0, 100.0, 100.0, 0.0]
    assert run.replicas == {"decode": [1, 1, 2, 2]} and run.ready == {"decode": [0, 0, 1, 1]}
    assert math.isnan(run.ttft_s[2]) and math.isclose(run.ttft_s[1], 0.3)
    assert math.isclose(run.ttft_s[3], 0.9) and math.isclose(run.itl_s[3], 0.02)


_record = st.builds(
    RequestRecord,
    sent_s=st.floats(0, 100),
    prompt_tokens=st.integers(1, 4096),
    max_tokens=st.integers(1, 512),
    token_s=st.lists(st.floats(0, 200), max_size=20).map(sorted),
    finish_reason=st.sampled_from([None, "length", "stop"]),
    error=st.sampled_from([None, None, "HTTP 503", "stream cut"]),
)


@settings(max_examples=200, deadline=None)
@given(records=st.lists(_record, max_size=40), gpus=st.integers(0, 8))
def test_every_request_is_served_or_failed_once(records: list[RequestRecord], gpus: int) -> None:
    s = compute_summary(records, TARGETS, [PodLife("decode", 0, 5)], {"decode": gpus}, [])
    assert s.served + s.failed == s.sent == len(records)
    assert s.attainment * s.sent <= s.served + 1e-9 if records else math.isnan(s.attainment)
    assert s.gpu_s["decode"] == 5 * gpus
    assert s.ttft.p50_s <= s.ttft.p90_s <= s.ttft.p99_s or math.isnan(s.ttft.p50_s)
