"""Router overhead at 50, 200 and 500 concurrent streaming clients, against simulated engines,
next to vLLM's toy P/D proxy pattern on the same engines and the engines called directly.

Prints, per concurrency level, one row for each of:

- **direct**: the clients run the two legs themselves (prefill, then streaming decode with
  the returned ``kv_transfer_params``): the throughput the engines give without a proxy;
- **tandem**: ``tandem router``;
- **toy proxy**: the FastAPI + httpx proxy of vLLM's NIXL examples, written again in
  ``bench/toy_proxy.py`` (the ``bench`` extra: ``pip install -e '.[bench]'``;
  ``--no-baseline`` skips it);

with, for the two proxies:

- requests/s and relayed tokens/s, CPU-seconds per 1,000 relayed tokens and the share of a
  core the proxy used, with every client streaming through it;
- the added time to first token, in a second window: p50 and p99 of TTFT through the
  proxy minus p50 and p99 of TTFT of the same two legs called directly. Probe clients,
  part of the concurrent load, alternate a direct and a proxied request, so both samples
  see the same engine load; the other clients only stream through the proxy. (Probes hang
  up after their first token, so they stay out of the first window: they would charge
  whole requests to tokens nobody relayed.)
- the proxy process's peak RSS.

Then the two goals: at every level at least 4x less CPU per relayed token than the toy
proxy, and at 500 streams the direct throughput kept.

Both proxies run as their own processes, pinned to the same core where the machine allows
(one is measured while the other idles), so their CPU time (``/proc/PID/stat``) and peak
RSS (``VmHWM``) are their own. Each runs as it ships: the router at its default log level
(INFO: no line per request), the toy proxy at uvicorn's default, as vLLM's script starts it
(``info``: an access-log line per request); their output goes to ``/dev/null``.
Engines are simulated engines (``tandem.engine``'s app) on the other cores, the load
generator a process of its own that reads raw SSE and parses nothing it does not need.
Every process runs at real-time priority where permitted (see :func:`raise_priority`), so
other work on a shared machine disturbs the figures less. So that nothing at that priority
outlives a broken run: a client whose request failed pauses before its next one, a proxy
that exits stops the run with a message naming it (exit status 1), and a run stops itself
past the most its windows may take (:func:`run_deadline_s`; 28 minutes for the default run).

Usage: ``python bench/router.py [--quick] [--levels 50,200,500] [--duration S] [--no-baseline]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import importlib.util
import json
import os
import random
import resource
import signal
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

MODEL = "bench-model"
KV_REQUEST = {
    "do_remote_decode": True,
    "do_remote_prefill": False,
    "remote_engine_id": None,
    "remote_block_ids": None,
    "remote_host": None,
    "remote_port": None,
}
WORDS = [
    "the",
    "a",
    "prefill",
    "decode",
    "cache",
    "token",
    "batch",
    "stream",
    "router",
    "engine",
    "latency",
    "pool",
]
#: Of the concurrent clients, how many alternate a direct and a routed request (the
#: latency probes); the others only stream through the router (the load).
PROBES = 16
#: The load generator's target for clients that run both legs themselves.
DIRECT = "direct:"
#: The goals: CPU per relayed token against the toy proxy's, and the direct throughput
#: kept (Tandem's req/s over the direct req/s) at the highest level.
CPU_GOAL = 4.0
THROUGHPUT_GOAL = 0.95
#: A client whose request failed waits this long before its next one: a proxy that died
#: mid-run must not turn the clients (at real-time priority) into a busy loop.
ERROR_PAUSE_S = 0.05
#: Beyond the levels' own windows, seconds a run may take in all (start-up, windows that
#: wait for their clients, shutdown) before it stops itself: see :func:`run_deadline_s`.
DEADLINE_SLACK_S = 300.0


class ProxyGone(RuntimeError):
    """A proxy under test exited before the run was over."""


def run_deadline_s(levels: int, proxies: int, warmup_s: float, duration_s: float) -> float:
    """The most seconds a whole run may take: each level runs two windows (load, then
    probes) for the direct target and for each proxy, each window its warm-up, its
    measured seconds and up to 60 s for its clients to finish, plus
    :data:`DEADLINE_SLACK_S`. A run past it is stuck, not slow, and stops itself.

    >>> run_deadline_s(3, 2, 4.0, 12.0)  # the default run: 3 levels, Tandem and the toy proxy
    1668.0
    """
    return levels * (1 + proxies) * 2 * (warmup_s + duration_s + 60.0) + DEADLINE_SLACK_S


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu_times(pid: int) -> tuple[float, float]:
    """User and system CPU seconds of process ``pid`` so far; :class:`ProxyGone` when it
    has exited."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        raise ProxyGone(f"process {pid} exited") from None
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far."""
    return sum(cpu_times(pid))


def peak_rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def plan_cores() -> tuple[set[int] | None, set[int] | None]:
    """(router core, everything else) when there are at least two cores to split."""
    try:
        cores = sorted(os.sched_getaffinity(0))
    except AttributeError:
        return None, None
    if len(cores) < 2:
        return None, None
    return {cores[0]}, set(cores[1:])


def raise_fd_limit() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def die_with_parent() -> None:
    """Linux: SIGTERM this (child) process when the benchmark exits, however it exits."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


