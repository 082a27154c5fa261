"""A comparison as a terminal table and as the JSON document of ``--json``. Pure.

The JSON shape is a contract (``tandem simulate --json``)::

    {"oracle": {"gpu_hours": ...},
     "policies": {NAME: {"attainment": ..., "gpu_hours": ..., "ttft_p90_s": ...,
                         "itl_p90_s": ..., "attainment_feasible": ...,
                         "infeasible_requests": ..., "peak_replicas": {POOL: n}}, ...}}

with Tandem's policy under ``tandem`` and the best fixed fleet in hindsight under
``fixed-hindsight``, whose entry also has its size per pool (``"prefill": n``,
``"decode": n``, or ``"pool": n``), the attainment it was searched for, whether a fleet
within the pools' bounds reached it, and every replay of the search. More fields are
added beside those (``attainment_feasible``: the attainment over requests some fleet
size could serve in time, ``infeasible_requests``: how many could not,
``absorbed_requests``; per-pool GPU-hours, goodput, other percentiles, counts, run time).
Numbers that do not exist (a percentile of nothing) are ``null``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from tandem.policy.config import LatencyTargets
from tandem.sim.bounds.hindsight import FixedFleetSearch
from tandem.sim.bounds.oracle import Oracle
from tandem.sim.compare.results import RunResult
from tandem.sim.compare.runs import FIXED_HINDSIGHT


def _num(value: float) -> float | None:
    return None if math.isnan(value) or math.isinf(value) else value


def build_report(
    oracle: Oracle,
    results: Mapping[str, RunResult],
    *,
    targets: LatencyTargets,
    meta: Mapping[str, Any] | None = None,
    cpu_s: Mapping[str, float] | None = None,
    hindsight: FixedFleetSearch[RunResult] | None = None,
) -> dict[str, Any]:
    """The ``--json`` document (``hindsight``: the search behind ``fixed-hindsight``)."""
    policies: dict[str, Any] = {}
    for name, r in results.items():
        entry: dict[str, Any] = {
            "attainment": r.attainment,
            "gpu_hours": r.gpu_hours,
            "ttft_p90_s": _num(r.ttft_p90_s),
            "itl_p90_s": _num(r.itl_p90_s),
            "attainment_feasible": r.attainment_feasible,
            "infeasible_requests": r.infeasible,
            "absorbed_requests": r.absorbed,
            "gpu_hours_vs_oracle": r.gpu_hours / oracle.gpu_hours if oracle.gpu_hours else None,
            "gpu_hours_by_pool": dict(r.gpu_hours_by_pool),
            "goodput_rps": r.goodput_rps,
            "goodput_tokens_per_s": r.goodput_tokens_per_s,
            "ttft_p50_s": _num(r.ttft_p50_s),
            "ttft_p99_s": _num(r.ttft_p99_s),
            "itl_p50_s": _num(r.itl_p50_s),
            "itl_p99_s": _num(r.itl_p99_s),
            "requests": r.requests,
            "met_slo": r.met,
            "completed": r.completed,
            "rejected": r.rejected,
            "aborted": r.aborted,
            "invalid": r.invalid,
            "peak_replicas": dict(r.peak_replicas),
            "scale_changes": r.scale_changes,
            "end_s": r.end_s,
        }
        if cpu_s is not None and name in cpu_s:
            entry["simulation_cpu_s"] = cpu_s[name]
        if name == FIXED_HINDSIGHT and hindsight is not None:
            entry.update(hindsight_fields(hindsight, results.get("tandem")))
        policies[name] = entry
    return {
        **dict(meta or {}),
        "targets": {
            "ttft_s": targets.ttft_s,
            "ttft_percentile": targets.ttft_percentile,
            "itl_s": targets.itl_s,
            "itl_percentile": targets.itl_percentile,
        },
        "oracle": {
            "gpu_hours": oracle.gpu_hours,
            "gpu_hours_by_pool": {r: p.gpu_hours for r, p in oracle.pools.items()},
            "peak_replicas": oracle.peak_replicas,
            "window_s": oracle.window_s,
            "cold_start_s": oracle.cold_start_s,
        },
        "policies": policies,
    }


def hindsight_fields(
    search: FixedFleetSearch[RunResult], tandem: RunResult | None
) -> dict[str, Any]:
    """What the ``fixed-hindsight`` entry adds: sizes, goal, and the search's replays."""
    out: dict[str, Any] = dict(search.sizes)
    out.update(
        {
            "target_attainment": search.goal,
            "met": search.met,
            "replays": len(search.tried),
            "search_exhausted": search.exhausted,
            "tried": [
                {**sizes, "attainment": r.attainment, "gpu_hours": r.gpu_hours}
                for sizes, r in search.tried
            ],
        }
    )
    if tandem is not None and search.result.gpu_hours > 0:
        out["tandem_gpu_hours_vs_this"] = tandem.gpu_hours / search.result.gpu_hours
    return out


