"""The ``tandem up`` loop: observe → decide → actuate, with a live view, a timeline, and a
summary and plot at the end. Does I/O.

The same :func:`~tandem.control.tick.compute_tick` the operator runs (state kept in a
status dict between ticks), the same :class:`~tandem.observe.scrape.Scraper` reading the
engines' and the router's ``/metrics``; only the actuator is local. A run goes::

    router up ─▶ initial pods ─▶ all ready? ─▶ load (--load) ─▶ ticks ─▶ load done
                 (startupTimeout)              (--duration)              or Ctrl-C
    ─▶ router down ─▶ engines stopped ─▶ --json timeline, summary, --plot
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

import aiohttp

from tandem.api import InferenceService
from tandem.api.validate import vllm_serve_flags
from tandem.api.vocab import PoolRole
from tandem.control.tick import compute_deletion_costs, compute_tick
from tandem.local.engines import EngineKind, EngineLaunch, check_local_model
from tandem.local.fleet import LocalFleet
from tandem.local.install import VllmNotFound, find_vllm
from tandem.local.load import LoadStats, replay_trace
from tandem.local.summary import (
    ScaleEvent,
    UpSummary,
    build_series,
    compute_summary,
    format_summary,
)
from tandem.local.view import LiveView
from tandem.observe.scrape import Scraper
from tandem.observe.source import metrics_url
from tandem.policy import compute_policy_config
from tandem.policy.config import PolicyConfig
from tandem.report.figure import render_timeline_png
from tandem.router.app import build_app, start_router
from tandem.router.config import build_router_config
from tandem.router.discovery import StaticDiscovery
from tandem.router.proxy import ROUTER
from tandem.traces.parse import TraceRequest


class UpError(Exception):
    """The fleet could not run (an engine failed to start, a model that cannot load)."""


@dataclass
class UpOptions:
    port: int = 8000
    host: str = "127.0.0.1"
    engine: EngineKind = "sim"
    vllm: str = "vllm"
    """The ``vllm`` executable (``--engine vllm``)."""
    cold_start_s: float | None = None
    interval_s: float | None = None
    trace: list[TraceRequest] | None = None
    trace_name: str = ""
    rate_scale: float = 1.0
    duration_s: float | None = None
    json_out: Path | None = None
    plot_out: Path | None = None
    log_dir: Path | None = None
    """Where engines write their output; ``--engine vllm`` uses a new temporary folder
    when not given (its path is printed), ``sim`` discards it."""
    view: bool = True
    grace_s: float = 30.0
    """How long requests still in flight when the load's duration ends may finish."""


@dataclass
class Timeline:
    """What ``--json`` writes: pool sizes over time and every decision."""

    pools: dict[PoolRole, list[dict[str, float]]] = field(default_factory=dict)
    decisions: list[ScaleEvent] = field(default_factory=list)
    pids: list[int] = field(default_factory=list)
    """Every engine process started (not written to JSON)."""
    summary: UpSummary | None = None
    """What the run ended with (not written to JSON)."""

    def to_dict(self) -> dict[str, Any]:
        return {"pools": self.pools, "decisions": [d.to_dict() for d in self.decisions]}


