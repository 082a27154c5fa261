"""The autoscaling benchmark: Tandem's policy against the baselines, the oracle, the
foresight schedule meeting 99 % and the best fixed fleet in hindsight, across traces,
rate scales and seeds.

Traces: the Azure code and conversation traces and every member of the synthetic family
(:mod:`tandem.traces.family`: long prompts, bursts, swings, mix shifts, multi-turn
reuse; each member drawn for the seed). Service: Llama-3.1-8B on H100s, each pool 1-32
replicas, TTFT p90 <= 1 s, ITL p90 <= 50 ms, cold start 120 s. For each trace and seed
the rate scale follows the bench's rule (the smallest whole scale whose oracle needs at
least 8 GPUs at peak), and the neighbouring scales run too. Each cell (trace, scale,
seed) prints, per policy, attainment over all requests and over feasible ones (when the
results count them), GPU-hours and the ratio to the oracle, to the cheapest foresight
schedule meeting 99 % (:func:`tandem.sim.bounds.foresight.search_headroom`) and to
``fixed-hindsight`` (the cheapest fixed fleet reaching Tandem's attainment,
:mod:`tandem.sim.compare.hindsight`); Tandem's GPU-hours against each baseline; and
whether Tandem met its goal (:mod:`tandem.sim.compare.goal`), with the margins where it
missed. A summary across the matrix follows, then the time it all took.

    python bench/autoscale.py                     # the whole matrix: 8 traces x 3 scales x 3 seeds
    python bench/autoscale.py --quick --jobs 2    # the first 15 minutes of each trace, 2 processes
    python bench/autoscale.py --trace long30 --trace code --seeds 0 --rule-only
    python bench/autoscale.py --list              # the traces it knows

Progress (each finished run, with its CPU time) goes to stderr; ``--json OUT`` keeps
every figure.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tandem.api import InferenceService
from tandem.api.validate import load_inference_service
from tandem.sim.bounds.foresight import HeadroomSearch, search_headroom
from tandem.sim.bounds.hindsight import FixedFleetSearch
from tandem.sim.bounds.oracle import compute_oracle
from tandem.sim.compare.goal import GOAL_ATTAINMENT, GoalCheck, check_goal, goal_attainment
from tandem.sim.compare.hindsight import find_fixed_hindsight
from tandem.sim.compare.results import RunResult
from tandem.sim.compare.runs import (
    FIXED_HINDSIGHT,
    POLICIES,
    Scenario,
    build_scenario,
    run_oracle_schedule,
    run_policy,
)
from tandem.sim.fleet.spec import build_fleet_plan
from tandem.traces.describe import summarize_trace
from tandem.traces.family import FAMILY
from tandem.traces.generate import generate_trace
from tandem.traces.parse import TraceRequest, parse_trace, slice_trace, trace_span_s
from tandem.traces.rate import scale_rate

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "traces"
AZURE = {
    "code": EXAMPLES / "AzureLLMInferenceTrace_code.csv",
    "conversation": EXAMPLES / "AzureLLMInferenceTrace_conv.csv",
}
TRACES = (*AZURE, *FAMILY)
MIN_PEAK_GPUS = 8
BASELINES = [p for p in POLICIES if p != "tandem"]
#: Length of a generated family member (the Azure traces are an hour each).
FAMILY_DURATION_S = 3600.0
QUICK_DURATION_S = 900.0


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


def load_trace(label: str, seed: int, duration_s: float | None) -> list[TraceRequest]:
    """An Azure trace (the same for every seed), or a family member drawn for ``seed``;
    its first ``duration_s`` when given."""
    if label in AZURE:
        path = AZURE[label]
        full = parse_trace(path.read_text(), path.name)
    else:
        full = generate_trace(FAMILY[label], seed, FAMILY_DURATION_S)
    return slice_trace(full, 0.0, duration_s)


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


def neighbour_scales(rule: float, rule_only: bool) -> list[float]:
    """The rule's scale and its neighbours (half the rule's when it is 1)."""
    if rule_only:
        return [rule]
    return [rule - 1 if rule > 1 else rule / 2, rule, rule + 1]


@dataclass(frozen=True)
class CellKey:
    trace: str
    seed: int
    scale: float
    rule: bool
    """Whether this is the rule's scale (else a neighbour)."""

    def label(self) -> str:
        return f"{self.trace} x{self.scale:g} seed {self.seed}" + (" (rule)" if self.rule else "")