#: Scheduling class of every benchmark process; see :func:`raise_priority`.
REALTIME = os.environ.get("TANDEM_BENCH_REALTIME", "1") != "0"


def raise_priority() -> str:
    """Real-time (SCHED_FIFO 10) where permitted, else nice -10; returns which.

    On a machine shared with other work a normal-priority router waits on the run
    queue for most of its wake-ups (its /proc schedstat shows it), which would measure
    the neighbours, not the router. Event-driven processes that sleep in epoll do not
    hog a core at real-time priority, and the kernel's RT throttling bounds them anyway.
    Set TANDEM_BENCH_REALTIME=0 to run at normal priority.
    """
    if REALTIME:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
            return "SCHED_FIFO"
        except (OSError, AttributeError):
            pass
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, 0, -10)
        return "nice -10"
    return "normal priority"


def child_setup(cores: set[int] | None) -> None:
    """In a child before exec: dies with us, file limit, priority, cores."""
    die_with_parent()
    raise_fd_limit()
    raise_priority()
    if cores:
        os.sched_setaffinity(0, cores)


async def spawn(args: list[str], cores: set[int] | None) -> asyncio.subprocess.Process:
    """``python ARGS`` with its own priority, file limit and cores."""
    return await asyncio.create_subprocess_exec(
        sys.executable, *args,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        preexec_fn=lambda: child_setup(cores),
    )  # fmt: skip


def serve_engine(role: str, port: int, speedup: float) -> None:
    """A simulated engine (``--serve-engine``) with vLLM's listen backlog.

    ``tandem engine sim`` listens with aiohttp's default backlog of 128; vLLM (uvicorn)
    uses 2048. With hundreds of streams starting at once the router opens that many
    connections to an engine, and a 128-deep accept queue drops SYNs (1 s retransmits),
    which would measure the engine's listener, not the router.
    """
    from aiohttp import web

    from tandem.engine.server.app import create_app
    from tandem.engine.server.factory import SimOptions, build_server_config

    options = SimOptions(role=role, served_model_names=(MODEL,), speedup=speedup)  # type: ignore[arg-type]
    app = create_app(build_server_config(options))
    web.run_app(app, host="127.0.0.1", port=port, backlog=2048, handler_cancellation=True,
                access_log=None, print=None, shutdown_timeout=0)  # fmt: skip


async def wait_ready(session: aiohttp.ClientSession, url: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            async with session.get(url + "/health") as resp:
                if resp.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.1)
    raise RuntimeError(f"{url} did not become healthy")


@dataclass
class Level:
    """What one concurrency level measured."""

    routed_ttft_s: list[float] = field(default_factory=list)
    direct_ttft_s: list[float] = field(default_factory=list)
    requests: int = 0
    errors: int = 0
    tokens: int = 0


def make_body(prompt_words: int, max_tokens: int, rng: random.Random) -> dict[str, Any]:
    prompt = " ".join(rng.choice(WORDS) for _ in range(prompt_words))
    return {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "stream": True}


async def read_stream(
    resp: aiohttp.ClientResponse, started: float, *, first_only: bool = False
) -> tuple[float, int]:
    """(TTFT, token events) of an SSE answer; ``first_only``: hang up after the first."""
    ttft = None
    events = 0
    async for chunk in resp.content.iter_any():
        if ttft is None:
            ttft = time.perf_counter() - started
        events += chunk.count(b"data: {")
        if first_only:
            resp.close()
            break
    if ttft is None:
        raise RuntimeError("empty stream")
    return ttft, events


