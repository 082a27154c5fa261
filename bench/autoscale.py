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
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any

from autoscale_report import (
    Cell,
    CellKey,
    CellSpec,
    cell_figures,
    check_cell,
    format_cell,
    format_summary,
)
from tandem.api import InferenceService
from tandem.api.validate import load_inference_service
from tandem.sim.bounds.foresight import HeadroomSearch, search_headroom
from tandem.sim.bounds.hindsight import FixedFleetSearch
from tandem.sim.bounds.oracle import compute_oracle
from tandem.sim.compare.goal import GOAL_ATTAINMENT, goal_attainment
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
    print(format_summary(figures, TRACES))
    print(
        f"\n{len(figures)} cells in {wall / 60:.1f} min wall, {cpu_s / 60:.1f} min CPU in "
        f"the runs ({args.jobs} job(s))"
    )
    write_json()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