@dataclass(frozen=True)
class CellSpec:
    key: CellKey
    duration_s: float | None
    warmup_s: float


@dataclass
class Cell:
    spec: CellSpec
    scenario: Scenario
    requests: int
    span_s: float
    trace_line: str
    runs: dict[str, tuple[RunResult, float, float]] = field(default_factory=dict)
    """Policy → (result, CPU s, wall s)."""
    foresight: HeadroomSearch[RunResult] | None = None
    hindsight: FixedFleetSearch[RunResult] | None = None
    cpu_s: float = 0.0

    @property
    def key(self) -> CellKey:
        return self.spec.key

    @property
    def complete(self) -> bool:
        return (
            len(self.runs) == len(POLICIES)
            and self.foresight is not None
            and (self.hindsight is not None)
        )


# Runs go to worker processes as the cell's key alone (a scenario holds the engine's
# cost model, whose compiled closures do not pickle); each process rebuilds the scenario,
# deterministically, and keeps the last few.


@functools.lru_cache(maxsize=4)
def cell_scenario(spec: CellSpec) -> Scenario:
    """The cell's scenario: its trace (drawn for the seed), scaled, with its oracle."""
    key = spec.key
    requests = scale_rate(load_trace(key.trace, key.seed, spec.duration_s), key.scale, key.seed)
    return build_scenario(bench_service(), requests, seed=key.seed, warmup_s=spec.warmup_s)


def _policy_task(name: str, spec: CellSpec) -> tuple[RunResult, float, float]:
    scenario = cell_scenario(spec)
    wall, cpu = time.perf_counter(), time.process_time()
    result, _ = run_policy(name, scenario)
    return result, time.process_time() - cpu, time.perf_counter() - wall


def _foresight_task(spec: CellSpec) -> tuple[HeadroomSearch[RunResult], float]:
    scenario = cell_scenario(spec)
    cpu = time.process_time()

    def run(headroom: Mapping[str, float]) -> RunResult:
        return run_oracle_schedule(scenario, headroom)

    found = search_headroom(
        run, tuple(scenario.plan.pools), GOAL_ATTAINMENT, measure=lambda r: goal_attainment(r)[0]
    )
    return found, time.process_time() - cpu


def _hindsight_task(spec: CellSpec, goal: float) -> tuple[FixedFleetSearch[RunResult], float]:
    scenario = cell_scenario(spec)
    cpu = time.process_time()
    return find_fixed_hindsight(scenario, goal), time.process_time() - cpu


Task = tuple[str, Callable[..., Any], tuple[Any, ...]]
"""``(name, function, arguments)`` of one run of a cell."""