async def run_up(isvc: InferenceService, opts: UpOptions, out: TextIO = sys.stdout) -> Timeline:
    """Run the fleet until the load ends (``--load``), ``--duration``, or cancellation;
    then stop everything, write the timeline and the plot, and print the summary."""
    config = compute_policy_config(isvc)
    launch = _launch(isvc, opts)
    interval = opts.interval_s or config.interval_s
    t0 = time.monotonic()

    def clock() -> float:
        return time.monotonic() - t0

    log_dir = opts.log_dir
    if log_dir is None and opts.engine == "vllm":
        log_dir = Path(tempfile.mkdtemp(prefix="tandem-up-"))
    app = build_app(build_router_config(isvc), StaticDiscovery({r: [] for r in isvc.spec.pools()}))
    serving = await start_router(app, opts.host, opts.port, shutdown_timeout_s=5.0)
    router = app[ROUTER]
    fleet = LocalFleet(isvc, launch, clock, router.set_pool_urls, log_dir)
    timeline = Timeline(pools={role: [] for role in isvc.spec.pools()})
    url = f"http://{opts.host}:{serving.port}"
    view = LiveView(isvc, out, opts.view)
    view.say(
        f"tandem up: {isvc.name} ({isvc.spec.mode}, {opts.engine} engines) serving OpenAI "
        f"at {url}/v1" + (f"; engine logs in {log_dir}" if log_dir else "")
    )
    stats = LoadStats() if opts.trace is not None else None
    load: asyncio.Task[LoadStats] | None = None
    up = False
    try:
        with view:
            for role, pool in isvc.spec.pools().items():
                await fleet.scale(role, pool.replicas.start)
            await _wait_ready(isvc, fleet, timeline, clock, view)
            up = True
            if opts.trace is not None and stats is not None:
                load = asyncio.create_task(
                    replay_trace(
                        url,
                        isvc.spec.model.name,
                        opts.trace,
                        opts.rate_scale,
                        opts.duration_s or float("inf"),
                        clock,
                        max_model_len=isvc.spec.model.max_model_len,
                        grace_s=opts.grace_s,
                        stats=stats,
                    )
                )
            view.loading(stats, opts.duration_s)
            await _loop(config, fleet, timeline, opts, interval, clock, url, load, stats, view)
    finally:
        if load is not None and not load.done():
            load.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await load
        await serving.stop()  # stop routing first, so no request reaches a stopping engine
        await fleet.close()
        end_s = clock()
        timeline.pids = list(fleet.spawned)
        if opts.json_out is not None:
            opts.json_out.write_text(json.dumps(timeline.to_dict(), indent=1))
        if up:  # a fleet that never came up has nothing to sum up: the error says why
            timeline.summary = _finish(isvc, config, opts, fleet, timeline, stats, end_s, view)
    return timeline


def _launch(isvc: InferenceService, opts: UpOptions) -> EngineLaunch:
    if opts.engine == "sim":
        cold = isvc.spec.autoscaling.cold_start if opts.cold_start_s is None else opts.cold_start_s
        return EngineLaunch("sim", sys.executable, cold)
    check_local_model(isvc.spec.model.uri)
    uri = isvc.spec.model.uri
    if uri.startswith("file://") and not (Path(uri[len("file://") :]) / "config.json").is_file():
        raise UpError(
            f"spec.model.uri: {uri!r} is not a model folder (no config.json there); write "
            "the tiny test model with `tandem engine tiny-model DIR`, or name a folder "
            "holding a Hugging Face model"
        )
    try:
        install = find_vllm(opts.vllm)
    except VllmNotFound as err:
        raise UpError(str(err)) from None
    flags = None
    if install.flag_list is not None:
        with contextlib.suppress(FileNotFoundError):
            flags = vllm_serve_flags(install.flag_list)
    return EngineLaunch("vllm", str(install.vllm), flags=flags)


async def _wait_ready(
    isvc: InferenceService,
    fleet: LocalFleet,
    timeline: Timeline,
    clock: Callable[[], float],
    view: LiveView,
) -> None:
    """Until every pool has its first pods ready; :class:`UpError` when one exits first
    or ``engine.startupTimeout`` passes."""
    deadline = time.monotonic() + isvc.spec.engine.startup_timeout
    async with aiohttp.ClientSession() as session:
        while True:
            await fleet.refresh(session)
            _sample(timeline, fleet, clock())
            view.starting(fleet)
            if fleet.failures:
                raise UpError(fleet.failures[0])
            if all(len(fleet.ready(role)) >= pool.replicas.start
                   for role, pool in isvc.spec.pools().items()):  # fmt: skip
                return
            if time.monotonic() > deadline:
                raise UpError(
                    f"engines not ready within spec.engine.startupTimeout "
                    f"({isvc.spec.engine.startup_timeout:g}s)"
                )
            await asyncio.sleep(0.5)


