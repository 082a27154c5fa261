"""The autoscaling benchmark: Tandem's policy against the baselines and the oracle.

For the Azure code and conversation traces, at the smallest rate scale whose oracle
needs at least 8 GPUs at peak, with TTFT p90 <= 1 s and ITL p90 <= 50 ms on
Llama-3.1-8B / H100 (cold start 120 s): one row per policy with SLO attainment,
GPU-hours, GPU-hours / oracle and GPU-hours / each baseline; then whether Tandem's
policy meets its goal (attainment >= 99 %, GPU-hours <= 1.15 x oracle, fewer GPU-hours
than every baseline reaching 99 %), what the oracle's own per-window schedule achieves
when the simulated fleet follows it with perfect foresight (how far the bound is from
a fleet that meets the targets), the cheapest foresight schedule found that does meet
99 % (the oracle's need times a headroom per pool, raised step by step:
:func:`tandem.sim.bounds.foresight.search_headroom`) and Tandem's GPU-hours against it, and the
simulator's speed (simulated seconds per CPU second, one core, one policy).

    python bench/autoscale.py            # the full hour of each trace
    python bench/autoscale.py --quick    # the first 15 minutes
    python bench/autoscale.py --jobs 2   # policies in parallel processes
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tandem.api import InferenceService
from tandem.api.validate import load_inference_service
from tandem.sim.bounds.foresight import HeadroomSearch, search_headroom
from tandem.sim.bounds.oracle import compute_oracle
from tandem.sim.compare.results import RunResult
from tandem.sim.compare.runs import (
    POLICIES,
    Scenario,
    build_scenario,
    run_oracle_schedule,
    run_policy,
)
from tandem.sim.fleet.spec import build_fleet_plan
from tandem.traces.parse import TraceRequest, parse_trace, slice_trace, trace_span_s
from tandem.traces.rate import scale_rate

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "traces"
TRACES = {
    "code": EXAMPLES / "AzureLLMInferenceTrace_code.csv",
    "conversation": EXAMPLES / "AzureLLMInferenceTrace_conv.csv",
}
MIN_PEAK_GPUS = 8
GOAL_ATTAINMENT = 0.99
GOAL_ORACLE_RATIO = 1.15
BASELINES = [p for p in POLICIES if p != "tandem"]


def bench_service() -> InferenceService:
    """Llama-3.1-8B on H100s, each pool 1-32 replicas, the targets of the issue."""
    pool = {"replicas": {"min": 1, "max": 32}, "gpu": {"count": 1, "type": "H100"}}
    return load_inference_service(
        {
            "apiVersion": "serving.tandem.dev/v1alpha1",
            "kind": "InferenceService",
            "metadata": {"name": "bench", "namespace": "default"},
            "spec": {
                "model": {"name": "llama-3.1-8b", "uri": "hf://meta-llama/Llama-3.1-8B-Instruct"},
                "prefill": pool,
                "decode": pool,
                "qos": {"ttft": {"p90": "1s"}, "itl": {"p90": "50ms"}},
                "autoscaling": {"coldStart": "120s"},
            },
        }
    )


def find_rate_scale(isvc: InferenceService, trace: list[TraceRequest], seed: int) -> float:
    """The smallest whole rate scale whose oracle needs >= 8 GPUs at peak (both pools)."""
    plan = build_fleet_plan(isvc)

    def peak_gpus(scale: float) -> int:
        oracle = compute_oracle(plan, scale_rate(trace, scale, seed))
        return sum(p.peak * plan.pools[r].gpus_per_replica for r, p in oracle.pools.items())

    lo, hi = 1, 64
    if peak_gpus(lo) >= MIN_PEAK_GPUS:
        return float(lo)
    while lo + 1 < hi:
        mid = (lo + hi) // 2
        if peak_gpus(mid) >= MIN_PEAK_GPUS:
            hi = mid
        else:
            lo = mid
    return float(hi)


@dataclass(frozen=True)
class Run:
    result: RunResult
    cpu_s: float
    wall_s: float


def _run_one(name: str, scenario: Scenario) -> Run:
    wall, cpu = time.perf_counter(), time.process_time()
    result, _ = run_policy(name, scenario)
    return Run(result, time.process_time() - cpu, time.perf_counter() - wall)


def run_trace(
    label: str, path: Path, duration_s: float | None, warmup_s: float, jobs: int, seed: int
) -> dict[str, Any]:
    isvc = bench_service()
    full = parse_trace(path.read_text(), path.name)
    trace = slice_trace(full, 0.0, duration_s)
    scale = find_rate_scale(isvc, trace, seed)
    requests = scale_rate(trace, scale, seed)
    scenario = build_scenario(isvc, requests, seed=seed, warmup_s=warmup_s)
    oracle = scenario.oracle
    runs: dict[str, Run] = {}
    if jobs > 1:
        with ProcessPoolExecutor(jobs) as pool:
            futures = {name: pool.submit(_run_one, name, scenario) for name in POLICIES}
            runs = {name: f.result() for name, f in futures.items()}
    else:
        for name in POLICIES:
            runs[name] = _run_one(name, scenario)
            print(f"  ran {name} ({runs[name].cpu_s:.0f} s CPU)", file=sys.stderr, flush=True)
    search = search_foresight(scenario, label=label)
    foresight = search.tried[0][1]
    span = trace_span_s(requests)
    print(
        f"\n== {label}: {path.name}, {span / 60:.0f} min, rate x{scale:g} "
        f"({len(requests)} requests), oracle {oracle.gpu_hours:.2f} GPU-h, "
        f"oracle peak {oracle.peak_replicas['prefill']} prefill + "
        f"{oracle.peak_replicas['decode']} decode GPUs"
    )
    head = f"{'policy':<11}{'attain':>8}{'GPU-h':>8}{'/oracle':>8}"
    head += "".join(f"{'/' + b:>9}" for b in BASELINES)
    print(head)
    print("-" * len(head))
    for name, run in runs.items():
        r = run.result
        row = f"{name:<11}{r.attainment * 100:>7.2f}%{r.gpu_hours:>8.2f}"
        row += f"{r.gpu_hours / oracle.gpu_hours:>8.2f}"
        row += "".join(f"{r.gpu_hours / runs[b].result.gpu_hours:>9.2f}" for b in BASELINES)
        print(row)
    goal = check_goal(runs, oracle.gpu_hours)
    print(goal["line"])
    print(
        f"the oracle's own schedule, replayed with perfect foresight: attainment "
        f"{foresight.attainment * 100:.2f}% at {foresight.gpu_hours:.2f} GPU-h "
        f"({foresight.gpu_hours / oracle.gpu_hours:.2f}x oracle)"
    )
    print(describe_search(search, runs["tandem"].result, oracle.gpu_hours))
    for name, run in runs.items():
        speed = (span + scenario.warmup_s) / run.cpu_s if run.cpu_s > 0 else float("inf")
        print(
            f"  {name:<11} {run.cpu_s:7.1f} s CPU  {run.wall_s:7.1f} s wall  "
            f"{speed:7.0f} simulated s per CPU s"
        )
    return {
        "trace": path.name,
        "rate_scale": scale,
        "requests": len(requests),
        "span_s": span,
        "oracle_gpu_hours": oracle.gpu_hours,
        "goal": {k: v for k, v in goal.items() if k != "line"},
        "oracle_schedule": {
            "attainment": foresight.attainment,
            "gpu_hours": foresight.gpu_hours,
            "ttft_p90_s": foresight.ttft_p90_s,
            "itl_p90_s": foresight.itl_p90_s,
        },
        "foresight_99": {
            "met": search.met,
            "headroom": dict(search.headroom),
            "attainment": search.result.attainment,
            "gpu_hours": search.result.gpu_hours,
            "gpu_hours_vs_oracle": search.result.gpu_hours / oracle.gpu_hours,
            "tandem_gpu_hours_vs_this": runs["tandem"].result.gpu_hours / search.result.gpu_hours,
            "runs": len(search.tried),
        },
        "policies": {
            name: {
                "attainment": run.result.attainment,
                "gpu_hours": run.result.gpu_hours,
                "gpu_hours_vs_oracle": run.result.gpu_hours / oracle.gpu_hours,
                "ttft_p90_s": run.result.ttft_p90_s,
                "itl_p90_s": run.result.itl_p90_s,
                "peak_replicas": dict(run.result.peak_replicas),
                "cpu_s": run.cpu_s,
                "wall_s": run.wall_s,
            }
            for name, run in runs.items()
        },
    }


def search_foresight(scenario: Scenario, label: str) -> HeadroomSearch[RunResult]:
    """The cheapest foresight schedule found that meets the attainment goal: the
    oracle's schedule with headroom per pool, raised step by step."""

    def run(headroom: Mapping[str, float]) -> RunResult:
        wall = time.perf_counter()
        result = run_oracle_schedule(scenario, headroom)
        shown = ", ".join(f"{r} x{h:g}" for r, h in headroom.items())
        print(
            f"  {label}: foresight schedule {shown}: {result.attainment * 100:.2f}% at "
            f"{result.gpu_hours:.2f} GPU-h ({time.perf_counter() - wall:.0f} s)",
            file=sys.stderr,
            flush=True,
        )
        return result

    return search_headroom(run, tuple(scenario.plan.pools), GOAL_ATTAINMENT)