class Matrix:
    """Builds the cells one by one and keeps the workers busy with their runs."""

    def __init__(
        self,
        cells: Iterator[CellKey],
        total_cells: int,
        duration_s: float | None,
        warmup_s: float,
        jobs: int,
    ) -> None:
        self.cells = cells
        self.total_tasks = total_cells * (len(POLICIES) + 2)
        self.duration_s = duration_s
        self.warmup_s = warmup_s
        self.jobs = jobs
        self.done_tasks = 0

    def start(self, key: CellKey) -> tuple[Cell, list[Task]]:
        """The cell, and its runs that need nothing else first."""
        spec = CellSpec(key, self.duration_s, self.warmup_s)
        scenario = cell_scenario(spec)
        requests = scenario.requests
        cell = Cell(
            spec, scenario, len(requests), trace_span_s(requests), summarize_trace(requests).line()
        )
        tasks: list[Task] = [(name, _policy_task, (name, spec)) for name in POLICIES]
        tasks.append(("foresight", _foresight_task, (spec,)))
        return cell, tasks

    def run(self, on_cell: Callable[[Cell], None]) -> None:
        if self.jobs == 1:
            for key in self.cells:
                cell, todo = self.start(key)
                while todo:
                    task, fn, args = todo.pop(0)
                    todo.extend(self._finish(cell, task, fn(*args)))
                on_cell(cell)
            return
        pending: dict[Future[Any], tuple[Cell, str]] = {}
        with ProcessPoolExecutor(self.jobs) as pool:
            while True:
                while len(pending) < 2 * self.jobs:
                    upcoming = next(self.cells, None)
                    if upcoming is None:
                        break
                    cell, tasks = self.start(upcoming)
                    for task, fn, args in tasks:
                        pending[pool.submit(fn, *args)] = (cell, task)
                if not pending:
                    return
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    cell, task = pending.pop(future)
                    for follow, fn, args in self._finish(cell, task, future.result()):
                        pending[pool.submit(fn, *args)] = (cell, follow)
                    if cell.complete:
                        on_cell(cell)

    def _finish(self, cell: Cell, task: str, value: Any) -> list[Task]:
        """Record a finished run; the runs it makes possible."""
        self.done_tasks += 1
        follow: list[Task] = []
        if task == "foresight":
            cell.foresight, cpu = value
            r = cell.foresight.result
            shown = ", ".join(f"{k} x{v:g}" for k, v in cell.foresight.headroom.items())
            said = (
                f"foresight {shown}: {r.attainment * 100:.2f}% ({len(cell.foresight.tried)} runs)"
            )
        elif task == FIXED_HINDSIGHT:
            cell.hindsight, cpu = value
            sizes = "+".join(str(n) for n in cell.hindsight.sizes.values())
            said = (
                f"fixed-hindsight {sizes}: {cell.hindsight.result.attainment * 100:.2f}% "
                f"({len(cell.hindsight.tried)} replays)"
            )
        else:
            result, cpu, _ = value
            cell.runs[task] = value
            said = f"{task}: {result.attainment * 100:.2f}% at {result.gpu_hours:.2f} GPU-h"
            if task == "tandem":  # the fixed fleet is searched for Tandem's attainment
                args = (cell.spec, result.attainment)
                follow.append((FIXED_HINDSIGHT, _hindsight_task, args))
        cell.cpu_s += cpu
        where = f"[{self.done_tasks}/{self.total_tasks}] {cell.key.label()}"
        print(f"  {where}: {said} ({cpu:.0f} s CPU)", file=sys.stderr, flush=True)
        return follow


def cell_keys(
    labels: Sequence[str],
    seeds: Sequence[int],
    rule_only: bool,
    duration_s: float | None,
    rules: dict[tuple[str, int], float],
) -> Iterator[CellKey]:
    """Every cell, trace by trace and seed by seed (the rule's scale found on the way and
    kept in ``rules``)."""
    isvc = bench_service()
    for label in labels:
        for seed in seeds:
            rule = find_rate_scale(isvc, load_trace(label, seed, duration_s), seed)
            rules[(label, seed)] = rule
            for scale in neighbour_scales(rule, rule_only):
                yield CellKey(label, seed, scale, scale == rule)


def check_cell(cell: Cell) -> GoalCheck:
    oracle = cell.scenario.oracle
    hindsight = cell.hindsight
    assert hindsight is not None
    return check_goal(
        cell.runs["tandem"][0],
        {b: cell.runs[b][0] for b in BASELINES},
        hindsight.result if hindsight.met else None,
        max_replicas={r: p.max_replicas for r, p in cell.scenario.plan.pools.items()},
        oracle_peak=oracle.peak_replicas,
    )


def _ratio(a: float, b: float | None) -> str:
    return f"{a / b:.2f}" if b else "-"


