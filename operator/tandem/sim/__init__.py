"""The fleet simulator: a trace through router, pools, cold starts and the real policy. Pure.

Discrete events in virtual time (:mod:`~tandem.sim.events`: only events move time,
handlers return the events they cause), deterministic for a seed. No I/O, no asyncio,
no clock reads: the ``tandem simulate`` command reads files and times runs.

* traces come from :mod:`tandem.traces`;
* the fleet: :func:`build_fleet_plan` from an InferenceService, :class:`Simulation`
  (engine pods from :mod:`tandem.engine.model`, the router's own selection, KV
  hand-off, cold starts, simulated Deployments, metrics sampled into the operator's
  own :func:`~tandem.observe.compute.compute_observation`);
* the autoscaler driver: :class:`AutoscalerDriver` and :func:`replay`, the same loop
  as the operator's timer, for the parity test and ``tandem up``;
* figures: :func:`summarize` (attainment, goodput, GPU-hours), :func:`compute_oracle`,
  and the comparison of :mod:`~tandem.sim.compare` (Tandem and the baselines).
"""

from tandem.sim.compare import POLICIES, Scenario, build_scenario, run_policy
from tandem.sim.driver import AutoscalerDriver, replay
from tandem.sim.oracle import Oracle, compute_oracle
from tandem.sim.results import RunResult, summarize
from tandem.sim.sampling import MetricsSampler, sample_fleet
from tandem.sim.simulation import Simulation, SimulationOptions, Tick
from tandem.sim.spec import FleetPlan, PoolPlan, build_fleet_plan

__all__ = [
    "POLICIES",
    "AutoscalerDriver",
    "FleetPlan",
    "MetricsSampler",
    "Oracle",
    "PoolPlan",
    "RunResult",
    "Scenario",
    "Simulation",
    "SimulationOptions",
    "Tick",
    "build_fleet_plan",
    "build_scenario",
    "compute_oracle",
    "replay",
    "run_policy",
    "sample_fleet",
    "summarize",
]