async def routed_once(
    session: aiohttp.ClientSession, url: str, body: dict[str, Any], *, first_only: bool = False
) -> tuple[float, int] | None:
    """(TTFT, token events) of one request through the router; None if it failed."""
    started = time.perf_counter()
    try:
        async with session.post(url + "/v1/completions", json=body) as resp:
            if resp.status != 200:
                await resp.read()
                return None
            return await read_stream(resp, started, first_only=first_only)
    except (aiohttp.ClientError, RuntimeError):
        return None


async def direct_once(
    session: aiohttp.ClientSession,
    prefill: str,
    decode: str,
    body: dict[str, Any],
    rid: str,
    *,
    first_only: bool = True,
) -> tuple[float, int] | None:
    """The same two legs without the router: prefill, then streaming decode."""
    first = {**body, "stream": False, "max_tokens": 1, "kv_transfer_params": KV_REQUEST}
    headers = {"X-Request-Id": rid}
    started = time.perf_counter()
    try:
        async with session.post(prefill + "/v1/completions", json=first, headers=headers) as resp:
            answer = json.loads(await resp.read())
        second = {**body, "kv_transfer_params": answer["kv_transfer_params"]}
        async with session.post(decode + "/v1/completions", json=second, headers=headers) as resp:
            return await read_stream(resp, started, first_only=first_only)
    except (aiohttp.ClientError, KeyError, RuntimeError, ValueError):
        return None


async def load_client(
    session: aiohttp.ClientSession, url: str, stop: asyncio.Event, level: Level, cfg: Any, seed: int
) -> None:
    """One of the concurrent streaming clients: requests back to back through the router."""
    rng = random.Random(seed)
    await asyncio.sleep(rng.random() * cfg.warmup)  # spread the starts
    direct = url.startswith(DIRECT)
    if direct:
        prefill, decode = (part.split(",") for part in url.removeprefix(DIRECT).split("|"))
    while not stop.is_set():
        body = make_body(cfg.prompt_words, cfg.max_tokens, rng)
        if direct:
            rid = f"load-{rng.getrandbits(64):x}"
            result = await direct_once(session, rng.choice(prefill), rng.choice(decode), body, rid,
                                       first_only=False)  # fmt: skip
        else:
            result = await routed_once(session, url, body)
        if result is None:
            level.errors += 1
            await asyncio.sleep(ERROR_PAUSE_S)
        elif not stop.is_set():  # requests that end after the window do not count
            level.requests += 1
            level.tokens += result[1]


async def probe_client(
    session: aiohttp.ClientSession,
    url: str,
    prefill: list[str],
    decode: list[str],
    stop: asyncio.Event,
    level: Level,
    cfg: Any,
    seed: int,
) -> None:
    """Alternates a direct two-leg request and a routed one, so both see the same load.

    Probes hang up after the first token (the engine aborts the rest), so they take many
    samples; their requests are not counted in the throughput figures.
    """
    rng = random.Random(seed)
    await asyncio.sleep(rng.random() * cfg.warmup)
    while not stop.is_set():
        body = make_body(cfg.prompt_words, cfg.max_tokens, rng)
        rid = f"direct-{rng.getrandbits(64):x}"
        direct = await direct_once(session, rng.choice(prefill), rng.choice(decode), body, rid)
        body = make_body(cfg.prompt_words, cfg.max_tokens, rng)
        if url.startswith(DIRECT):  # the direct level: its "proxied" sample is direct too
            rid = f"direct-{rng.getrandbits(64):x}"
            routed = await direct_once(session, rng.choice(prefill), rng.choice(decode), body, rid)
        else:
            routed = await routed_once(session, url, body, first_only=True)
        if direct is None or routed is None:
            level.errors += 1
            await asyncio.sleep(ERROR_PAUSE_S)
        elif not stop.is_set():
            level.direct_ttft_s.append(direct[0])
            level.routed_ttft_s.append(routed[0])


async def router_ttft_buckets(session: aiohttp.ClientSession, url: str) -> dict[float, float]:
    """Cumulative bucket counts of the router's own TTFT histogram (all classes)."""
    async with session.get(url + "/metrics") as resp:
        text = await resp.text()
    buckets: dict[float, float] = {}
    prefix = "tandem_router_time_to_first_token_seconds_bucket{"
    for line in text.splitlines():
        if line.startswith(prefix):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            bound = float("inf") if le == "+Inf" else float(le)
            buckets[bound] = buckets.get(bound, 0.0) + float(line.rsplit(" ", 1)[1])
    return buckets