def format_cell(cell: Cell, check: GoalCheck) -> str:
    """The cell's block for the terminal."""
    oracle = cell.scenario.oracle
    foresight, hindsight = cell.foresight, cell.hindsight
    assert foresight is not None and hindsight is not None
    f99 = foresight.result.gpu_hours if foresight.met else None
    fixed = hindsight.result.gpu_hours if hindsight.met else None
    peaks = oracle.peak_replicas
    lines = [
        f"\n== {cell.key.label()}: {cell.requests} requests over {cell.span_s / 60:.0f} min, "
        f"oracle {oracle.gpu_hours:.2f} GPU-h (peak {peaks['prefill']} prefill + "
        f"{peaks['decode']} decode)",
        f"   trace: {cell.trace_line}",
    ]
    head = (
        f"{'policy':<16}{'attain':>8}{'feasible':>9}{'GPU-h':>8}{'/oracle':>8}"
        f"{'/fsight':>8}{'/fixed':>8}  peak P/D"
    )
    lines += [head, "-" * len(head)]
    rows: list[tuple[str, RunResult]] = [(n, cell.runs[n][0]) for n in POLICIES]
    rows.append((FIXED_HINDSIGHT, hindsight.result))
    for name, r in rows:
        share, measured = goal_attainment(r)
        feasible = f"{share * 100:.2f}%" if measured == "attainment_feasible" else "-"
        lines.append(
            f"{name:<16}{r.attainment * 100:>7.2f}%{feasible:>9}{r.gpu_hours:>8.2f}"
            f"{_ratio(r.gpu_hours, oracle.gpu_hours):>8}{_ratio(r.gpu_hours, f99):>8}"
            f"{_ratio(r.gpu_hours, fixed):>8}  "
            + "/".join(str(v) for v in r.peak_replicas.values())
        )
    shown = ", ".join(f"{k} x{v:g}" for k, v in foresight.headroom.items())
    lines.append(
        f"foresight schedule meeting 99%: {'' if foresight.met else 'none found; last '}"
        f"{shown} the oracle's need, {foresight.result.attainment * 100:.2f}% at "
        f"{foresight.result.gpu_hours:.2f} GPU-h ({len(foresight.tried)} runs)"
    )
    sizes = " + ".join(f"{n} {role}" for role, n in hindsight.sizes.items())
    lines.append(
        f"fixed-hindsight for tandem's {hindsight.goal * 100:.2f}%: "
        + (
            f"{sizes}, {hindsight.result.attainment * 100:.2f}% at "
            f"{hindsight.result.gpu_hours:.2f} GPU-h"
            if hindsight.met
            else f"no fixed fleet within the bounds reaches it (the largest: "
            f"{hindsight.result.attainment * 100:.2f}%)"
        )
        + f" ({len(hindsight.tried)} replays)"
    )
    tandem = cell.runs["tandem"][0]
    lines.append(
        "tandem's GPU-h / each baseline's (its attainment): "
        + ", ".join(
            f"{b} {tandem.gpu_hours / cell.runs[b][0].gpu_hours:.2f} "
            f"({cell.runs[b][0].attainment * 100:.1f}%)"
            for b in BASELINES
        )
    )
    lines.append(check.line())
    return "\n".join(lines)


