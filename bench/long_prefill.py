"""The prefill pool's long-prefill cap (``spec.prefill.longPrefillTokenThreshold``, vLLM's
``--long-prefill-token-threshold``) across the traces, with Tandem's policy.

Each trace and seed of :mod:`autoscale` (its service, rate-scale rule and warm-up) runs
without the cap, the baseline measured in the same run, and with each threshold given:
per trace, the mean attainment over feasible requests and the GPU-hours summed over the
seeds, and their change against the baseline; then the same over every trace.

    python bench/long_prefill.py --jobs 2                     # 1024, 2048 and 4096, seeds 0-2
    python bench/long_prefill.py --quick --thresholds 2048    # the first 15 minutes
    python bench/long_prefill.py --trace long5-bursty --trace mix-shift --seeds 3 4 5

Progress (each finished run) goes to stderr.
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor

from autoscale import (
    QUICK_DURATION_S,
    TRACES,
    bench_service,
    find_rate_scale,
    load_trace,
)
from tandem.api import InferenceService
from tandem.sim.compare.runs import Scenario, build_scenario, run_policy
from tandem.traces.parse import TraceRequest
from tandem.traces.rate import scale_rate

#: (trace, seed, scale, threshold, duration_s, warmup_s)
Run = tuple[str, int, float, int, float | None, float]


def capped_service(threshold: int) -> InferenceService:
    """The bench's service, its prefill pool capped at ``threshold`` tokens (0: no cap)."""
    service = bench_service()
    if not threshold:
        return service
    spec = service.spec
    assert spec.prefill is not None
    prefill = spec.prefill.model_copy(update={"long_prefill_token_threshold": threshold})
    return service.model_copy(update={"spec": spec.model_copy(update={"prefill": prefill})})


@functools.lru_cache(maxsize=2)
def _requests(
    trace: str, seed: int, scale: float, duration_s: float | None
) -> tuple[TraceRequest, ...]:
    """The cell's trace, scaled (the same for every threshold: kept for the next run)."""
    return tuple(scale_rate(load_trace(trace, seed, duration_s), scale, seed))


def scenario(run: Run) -> Scenario:
    trace, seed, scale, threshold, duration_s, warmup_s = run
    requests = list(_requests(trace, seed, scale, duration_s))
    return build_scenario(capped_service(threshold), requests, seed=seed, warmup_s=warmup_s)


def measure(run: Run) -> tuple[Run, float, float, float]:
    """(run, attainment over feasible requests, GPU-hours, CPU seconds)."""
    cpu = time.process_time()
    result, _ = run_policy("tandem", scenario(run))
    return run, result.attainment_feasible, result.gpu_hours, time.process_time() - cpu


def report(
    rows: Sequence[tuple[Run, float, float, float]], thresholds: Sequence[int], traces: list[str]
) -> str:
    """Per trace and over all, each threshold against no cap."""
    by: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for (trace, _, _, threshold, _, _), attainment, gpu_h, _ in rows:
        by.setdefault((trace, threshold), []).append((attainment, gpu_h))

    def figures(keys: list[str], threshold: int) -> tuple[float, float]:
        cells = [cell for trace in keys for cell in by[(trace, threshold)]]
        return 100 * sum(a for a, _ in cells) / len(cells), sum(g for _, g in cells)

    lines = [
        f"{'trace':<18} {'no cap':>17} " + " ".join(f"{'cap ' + str(t):>34}" for t in thresholds),
        "-" * (37 + 35 * len(thresholds)),
    ]
    for label, keys in [*((t, [t]) for t in traces), ("all", traces)]:
        base_att, base_gpu = figures(keys, 0)
        cells = [f"{label:<18} {base_att:6.2f}% {base_gpu:7.2f} h"]
        for threshold in thresholds:
            att, gpu = figures(keys, threshold)
            change = 100 * (gpu / base_gpu - 1)
            cells.append(f"{att:6.2f}% ({att - base_att:+5.2f}) {gpu:7.2f} h ({change:+5.1f}%)")
        lines.append(" ".join(cells))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--thresholds", type=int, nargs="+", default=[1024, 2048, 4096], metavar="N"
    )
    parser.add_argument(
        "--trace", choices=TRACES, action="append", metavar="NAME", help="a trace (repeatable)"
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], metavar="N")
    parser.add_argument("--quick", action="store_true", help="the first 15 minutes of each trace")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    args = parser.parse_args(argv)
    if any(t < 1 for t in args.thresholds) or args.jobs < 1:
        print("--thresholds and --jobs must be at least 1", file=sys.stderr)
        return 1
    traces = args.trace or list(TRACES)
    duration = QUICK_DURATION_S if args.quick else None
    warmup = 300.0 if args.quick else 600.0
    base = bench_service()
    runs: list[Run] = []
    for trace in traces:
        for seed in args.seeds:
            scale = find_rate_scale(base, load_trace(trace, seed, duration), seed)
            for threshold in (0, *args.thresholds):
                runs.append((trace, seed, scale, threshold, duration, warmup))
    wall = time.perf_counter()
    rows = []
    with ProcessPoolExecutor(args.jobs) as pool:
        for done, row in enumerate(pool.map(measure, runs), 1):
            (trace, seed, scale, threshold, _, _), attainment, gpu_h, cpu = row
            cap = f"cap {threshold}" if threshold else "no cap"
            print(
                f"  [{done}/{len(runs)}] {trace} x{scale:g} seed {seed} {cap}: "
                f"{100 * attainment:.2f}% at {gpu_h:.2f} GPU-h ({cpu:.0f} s CPU)",
                file=sys.stderr,
                flush=True,
            )
            rows.append(row)
    span = "the first 15 minutes" if args.quick else "whole traces"
    print(
        f"Tandem, attainment of feasible requests (mean over seeds {args.seeds}) and GPU-hours "
        f"(summed), {span}; the rule's rate scale\n"
    )
    print(report(rows, args.thresholds, traces))
    print(f"\n{len(runs)} runs in {(time.perf_counter() - wall) / 60:.1f} min wall")
    return 0


if __name__ == "__main__":
    sys.exit(main())
