"""One trace, several autoscalers, the same fleet: the comparison ``tandem simulate`` runs.

Policies by name (:data:`POLICIES`), each a run of its own on the same arrivals:

* ``tandem`` — Tandem's policy (``autoscaling.policy`` of the spec, ``slo`` by
  default), through :class:`~tandem.policy.baselines.TandemAutoscaler`;
* ``static`` — the disaggregated fleet fixed, per pool, at the busiest window's need
  (the oracle's, before rounding) over a provisioning headroom
  (:data:`STATIC_UTILIZATION`: 0.75 for ``balanced``), as one provisions for the peak;
* ``hpa``, ``keda``, ``kpa``, ``llm-d``, ``dynamo`` — the baselines of
  :mod:`tandem.policy.baselines` with their published defaults (Dynamo's profile is
  measured on the engine model, :mod:`tandem.sim.bounds.profile`);
* ``aggregated`` — one pool doing both phases (continuous batching, no hand-off) with
  the same GPU budget as ``static``.

Beside the policies, ``fixed-hindsight`` (:data:`FIXED_HINDSIGHT`) names the cheapest
static fleet reaching a given attainment, searched by :mod:`tandem.sim.compare.hindsight`
with :func:`run_static`.

Dynamic policies start warm: a warm-up (the trace's first 10 minutes, mirrored) runs
before the measured trace, outside the figures, with each pool starting at the
oracle's need for that load, so every policy enters the trace in the state its own
decisions lead to. Pure: timing runs is the caller's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from tandem.api import InferenceService
from tandem.api.vocab import PoolRole
from tandem.engine.model.cost_preset import CostPreset
from tandem.policy.baselines import (
    Autoscaler,
    DynamoSlaPlanner,
    Hpa,
    Keda,
    Kpa,
    LlmdSaturation,
    TandemAutoscaler,
)
from tandem.sim.autoscaler.driver import AutoscalerDriver
from tandem.sim.bounds.foresight import OracleSchedule
from tandem.sim.bounds.oracle import DEFAULT_WINDOW_S, Oracle, compute_oracle
from tandem.sim.bounds.profile import EngineProfile
from tandem.sim.compare.results import RunResult, summarize
from tandem.sim.fleet.simulation import Simulation, SimulationOptions
from tandem.sim.fleet.spec import (
    DEFAULT_KV_LINK_BYTES_PER_S,
    FleetPlan,
    build_fleet_plan,
    build_policy_config,
)
from tandem.traces.parse import TraceRequest
from tandem.traces.rate import with_warmup

#: Seconds of warm-up before the measured trace (its first 10 minutes, mirrored).
DEFAULT_WARMUP_S = 600.0

POLICIES: tuple[str, ...] = (
    "tandem",
    "static",
    "hpa",
    "keda",
    "kpa",
    "llm-d",
    "dynamo",
    "aggregated",
)


@dataclass(frozen=True)
class Scenario:
    """Everything every run of a comparison shares."""

    isvc: InferenceService
    plan: FleetPlan
    requests: tuple[TraceRequest, ...]
    """The measured trace, from time 0."""
    oracle: Oracle
    seed: int = 0
    warm_start: bool = True
    """Dynamic policies start at the oracle's need for the warm-up (else the spec's)."""
    warmup_s: float = DEFAULT_WARMUP_S
    """A mirrored copy of the trace's first seconds runs first, outside the figures, so
    each policy enters the trace in the state its own decisions lead to."""
    staleness_s: float = 0.0
    """Age of the samples each tick reads: 0 for the pod scraper, the monitoring
    interval for a Prometheus source."""
    record_observations: bool = False
    exact_engine: bool = False
    model: str | None = None
    gpu: str | None = None
    kv_link_bytes_per_s: float = DEFAULT_KV_LINK_BYTES_PER_S
    preset: CostPreset | None = None
    """A measured engine for every pool (``tandem simulate --preset``)."""


def build_scenario(
    isvc: InferenceService,
    requests: Sequence[TraceRequest],
    *,
    seed: int = 0,
    model: str | None = None,
    gpu: str | None = None,
    cold_start_s: float | None = None,
    kv_link_bytes_per_s: float = DEFAULT_KV_LINK_BYTES_PER_S,
    warm_start: bool = True,
    staleness_s: float | None = None,
    oracle_window_s: float = DEFAULT_WINDOW_S,
    exact_engine: bool = False,
    record_observations: bool = False,
    warmup_s: float = DEFAULT_WARMUP_S,
    preset: CostPreset | None = None,
) -> Scenario:
    """The shared setup of a comparison, with its oracle."""
    plan = build_fleet_plan(
        isvc,
        model=model,
        gpu=gpu,
        cold_start_s=cold_start_s,
        kv_link_bytes_per_s=kv_link_bytes_per_s,
        exact_engine=exact_engine,
        preset=preset,
    )
    if staleness_s is None:
        metrics = isvc.spec.autoscaling.metrics
        staleness_s = isvc.spec.monitoring.interval if metrics.source == "prometheus" else 0.0
    oracle = compute_oracle(plan, requests, oracle_window_s)
    return Scenario(
        isvc=isvc,
        plan=plan,
        requests=tuple(requests),
        oracle=oracle,
        seed=seed,
        warm_start=warm_start,
        warmup_s=warmup_s,
        staleness_s=staleness_s,
        record_observations=record_observations,
        exact_engine=exact_engine,
        model=model,
        gpu=gpu,
        kv_link_bytes_per_s=kv_link_bytes_per_s,
        preset=preset,
    )


#: Not a policy anyone can run: the oracle's own schedule, followed with its perfect
#: knowledge of the trace (:mod:`tandem.sim.bounds.foresight`), to see what it achieves.
ORACLE_SCHEDULE = "oracle-schedule"


def build_autoscaler(name: str, scenario: Scenario) -> Autoscaler | None:
    """The autoscaler a policy name stands for (``None``: the fleet keeps its size)."""
    if name in ("static", "aggregated"):
        return None
    config = build_policy_config(scenario.isvc, scenario.plan)
    pools = config.pools
    if name == ORACLE_SCHEDULE:
        return OracleSchedule(
            scenario.oracle,
            dict(pools),
            config.interval_s,
            scenario.plan.cold_start_s,
            scenario.warmup_s,
        )
    if name == "tandem":
        return TandemAutoscaler(config)
    if name == "hpa":
        return Hpa(pools)
    if name == "keda":
        return Keda(pools)
    if name == "kpa":
        return Kpa(pools)
    if name == "llm-d":
        return LlmdSaturation(pools)
    if name == "dynamo":
        plan = scenario.plan
        first = plan.pools.get("prefill") or next(iter(plan.pools.values()))
        second = plan.pools.get("decode") or first
        profile = EngineProfile(
            first.cost,
            first.engine_config,
            second.cost,
            second.engine_config,
            first.gpus_per_replica,
            second.gpus_per_replica,
        )
        return DynamoSlaPlanner(pools, profile, config.targets)
    raise ValueError(f"unknown policy {name!r}; policies: {', '.join(POLICIES)}")


#: Share of the peak window's need a static fleet is provisioned to run at, by
#: ``qos.objective``: the usual headroom for provisioning by hand, kept apart from what
#: Tandem's policy plans so that tuning the policy never moves this baseline.
STATIC_UTILIZATION = {"latency": 0.6, "balanced": 0.75, "throughput": 0.9}


def static_replicas(scenario: Scenario) -> dict[PoolRole, int]:
    """Per pool, the peak window's need over the static utilization (within bounds)."""
    utilization = STATIC_UTILIZATION[scenario.isvc.spec.qos.objective]
    out: dict[PoolRole, int] = {}
    for role, pool in scenario.plan.pools.items():
        peak = max(scenario.oracle.pools[role].need, default=0.0)
        n = math.ceil(peak / utilization - 1e-9)
        out[role] = min(max(n, pool.min_replicas, 1), max(pool.max_replicas, 1))
    return out


