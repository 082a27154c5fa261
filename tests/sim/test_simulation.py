"""Whole runs: deterministic replay, conservation, cold start, drains."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from tandem.observe.types import Observation
from tandem.policy.types import Decision, PoolDecision
from tandem.sim.autoscaler.driver import AutoscalerDriver
from tandem.sim.compare.results import RunResult
from tandem.sim.compare.runs import Scenario, run_policy
from tandem.sim.fleet.pod import GONE
from tandem.sim.fleet.requests import ABORTED, COMPLETED, PENDING
from tandem.sim.fleet.simulation import Simulation, SimulationOptions
from tandem.sim.fleet.spec import FleetPlan, build_fleet_plan
from tests.sim.factories import make_isvc, make_scenario, make_trace


def test_same_seed_same_numbers(bursty: Scenario) -> None:
    first, _ = run_policy("tandem", bursty)
    again, _ = run_policy("tandem", bursty)
    assert first == again


def test_the_seed_drives_the_routers_choices() -> None:
    plan = build_fleet_plan(make_isvc())
    trace = make_trace(400, 30.0)
    ttfts = []
    for seed in (1, 1, 2):
        options = SimulationOptions(seed=seed, initial_replicas={"prefill": 3, "decode": 3})
        sim = Simulation(plan, trace, None, options).run()
        ttfts.append([sim.table.ttft_s(i) for i in range(len(trace))])
    assert ttfts[0] == ttfts[1]
    assert ttfts[0] != ttfts[2]


def assert_conserved(sim: Simulation) -> None:
    table = sim.table
    assert all(n == 1 for n in table.finishes), "every request ends exactly once"
    assert PENDING not in table.outcome
    for i in range(len(table)):
        if table.outcome[i] == COMPLETED:
            assert table.first_token_s[i] >= table.arrival_s[i]
            assert table.finish_s[i] >= table.first_token_s[i]
    for pod in sim.fleet.by_number:
        assert pod.engine.kv_blocks_used == 0, f"{pod.name} still holds KV blocks"
        assert not pod.requests, f"{pod.name} still holds requests"
        assert pod.engine.num_running == pod.engine.num_waiting == 0
        assert pod.endpoint.outstanding_requests == 0
        assert pod.endpoint.outstanding_prompt_tokens == 0
        assert pod.endpoint.absorbed_prompt_tokens == 0
    for i in range(len(table)):
        if table.absorbed[i]:  # prefilled by its decode pod: no prefill pod, no KV pull
            assert table.prefill_pod[i] == -1 and table.decode_pod[i] >= 0
    assert sim.router.inflight == 0
    served = sum(sim.router.classes["default"].codes.values())
    assert served == len(table)


Runs = dict[str, tuple[RunResult, Simulation]]


def test_conservation_for_every_policy(bursty_runs: Runs) -> None:
    for name, (result, sim) in bursty_runs.items():
        assert_conserved(sim)
        assert result.requests == len(sim.table) - sim.options.first_measured, name


def test_autoscaled_runs_scale_both_ways(bursty_runs: Runs) -> None:
    _, sim = bursty_runs["kpa"]  # a 60 s window: down again within the trace
    gone = [p for p in sim.fleet.by_number if p.state == GONE]
    assert gone, "the burst's pods are removed again"
    assert all(p.removed_s is not None and p.removed_s >= p.created_s for p in gone)
    for pod in sim.fleet.by_number:
        if pod.ready_s is not None and pod.created_s > 0:
            assert pod.ready_s - pod.created_s == pytest.approx(sim.plan.cold_start_s)
    assert max(n for _, role, n, _ in sim.fleet.timeline if role == "prefill") > 1


def test_gpu_hours_count_pods_from_request_to_removal() -> None:
    isvc = make_isvc()
    plan = build_fleet_plan(isvc, cold_start_s=10.0)
    options = SimulationOptions(initial_replicas={"prefill": 2, "decode": 3})
    sim = Simulation(plan, make_trace(50, 20.0), None, options).run()
    assert sum(sim.gpu_s.values()) == pytest.approx(5 * sim.end_s)


class ShrinkDecode:
    """An autoscaler that takes the decode pool to one replica at its first tick."""

    name = "shrink"
    interval_s = 2.0

    def initial_state(self) -> None:
        return None

    def decide(self, state: None, obs: Observation) -> tuple[None, Decision]:
        pools = {
            role: PoolDecision(role, p.replicas, 1 if role == "decode" else p.replicas, "test")
            for role, p in obs.pools.items()
        }
        return None, Decision(obs.now_s, pools)


def test_a_pod_past_its_shutdown_timeout_aborts_what_it_holds() -> None:
    plan = build_fleet_plan(make_isvc(engine={"shutdownTimeout": "1s"}))
    trace = make_trace(120, 40.0, output=400)
    options = SimulationOptions(initial_replicas={"decode": 3})
    sim = Simulation(plan, trace, AutoscalerDriver(ShrinkDecode()), options).run()
    assert_conserved(sim)
    assert ABORTED in sim.table.outcome
    drained = [p for p in sim.fleet.by_number if p.state == GONE]
    assert len(drained) == 2
    assert all(p.removed_s == pytest.approx(3.0) for p in drained)  # tick at 2 s + 1 s


def test_warm_up_is_left_out_of_the_figures(bursty: Scenario) -> None:
    result, sim = run_policy("tandem", bursty)
    assert sim.options.first_measured > 0
    assert result.requests == len(bursty.requests)
    assert result.timeline.t_s[0] == 0.0
    assert not math.isnan(result.ttft_p90_s)


def test_time_limit_aborts_what_is_left() -> None:
    plan = build_fleet_plan(make_isvc())
    options = SimulationOptions(initial_replicas={"prefill": 1, "decode": 1}, max_duration_s=5.0)
    sim = Simulation(plan, make_trace(600, 200.0, output=200), None, options).run()
    assert_conserved(sim)
    assert ABORTED in sim.table.outcome


@pytest.mark.parametrize("policy", ["tandem", "keda", "llm-d", "aggregated"])
def test_exact_engine_gives_the_same_run(policy: str) -> None:
    """Steady decoding with batched, on-demand steps against every sequence visited and
    one event per iteration: the same run, to the last bit. A small router admission
    limit makes some requests wait at the door (429), which reads in-flight counts."""
    isvc = make_isvc(router={"replicas": 1, "maxInflight": 40})
    scenario = make_scenario(make_trace(500, 30.0), warmup_s=30.0, isvc=isvc)
    fast, fast_sim = run_policy(policy, scenario)
    exact, _ = run_policy(policy, replace(scenario, exact_engine=True, plan=_exact(scenario)))
    assert exact == fast
    assert all(p.engine.busy_s_total > 0 for p in fast_sim.fleet.by_number if p.ready_s == 0.0)
    if policy == "keda":
        assert fast.rejected > 0


def _exact(scenario: Scenario) -> FleetPlan:
    plan = scenario.plan
    return replace(plan, pools={r: replace(p, exact_engine=True) for r, p in plan.pools.items()})


@pytest.mark.parametrize(("mode", "legs"), [("disaggregated", 2), ("aggregated", 1)])
def test_a_measured_front_end_reaches_every_first_token_and_end(mode: str, legs: int) -> None:
    """A preset's front end (``PoolPlan.frontend_latency_s``) is added to each request's
    first token and end once per engine leg (prefill and decode, or the one engine), the
    router's TTFT included; the engines' own timings and the run itself are unchanged."""
    plan = build_fleet_plan(make_isvc(mode=mode))
    slow = replace(
        plan, pools={r: replace(p, frontend_latency_s=0.05) for r, p in plan.pools.items()}
    )
    options = SimulationOptions(initial_replicas={role: 2 for role in plan.pools})
    trace = make_trace(200, 10.0)
    base = Simulation(plan, trace, None, options).run()
    late = Simulation(slow, trace, None, options).run()
    done = [i for i, o in enumerate(base.table.outcome) if o == COMPLETED]
    assert len(done) == len(trace) and late.table.outcome == base.table.outcome
    for i in done:
        for column in ("first_token_s", "finish_s"):
            shift = getattr(late.table, column)[i] - getattr(base.table, column)[i]
            assert shift == pytest.approx(0.05 * legs), (i, column)
    assert late.router.classes["default"].ttft.total == pytest.approx(
        base.router.classes["default"].ttft.total + 0.05 * legs * len(trace)
    )
    assert [p.ttft.total for p in late.fleet.by_number] == [
        p.ttft.total for p in base.fleet.by_number
    ]
