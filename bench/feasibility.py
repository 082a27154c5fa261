"""Feasibility-aware sizing and absorbed bursts, against Tandem without them, in one run.

Three variants of Tandem's policy on the same arrivals, the same fleet and warm-up:

* ``tandem``: as shipped;
* ``no-absorb``: decode engines never prefill a burst the prefill pool would serve late
  (``RouterConfig.absorb_bursts`` off);
* ``blind``: no absorption, and the policy reads every request's TTFT over its target,
  as it did before it could tell the requests no pool size serves in time (the
  observations without the router's feasibility accounting).

Workloads, so that no figure hangs on one trace, rate or seed: the Azure code and
conversation traces at ``bench/autoscale.py``'s rate scale (the smallest whose oracle
needs 8 GPUs at peak) and at x0.7 and x1.5 of it, seeds 0 and 1; and a long-context
workload (chat prompts plus 14 % or 27 % of 20k-100k-token prompts, arrivals swinging
by half around 6 requests/s), seeds 0 and 1, where a 1 s TTFT target is impossible for
most long prompts on Llama-3.1-8B / H100. Each run prints attainment over all requests
and over the feasible ones, the requests no fleet size could serve in time, the requests
absorbed, GPU-hours and peak replicas; each workload family ends with every variant's
mean GPU-hours and attainments as ratios to ``blind``'s, measured in the same run.

    python bench/feasibility.py            # whole traces (an hour each; 30 min long-context)
    python bench/feasibility.py --quick    # the first 15 minutes
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from dataclasses import dataclass, replace
from typing import Any

from autoscale import TRACES, bench_service, find_rate_scale
from tandem.observe.types import Observation
from tandem.policy.baselines import Autoscaler, TandemAutoscaler
from tandem.policy.state import PolicyState
from tandem.policy.types import Decision
from tandem.sim.compare.results import RunResult
from tandem.sim.compare.runs import Scenario, build_scenario, run_autoscaler
from tandem.sim.fleet.spec import build_policy_config
from tandem.traces.parse import TraceRequest, parse_trace, slice_trace
from tandem.traces.rate import scale_rate

VARIANTS = ("tandem", "no-absorb", "blind")
RATE_MULTIPLES = (0.7, 1.0, 1.5)
SEEDS = (0, 1)
LONG_SHARES = (0.14, 0.27)


class Blind:
    """Tandem's policy on observations stripped of the router's feasibility accounting:
    its latency rule reads TTFT over target for every request, as before."""

    def __init__(self, inner: TandemAutoscaler) -> None:
        self.inner = inner
        self.name = "blind"
        self.interval_s = inner.interval_s

    def initial_state(self) -> PolicyState:
        return self.inner.initial_state()

    def decide(self, state: PolicyState, obs: Observation) -> tuple[PolicyState, Decision]:
        latency = {
            name: replace(lat, queueing_ratio={}, feasible_requests=None, infeasible_requests={})
            for name, lat in obs.latency_by_class.items()
        }
        return self.inner.decide(state, replace(obs, latency_by_class=latency))


def long_context_trace(share: float, seed: int, span_s: float) -> list[TraceRequest]:
    """Chat prompts (log-normal around 1.5k tokens, at most 16k) and ``share`` of
    20k-100k-token prompts; outputs log-normal around 200 tokens; Poisson arrivals at 6/s
    swinging by half over the span."""
    rng = random.Random(seed)
    out: list[TraceRequest] = []
    t = 0.0
    while t < span_s:
        rate = 6.0 * (1 + 0.5 * math.sin(2 * math.pi * t / span_s))
        if rng.random() < share:
            prompt = int(rng.uniform(20_000, 100_000))
        else:
            prompt = min(int(rng.lognormvariate(math.log(1_500), 0.8)), 16_000)
        output = max(1, min(int(rng.lognormvariate(math.log(200), 0.7)), 2_000))
        out.append(TraceRequest(t, max(prompt, 16), output))
        t += rng.expovariate(rate)
    return out


def variant(name: str, scenario: Scenario) -> tuple[Autoscaler, Scenario]:
    """The autoscaler and scenario of one variant."""
    config = build_policy_config(scenario.isvc, scenario.plan)
    tandem = TandemAutoscaler(config, name=name)
    if name == "tandem":
        return tandem, scenario
    plan = scenario.plan
    quiet = replace(scenario, plan=replace(plan, router=replace(plan.router, absorb_bursts=False)))
    return (tandem if name == "no-absorb" else Blind(tandem)), quiet


@dataclass(frozen=True)
class Row:
    family: str
    label: str
    variant: str
    result: RunResult
    cpu_s: float


def run(family: str, label: str, scenario: Scenario) -> list[Row]:
    rows = []
    for name in VARIANTS:
        autoscaler, varied = variant(name, scenario)
        cpu = time.process_time()
        result, _ = run_autoscaler(name, autoscaler, varied)
        row = Row(family, label, name, result, time.process_time() - cpu)
        print(format_row(row, scenario), flush=True)
        rows.append(row)
    return rows


def format_row(row: Row, scenario: Scenario) -> str:
    r = row.result
    peaks = "/".join(str(n) for n in r.peak_replicas.values())
    return (
        f"{row.label:<28}{row.variant:<10}{r.attainment * 100:>8.2f}%"
        f"{r.attainment_feasible * 100:>9.2f}%{r.infeasible:>8}{r.absorbed:>8}"
        f"{r.gpu_hours:>8.2f}{r.gpu_hours / scenario.oracle.gpu_hours:>8.2f}  {peaks:<8}"
        f"{row.cpu_s:>6.0f}s"
    )


def summarize(family: str, rows: list[Row]) -> str:
    """Each variant's mean GPU-hours and attainments over the family, as ratios to
    ``blind``'s (the means of the same runs)."""

    def mean(name: str, figure: str) -> float:
        return statistics.mean(float(getattr(r.result, figure)) for r in rows if r.variant == name)

    lines = [f"{family}: mean over {len(rows) // len(VARIANTS)} runs, and / blind"]
    base = {f: mean("blind", f) for f in ("gpu_hours", "attainment", "attainment_feasible")}
    for name in VARIANTS:
        gpu, att, feas = (mean(name, f) for f in base)
        lines.append(
            f"  {name:<10} GPU-h {gpu:6.2f} ({gpu / base['gpu_hours']:.2f}x)  attainment "
            f"{att * 100:6.2f}% ({att / base['attainment']:.3f}x)  feasible "
            f"{feas * 100:6.2f}% ({feas / base['attainment_feasible']:.3f}x)"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the first 15 minutes only")
    parser.add_argument(
        "--family", choices=("code", "conversation", "long-context"), action="append"
    )
    args = parser.parse_args(argv)
    duration, warmup = (900.0, 300.0) if args.quick else (None, 600.0)
    isvc = bench_service()
    head = (
        f"{'workload':<28}{'variant':<10}{'attain':>9}{'feasible':>10}{'infeas':>8}"
        f"{'absorbed':>8}{'GPU-h':>8}{'/oracle':>8}  {'peak P/D':<8}{'CPU':>7}"
    )
    summaries: list[str] = []
    for family in args.family or ["code", "conversation", "long-context"]:
        print(f"\n== {family}\n{head}\n{'-' * len(head)}", flush=True)
        rows: list[Row] = []
        for label, requests, seed in workloads(family, isvc, duration):
            scenario = build_scenario(isvc, requests, seed=seed, warmup_s=warmup)
            rows += run(family, label, scenario)
        summaries.append(summarize(family, rows))
        print(summaries[-1], flush=True)
    print("\n" + "\n".join(summaries))
    return 0


def workloads(
    family: str, isvc: Any, duration_s: float | None
) -> list[tuple[str, list[TraceRequest], int]]:
    """(label, requests, seed) of every run of a family."""
    out = []
    if family == "long-context":
        span = duration_s or 1800.0
        for share in LONG_SHARES:
            for seed in SEEDS:
                label = f"long {share * 100:.0f}% seed {seed}"
                out.append((label, long_context_trace(share, seed, span), seed))
        return out
    path = TRACES[family]
    trace = slice_trace(parse_trace(path.read_text(), path.name), 0.0, duration_s)
    base = find_rate_scale(isvc, trace, 0)
    for multiple in RATE_MULTIPLES:
        for seed in SEEDS:
            scale = base * multiple
            label = f"{family} x{scale:g} seed {seed}"
            out.append((label, scale_rate(trace, scale, seed), seed))
    return out


if __name__ == "__main__":
    sys.exit(main())
