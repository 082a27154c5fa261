"""The ``tandem up`` loop: observe → decide → actuate, with a live view and a timeline.

The same :func:`~tandem.control.tick.compute_tick` the operator runs (state kept in a
status dict between ticks), the same :class:`~tandem.observe.scrape.Scraper` reading the
engines' and the router's ``/metrics``; only the actuator is local. Does I/O.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

import aiohttp

from tandem.api import InferenceService
from tandem.api.vocab import PoolRole
from tandem.control.tick import compute_deletion_costs, compute_tick
from tandem.local.fleet import LocalFleet
from tandem.local.load import LoadStats, replay_trace
from tandem.observe.scrape import Scraper
from tandem.observe.source import metrics_url
from tandem.observe.types import Observation
from tandem.policy import compute_policy_config
from tandem.router.app import build_app, start_router
from tandem.router.config import build_router_config
from tandem.router.discovery import StaticDiscovery
from tandem.router.proxy import ROUTER
from tandem.traces.parse import TraceRequest


@dataclass
class UpOptions:
    port: int = 8000
    host: str = "127.0.0.1"
    cold_start_s: float | None = None
    interval_s: float | None = None
    trace: list[TraceRequest] | None = None
    rate_scale: float = 1.0
    duration_s: float | None = None
    json_out: Path | None = None
    view: bool = True


@dataclass
class Timeline:
    """What ``--json`` writes: pool sizes over time and every decision."""

    pools: dict[PoolRole, list[dict[str, float]]] = field(default_factory=dict)
    decisions: list[dict[str, Any]] = field(default_factory=list)
    pids: list[int] = field(default_factory=list)
    """Every engine process started (not written to JSON)."""

    def to_dict(self) -> dict[str, Any]:
        return {"pools": self.pools, "decisions": self.decisions}


async def run_up(isvc: InferenceService, opts: UpOptions, out: TextIO = sys.stdout) -> Timeline:
    """Run the fleet until the load ends (``--load``), ``--duration``, or cancellation."""
    config = compute_policy_config(isvc)
    interval = opts.interval_s or config.interval_s
    cold = isvc.spec.autoscaling.cold_start if opts.cold_start_s is None else opts.cold_start_s
    t0 = time.monotonic()

    def clock() -> float:
        return time.monotonic() - t0

    app = build_app(build_router_config(isvc), StaticDiscovery({r: [] for r in isvc.spec.pools()}))
    serving = await start_router(app, opts.host, opts.port, shutdown_timeout_s=5.0)
    router = app[ROUTER]
    fleet = LocalFleet(isvc, cold, clock, router.set_pool_urls)
    timeline = Timeline(pools={role: [] for role in isvc.spec.pools()})
    url = f"http://{opts.host}:{serving.port}"
    print(f"tandem up: {isvc.name} ({isvc.spec.mode}) serving OpenAI at {url}/v1", file=out)
    load: asyncio.Task[LoadStats] | None = None
    try:
        for role, pool in isvc.spec.pools().items():
            await fleet.scale(role, pool.replicas.start)
        if opts.trace is not None:
            load = asyncio.create_task(
                replay_trace(
                    url,
                    isvc.spec.model.name,
                    opts.trace,
                    opts.rate_scale,
                    opts.duration_s or float("inf"),
                    clock,
                )
            )
        await _loop(isvc, config, fleet, timeline, opts, interval, clock, url, load, out)
        if load is not None and load.done():
            stats = load.result()
            print(f"load: {stats.sent} sent, {stats.ok} ok, {stats.failed} failed", file=out)
    finally:
        if load is not None and not load.done():
            load.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await load
        await serving.stop()  # stop routing first, so no request reaches a stopping engine
        await fleet.close()
        timeline.pids = list(fleet.spawned)
        if opts.json_out is not None:
            opts.json_out.write_text(json.dumps(timeline.to_dict(), indent=1))
    return timeline


async def _loop(
    isvc: InferenceService,
    config: Any,
    fleet: LocalFleet,
    timeline: Timeline,
    opts: UpOptions,
    interval: float,
    clock: Any,
    url: str,
    load: asyncio.Task[LoadStats] | None,
    out: TextIO,
) -> None:
    status: dict[str, Any] = {}
    next_tick = clock() + interval
    routers = {"router": metrics_url("127.0.0.1", int(url.rsplit(":", 1)[1]))}
    async with (
        aiohttp.ClientSession() as session,
        Scraper(session=session, timeout_s=2.0) as scraper,
    ):
        while True:
            now = clock()
            if opts.duration_s is not None and now >= opts.duration_s:
                return
            if load is not None and load.done():
                return
            await fleet.refresh(session)
            for role in timeline.pools:
                timeline.pools[role].append(
                    {
                        "t": round(now, 2),
                        "desired": fleet.replicas(role),
                        "ready": len(fleet.ready(role)),
                    }
                )
            if now >= next_tick:
                next_tick += interval
                obs = await scraper.observe(fleet.targets(), routers)
                obs = _at(obs, now)
                tick = compute_tick(status, obs, config, _iso())
                status = {**status, **tick.status}
                for role, n in tick.scale.items():
                    pool = obs.pools.get(role)
                    costs = compute_deletion_costs(pool) if pool is not None else None
                    await fleet.scale(role, n, costs)
                    d = tick.decision.pools[role]
                    timeline.decisions.append(
                        {
                            "t": round(now, 2),
                            "pool": role,
                            "from": d.current,
                            "to": d.desired,
                            "reason": d.reason,
                        }
                    )
                if opts.view:
                    _render(out, isvc, fleet, obs, tick.decision, now)
            await asyncio.sleep(min(1.0, max(0.05, next_tick - clock())))


def _at(obs: Observation, now_s: float) -> Observation:
    return replace(obs, now_s=now_s)


def _iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _render(
    out: TextIO,
    isvc: InferenceService,
    fleet: LocalFleet,
    obs: Observation,
    decision: Any,
    now: float,
) -> None:
    qos = isvc.spec.qos
    lines = [
        f"t={now:6.1f}s  {isvc.name}  targets: TTFT p{qos.ttft.percentile} "
        f"{qos.ttft.seconds:g}s, ITL p{qos.itl.percentile} {qos.itl.seconds * 1000:g}ms"
    ]
    lines.append(f"{'pool':8} {'desired':>7} {'ready':>5} {'waiting':>7} {'running':>7} {'kv':>5}")
    for role, pool in obs.pools.items():
        lines.append(
            f"{role:8} {fleet.replicas(role):>7} {len(fleet.ready(role)):>5} "
            f"{pool.waiting_requests:>7.0f} {pool.running_requests:>7.0f} "
            f"{pool.kv_usage:>5.2f}"
        )
    for name, lat in obs.latency_by_class.items():
        ttft = lat.ttft_s.get(qos.ttft.percentile)
        itl = lat.itl_s.get(qos.itl.percentile)
        infeasible = "".join(
            f"  {n:g} infeasible ({reason})"
            for reason, n in sorted(lat.infeasible_requests.items())
        )
        lines.append(
            f"latency[{name}]: TTFT {_fmt(ttft)}  ITL {_fmt(itl)}  ({lat.source}){infeasible}"
        )
    if obs.absorbed_requests_per_s:
        lines.append(
            f"absorbed by decode engines: {obs.absorbed_requests_per_s:.2g} req/s, "
            f"{obs.absorbed_prompt_tokens_per_s:.3g} prompt tok/s"
        )
    lines += [f"decision: {d.reason}" for d in decision.pools.values()]
    if out.isatty():
        out.write("\x1b[H\x1b[2J")
    out.write("\n".join(lines) + "\n")
    out.flush()


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.0f}ms"
