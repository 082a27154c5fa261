"""The fleet simulator: a trace through router, pools, cold starts and the real policy. Pure.

Discrete events in virtual time, deterministic for a seed. No I/O, no asyncio, no clock
reads: the ``tandem simulate`` command reads files and times runs. Traces come from
:mod:`tandem.traces`. Four parts, each importing only the ones below it:

* :mod:`~tandem.sim.compare`: the runs of a comparison (Tandem and the baselines on one
  scenario), what each achieved (:func:`summarize`: attainment, goodput, GPU-hours), the
  best fixed fleet in hindsight (:func:`find_fixed_hindsight`), Tandem's goal, the
  table, JSON and plot;
* :mod:`~tandem.sim.bounds`: the oracle (:func:`compute_oracle`), its schedule replayed
  with foresight, the search for the cheapest fixed fleet, one replica's capacity,
  Dynamo's offline profile;
* :mod:`~tandem.sim.fleet`: the simulated fleet: :func:`build_fleet_plan` from an
  InferenceService and :class:`Simulation` (engine pods from :mod:`tandem.engine.model`,
  the router's own selection, KV hand-off, cold starts, simulated Deployments, metrics
  sampled into the operator's own :func:`~tandem.observe.compute.compute_observation`);
* :mod:`~tandem.sim.autoscaler`: :class:`AutoscalerDriver` and :func:`replay`, the same
  loop as the operator's timer, for the parity test and ``tandem up``.
"""

from tandem.sim.autoscaler.driver import AutoscalerDriver, replay
from tandem.sim.bounds.oracle import Oracle, compute_oracle
from tandem.sim.compare.hindsight import find_fixed_hindsight, run_fixed
from tandem.sim.compare.results import RunResult, summarize
from tandem.sim.compare.runs import POLICIES, Scenario, build_scenario, run_policy
from tandem.sim.fleet.sampling import MetricsSampler, sample_fleet
from tandem.sim.fleet.simulation import Simulation, SimulationOptions, Tick
from tandem.sim.fleet.spec import FleetPlan, PoolPlan, build_fleet_plan

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
    "find_fixed_hindsight",
    "replay",
    "run_fixed",
    "run_policy",
    "sample_fleet",
    "summarize",
]