def bucket_quantile(before: dict[float, float], after: dict[float, float], q: float) -> float:
    """The q-quantile of the observations between two scrapes (linear within a bucket)."""
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
    total = counts[-1] if counts else 0.0
    if total <= 0:
        return float("nan")
    rank, low, seen = q * total, 0.0, 0.0
    for bound, cumulative in zip(bounds, counts, strict=True):
        if cumulative >= rank:
            if bound == float("inf"):
                return low
            inside = cumulative - seen
            return low + (bound - low) * ((rank - seen) / inside if inside else 1.0)
        low, seen = bound, cumulative
    return low


def percentile(values: list[float], pct: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


async def start_load(
    target: str, clients: int, cfg: Any, load_cores: set[int] | None
) -> asyncio.subprocess.Process:
    """The load generator process for ``target``, once it says it is ready."""
    load = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--serve-load", target, str(clients),
        json.dumps({k: getattr(cfg, k) for k in ("prompt_words", "max_tokens", "warmup",
                                                   "duration")}),
        stdout=asyncio.subprocess.PIPE, preexec_fn=lambda: child_setup(load_cores),
    )  # fmt: skip
    assert load.stdout is not None
    await load.stdout.readline()  # "ready": its clock starts now, as the caller's does
    return load


async def run_level(
    concurrency: int,
    router_url: str,
    router_pid: int | None,
    prefill: list[str],
    decode: list[str],
    cfg: Any,
    load_cores: set[int] | None,
    *,
    probes: int,
    own_histogram: bool = True,
) -> dict[str, float]:
    """One window: the load in its own process, ``probes`` probe clients here, the proxy's
    CPU over the window.

    The load generator reads hundreds of streams; in its own process its event loop
    cannot delay the probes' clocks. ``router_url`` may be a direct target (clients run
    both legs themselves, ``router_pid`` None): the same clients, the same probes, no proxy.
    """
    level = Level()
    stop = asyncio.Event()
    probes = min(probes, concurrency)
    load = await start_load(router_url, concurrency - probes, cfg, load_cores)
    assert load.stdout is not None
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        tasks = [
            asyncio.create_task(
                probe_client(session, router_url, prefill, decode, stop, level, cfg, 10_000 + i)
            )
            for i in range(probes)
        ]
        await asyncio.sleep(cfg.warmup)
        level.routed_ttft_s.clear(), level.direct_ttft_s.clear()
        level.errors = 0
        buckets0 = await router_ttft_buckets(session, router_url) if own_histogram else {}
        cpu0, t0 = cpu_seconds(router_pid) if router_pid else 0.0, time.perf_counter()
        await asyncio.sleep(cfg.duration)
        cpu1, t1 = cpu_seconds(router_pid) if router_pid else 0.0, time.perf_counter()
        buckets1 = await router_ttft_buckets(session, router_url) if own_histogram else {}
        stop.set()
        if tasks:
            await asyncio.wait(tasks, timeout=60)
    counts = json.loads((await load.stdout.read()) or b"{}")
    await load.wait()
    wall_s, cpu_s = t1 - t0, max(cpu1 - cpu0, 1e-9)
    routed, direct = level.routed_ttft_s, level.direct_ttft_s
    requests, tokens = counts.get("requests", 0), counts.get("tokens", 0)
    if router_pid is None:
        return {"concurrency": concurrency, "requests": requests,
                "errors": level.errors + counts.get("errors", 0),
                "direct_p50_ms": percentile(direct, 50) * 1000,
                "direct_p99_ms": percentile(direct, 99) * 1000,
                "req_per_s": requests / wall_s, "tok_per_s": tokens / wall_s}  # fmt: skip
    return {
        "concurrency": concurrency,
        "requests": requests,
        "errors": level.errors + counts.get("errors", 0),
        "added_p50_ms": (percentile(routed, 50) - percentile(direct, 50)) * 1000,
        "added_p99_ms": (percentile(routed, 99) - percentile(direct, 99)) * 1000,
        "routed_p50_ms": percentile(routed, 50) * 1000,
        "routed_p99_ms": percentile(routed, 99) * 1000,
        "direct_p50_ms": percentile(direct, 50) * 1000,
        "direct_p99_ms": percentile(direct, 99) * 1000,
        "probe_pairs": len(direct),
        "router_seen_p50_ms": bucket_quantile(buckets0, buckets1, 0.5) * 1000,
        "router_seen_p99_ms": bucket_quantile(buckets0, buckets1, 0.99) * 1000,
        "req_per_s": requests / wall_s,
        "tok_per_s": tokens / wall_s,
        "router_cpu_util": cpu_s / wall_s,
        "req_per_cpu_s": requests / cpu_s,
        "tok_per_cpu_s": tokens / cpu_s,
        "cpu_s_per_1k_tokens": cpu_s / tokens * 1000 if tokens else float("nan"),
        "peak_rss_mib": peak_rss_mib(router_pid),
    }


