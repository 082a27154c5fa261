"""The synthetic trace family: deterministic for a seed, within its stated bounds, and
each member showing the axis it claims (long share, swings, bursts, mix shift, reuse)."""

from __future__ import annotations

import itertools
import random
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tandem.traces.family import FAMILY, family_member
from tandem.traces.generate import (
    CLASSES,
    MAX_CONTEXT_TOKENS,
    MAX_OUTPUT_TOKENS,
    Lognormal,
    Pareto,
    TraceShape,
    burst_windows,
    generate_trace,
)
from tandem.traces.parse import TraceRequest, parse_jsonl
from tandem.traces.rate import scale_rate, with_warmup
from tandem.traces.write import format_jsonl

KINDS = st.sampled_from(sorted(FAMILY))
SEEDS = st.integers(min_value=0, max_value=2**32 - 1)
#: Prompts of the ``long`` class are at least this long; the other classes rarely are.
LONG_FLOOR = 12_288


def test_the_same_seed_gives_the_same_trace_and_another_seed_another() -> None:
    shape = family_member("long15-multiturn")
    a = generate_trace(shape, 7, 600.0)
    assert a == generate_trace(shape, 7, 600.0)
    assert a != generate_trace(shape, 8, 600.0)


def test_a_pinned_head_stays_the_same() -> None:
    # Only random.Random.random() is drawn, whose sequence Python keeps across versions;
    # this pins the first requests so a change of the generator is a deliberate one.
    head = generate_trace(family_member("long30"), 1, 60.0)[:3]
    assert [(r.arrival_s, r.prompt_tokens, r.output_tokens) for r in head] == [
        (0.0, 38070, 352),
        (0.623, 424, 308),
        (1.232, 50204, 629),
    ]


@settings(max_examples=40, deadline=None)
@given(kind=KINDS, seed=SEEDS, duration_s=st.floats(min_value=30.0, max_value=900.0))
def test_every_member_stays_within_its_bounds(kind: str, seed: int, duration_s: float) -> None:
    trace = generate_trace(FAMILY[kind], seed, duration_s)
    assert trace, "a few minutes of any member hold requests"
    assert trace[0].arrival_s == 0.0
    assert all(a.arrival_s <= b.arrival_s for a, b in itertools.pairwise(trace))
    assert trace[-1].arrival_s < duration_s
    for r in trace:
        assert r.arrival_s * 1000 == pytest.approx(round(r.arrival_s * 1000), abs=1e-6)
        assert r.prompt_tokens >= 1 and 1 <= r.output_tokens <= MAX_OUTPUT_TOKENS
        assert r.prompt_tokens + r.output_tokens <= MAX_CONTEXT_TOKENS
        assert 0 <= r.prefix_tokens < r.prompt_tokens
        assert r.session_id is not None


@settings(max_examples=25, deadline=None)
@given(kind=KINDS, seed=SEEDS)
def test_a_follow_up_turn_reuses_its_whole_previous_turn(kind: str, seed: int) -> None:
    sessions: dict[int, list[TraceRequest]] = {}
    for r in generate_trace(FAMILY[kind], seed, 900.0):
        assert r.session_id is not None
        sessions.setdefault(r.session_id, []).append(r)
    for turns in sessions.values():
        assert turns[0].prefix_tokens == 0
        for before, after in itertools.pairwise(turns):
            assert after.arrival_s > before.arrival_s
            assert after.prefix_tokens == before.prompt_tokens + before.output_tokens
            assert after.prompt_tokens > after.prefix_tokens  # a new message on top


@settings(max_examples=20, deadline=None)
@given(kind=KINDS, seed=SEEDS)
def test_json_lines_read_back_as_the_same_trace(kind: str, seed: int) -> None:
    trace = generate_trace(FAMILY[kind], seed, 300.0)
    assert parse_jsonl(format_jsonl(trace)) == trace


@pytest.mark.parametrize("kind", sorted(FAMILY))
def test_the_long_context_share_is_the_stated_one(kind: str) -> None:
    shape = FAMILY[kind]
    trace = generate_trace(shape, 11, 7200.0)
    firsts = [r for r in trace if r.prefix_tokens == 0]  # a conversation's first turn
    share = sum(r.prompt_tokens >= LONG_FLOOR for r in firsts) / len(firsts)
    # The other classes' lognormal tails add well under 1 % above 12k tokens.
    assert shape.long_share() - 0.03 <= share <= shape.long_share() + 0.03, share


def test_the_family_spans_the_long_context_axis_from_0_to_30_percent() -> None:
    shares = sorted(s.long_share() for s in FAMILY.values())
    assert shares[0] == 0.0 and shares[-1] == pytest.approx(0.3)
    assert len({round(s, 2) for s in shares}) >= 4


def test_prompts_reach_the_whole_context() -> None:
    trace = generate_trace(family_member("long30"), 3, 3600.0)
    assert max(r.prompt_tokens for r in trace) > 120_000


@given(seed=SEEDS, tokens=st.sampled_from([16_384, 32_768, 65_536, 100_000]))
@settings(max_examples=10, deadline=None)
def test_the_pareto_tail_follows_its_survival_function(seed: int, tokens: int) -> None:
    law = CLASSES["long"].prompt
    assert isinstance(law, Pareto)
    rng = random.Random(seed)
    draws = [law.draw(rng) for _ in range(20_000)]
    assert all(law.low <= d <= law.high for d in draws)
    share = sum(d > tokens for d in draws) / len(draws)
    assert share == pytest.approx(law.survival(tokens), abs=0.015)


