"""How faithful the simulated engine is to real vLLM, once ``tandem profile`` has fitted it.

1. Starts real vLLM (the CPU build of ``.ci/install-vllm``) serving the tiny test model,
   and profiles it with ``tandem profile`` (the full sweep; ``--quick`` the short one):
   closed waves of identical requests, one prompt at a time and 1 to 64 at once.
2. Builds held-out loads the fit never saw: open-loop Poisson arrivals of mixed requests
   (prompts log-normal around 200 tokens, 16 to 1,500; outputs 16 to 128 tokens), at the
   rates where the *fitted* engine model would be busy 30 %, 60 % and 85 % of the time.
   The rates come from the fitted preset, not from the measurements below.
3. Replays each load, same prompts and same arrival times, against real vLLM, then
   (vLLM stopped) against ``tandem engine sim --preset`` with the fitted preset, and
   prints TTFT p50/p90 and ITL p50/p90 of both with the relative error (sim over real).
   A request's ITL is its mean gap, ``(last token - first token) / (tokens - 1)``, as
   ``tandem profile`` counts it; the percentiles are over requests. The fitted preset
   holds vLLM's front end as the profile measured it (``frontend.latency_s``: what its
   HTTP and API server add to a first token, one request at a time); ``--engine-only``
   also replays the sim with it left out, the engine model alone, in a table of its own.
4. Replays each load on real vLLM a second time (new prompts, same lengths and times) and
   prints that run against the first the same way: the machine's noise floor, against
   which the sim's error reads (``--no-baseline`` skips it).

Each table is followed by the engines' own mean TTFT and ITL over each load (their
``/metrics`` histograms): where the clients' figures and the engine's own part ways, the
time went between the engine and its clients (vLLM's API server). The engines run at
``nice -10`` where permitted; the load average before and after is printed with the
tables. Bounded: at most ``--max-requests`` per load, ``--duration`` seconds of arrivals
each.

Cores: by default the engines, their front ends and the load generator share every
core, and the profile and the replays measure their contention as much as the engine.
``--bind`` gives vLLM's forward pass (its worker's OpenMP thread,
``VLLM_CPU_OMP_THREADS_BIND``) the last CPU to itself and runs everything else (this
bench and its load generator, vLLM's API server and engine-core process, the simulated
engine) on the others, as vLLM's CPU guide advises (reserve a core for the serving front
end) and as a GPU node has it. On two cores that leaves one core for vLLM's front end and
the load generator together, which keeps up at light loads only (docs/profile.md).

Usage: ``.venv/bin/python bench/fidelity.py [--quick] [--bind] [--engine-only] [--duration S]
[--json OUT]``
(needs ``bash .ci/install-vllm``; about 12 minutes on two cores, less with ``--quick``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import random
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the real-vLLM launcher of the tests (tests/vllm/engines.py)

from tests.vllm.engines import (  # noqa: E402
    INSTALL_COMMAND,
    SERVED_NAME,
    VLLM_VERSION,
    find_install,
    free_port,
    spawn_engine,
    write_tiny_model,
)

from tandem.engine.model import Engine, EngineRequest  # noqa: E402
from tandem.engine.model.cost_preset import CostPreset, cost_preset_from_mapping  # noqa: E402
from tandem.profile.measure import (  # noqa: E402
    ENGINE_ITL,
    ENGINE_TTFT,
    Target,
    engine_mean_s,
    measure_request,
    new_session,
    parse_latency_totals,
)
from tandem.profile.plan import build_prompt  # noqa: E402
from tandem.profile.points import RequestTiming, percentile  # noqa: E402
from tandem.profile.run import ProfileRequest, profile  # noqa: E402

MAX_NUM_SEQS = 64
MAX_NUM_BATCHED_TOKENS = 2048
MAX_MODEL_LEN = 2048
UTILIZATIONS = (0.3, 0.6, 0.85)


@dataclass(frozen=True)
class Arrival:
    at_s: float
    prompt_tokens: int
    output_tokens: int
    seed: int


def build_schedule(rate_per_s: float, duration_s: float, seed: int, limit: int) -> list[Arrival]:
    """Poisson arrivals of mixed requests (pure; the same seed gives the same requests)."""
    rng = random.Random(seed)
    out: list[Arrival] = []
    t = rng.expovariate(rate_per_s)
    while t < duration_s and len(out) < limit:
        prompt = min(1500, max(16, round(rng.lognormvariate(math.log(200), 0.8))))
        out.append(Arrival(t, prompt, rng.randint(16, 128), seed * 1_000_003 + len(out)))
        t += rng.expovariate(rate_per_s)
    return out


def modelled_utilization(preset: CostPreset, schedule: list[Arrival]) -> float:
    """Share of the time the fitted engine model is busy serving ``schedule``."""
    engine = Engine(preset.engine_config(), preset.cost_model())
    pending = list(reversed(schedule))
    now = 0.0
    while pending or engine.has_work:
        while pending and pending[-1].at_s <= now:
            a = pending.pop()
            engine.add_request(EngineRequest(str(a.seed), a.prompt_tokens, a.output_tokens), now)
        if engine.has_work:
            now = engine.step(now).end_s
        elif pending:
            now = pending[-1].at_s
    return engine.busy_s_total / max(now, 1e-9)


def rate_for(preset: CostPreset, utilization: float, duration_s: float, seed: int,
             limit: int) -> float:  # fmt: skip
    """The arrival rate at which the fitted model is busy ``utilization`` of the time."""
    low, high = 0.01, 1.0
    while modelled_utilization(preset, build_schedule(high, duration_s, seed, limit)) < utilization:
        low, high = high, high * 2
        if high > 1e4:
            break
    for _ in range(20):
        mid = (low + high) / 2
        if modelled_utilization(preset, build_schedule(mid, duration_s, seed, limit)) < utilization:
            low = mid
        else:
            high = mid
    return (low + high) / 2


@dataclass(frozen=True)
class Replay:
    """One load replayed against one engine: the clients' timings, and the engine's own
    mean TTFT and ITL over it (its ``/metrics`` histograms, read before and after)."""

    timings: list[RequestTiming]
    engine_ttft_s: float | None
    engine_itl_s: float | None


async def replay(url: str, schedule: list[Arrival], run: int = 0) -> Replay:
    """Send each request at its arrival time; every request's timing (bounded in time).
    ``run`` draws other prompts (same lengths): a second replay is new to the engine."""
    target = Target(url, SERVED_NAME, timeout_s=300.0)
    async with new_session(target) as session:
        before = parse_latency_totals(await _text(session, url + "/metrics"))
        start = time.perf_counter()

        async def one(a: Arrival) -> RequestTiming:
            await asyncio.sleep(max(0.0, a.at_s - (time.perf_counter() - start)))
            prompt = build_prompt(a.seed + run * 7_919, a.prompt_tokens)
            rid = f"{a.seed}-{run}"
            return await measure_request(session, target, prompt, a.output_tokens, rid)

        timings = list(await asyncio.gather(*(one(a) for a in schedule)))
        after = parse_latency_totals(await _text(session, url + "/metrics"))
    return Replay(
        timings,
        engine_mean_s(before, after, ENGINE_TTFT),
        engine_mean_s(before, after, ENGINE_ITL),
    )


async def _text(session: Any, url: str) -> str:
    async with session.get(url) as resp:
        text: str = await resp.text()
        return text


def figures(run: Replay) -> dict[str, Any]:
    """TTFT and ITL percentiles over the load's requests, and the engine's own means."""
    ttfts = [t.ttft_s for t in run.timings]
    itls = [i for t in run.timings if (i := t.itl_s) is not None]
    return {
        "requests": len(run.timings),
        "ttft_p50_s": percentile(ttfts, 50),
        "ttft_p90_s": percentile(ttfts, 90),
        "itl_p50_s": percentile(itls, 50),
        "itl_p90_s": percentile(itls, 90),
        "engine_ttft_s": run.engine_ttft_s,
        "engine_itl_s": run.engine_itl_s,
    }


def pick_engine_cpu(cpus: list[int], bind: bool) -> int | None:
    """With ``bind``, the CPU vLLM's forward pass gets to itself: the last of ``cpus``
    (this process's affinity), if another remains for everything else.

    >>> pick_engine_cpu([0, 1], True), pick_engine_cpu([0, 1, 2, 3], True)
    (1, 3)
    >>> pick_engine_cpu([0], True), pick_engine_cpu([0, 1], False)
    (None, None)
    """
    if not bind or len(cpus) < 2:
        return None
    return cpus[-1]


def placement(engine_cpu: int | None) -> str:
    if engine_cpu is None:
        return "engines, front ends and load generator on the same CPUs"
    return f"vLLM's forward pass on CPU {engine_cpu}, everything else on the others"


def nice(group: int) -> None:
    """``nice -10`` for an engine's process group, where permitted: it shares two cores
    with the load generator and whatever else runs there."""
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PGRP, group, -10)


def start_sim(
    preset_file: Path, log_dir: Path, name: str = "sim"
) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    log = (log_dir / f"{name}.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "tandem.cli", "engine", "sim", "--host", "127.0.0.1",
         "--port", str(port), "--served-model-name", SERVED_NAME,
         "--preset", str(preset_file)],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    nice(process.pid)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        with (
            contextlib.suppress(OSError),
            urllib.request.urlopen(url + "/health", timeout=2) as resp,
        ):
            if resp.status == 200:
                return process, url
        if process.poll() is not None:
            break
        time.sleep(0.5)
    process.kill()
    raise SystemExit(f"the sim engine did not start; see {log_dir / f'{name}.log'}")


def without_frontend(document: dict[str, Any]) -> dict[str, Any]:
    """The profile document with its preset's front-end latency left out (pure).

    >>> without_frontend({"preset": {"frontend": {"latency_s": 0.01}, "fit": {}}})
    {'preset': {'fit': {}}}
    """
    preset = {k: v for k, v in document["preset"].items() if k != "frontend"}
    return {**document, "preset": preset}


def stop(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)


def _pct(other: float, real: float) -> str:
    return f"{(other - real) / real * 100:+.0f}%"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e3:.1f}"


KEYS = {"ttft_p50_s": "TTFT p50", "ttft_p90_s": "TTFT p90", "itl_p50_s": "ITL p50",
        "itl_p90_s": "ITL p90"}  # fmt: skip


def format_table(rows: list[dict[str, Any]], other: str = "sim") -> str:
    """Real vLLM against ``other`` (``sim``, or ``again``: real vLLM's second replay) per
    load: TTFT and ITL percentiles with the relative error, then the engines' own means."""
    head = f"{'load':>5} {'req/s':>6} {'n':>4}"
    for label in KEYS.values():
        head += f" | {label + ' real / ' + other:>22} {'err':>5}"
    lines = [head, "-" * len(head)]
    for row in rows:
        real, them = row["real"], row[other]
        line = f"{row['utilization']:>5.0%} {row['rate_per_s']:>6.2f} {real['requests']:>4}"
        for key in KEYS:
            pair = f"{_ms(real[key])} / {_ms(them[key])} ms"
            line += f" | {pair:>22} {_pct(them[key], real[key]):>5}"
        lines.append(line)
    lines.append(f"engines' own means (/metrics histograms), real / {other}:")
    for row in rows:
        real, them = row["real"], row[other]
        lines.append(f"{row['utilization']:>5.0%}  TTFT {_ms(real['engine_ttft_s'])} / "
                     f"{_ms(them['engine_ttft_s'])} ms, ITL {_ms(real['engine_itl_s'])} / "
                     f"{_ms(them['engine_itl_s'])} ms")  # fmt: skip
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the short profile, 45 s loads")
    parser.add_argument("--duration", type=float, help="seconds of arrivals per load (90)")
    parser.add_argument("--max-requests", type=int, default=400, help="per load (400)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", type=Path, metavar="OUT", help="write the figures")
    parser.add_argument("--logs", type=Path, default=Path("fidelity-logs"), help="engine logs")
    parser.add_argument("--no-baseline", action="store_true",
                        help="replay each load on real vLLM once, not twice")  # fmt: skip
    parser.add_argument("--engine-only", action="store_true",
                        help="also replay the sim with the preset's front end left out "
                             "(its engine model alone), in a table of its own")  # fmt: skip
    parser.add_argument("--bind", action="store_true",
                        help="vLLM's forward pass on the last CPU, everything else on the "
                             "others (needs two CPUs or more)")  # fmt: skip
    args = parser.parse_args()
    cpus = os.sched_getaffinity(0)
    engine_cpu = pick_engine_cpu(sorted(cpus), args.bind)
    if args.bind and engine_cpu is None:
        print("--bind needs two CPUs or more to run on", file=sys.stderr)
        return 2
    binding = None if engine_cpu is None else {"VLLM_CPU_OMP_THREADS_BIND": str(engine_cpu)}
    if engine_cpu is not None:  # this process and all it starts stay off the engine's CPU
        os.sched_setaffinity(0, cpus - {engine_cpu})
    duration = args.duration or (45.0 if args.quick else 90.0)
    install, why = find_install()
    if install is None:
        print(f"real vLLM is not installed: {why}. Run `{INSTALL_COMMAND}`", file=sys.stderr)
        return 2
    args.logs.mkdir(parents=True, exist_ok=True)
    model_dir = write_tiny_model(install)
    load_before = os.getloadavg()
    started = time.monotonic()
    limits = ("--max-num-seqs", str(MAX_NUM_SEQS), "--max-num-batched-tokens",
              str(MAX_NUM_BATCHED_TOKENS))  # fmt: skip
    real = spawn_engine(install, model_dir, "aggregated", args.logs, name="vllm",
                        max_model_len=MAX_MODEL_LEN, extra=limits, env=binding)  # fmt: skip
    rows: list[dict[str, Any]] = []
    nice(real.process.pid)
    try:
        real.wait_ready(900)
        nice(real.process.pid)  # its engine core and worker, forked since
        print(f"real vLLM ready in {real.startup_s:.0f}s; profiling it", flush=True)
        outcome = asyncio.run(profile(ProfileRequest(
            url=real.url, decode_url=None, model=None, quick=args.quick, ttft_s=1.0,
            itl_s=0.05, targets_source="defaults", max_num_seqs=MAX_NUM_SEQS,
            max_num_batched_tokens=MAX_NUM_BATCHED_TOKENS, prompt_tokens=None,
            output_tokens=None, max_concurrency=MAX_NUM_SEQS, seed=args.seed,
        ), show_progress=sys.stderr.isatty()))  # fmt: skip
        print(outcome.summary, flush=True)
        preset_file = args.logs / "profile.json"
        preset_file.write_text(json.dumps(outcome.document, indent=2))
        preset = cost_preset_from_mapping(outcome.document)
        schedules = []
        for u in UTILIZATIONS:
            rate = rate_for(preset, u, duration, args.seed, args.max_requests)
            schedule = build_schedule(rate, duration, args.seed, args.max_requests)
            schedules.append((u, rate, schedule))
        for u, rate, schedule in schedules:
            print(f"real vLLM: {len(schedule)} requests at {rate:.2f}/s ({u:.0%})", flush=True)
            real_run = figures(asyncio.run(replay(real.url, schedule)))
            rows.append({"utilization": u, "rate_per_s": rate, "real": real_run})
        if not args.no_baseline:
            for row, (u, _, schedule) in zip(rows, schedules, strict=True):
                print(f"real vLLM again: {len(schedule)} requests ({u:.0%})", flush=True)
                row["again"] = figures(asyncio.run(replay(real.url, schedule, run=1)))
    finally:
        real.stop()
    sims = [("sim", preset_file)]
    if args.engine_only:
        engine_only = args.logs / "profile-engine-only.json"
        engine_only.write_text(json.dumps(without_frontend(outcome.document), indent=2))
        sims.append(("engine-only", engine_only))
    for name, file in sims:
        sim, url = start_sim(file, args.logs, name)
        try:
            for row, (u, rate, schedule) in zip(rows, schedules, strict=True):
                print(f"{name}: {len(schedule)} requests at {rate:.2f}/s ({u:.0%})", flush=True)
                row[name] = figures(asyncio.run(replay(url, schedule)))
        finally:
            stop(sim)
    load_after = os.getloadavg()
    print()
    print(f"fidelity: real vLLM {VLLM_VERSION} (CPU, tiny model) against tandem engine sim "
          f"with the fitted preset, {duration:g}s of arrivals per load, seed {args.seed}; "
          f"load average {load_before[0]:.1f} before, {load_after[0]:.1f} after; "
          f"{time.monotonic() - started:.0f}s in all; {placement(engine_cpu)}")  # fmt: skip
    print(
        f"(the sim's preset holds the front end fitted: "
        f"{preset.frontend_latency_s * 1e3:.1f} ms a request)"
    )
    print(format_table(rows))
    if args.engine_only:
        print()
        print("the sim without the front end (the engine model alone)")
        print(format_table(rows, "engine-only"))
    if not args.no_baseline:
        print()
        print("noise floor: the same loads replayed on real vLLM a second time")
        print(format_table(rows, "again"))
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "profile": outcome.document}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