async def measure(
    concurrency: int,
    url: str,
    pid: int | None,
    prefill: list[str],
    decode: list[str],
    cfg: Any,
    load_cores: set[int] | None,
    *,
    own_histogram: bool,
) -> dict[str, float]:
    """One level of one target, in two windows: every client streaming (throughput, CPU
    per relayed token, RSS), then ``cfg.probes`` of them probing (added time to first
    token). Probes hang up after the first token and go through both legs each time, so in
    the first window they would charge per-request costs to tokens nobody relayed."""
    args = (concurrency, url, pid, prefill, decode, cfg, load_cores)
    load = await run_level(*args, probes=0, own_histogram=False)
    latency = await run_level(*args, probes=cfg.probes, own_histogram=own_histogram)
    keep = ("added_p50_ms", "added_p99_ms", "routed_p50_ms", "routed_p99_ms", "direct_p50_ms",
            "direct_p99_ms", "probe_pairs", "router_seen_p50_ms", "router_seen_p99_ms")  # fmt: skip
    return {**load, **{k: latency[k] for k in keep if k in latency},
            "errors": load["errors"] + latency["errors"]}  # fmt: skip


def serve_load(url: str, clients: int, settings: str) -> None:
    """``--serve-load``: streaming clients through the router; prints completions as JSON.

    Counts the requests (and their token events) that finish inside the measured window,
    which starts ``warmup`` seconds after the "ready" line.
    """
    cfg = argparse.Namespace(**json.loads(settings))

    async def run() -> dict[str, int]:
        level = Level()
        stop = asyncio.Event()
        connector = aiohttp.TCPConnector(limit=0)
        timeout = aiohttp.ClientTimeout(total=120)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            print("ready", flush=True)
            tasks = [
                asyncio.create_task(load_client(session, url, stop, level, cfg, i))
                for i in range(clients)
            ]
            await asyncio.sleep(cfg.warmup)
            level.requests = level.tokens = level.errors = 0
            await asyncio.sleep(cfg.duration)
            stop.set()
            if tasks:
                await asyncio.wait(tasks, timeout=60)
        return {"requests": level.requests, "tokens": level.tokens, "errors": level.errors}

    raise_fd_limit()
    print(json.dumps(asyncio.run(run())), flush=True)


@dataclass
class Proxy:
    """A proxy under test: its name, URL and process."""

    name: str
    url: str
    process: asyncio.subprocess.Process


COLUMNS = [
    ("streams", 7, "concurrency", "d"),
    ("target", 9, "target", "s"),
    ("added p50", 9, "added_p50_ms", ".2f"),
    ("added p99", 9, "added_p99_ms", ".2f"),
    ("direct p50", 10, "direct_p50_ms", ".1f"),
    ("direct p99", 10, "direct_p99_ms", ".1f"),
    ("req/s", 7, "req_per_s", ".1f"),
    ("tok/s", 7, "tok_per_s", ".0f"),
    ("cpu-s/1k tok", 12, "cpu_s_per_1k_tokens", ".3f"),
    ("cpu", 5, "router_cpu_util", ".2f"),
    ("rss MiB", 7, "peak_rss_mib", ".1f"),
    ("errors", 6, "errors", "d"),
]


def format_row(row: dict[str, Any]) -> str:
    cells = []
    for _, width, key, fmt in COLUMNS:
        value = row.get(key)
        cells.append(f"{'-':>{width}}" if value is None else f"{value:>{width}{fmt}}")
    return " ".join(cells)