def cell_figures(cell: Cell, check: GoalCheck) -> dict[str, Any]:
    """The cell for ``--json``."""
    oracle = cell.scenario.oracle
    foresight, hindsight = cell.foresight, cell.hindsight
    assert foresight is not None and hindsight is not None
    f99 = foresight.result.gpu_hours if foresight.met else None
    fixed = hindsight.result.gpu_hours if hindsight.met else None

    def entry(r: RunResult) -> dict[str, Any]:
        share, measured = goal_attainment(r)
        return {
            "attainment": r.attainment,
            "attainment_feasible": share if measured == "attainment_feasible" else None,
            "gpu_hours": r.gpu_hours,
            "gpu_hours_vs_oracle": r.gpu_hours / oracle.gpu_hours,
            "gpu_hours_vs_foresight_99": r.gpu_hours / f99 if f99 else None,
            "gpu_hours_vs_fixed_hindsight": r.gpu_hours / fixed if fixed else None,
            "ttft_p90_s": None if math.isnan(r.ttft_p90_s) else r.ttft_p90_s,
            "itl_p90_s": None if math.isnan(r.itl_p90_s) else r.itl_p90_s,
            "peak_replicas": dict(r.peak_replicas),
        }

    policies = {
        n: {**entry(r), "cpu_s": cpu, "wall_s": wall}
        for n, (r, cpu, wall) in sorted(cell.runs.items(), key=lambda kv: POLICIES.index(kv[0]))
    }
    tandem = cell.runs["tandem"][0]
    policies["tandem"]["gpu_hours_vs_baselines"] = {
        b: tandem.gpu_hours / cell.runs[b][0].gpu_hours for b in BASELINES
    }
    policies[FIXED_HINDSIGHT] = {
        **entry(hindsight.result),
        **dict(hindsight.sizes),
        "target_attainment": hindsight.goal,
        "met": hindsight.met,
        "replays": len(hindsight.tried),
    }
    return {
        "trace": cell.key.trace,
        "seed": cell.key.seed,
        "rate_scale": cell.key.scale,
        "rule_scale": cell.key.rule,
        "requests": cell.requests,
        "span_s": cell.span_s,
        "oracle": {"gpu_hours": oracle.gpu_hours, "peak_replicas": oracle.peak_replicas},
        "foresight_99": {
            "met": foresight.met,
            "headroom": dict(foresight.headroom),
            "attainment": foresight.result.attainment,
            "gpu_hours": foresight.result.gpu_hours,
            "runs": len(foresight.tried),
        },
        "policies": policies,
        "goal": {
            "met": check.met,
            "attainment": check.attainment,
            "attainment_field": check.attainment_field,
            "attainment_ok": check.attainment_ok,
            "gpu_hours_vs_fixed_hindsight": check.fixed_ratio,
            "fixed_hindsight_ok": check.fixed_ok,
            "baselines_at_or_above": list(check.baselines_at_or_above),
            "baselines_beaten": list(check.baselines_beaten),
            "pools_at_max": [p.__dict__ for p in check.pools_at_max],
            "misses": check.misses(),
        },
        "cpu_s": cell.cpu_s,
    }