def test_the_lognormal_median_is_its_median() -> None:
    law = Lognormal(700, 1.1)
    rng = random.Random(5)
    draws = sorted(law.draw(rng) for _ in range(20_001))
    assert draws[10_000] == pytest.approx(700, rel=0.04)


def test_the_diurnal_swing_puts_the_peak_half_way() -> None:
    shape = family_member("chat-diurnal")  # amplitude 0.6
    trace = generate_trace(shape, 2, 3600.0)
    middle = sum(900 <= r.arrival_s < 2700 for r in trace)
    # Integral of 1 - a cos(2 pi s) over the middle half over the rest: (0.5 + a/pi) /
    # (0.5 - a/pi) = 2.24 for a = 0.6.
    assert 1.9 <= middle / (len(trace) - middle) <= 2.6


def test_a_flat_shape_has_no_swing() -> None:
    shape = replace(family_member("long30"), diurnal_amplitude=0.0)
    trace = generate_trace(shape, 2, 3600.0)
    middle = sum(900 <= r.arrival_s < 2700 for r in trace)
    assert 0.9 <= middle / (len(trace) - middle) <= 1.1


def test_bursts_arrive_many_times_faster() -> None:
    shape = family_member("long5-bursty")  # 8 an hour, 10 s each, 8x
    windows = burst_windows(shape, 4, 3600.0)
    assert len(windows) >= 3
    trace = generate_trace(shape, 4, 3600.0)
    inside = sum(any(a <= r.arrival_s < b for a, b in windows) for r in trace)
    burst_s = sum(b - a for a, b in windows)
    inside_rate = inside / burst_s
    outside_rate = (len(trace) - inside) / (3600.0 - burst_s)
    assert inside_rate > 4 * outside_rate


def test_the_mix_shifts_from_decode_bound_to_prefill_bound() -> None:
    trace = generate_trace(family_member("mix-shift"), 6, 3600.0)
    tenth = len(trace) // 10
    head, tail = trace[:tenth], trace[-tenth:]
    assert sum(r.output_tokens for r in head) > 2 * sum(r.output_tokens for r in tail)
    assert sum(r.prompt_tokens for r in tail) > 5 * sum(r.prompt_tokens for r in head)
    # The long class ramps from 0 to 20 % of the mix: 1 % over the first tenth, 19 % over
    # the last.
    assert sum(r.prompt_tokens >= LONG_FLOOR for r in head) / tenth < 0.03
    assert sum(r.prompt_tokens >= LONG_FLOOR for r in tail) / tenth > 0.14


@pytest.mark.parametrize("kind", [k for k, s in FAMILY.items() if s.turns_mean > 1])
def test_multi_turn_members_reuse_prefixes(kind: str) -> None:
    shape = FAMILY[kind]
    trace = generate_trace(shape, 9, 3600.0)
    follow_ups = sum(r.prefix_tokens > 0 for r in trace) / len(trace)
    # Geometric turns of mean T: a share 1 - 1/T of turns are follow-ups, fewer when a
    # conversation is cut by the context or the end of the trace.
    assert 0.5 * (1 - 1 / shape.turns_mean) <= follow_ups <= 1 - 1 / shape.turns_mean + 0.03


@pytest.mark.parametrize("kind", sorted(FAMILY))
def test_the_mean_rate_is_the_stated_one(kind: str) -> None:
    shape = FAMILY[kind]
    rate = 2 * shape.rate_per_s
    trace = generate_trace(shape, 12, 7200.0, rate_per_s=rate)
    # Bursts add (multiplier - 1) x the rate over their windows; the swing averages out
    # over whole periods; conversations cut at the end and at the context shave a little.
    burst_s = sum(b - a for a, b in burst_windows(shape, 12, 7200.0))
    expected = rate * (1 + burst_s * (shape.burst_multiplier - 1) / 7200.0)
    assert 0.85 * expected <= len(trace) / 7200.0 <= 1.05 * expected


def test_bad_shapes_name_the_field() -> None:
    base = family_member("long30")
    with pytest.raises(ValueError, match="unknown request class poem; classes: chat"):
        replace(base, mix_start={"poem": 1.0})
    with pytest.raises(ValueError, match=r"diurnal_amplitude must be in \[0, 1\)"):
        replace(base, diurnal_amplitude=1.5)
    with pytest.raises(ValueError, match="turns_mean must be >= 1"):
        replace(base, turns_mean=0.5)
    with pytest.raises(ValueError, match="duration must be"):
        generate_trace(base, 0, 0.0)
    with pytest.raises(ValueError, match="rate must be"):
        generate_trace(base, 0, 60.0, rate_per_s=-1.0)
    with pytest.raises(ValueError, match="unknown trace kind 'x'; kinds: chat-diurnal"):
        family_member("x")
    assert isinstance(base, TraceShape)


def test_rate_scaling_and_warm_up_keep_sessions_and_prefixes() -> None:
    trace = generate_trace(family_member("agent-sessions"), 1, 300.0)
    scaled = scale_rate(trace, 2.5, seed=1)
    keys = {(r.prompt_tokens, r.output_tokens, r.session_id, r.prefix_tokens) for r in trace}
    assert {
        (r.prompt_tokens, r.output_tokens, r.session_id, r.prefix_tokens) for r in scaled
    } == keys
    arrivals, first, _ = with_warmup(trace, 60.0)
    assert {(r.session_id, r.prefix_tokens) for r in arrivals[first:]} == {
        (r.session_id, r.prefix_tokens) for r in trace
    }