def summarize(rows: list[dict[str, Any]], levels: list[int]) -> list[str]:
    """The goals, as ratios measured in this run."""
    by = {(r["concurrency"], r["target"]): r for r in rows}
    lines = []
    ratios = []
    for level in levels:
        tandem, toy = by.get((level, "tandem")), by.get((level, "toy proxy"))
        if tandem and toy:
            ratios.append((level, toy["cpu_s_per_1k_tokens"] / tandem["cpu_s_per_1k_tokens"]))
    if ratios:
        shown = ", ".join(f"{level} streams {ratio:.1f}x" for level, ratio in ratios)
        met = all(ratio >= CPU_GOAL for _, ratio in ratios)
        verdict = "met" if met else "NOT met"
        lines.append(
            f"CPU per relayed token, toy proxy / tandem: {shown} "
            f"(goal >= {CPU_GOAL:g}x at every level: {verdict})"
        )
    top = max(levels)
    tandem, direct = by.get((top, "tandem")), by.get((top, "direct"))
    if tandem and direct and direct["req_per_s"]:
        kept = tandem["req_per_s"] / direct["req_per_s"]
        toy = by.get((top, "toy proxy"))
        toy_part = f", toy proxy {toy['req_per_s']:.1f} req/s" if toy else ""
        lines.append(
            f"throughput at {top} streams: tandem {tandem['req_per_s']:.1f} req/s, direct "
            f"{direct['req_per_s']:.1f} req/s: {kept:.2f} of it kept{toy_part} (goal >= "
            f"{THROUGHPUT_GOAL:g}: {'met' if kept >= THROUGHPUT_GOAL else 'NOT met'})"
        )
    return lines