def format_summary(figures: Sequence[Mapping[str, Any]]) -> str:
    """Across the matrix: per trace and scale, Tandem over the seeds."""
    groups: dict[tuple[str, float], list[Mapping[str, Any]]] = {}
    for f in figures:
        groups.setdefault((f["trace"], f["rate_scale"]), []).append(f)
    head = (
        f"{'trace':<18}{'scale':>6}{'seeds':>6}{'attain min':>11}{'mean':>8}"
        f"{'/oracle':>9}{'/fsight':>9}{'/fixed (range)':>19}{'goal met':>10}"
    )
    lines = [
        "\n== tandem across the matrix (mean over seeds; /fixed min-max)",
        head,
        "-" * len(head),
    ]
    for (trace, scale), cells in sorted(
        groups.items(), key=lambda kv: (TRACES.index(kv[0][0]), kv[0][1])
    ):
        tandem = [c["policies"]["tandem"] for c in cells]
        shares = [c["goal"]["attainment"] for c in cells]
        oracle = [t["gpu_hours_vs_oracle"] for t in tandem]
        fsight = [t["gpu_hours_vs_foresight_99"] for t in tandem if t["gpu_hours_vs_foresight_99"]]
        fixed = [
            t["gpu_hours_vs_fixed_hindsight"] for t in tandem if t["gpu_hours_vs_fixed_hindsight"]
        ]
        rule = "*" if any(c["rule_scale"] for c in cells) else ""
        fixed_text = (
            f"{sum(fixed) / len(fixed):.2f} ({min(fixed):.2f}-{max(fixed):.2f})" if fixed else "-"
        )
        fsight_text = f"{sum(fsight) / len(fsight):.2f}" if fsight else "-"
        lines.append(
            f"{trace:<18}{f'x{scale:g}{rule}':>6}{len(cells):>6}{min(shares) * 100:>10.2f}%"
            f"{sum(shares) / len(shares) * 100:>7.2f}%{sum(oracle) / len(oracle):>9.2f}"
            f"{fsight_text:>9}{fixed_text:>19}"
            f"{sum(c['goal']['met'] for c in cells):>7}/{len(cells)}"
        )
    met = sum(f["goal"]["met"] for f in figures)
    lines.append(f"(* the rule's scale) goal met on {met} of {len(figures)} cells")
    counts: dict[str, int] = {}
    for f in figures:
        g = f["goal"]
        for name, ok in (
            ("attainment below 99%", g["attainment_ok"]),
            ("more GPU-hours than fixed-hindsight", g["fixed_hindsight_ok"]),
            (
                "a baseline as good for less",
                len(g["baselines_beaten"]) == len(g["baselines_at_or_above"]),
            ),
            ("a pool at its maximum the oracle never needed", not g["pools_at_max"]),
        ):
            counts[name] = counts.get(name, 0) + (0 if ok else 1)
    lines.append("misses by criterion: " + ", ".join(f"{k}: {v}" for k, v in counts.items()))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the first 15 minutes of each trace")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    parser.add_argument(
        "--trace", choices=TRACES, action="append", metavar="NAME", help="a trace (repeatable)"
    )
    parser.add_argument(
        "--seeds", type=int, nargs="+", default=[0, 1, 2], metavar="N", help="seeds (0 1 2)"
    )
    parser.add_argument("--rule-only", action="store_true", help="no neighbouring scales")
    parser.add_argument("--list", action="store_true", help="list the traces and exit")
    parser.add_argument("--json", type=Path, help="also write every figure as JSON")
    args = parser.parse_args(argv)
    if args.list:
        for label in TRACES:
            what = (
                f"Azure LLM inference 2023, {AZURE[label].name}"
                if label in AZURE
                else FAMILY[label].description
            )
            print(f"{label:<18} {what}")
        return 0
    missing = [str(p) for p in AZURE.values() if not p.is_file()]
    if missing:
        print(f"traces not found: {', '.join(missing)}", file=sys.stderr)
        return 1
    if args.jobs < 1:
        print("--jobs must be at least 1", file=sys.stderr)
        return 1
    labels = args.trace or list(TRACES)
    duration = QUICK_DURATION_S if args.quick else None
    warmup = 300.0 if args.quick else 600.0
    rules: dict[tuple[str, int], float] = {}
    total = len(labels) * len(args.seeds) * (1 if args.rule_only else 3)
    cells = cell_keys(labels, args.seeds, args.rule_only, duration, rules)
    matrix = Matrix(cells, total, duration, warmup, args.jobs)
    figures: list[dict[str, Any]] = []
    cpu_s = 0.0
    started_wall = time.perf_counter()

    def write_json() -> None:
        if args.json:
            out = {
                "quick": args.quick,
                "seeds": args.seeds,
                "rules": {f"{t} seed {s}": r for (t, s), r in rules.items()},
                "cells": figures,
                "wall_s": time.perf_counter() - started_wall,
                "cpu_s": cpu_s,
            }
            args.json.write_text(json.dumps(out, indent=2) + "\n")

    def on_cell(cell: Cell) -> None:
        nonlocal cpu_s
        check = check_cell(cell)
        print(format_cell(cell, check), flush=True)
        figures.append(cell_figures(cell, check))
        cpu_s += cell.cpu_s
        write_json()  # after every cell, so a long run stopped early keeps what it did

    print(
        f"{total} cells ({', '.join(labels)}; seeds {' '.join(map(str, args.seeds))}; "
        f"{'the rule scale' if args.rule_only else 'the rule scale and its neighbours'}), "
        f"{'the first 15 minutes' if args.quick else 'whole traces'}, {args.jobs} job(s)",
        flush=True,
    )
    matrix.run(on_cell)
    wall = time.perf_counter() - started_wall
    print(format_summary(figures))
    print(
        f"\n{len(figures)} cells in {wall / 60:.1f} min wall, {cpu_s / 60:.1f} min CPU in "
        f"the runs ({args.jobs} job(s))"
    )
    write_json()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
