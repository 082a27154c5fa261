"""One run: a trace through a fleet under one autoscaler, in virtual time. Pure.

:class:`Simulation` wires the request path (:mod:`tandem.sim.fleet.flow`) to the control
loop: the router's 1 s scrape of engine gauges, the autoscaler's tick (scrape every
ready pod and the router, compute the observation with the operator's own code,
decide, actuate the Deployments), and a timeline sample every few seconds for the
plot. The run ends when every request has ended (or at ``max_duration_s``, when what
is still open is aborted). Deterministic for a seed: the only randomness is the
router's power-of-two-choices draw, from a ``random.Random(seed)``.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from tandem.api.vocab import PoolRole
from tandem.observe.types import Observation
from tandem.policy.types import Decision
from tandem.sim.autoscaler.driver import AutoscalerDriver
from tandem.sim.fleet.events import EventQueue, Handler, NewEvent
from tandem.sim.fleet.flow import ARRIVAL, ITERATION, KV_RELEASE, ROUTER_TIMEOUT, Flow
from tandem.sim.fleet.pools import DRAIN_DEADLINE, POD_READY, Fleet
from tandem.sim.fleet.requests import RequestTable
from tandem.sim.fleet.router import SimRouter
from tandem.sim.fleet.sampling import FleetSample, MetricsSampler, sample_fleet
from tandem.sim.fleet.spec import FleetPlan
from tandem.traces.parse import TraceRequest

ROUTER_SCRAPE = 20
SCRAPE = 21
TICK = 22
TIMELINE = 23
END = 24
MEASURE = 25


@dataclass(frozen=True)
class SimulationOptions:
    """How one run is set up (the fleet and the trace come separately)."""

    seed: int = 0
    initial_replicas: Mapping[PoolRole, int] = field(default_factory=dict)
    """Replicas each pool has, ready, at time 0 (default: the spec's ``initial``)."""
    staleness_s: float = 0.0
    """How old the samples an autoscaler tick reads are, seconds (0: scraped at the tick,
    as the operator's pod scraper does; a Prometheus source lags up to its interval)."""
    timeline_interval_s: float = 10.0
    """Seconds between timeline samples (plot resolution)."""
    max_duration_s: float | None = None
    """Virtual-time limit; requests still open then are aborted (``None``: last
    arrival + 1 h)."""
    record_observations: bool = False
    """Keep every observation the autoscaler saw (parity tests, debugging)."""
    first_measured: int = 0
    """Arrivals before this index are a warm-up: served, but left out of the figures."""
    measure_from_s: float = 0.0
    """When the measured part starts: GPU-hours and the timeline count from here."""


@dataclass(frozen=True)
class Tick:
    """One autoscaler tick: when, what it saw (if recorded) and what it decided."""

    now_s: float
    decision: Decision
    observation: Observation | None = None


class Simulation:
    """A trace, a fleet and one autoscaler (``None``: the fleet keeps its size)."""

    def __init__(
        self,
        plan: FleetPlan,
        requests: Sequence[TraceRequest],
        driver: AutoscalerDriver | None,
        options: SimulationOptions = SimulationOptions(),
    ) -> None:
        if not requests:
            raise ValueError("a simulation needs at least one request")
        self.plan = plan
        self.options = options
        self.driver = driver
        self.table = RequestTable(requests, plan.router.default_class)
        self.fleet = Fleet(plan)
        self.router = SimRouter(
            plan.max_inflight,
            options.seed,
            [c.name for c in plan.router.classes],
            plan.router.prefill_tokens_per_s,
        )
        self.flow = Flow(plan, self.table, self.fleet, self.router)
        self.sampler = MetricsSampler()
        self.queue = EventQueue()
        self.ticks: list[Tick] = []
        self.timeline: list[tuple[float, int, int]] = []
        """``(time s, requests arrived, token gaps recorded)`` every timeline interval."""
        self.end_s = 0.0
        self.gpu_s: Mapping[str, float] = {}
        """GPU-seconds per pool from ``measure_from_s`` until the last request ended."""
        self._gpu_s_at_start: Mapping[str, float] = {}
        self.gap_index_at_start = 0
        """Token gaps recorded before the measured part began."""
        self._progress: Callable[[float], None] | None = None
        last = requests[-1].arrival_s
        self.limit_s = options.max_duration_s or last + 3600.0
        self._arrived = 0

    def run(self, progress: Callable[[float], None] | None = None) -> Simulation:
        """Run to the end; ``progress(now_s)`` is called every timeline interval."""
        self._progress = progress
        q = self.queue
        for role, pool in self.plan.pools.items():
            count = self.options.initial_replicas.get(role, pool.initial_replicas)
            for _ in range(min(max(count, pool.min_replicas), pool.max_replicas)):
                self.router.add(self.fleet.create(role, 0.0, ready=True))
            self.fleet.record(role, 0.0)
        q.push(self.table.arrival_s[0], ARRIVAL, 0)
        q.push(0.0, ROUTER_SCRAPE, None)
        # Timeline points fall on the start of the measured part.
        q.push(self.options.measure_from_s % self.options.timeline_interval_s, TIMELINE, None)
        if self.driver is not None:
            first = max(self.driver.interval_s - self.options.staleness_s, 0.0)
            q.push(first, SCRAPE, None)
        q.push(self.limit_s, END, None)
        if self.options.measure_from_s > 0:
            q.push(self.options.measure_from_s, MEASURE, None)
        flow = self.flow
        handlers: dict[int, Handler] = {
            ARRIVAL: self._on_arrival,
            ITERATION: flow.on_iteration,
            KV_RELEASE: flow.on_kv_release,
            ROUTER_TIMEOUT: flow.on_router_timeout,
            POD_READY: flow.on_pod_ready,
            DRAIN_DEADLINE: flow.on_drain_deadline,
            ROUTER_SCRAPE: self._on_router_scrape,
            SCRAPE: self._on_scrape,
            TICK: self._on_tick,
            TIMELINE: self._on_timeline,
            END: self._on_end,
            MEASURE: self._on_measure,
        }
        # The hot loop allocates millions of short-lived tuples and no reference cycles;
        # the cyclic collector would rescan every live request at each generation-2 pass.
        collecting = gc.isenabled()
        gc.disable()
        try:
            q.run(handlers, until_s=self.limit_s)
        finally:
            if collecting:
                gc.enable()
        if flow.open:
            flow.abort_unfinished(self.limit_s)
            self._finish(self.limit_s)
        return self

    @property
    def done(self) -> bool:
        return self.flow.open == 0

    def _on_arrival(self, now: float, i: int) -> Sequence[NewEvent]:
        self._arrived = i + 1
        events = self.flow.on_arrival(now, i)
        if self.flow.open == 0:
            self._finish(now)
        return events

    def _finish(self, now: float) -> None:
        if not self.gpu_s:
            self.end_s = max(self.flow.last_end_s, now)
            total = self.fleet.gpu_seconds(self.end_s)
            start = self._gpu_s_at_start
            self.gpu_s = {role: s - start.get(role, 0.0) for role, s in total.items()}

    def _on_measure(self, now: float, _: None) -> Sequence[NewEvent]:
        events = self.flow.catchup.all(now)
        self._gpu_s_at_start = self.fleet.gpu_seconds(now)
        self.gap_index_at_start = len(self.flow.gaps_s)
        return events

    def _periodic(self, now: float) -> bool:
        """Whether periodic events carry on (they stop once every request ended)."""
        if self.flow.open == 0:
            self._finish(self.flow.last_end_s)
            return False
        return True

    def _on_router_scrape(self, now: float, _: None) -> Sequence[NewEvent]:
        events = self.flow.catchup.all(now)
        self.router.refresh()
        if self._periodic(now):
            events.append((now + self.plan.router.scrape_interval_s, ROUTER_SCRAPE, None))
        return events

    def _on_scrape(self, now: float, _: None) -> Sequence[NewEvent]:
        events = self.flow.catchup.all(now)
        if not self._periodic(now):
            return events
        sample = sample_fleet(self.fleet, self.router, now)
        events.append((now + self.options.staleness_s, TICK, sample))
        return events

    def _on_tick(self, now: float, sample: FleetSample) -> Sequence[NewEvent]:
        assert self.driver is not None
        obs = self.sampler.observe(now, sample)
        decision = self.driver.tick(obs)
        keep = obs if self.options.record_observations else None
        self.ticks.append(Tick(now, decision, keep))
        events = self.flow.catchup.all(now)  # scale-down picks pods by their load now
        for role, pool in decision.pools.items():
            if role not in self.fleet.pods or pool.desired == self.fleet.replicas(role):
                continue
            new, _, drained = self.fleet.scale_to(role, pool.desired, now)
            events.extend(new)
            for pod in drained:
                events.extend(self.flow.drain(pod, now))
        next_scrape = now + self.driver.interval_s - self.options.staleness_s
        events.append((max(next_scrape, now), SCRAPE, None))
        return events

    def _on_timeline(self, now: float, _: None) -> Sequence[NewEvent]:
        events = self.flow.catchup.all(now)
        self.timeline.append((now, self._arrived, len(self.flow.gaps_s)))
        if self._progress is not None:
            self._progress(now)
        if self._periodic(now):
            events.append((now + self.options.timeline_interval_s, TIMELINE, None))
        return events

    def _on_end(self, now: float, _: None) -> Sequence[NewEvent]:
        return ()