async def main(cfg: argparse.Namespace) -> int:
    task = asyncio.current_task()
    deadline_s = run_deadline_s(len(cfg.levels), 2 if cfg.baseline else 1, cfg.warmup,
                                cfg.duration)  # fmt: skip
    timed_out = False
    if task is not None:  # SIGTERM (e.g. from timeout) still stops the engines and proxies
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)

        def stop_stuck_run() -> None:
            nonlocal timed_out
            timed_out = True
            task.cancel()

        asyncio.get_running_loop().call_later(deadline_s, stop_stuck_run)
    if cfg.baseline:
        missing = [
            m for m in ("fastapi", "httpx", "uvicorn") if importlib.util.find_spec(m) is None
        ]
        if missing:
            print(f"the toy proxy baseline needs {', '.join(missing)}: pip install -e '.[bench]' "
                  "(or run with --no-baseline)", file=sys.stderr)  # fmt: skip
            return 2
    raise_fd_limit()
    priority = raise_priority()
    router_core, other_cores = plan_cores()
    if other_cores:
        os.sched_setaffinity(0, other_cores)
    procs: list[asyncio.subprocess.Process] = []
    prefill, decode = [], []
    for role, urls, count in (("prefill", prefill, cfg.prefill), ("decode", decode, cfg.decode)):
        for _ in range(count):
            port = free_port()
            engine = [__file__, "--serve-engine", role, str(port), str(cfg.speedup)]
            procs.append(await spawn(engine, other_cores))
            urls.append(f"http://127.0.0.1:{port}")
    proxies: list[Proxy] = []
    router_port = free_port()
    router = await spawn(
        ["-m", "tandem.cli", "router", "--port", str(router_port), "--prefill", ",".join(prefill),
         "--decode", ",".join(decode), "--max-inflight", "100000"],
        router_core,
    )  # fmt: skip
    procs.append(router)
    proxies.append(Proxy("tandem", f"http://127.0.0.1:{router_port}", router))
    if cfg.baseline:
        toy_port = free_port()
        toy = await spawn(
            [str(Path(__file__).with_name("toy_proxy.py")), "--port", str(toy_port),
             "--prefill", ",".join(prefill), "--decode", ",".join(decode)],
            router_core,
        )  # fmt: skip
        procs.append(toy)
        proxies.append(Proxy("toy proxy", f"http://127.0.0.1:{toy_port}", toy))
    try:
        async with aiohttp.ClientSession() as session:
            for url in [*prefill, *decode, *(p.url for p in proxies)]:
                await wait_ready(session, url)
        where = f"pinned to core {min(router_core)}" if router_core else "not pinned (one core)"
        print(
            f"proxies {where}, one measured at a time; {cfg.prefill} prefill + {cfg.decode} "
            f"decode sim engines (llama-3.1-8b on H100, speedup {cfg.speedup}); prompt "
            f"~{cfg.prompt_words} words, {cfg.max_tokens} output tokens; {cfg.duration:g} s "
            f"per level after {cfg.warmup:g} s warm-up; {cfg.probes} of the clients probe "
            f"(direct, then proxied); every process at {priority}"
        )
        print("each level twice: every client streaming (req/s, tok/s, cpu, rss), then with")
        print(
            "probes (latencies in ms; added = proxied - direct, probe pairs); direct: the clients"
        )
        print(
            "run the two legs themselves; cpu-s/1k tok: proxy CPU-seconds per 1,000 relayed tokens"
        )
        print(" ".join(f"{title:>{width}}" for title, width, _, _ in COLUMNS))
        rows: list[dict[str, Any]] = []
        for concurrency in cfg.levels:
            for proxy in proxies:
                if proxy.process.returncode is not None:
                    raise ProxyGone(f"the {proxy.name} process exited with code "
                                    f"{proxy.process.returncode}")  # fmt: skip
            target = DIRECT + ",".join(prefill) + "|" + ",".join(decode)
            direct = await measure(concurrency, target, None, prefill, decode, cfg, other_cores,
                                   own_histogram=False)  # fmt: skip
            rows.append({**direct, "target": "direct"})
            print(format_row(rows[-1]), flush=True)
            for proxy in proxies:
                assert proxy.process.pid is not None
                try:
                    result = await measure(
                        concurrency, proxy.url, proxy.process.pid, prefill, decode, cfg,
                        other_cores, own_histogram=proxy.name == "tandem",
                    )  # fmt: skip
                except ProxyGone:
                    raise ProxyGone(
                        f"the {proxy.name} process exited during the {concurrency}-stream level"
                    ) from None
                rows.append({**result, "target": proxy.name})
                print(format_row(rows[-1]), flush=True)
                if cfg.json:
                    print(json.dumps(rows[-1]))
        for line in summarize(rows, cfg.levels):
            print(line)
    except ProxyGone as err:
        print(f"bench/router.py: {err}; its figures would be the clients' errors, so the "
              "run stops here (run the proxy by hand to see why)", file=sys.stderr)  # fmt: skip
        return 1
    except asyncio.CancelledError:
        if not timed_out:
            raise
        print(f"bench/router.py: stopped after {deadline_s:.0f} s, the most this run may "
              "take: something is stuck (a proxy or an engine not answering)",
              file=sys.stderr)  # fmt: skip
        return 1
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                proc.kill()
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="short levels (a smoke run)")
    p.add_argument("--levels", default="50,200,500", help="concurrent streams per level")
    p.add_argument("--duration", type=float, default=None, help="measured seconds per level")
    p.add_argument("--warmup", type=float, default=None, help="unmeasured seconds per level")
    p.add_argument("--prefill", type=int, default=2, help="prefill engines (2)")
    p.add_argument("--decode", type=int, default=2, help="decode engines (2)")
    p.add_argument("--prompt-words", type=int, default=64)
    p.add_argument("--max-tokens", type=int, default=None, help="output tokens (64; quick 32)")
    p.add_argument(
        "--speedup",
        type=float,
        default=0.5,
        help="simulated s per wall s; < 1 slows engines (fewer tokens per wall s)",
    )
    p.add_argument("--probes", type=int, default=PROBES, help="of the clients, how many probe")
    p.add_argument("--json", action="store_true", help="also print each row as JSON")
    p.add_argument(
        "--no-baseline",
        dest="baseline",
        action="store_false",
        help="skip vLLM's toy proxy pattern (bench/toy_proxy.py)",
    )
    args = p.parse_args(argv)
    args.levels = [int(x) for x in args.levels.split(",")]
    args.duration = args.duration or (5.0 if args.quick else 12.0)
    args.warmup = args.warmup or (2.5 if args.quick else 4.0)
    args.max_tokens = args.max_tokens or (32 if args.quick else 64)
    return args


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve-engine"]:
        serve_engine(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
        raise SystemExit(0)
    if sys.argv[1:2] == ["--serve-load"]:
        serve_load(sys.argv[2], int(sys.argv[3]), sys.argv[4])
        raise SystemExit(0)
    raise SystemExit(asyncio.run(main(parse_args())))