async def _loop(
    config: PolicyConfig,
    fleet: LocalFleet,
    timeline: Timeline,
    opts: UpOptions,
    interval: float,
    clock: Callable[[], float],
    url: str,
    load: asyncio.Task[LoadStats] | None,
    stats: LoadStats | None,
    view: LiveView,
) -> None:
    status: dict[str, Any] = {}
    started = clock()
    next_tick = started + interval
    reported = 0
    routers = {"router": metrics_url("127.0.0.1", int(url.rsplit(":", 1)[1]))}
    async with (
        aiohttp.ClientSession() as session,
        Scraper(session=session, timeout_s=2.0) as scraper,
    ):
        while True:
            now = clock()
            if load is not None:
                if load.done():
                    return
            elif opts.duration_s is not None and now - started >= opts.duration_s:
                return
            await fleet.refresh(session)
            for failure in fleet.failures[reported:]:
                view.say(f"t={now:.1f}s engine failed: {failure}")
            reported = len(fleet.failures)
            _sample(timeline, fleet, now)
            if now >= next_tick:
                next_tick += interval
                obs = replace(await scraper.observe(fleet.targets(), routers), now_s=now)
                tick = compute_tick(status, obs, config, _iso())
                status = {**status, **tick.status}
                for role, n in tick.scale.items():
                    pool = obs.pools.get(role)
                    costs = compute_deletion_costs(pool) if pool is not None else None
                    await fleet.scale(role, n, costs)
                    d = tick.decision.pools[role]
                    event = ScaleEvent(now, role, d.current, d.desired, d.reason)
                    timeline.decisions.append(event)
                    view.say(f"t={now:.1f}s {d.reason}")
                view.update(now, fleet, obs, tick.decision, stats)
            else:
                view.update(now, fleet, None, None, stats)
            await asyncio.sleep(min(1.0, max(0.05, next_tick - clock())))


def _sample(timeline: Timeline, fleet: LocalFleet, now_s: float) -> None:
    for role, samples in timeline.pools.items():
        samples.append(
            {"t": round(now_s, 2), "desired": fleet.replicas(role), "ready": len(fleet.ready(role))}
        )


def _finish(
    isvc: InferenceService,
    config: PolicyConfig,
    opts: UpOptions,
    fleet: LocalFleet,
    timeline: Timeline,
    stats: LoadStats | None,
    end_s: float,
    view: LiveView,
) -> UpSummary:
    """Print the summary; write the plot."""
    records = stats.records if stats is not None else []
    gpus: dict[str, int] = {role: pool.gpus_per_replica for role, pool in config.pools.items()}
    summary = compute_summary(
        records, config.targets, fleet.lives(), gpus, timeline.decisions,
        stats.fitted if stats is not None else 0,
    )  # fmt: skip
    load = f" replaying {opts.trace_name} x{opts.rate_scale:g}" if opts.trace_name else ""
    title = f"tandem up: {isvc.name}, {end_s:.0f}s{load}"
    for line in format_summary(summary, title):
        view.say(line)
    if opts.plot_out is not None:
        step = max(1.0, round(end_s / 150.0))
        pools: dict[str, list[dict[str, float]]] = {str(r): s for r, s in timeline.pools.items()}
        series = build_series(records, pools, config.targets, end_s, step)
        png = render_timeline_png(
            series[0], {isvc.name: series[1]}, config.targets, title,
            time_unit="s" if end_s <= 600 else "min",
        )  # fmt: skip
        opts.plot_out.write_bytes(png)
        view.say(f"plot: {opts.plot_out}")
    return summary


def _iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
