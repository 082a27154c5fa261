"""The cells of ``bench/autoscale.py`` (one trace, rate scale and seed each) and their
report: what each run achieved against the oracle, the foresight schedule meeting 99 %
and the best fixed fleet in hindsight, Tandem's goal with its margins, the JSON of a
cell and the summary across the matrix. Formatting only; the runs are the bench's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tandem.sim.bounds.foresight import HeadroomSearch
from tandem.sim.bounds.hindsight import FixedFleetSearch
from tandem.sim.compare.goal import GoalCheck, check_goal, goal_attainment
from tandem.sim.compare.results import RunResult
from tandem.sim.compare.runs import FIXED_HINDSIGHT, POLICIES, Scenario

BASELINES = [p for p in POLICIES if p != "tandem"]


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


def format_summary(figures: Sequence[Mapping[str, Any]], order: Sequence[str]) -> str:
    """Across the matrix: per trace (in ``order``) and scale, Tandem over the seeds."""
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
        groups.items(), key=lambda kv: (order.index(kv[0][0]), kv[0][1])
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