def describe_hindsight(search: FixedFleetSearch[RunResult], tandem: RunResult | None) -> str:
    """One line: the fixed fleet found, and Tandem's GPU-hours against it."""
    sizes = " + ".join(f"{n} {role}" for role, n in search.sizes.items())
    r = search.result
    if not search.met:
        line = (
            f"{FIXED_HINDSIGHT}: no fixed fleet within the pools' bounds reaches "
            f"{search.goal * 100:.2f}% (the largest, {sizes}, reaches {r.attainment * 100:.2f}%)"
        )
    else:
        line = (
            f"{FIXED_HINDSIGHT}: {sizes} reach {r.attainment * 100:.2f}% (goal "
            f"{search.goal * 100:.2f}%) at {r.gpu_hours:.2f} GPU-h"
        )
        if tandem is not None and r.gpu_hours > 0:
            ratio = tandem.gpu_hours / r.gpu_hours
            verdict = "fewer" if ratio < 1 else "more"
            line += (
                f"; tandem spends {ratio:.2f}x this ({abs(1 - ratio) * 100:.0f}% {verdict} "
                "GPU-hours)"
            )
    line += f" [{len(search.tried)} replays{', stopped at the cap' if search.exhausted else ''}]"
    return line


def _fmt_s(value: float) -> str:
    if math.isnan(value):
        return "-"
    return f"{value * 1000:.0f}ms" if value < 1 else f"{value:.2f}s"


def format_table(oracle: Oracle, results: Mapping[str, RunResult]) -> str:
    """The terminal summary: one row per policy, then the oracle. ``feasible`` is the
    attainment over the requests some fleet size could serve in time; ``infeasible``
    counts the others."""
    roles = list(oracle.pools)
    peak_head = "/".join(r[0].upper() for r in roles) if len(roles) > 1 else "peak"
    head = (
        f"{'policy':<16}{'attain':>8}{'GPU-h':>9}{'÷oracle':>9}{'TTFT p90':>10}"
        f"{'ITL p90':>9}{'goodput/s':>11}  {'peak ' + peak_head:<12}{'failed':>7}"
        f"{'feasible':>10}{'infeasible':>11}"
    )
    lines = [head, "-" * len(head)]
    for name, r in results.items():
        ratio = r.gpu_hours / oracle.gpu_hours if oracle.gpu_hours else math.nan
        peaks = "/".join(str(v) for v in r.peak_replicas.values())
        failed = r.rejected + r.aborted
        lines.append(
            f"{name:<16}{r.attainment * 100:>7.2f}%{r.gpu_hours:>9.2f}{ratio:>8.2f}x"
            f"{_fmt_s(r.ttft_p90_s):>10}{_fmt_s(r.itl_p90_s):>9}{r.goodput_rps:>11.2f}  "
            f"{peaks:<12}{failed:>7}{r.attainment_feasible * 100:>9.2f}%{r.infeasible:>11}"
        )
    peaks = "/".join(str(oracle.peak_replicas[r]) for r in roles)
    lines.append(
        f"{'oracle':<16}{'':>8}{oracle.gpu_hours:>9.2f}{1.0:>8.2f}x{'':>10}{'':>9}{'':>11}  "
        f"{peaks:<12}"
    )
    return "\n".join(lines)
