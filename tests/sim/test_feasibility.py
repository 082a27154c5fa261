"""Requests no fleet size could serve in time, in simulation: the figures count them apart,
the router's accounting finds them, the autoscaler sizes for throughput only; and prefill
bursts absorbed by decode pods."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from tandem.sim.compare.results import RunResult, summarize
from tandem.sim.compare.runs import Scenario, run_policy
from tandem.sim.fleet.least import LeastLatencies
from tandem.sim.fleet.simulation import Simulation, SimulationOptions
from tandem.sim.fleet.spec import build_fleet_plan
from tandem.traces.parse import TraceRequest
from tests.sim.factories import make_isvc, make_scenario

Runs = dict[str, tuple[RunResult, Simulation]]


def long_context_trace(
    n: int = 300, rate_per_s: float = 1.0, long_share: float = 0.3, seed: int = 0
) -> list[TraceRequest]:
    """Chat prompts of 500-3,000 tokens, and ``long_share`` of 30k-60k (beyond what one
    H100 prefills for Llama-3.1-8B within 1 s)."""
    rng = random.Random(seed)
    out, t = [], 0.0
    for _ in range(n):
        long = rng.random() < long_share
        prompt = rng.randint(30_000, 60_000) if long else rng.randint(500, 3_000)
        out.append(TraceRequest(t, prompt, rng.randint(20, 200)))
        t += rng.expovariate(rate_per_s)
    return out


def test_the_least_ttft_is_the_prompt_alone_on_idle_engines() -> None:
    least = LeastLatencies(build_fleet_plan(make_isvc()))
    times = [least.ttft_s(p) for p in (100, 1_000, 8_000, 22_000, 30_000, 100_000)]
    assert times == sorted(times) and len(set(times)) == len(times)
    assert times[2] < 1.0 < times[4]  # 8k tokens fit a 1 s target on an H100; 30k do not
    assert least.itl_s(1_000, 100) < 0.05 < 0.2  # an 8B model decodes alone in ms
    aggregated = LeastLatencies(build_fleet_plan(make_isvc(mode="aggregated")))
    assert aggregated.ttft_s(8_000) < least.ttft_s(8_000)  # no KV hand-off


def test_infeasible_requests_are_counted_apart_and_found_by_the_router() -> None:
    trace = long_context_trace()
    plan = build_fleet_plan(make_isvc(prefill_max=8, decode_max=4))
    options = SimulationOptions(initial_replicas={"prefill": 8, "decode": 2})
    sim = Simulation(plan, trace, None, options).run()
    result = summarize(sim, "static")
    least = LeastLatencies(plan)
    beyond = sum(1 for r in trace if least.ttft_s(r.prompt_tokens) >= 1.0)
    assert result.infeasible == beyond > 50
    assert result.attainment_feasible > result.attainment
    assert result.attainment_feasible > 0.9  # a fleet this size serves the rest in time
    # The router judges from what it learned: never more than the truth, most of it.
    router = sim.router.classes["default"].infeasible["ttft"]
    assert 0.8 * beyond <= router <= beyond


def test_a_per_token_allowance_makes_long_prompts_feasible() -> None:
    trace = long_context_trace(n=150)
    isvc = make_isvc(qos={"ttft": {"p90": "1s", "perPromptToken": "100us"}, "itl": {"p90": "50ms"}})
    plan = build_fleet_plan(isvc)
    assert plan.targets.ttft_for(40_000) == pytest.approx(5.0)
    options = SimulationOptions(initial_replicas={"prefill": 8, "decode": 2})
    result = summarize(Simulation(plan, trace, None, options).run(), "static")
    assert result.infeasible == 0 and result.attainment == result.attainment_feasible
    assert result.attainment > 0.9


def test_an_all_infeasible_workload_is_sized_for_its_throughput() -> None:
    """40k-token prompts at 0.5/s: about one replica of prefill work, and none of them can
    meet 1 s. TTFT p90 stays over target whatever the size; the pool must not chase it."""
    rng = random.Random(3)
    trace, t = [], 0.0
    while t < 600:
        trace.append(TraceRequest(t, rng.randint(35_000, 45_000), rng.randint(20, 100)))
        t += rng.expovariate(0.5)
    scenario = make_scenario(trace, isvc=make_isvc(prefill_max=16, decode_max=4), warmup_s=60)
    result, sim = run_policy("tandem", scenario)
    assert result.infeasible == result.requests and result.attainment_feasible == 0.0
    assert result.peak_replicas["prefill"] < 16 // 2
    latency = [
        t.decision.pools["prefill"]
        for t in sim.ticks
        if t.decision.pools["prefill"].driver == "latency"
    ]
    assert not latency, latency[0].reason


def test_the_burst_is_absorbed_by_decode_pods(bursty: Scenario, bursty_runs: Runs) -> None:
    result, sim = bursty_runs["tandem"]
    assert result.absorbed > 0
    counters = sim.router.classes["default"]
    assert counters.absorbed >= result.absorbed  # the warm-up absorbs too
    absorbed = [i for i in range(len(sim.table)) if sim.table.absorbed[i]]
    first = min(absorbed)
    assert sim.table.arrival_s[first] - sim.options.measure_from_s >= 80.0  # in the burst
    # The policy counted the absorbed prompts as prefill demand.
    seen = [t.observation for t in sim.ticks if t.observation is not None]
    assert any(o.absorbed_prompt_tokens_per_s > 0 for o in seen)


def test_no_burst_is_absorbed_when_absorbing_is_off(bursty: Scenario) -> None:
    plan = bursty.plan
    off = replace(bursty, plan=replace(plan, router=replace(plan.router, absorb_bursts=False)))
    result, sim = run_policy("tandem", off)
    assert result.absorbed == 0 and not any(sim.table.absorbed)
    assert sim.router.classes["default"].absorbed == 0