def plan_for(name: str, scenario: Scenario) -> tuple[FleetPlan, dict[PoolRole, int]]:
    """The fleet a policy runs on and each pool's size at time 0."""
    plan, oracle = scenario.plan, scenario.oracle
    if name == "static":
        return plan, static_replicas(scenario)
    if name == "aggregated":
        static = static_replicas(scenario)
        budget = sum(static[r] * p.gpus_per_replica for r, p in plan.pools.items())
        agg = build_fleet_plan(
            scenario.isvc,
            model=scenario.model,
            gpu=scenario.gpu,
            cold_start_s=plan.cold_start_s,
            kv_link_bytes_per_s=scenario.kv_link_bytes_per_s,
            mode="aggregated",
            exact_engine=scenario.exact_engine,
            preset=scenario.preset,
        )
        pool = agg.pools["pool"]
        n = max(budget // max(pool.gpus_per_replica, 1), 1)
        pool = replace(pool, min_replicas=n, max_replicas=n, initial_replicas=n)
        return replace(agg, pools={"pool": pool}), {"pool": n}
    if scenario.warm_start:
        # Sized for the load the run begins with: the warm-up mirrors the trace's first
        # ``warmup_s``, so the oracle's largest need over those windows (or the first).
        windows = max(int(-(-scenario.warmup_s // oracle.window_s)), 1)
        first = {role: max(p.replicas[:windows], default=1) for role, p in oracle.pools.items()}
        return plan, first
    return plan, {role: p.initial_replicas for role, p in plan.pools.items()}


def run_policy(
    name: str, scenario: Scenario, progress: Callable[[float], None] | None = None
) -> tuple[RunResult, Simulation]:
    """Simulate one policy on the scenario's trace."""
    return _simulate(name, build_autoscaler(name, scenario), scenario, progress)


def run_oracle_schedule(scenario: Scenario, headroom: Mapping[str, float]) -> RunResult:
    """The oracle's schedule with ``headroom`` (role → multiple of its need), followed
    with foresight (:class:`~tandem.sim.bounds.foresight.OracleSchedule`)."""
    schedule = build_autoscaler(ORACLE_SCHEDULE, scenario)
    assert isinstance(schedule, OracleSchedule)
    return _simulate(ORACLE_SCHEDULE, replace(schedule, headroom=dict(headroom)), scenario)[0]


def run_static(
    name: str, scenario: Scenario, replicas: Mapping[PoolRole, int]
) -> tuple[RunResult, Simulation]:
    """The scenario's fleet held at ``replicas`` per pool for the whole trace (within
    each pool's bounds), reported under ``name``."""
    return _simulate(name, None, scenario, initial=dict(replicas))


def _simulate(
    name: str,
    autoscaler: Autoscaler | None,
    scenario: Scenario,
    progress: Callable[[float], None] | None = None,
    initial: dict[PoolRole, int] | None = None,
) -> tuple[RunResult, Simulation]:
    if initial is None:
        plan, initial = plan_for(name, scenario)
    else:
        plan = scenario.plan
    driver = AutoscalerDriver(autoscaler) if autoscaler is not None else None
    warmup = scenario.warmup_s if autoscaler is not None else 0.0
    arrivals, first, offset = with_warmup(scenario.requests, warmup)
    options = SimulationOptions(
        seed=scenario.seed,
        initial_replicas=initial,
        staleness_s=scenario.staleness_s,
        record_observations=scenario.record_observations,
        first_measured=first,
        measure_from_s=offset,
    )
    shown = None if progress is None else (lambda now: progress(max(now - offset, 0.0)))
    sim = Simulation(plan, arrivals, driver, options).run(shown)
    return summarize(sim, name), sim


#: Not a policy either: the cheapest fixed fleet reaching an attainment, found by replaying
#: static fleets (:mod:`tandem.sim.compare.hindsight`); ``tandem simulate`` runs it after
#: the policies, for Tandem's attainment.
FIXED_HINDSIGHT = "fixed-hindsight"


def validate_policies(names: Sequence[str]) -> list[str]:
    """The names in order, without repeats; ``ValueError`` naming the valid ones."""
    known = (*POLICIES, FIXED_HINDSIGHT)
    out: list[str] = []
    for name in names:
        if name not in known:
            raise ValueError(f"unknown policy {name!r}; policies: {', '.join(known)}")
        if name not in out:
            out.append(name)
    return out


def run_autoscaler(
    name: str, autoscaler: Autoscaler | None, scenario: Scenario
) -> tuple[RunResult, Simulation]:
    """Simulate any autoscaler (a variant of a policy, say) on the scenario's trace, with
    the fleet and start of the dynamic policies; ``name`` labels the result."""
    return _simulate(name, autoscaler, scenario)
