"""Figures for the engine model and the simulated engine server.

1. Static vs continuous batching (prefill- and decode-prioritized) on the Azure conversation
   trace at a fixed request rate, one simulated H100 serving Llama-3.1-8B: throughput and
   TTFT/ITL percentiles, plus capacity (every request queued at t=0).
2. The cost model's calibration error per row group of the measured profiling table.
3. How many concurrent streams one ``tandem engine sim`` process sustains while its own
   inter-token latency stays within 10% of the modelled one.

Run: ``.venv/bin/python bench/engine.py [--quick] [--refit]``. Numbers vary a little with
the machine only in part 3; parts 1 and 2 are deterministic.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import random
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from tandem.engine.model import Engine, EngineRequest
from tandem.engine.model.calibrate import fit_calibration, parse_perf_rows

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
TRACE = EXAMPLES / "traces" / "AzureLLMInferenceTrace_conv.csv"
PERF = EXAMPLES / "calibration" / "perf_model.csv"

MODES: dict[str, dict[str, object]] = {
    "static": {"batching": "static"},
    "continuous, prefill-prioritized": {"prioritize": "prefill"},
    "continuous, decode-prioritized": {"prioritize": "decode"},
    "  same, 2048-token budget: prefill": {"prioritize": "prefill", "max_num_batched_tokens": 2048},
    "  same, 2048-token budget: decode": {"prioritize": "decode", "max_num_batched_tokens": 2048},
}


def load_trace(n: int) -> list[tuple[int, int]]:
    """(prompt tokens, output tokens) of the first ``n`` requests of the trace."""
    with TRACE.open() as fh:
        rows = list(csv.DictReader(fh))[:n]
    return [(max(1, int(r["ContextTokens"])), max(1, int(r["GeneratedTokens"]))) for r in rows]


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(p / 100 * len(values)))]


@dataclass
class ReplayResult:
    throughput_tok_s: float
    throughput_req_s: float
    ttft_s: list[float]
    itl_s: list[float]
    preemptions: int
    wall_s: float


def replay(lengths: list[tuple[int, int]], rate: float | None, **overrides: Any) -> ReplayResult:
    """Run the trace through one engine in virtual time. ``rate`` None: all arrive at t=0."""
    engine = Engine.from_presets("llama-3.1-8b", "h100", **overrides)
    rng = random.Random(7)
    t = 0.0
    arrivals = []
    for i, (prompt, out) in enumerate(lengths):
        if rate is not None:
            t += rng.expovariate(rate)
        arrivals.append((t, EngineRequest(str(i), prompt, out)))
    started = time.perf_counter()
    now, i, done = 0.0, 0, 0
    last: dict[str, float] = {}
    ttft: list[float] = []
    itl: list[float] = []
    end = 0.0
    while done < len(arrivals):
        while i < len(arrivals) and arrivals[i][0] <= now:
            engine.add_request(arrivals[i][1], arrivals[i][0])
            i += 1
        if not engine.has_work:
            now = arrivals[i][0]
            continue
        res = engine.step(now)
        if res.idle:
            now = arrivals[i][0]
            continue
        end = res.end_s
        for rid in res.emitted:
            prev = last.get(rid)
            if prev is not None:
                itl.append(end - prev)
            last[rid] = end
        for fin in res.finished:
            done += 1
            if fin.ttft_s is not None:
                ttft.append(fin.ttft_s)
            del last[fin.request_id]
        now = end
    span = end - arrivals[0][0]
    tokens = sum(out for _, out in lengths)
    return ReplayResult(
        tokens / span,
        len(lengths) / span,
        ttft,
        itl,
        engine.stats().preemptions_total,
        time.perf_counter() - started,
    )


def print_batching(n: int, rate: float) -> None:
    lengths = load_trace(n)
    mean_out = sum(o for _, o in lengths) / n
    mean_in = sum(p for p, _ in lengths) / n
    print(
        f"== Batching on {TRACE.name}: first {n} requests (prompt mean {mean_in:.0f}, "
        f"output mean {mean_out:.0f} tokens), Llama-3.1-8B on one simulated H100 =="
    )
    print(
        "vLLM defaults for H100: max_num_seqs=1024, max_num_batched_tokens=8192, "
        "chunked prefill, KV from 90% of 80 GiB"
    )
    for label, arrival_rate in (
        (f"Poisson arrivals at {rate:g} req/s", rate),
        ("capacity (all requests queued at t=0)", None),
    ):
        print(f"-- {label} --")
        header = (
            f"{'mode':34} {'tok/s':>7} {'req/s':>6} {'TTFT p50':>9} {'p90':>8} "
            f"{'p99':>8} {'ITL p50':>8} {'p90':>7} {'p99':>7} {'preempt':>7}"
        )
        print(header)
        for name, overrides in MODES.items():
            r = replay(lengths, arrival_rate, **overrides)
            print(
                f"{name:34} {r.throughput_tok_s:7.0f} {r.throughput_req_s:6.2f} "
                f"{pct(r.ttft_s, 50):8.3f}s {pct(r.ttft_s, 90):7.2f}s {pct(r.ttft_s, 99):7.2f}s "
                f"{pct(r.itl_s, 50) * 1e3:6.1f}ms {pct(r.itl_s, 90) * 1e3:5.0f}ms "
                f"{pct(r.itl_s, 99) * 1e3:5.0f}ms {r.preemptions:7d}"
            )
    print()


def print_calibration(refit: bool) -> None:
    with PERF.open(newline="") as fh:
        fit = fit_calibration(parse_perf_rows(fh))
    print(
        f"== Calibration against {PERF.name} (Llama-2-70B, vLLM; error = |model - measured| "
        "/ measured) =="
    )
    print(f"{'hardware':10} {'TP':>2} {'phase':8} {'rows':>4} {'mean err':>9} {'max err':>8}")
    for e in fit.errors:
        note = "  (suspect TP2/batch-64 rows, not fitted)" if e.excluded else ""
        print(
            f"{e.hardware:10} {e.tensor_parallel:2d} {e.phase:8} {e.num_rows:4d} "
            f"{e.mean_abs_pct:8.1f}% {e.max_abs_pct:7.1f}%{note}"
        )
    fitted = [e for e in fit.errors if not e.excluded]
    rows = sum(e.num_rows for e in fitted)
    overall = sum(e.mean_abs_pct * e.num_rows for e in fitted) / rows
    print(f"overall mean error over {rows} fitted rows: {overall:.1f}%")
    print(
        "fitted factors: (family, TP): compute_eff, memory_eff, overhead/layer, "
        "per-seq overhead/layer"
    )
    for (family, tp), c in sorted(fit.calibrations.items()):
        print(
            f"  ({family}, {tp}): {c.compute_efficiency:.2f}, {c.memory_efficiency:.2f}, "
            f"{c.overhead_s_per_layer * 1e6:.1f} us, {c.seq_overhead_s_per_layer * 1e6:.2f} us"
        )
    if refit:
        print("constants for calibration.py:")
        for (family, tp), c in sorted(fit.calibrations.items()):
            print(
                f'    ("{family}", {tp}): Calibration({c.compute_efficiency}, '
                f"{c.memory_efficiency}, {c.overhead_s_per_layer * 1e6:.2f}e-6, "
                f"{c.seq_overhead_s_per_layer * 1e6:.3f}e-6),"
            )
    print()


SERVER = (
    "import argparse, sys\n"
    "from tandem.commands import engine\n"
    "p = argparse.ArgumentParser(prog='tandem')\n"
    "engine.register(p.add_subparsers())\n"
    "a = p.parse_args(sys.argv[1:])\n"
    "sys.exit(a.func(a))\n"
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def _stream(
    session: aiohttp.ClientSession, url: str, stop: asyncio.Event, counts: list[int], idx: int
) -> None:
    body = {"prompt": "word " * 100, "max_tokens": 100000, "ignore_eos": True, "stream": True}
    try:
        async with session.post(url, json=body) as resp:
            async for line in resp.content:
                if line.startswith(b"data: {"):
                    counts[idx] += 1
                if stop.is_set():
                    return
    except (aiohttp.ClientError, asyncio.CancelledError):
        return


async def _measure(port: int, streams: int, window_s: float) -> dict[str, float]:
    base = f"http://127.0.0.1:{port}"
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(
        connector=conn, timeout=aiohttp.ClientTimeout(total=None)
    ) as s:
        for _ in range(200):
            try:
                async with s.get(base + "/health") as r:
                    if r.status == 200:
                        break
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)
        stop = asyncio.Event()
        counts = [0] * streams
        tasks = [
            asyncio.create_task(_stream(s, base + "/v1/completions", stop, counts, i))
            for i in range(streams)
        ]
        for _ in range(600):  # every stream has its first token
            if all(counts):
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)
        async with s.get(base + "/tandem/stats") as r:
            before = (await r.json())["loop"]
        t0, c0 = time.perf_counter(), sum(counts)
        await asyncio.sleep(window_s)
        async with s.get(base + "/tandem/stats") as r:
            after = await r.json()
        t1, c1 = time.perf_counter(), sum(counts)
        stop.set()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    loop = after["loop"]
    wall = loop["itl_wall_sum_s"] - before["itl_wall_sum_s"]
    model = loop["itl_model_sum_s"] - before["itl_model_sum_s"]
    n = loop["itl_count"] - before["itl_count"]
    return {
        "running": float(after["engine"]["num_running"]),
        "model_itl_ms": model / n * 1e3 if n else float("nan"),
        "wall_itl_ms": wall / n * 1e3 if n else float("nan"),
        "ratio": wall / model if model else float("nan"),
        "server_tok_s": (loop["tokens"] - before["tokens"]) / (t1 - t0),
        "client_tok_s": (c1 - c0) / (t1 - t0),
        "max_lag_ms": loop["max_lag_s"] * 1e3,
    }


def print_server_capacity(levels: list[int], window_s: float, speedups: list[float]) -> None:
    print("== One sim server process: concurrent streams vs its own ITL (wall) / modelled ITL ==")
    print(
        "Llama-3.1-8B on H100, max-num-seqs 2048; clients in a separate process on loopback;"
        " 'within 10%' means wall/model <= 1.10"
    )
    print(
        f"{'speedup':>7} {'streams':>7} {'running':>7} {'model ITL':>10} {'wall ITL':>9} "
        f"{'ratio':>6} {'server tok/s':>12} {'client tok/s':>12}  ok"
    )
    for speedup in speedups:
        best = 0
        for n in levels:
            port = free_port()
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    SERVER,
                    "engine",
                    "sim",
                    "--port",
                    str(port),
                    "--host",
                    "127.0.0.1",
                    "--max-num-seqs",
                    "2048",
                    "--speedup",
                    str(speedup),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            try:
                m = asyncio.run(_measure(port, n, window_s))
            finally:
                proc.terminate()
                proc.wait(timeout=10)
            ok = m["ratio"] <= 1.10
            best = n if ok else best
            print(
                f"{speedup:7g} {n:7d} {m['running']:7.0f} {m['model_itl_ms']:8.1f}ms "
                f"{m['wall_itl_ms']:7.1f}ms {m['ratio']:6.3f} {m['server_tok_s']:12.0f} "
                f"{m['client_tok_s']:12.0f}  {'yes' if ok else 'NO'}"
            )
            if not ok:
                break
        print(f"speedup {speedup:g}: sustains at least {best} concurrent streams within 10%")
    print()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer requests and load levels")
    ap.add_argument("--refit", action="store_true", help="print calibration constants")
    ap.add_argument("--rate", type=float, default=9.0, help="requests/s for part 1")
    ap.add_argument("--skip-server", action="store_true")
    args = ap.parse_args()
    if not TRACE.is_file() or not PERF.is_file():
        print(f"reference data not found: {TRACE}, {PERF}", file=sys.stderr)
        return 2
    print_batching(1000 if args.quick else 4000, args.rate)
    print_calibration(args.refit)
    if not args.skip_server:
        if args.quick:
            print_server_capacity([100, 500], 3.0, [1.0])
        else:
            print_server_capacity([100, 500, 1000, 2000], 4.0, [1.0, 2.0, 4.0])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
