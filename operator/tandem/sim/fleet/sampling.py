"""Scraping the simulated fleet the way the operator scrapes a real one. Pure.

At every autoscaler tick the operator reads each ready pod's ``/metrics`` and the
router's, keeps each pod's previous sample, and hands both to
:func:`tandem.observe.compute.compute_observation`. :class:`MetricsSampler` does the
same with simulated pods: each engine's counters and gauges and each pod's histograms
become the :class:`~tandem.observe.parse.EngineSample` a parsed page would give, and
the operator's own compute function turns them into the :class:`Observation`. So the
policy sees in simulation exactly what it would see in a cluster, including pods
first seen this tick adding to the gauges but not yet to the rates.

Samples may be taken before the tick that uses them (``staleness_s``), as with a
Prometheus server whose data is up to one scrape interval old.

GPU utilization (what DCGM exports, used only by the HPA baseline) is not on vLLM's
page; it is each pod's busy seconds over the window, averaged over the pool.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from tandem.api.vocab import PoolRole
from tandem.observe.compute import PodScrape, PoolScrape, compute_observation
from tandem.observe.parse import EngineSample, RouterSample
from tandem.observe.types import Observation, PoolObservation
from tandem.sim.fleet.pod import Pod
from tandem.sim.fleet.pools import Fleet
from tandem.sim.fleet.router import SimRouter

ROUTER_POD = "router-0"


@dataclass(frozen=True)
class FleetSample:
    """Everything one scrape read, before it becomes an observation."""

    at_s: float
    pools: Mapping[PoolRole, tuple[int, int, Mapping[str, EngineSample]]]
    """role -> (replicas, ready, samples of the ready pods by pod name)."""
    busy_s: Mapping[str, float]
    """Pod name -> busy seconds so far (for GPU utilization)."""
    router: RouterSample


def sample_engine(pod: Pod, at_s: float) -> EngineSample:
    """One pod's ``/metrics`` page as the parser would read it."""
    engine = pod.engine
    config = engine.config
    return EngineSample(
        at_s=at_s,
        waiting_requests=float(engine.num_waiting),
        waiting_for_capacity=float(engine.num_waiting_for_capacity),
        running_requests=float(engine.num_running),
        kv_usage=engine.kv_usage,
        kv_capacity_tokens=float(config.num_gpu_blocks * config.block_size),
        prompt_tokens=float(engine.prompt_tokens_total),
        generation_tokens=float(engine.generation_tokens_total),
        preemptions=float(engine.preemptions_total),
        requests_finished=float(engine.requests_finished_total),
        ttft=pod.ttft.histogram(),
        itl=pod.itl.histogram(),
    )


def sample_fleet(fleet: Fleet, router: SimRouter, at_s: float) -> FleetSample:
    """Scrape every ready pod and the router at ``at_s``."""
    pools: dict[PoolRole, tuple[int, int, Mapping[str, EngineSample]]] = {}
    busy: dict[str, float] = {}
    for role in fleet.pods:
        ready = fleet.ready(role)
        pools[role] = (
            fleet.replicas(role),
            len(ready),
            {p.name: sample_engine(p, at_s) for p in ready},
        )
        for p in ready:
            busy[p.name] = p.engine.busy_s_total
    return FleetSample(at_s, pools, busy, router.sample(at_s))


class MetricsSampler:
    """The operator's scraper, minus HTTP: keeps previous samples between ticks."""

    def __init__(self) -> None:
        self._engines: dict[str, EngineSample] = {}
        self._busy: dict[str, tuple[float, float]] = {}
        self._router: RouterSample | None = None
        self._last_now_s: float | None = None

    def observe(self, now_s: float, sample: FleetSample) -> Observation:
        """The observation of the tick at ``now_s`` from ``sample`` and the previous one."""
        scrapes: dict[PoolRole, PoolScrape] = {}
        kept: dict[str, EngineSample] = {}
        for role, (replicas, ready, samples) in sample.pools.items():
            pods = {
                name: PodScrape(current=s, previous=self._engines.get(name))
                for name, s in samples.items()
            }
            kept.update(samples)
            scrapes[role] = PoolScrape(replicas, ready, pods)
        routers = {ROUTER_POD: PodScrape(current=sample.router, previous=self._router)}
        window_s = now_s - self._last_now_s if self._last_now_s is not None else 0.0
        obs = compute_observation(now_s, max(window_s, 0.0), scrapes, routers)
        pools = {role: self._with_utilization(p, sample) for role, p in obs.pools.items()}
        obs = replace(obs, pools=pools)
        self._engines, self._router, self._last_now_s = kept, sample.router, now_s
        self._busy = {name: (sample.at_s, busy) for name, busy in sample.busy_s.items()}
        return obs

    def _with_utilization(self, pool: PoolObservation, sample: FleetSample) -> PoolObservation:
        shares: list[float] = []
        for name in pool.pods:
            before = self._busy.get(name)
            now_busy = sample.busy_s.get(name)
            if before is None or now_busy is None or sample.at_s <= before[0]:
                continue
            shares.append(min(max((now_busy - before[1]) / (sample.at_s - before[0]), 0.0), 1.0))
        if not shares:
            return pool
        return replace(pool, gpu_utilization=sum(shares) / len(shares))