def describe_search(
    search: HeadroomSearch[RunResult], tandem: RunResult, oracle_gpu_hours: float
) -> str:
    """One line: the foresight schedule that meets the goal, and Tandem against it."""
    shown = ", ".join(f"{role} x{h:g}" for role, h in search.headroom.items())
    r = search.result
    head = "the cheapest" if search.met else "no"
    line = (
        f"{head} foresight schedule found meeting {GOAL_ATTAINMENT * 100:g}% "
        f"({shown} the oracle's need): attainment {r.attainment * 100:.2f}% at "
        f"{r.gpu_hours:.2f} GPU-h ({r.gpu_hours / oracle_gpu_hours:.2f}x oracle)"
    )
    if search.met:
        line += f"; tandem spends {tandem.gpu_hours / r.gpu_hours:.2f}x this"
    return line


def check_goal(runs: dict[str, Run], oracle_gpu_hours: float) -> dict[str, Any]:
    """Tandem's goal: >= 99 % attainment, <= 1.15 x oracle, below every 99 % baseline."""
    tandem = runs["tandem"].result
    ratio = tandem.gpu_hours / oracle_gpu_hours
    reaching = [b for b in BASELINES if runs[b].result.attainment >= GOAL_ATTAINMENT]
    beaten = [b for b in reaching if tandem.gpu_hours < runs[b].result.gpu_hours]
    ok_attain = tandem.attainment >= GOAL_ATTAINMENT
    ok_ratio = ratio <= GOAL_ORACLE_RATIO
    ok_beat = len(beaten) == len(reaching)
    verdict = "MET" if ok_attain and ok_ratio and ok_beat else "MISSED"
    line = (
        f"goal {verdict}: tandem attainment {tandem.attainment * 100:.2f}% "
        f"({'ok' if ok_attain else 'below'} 99%), {ratio:.2f}x oracle "
        f"({'ok' if ok_ratio else 'above'} 1.15x), fewer GPU-hours than "
        f"{len(beaten)} of {len(reaching)} baselines reaching 99% "
        f"({', '.join(reaching) or 'none'})"
    )
    return {
        "met": verdict == "MET",
        "attainment_ok": ok_attain,
        "oracle_ratio": ratio,
        "baselines_reaching_99": reaching,
        "baselines_beaten": beaten,
        "line": line,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the first 15 minutes only")
    parser.add_argument("--jobs", type=int, default=1, help="policies run in parallel")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--trace", choices=sorted(TRACES), action="append", help="one trace")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON")
    args = parser.parse_args(argv)
    missing = [str(p) for p in TRACES.values() if not p.is_file()]
    if missing:
        print(f"traces not found: {', '.join(missing)}", file=sys.stderr)
        return 1
    duration = 900.0 if args.quick else None
    warmup = 300.0 if args.quick else 600.0
    figures = {}
    for label in args.trace or ["code", "conversation"]:
        figures[label] = run_trace(
            label, TRACES[label], duration, warmup, max(args.jobs, 1), args.seed
        )
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
