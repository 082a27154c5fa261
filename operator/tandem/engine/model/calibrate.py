"""Fitting the cost model's efficiency factors to a measured profiling table. Pure.

Input rows come from the SplitwiseSim table (``perf_model.csv``): for each configuration,
``prompt_time`` is the prefill of ``batch_size`` prompts of ``prompt_size`` tokens in one
pass and ``token_time`` the mean decode step of that batch while it generates
``token_size`` tokens (times in ms). Each (hardware, TP) group is fitted on its own: a grid
search over the two efficiencies, with the two overheads solved in closed form by weighted
least squares (weights 1/measured^2, so the fit minimises relative error). The caller reads
the file; this module only parses text and does arithmetic.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from dataclasses import dataclass

from tandem.engine.model.calibration import Calibration
from tandem.engine.model.cost import CostModel
from tandem.engine.model.presets import GpuSpec, ModelSpec, get_gpu, get_model

#: models and hardware of the table that the fit uses (table name -> preset key)
FITTED_MODELS = {"llama2-70b": "llama-2-70b"}
FITTED_HARDWARE = {"a100-80gb": "a100", "h100-80gb": "h100"}


@dataclass(frozen=True)
class PerfRow:
    """One measured configuration (times in seconds)."""

    model: str
    hardware: str
    tensor_parallel: int
    prompt_size: int
    batch_size: int
    token_size: int
    prompt_time_s: float
    token_time_s: float

    @property
    def suspect(self) -> bool:
        """TP 2 at batch 64 breaks both series (prefill ~9x faster than batch 32), on A100
        and on H100; the table's notes flag the H100 rows. Excluded from the fit."""
        return self.tensor_parallel == 2 and self.batch_size == 64


@dataclass(frozen=True)
class GroupError:
    """Relative error of the fitted model on one row group."""

    model: str
    hardware: str
    tensor_parallel: int
    phase: str
    """``prefill`` (prompt_time) or ``decode`` (token_time)."""
    num_rows: int
    mean_abs_pct: float
    """Mean absolute percentage error, percent."""
    max_abs_pct: float
    excluded: bool = False
    """True for the suspect rows, reported but not fitted."""


@dataclass(frozen=True)
class CalibrationFit:
    """Fitted factors per (GPU family, TP) and the error per row group."""

    calibrations: dict[tuple[str, int], Calibration]
    errors: tuple[GroupError, ...]


def parse_perf_rows(lines: Iterable[str]) -> list[PerfRow]:
    """Rows of the profiling CSV (header included) as :class:`PerfRow` objects."""
    rows = []
    for rec in csv.DictReader(lines):
        rows.append(
            PerfRow(
                model=rec["model"],
                hardware=rec["hardware"],
                tensor_parallel=int(rec["tensor_parallel"]),
                prompt_size=int(rec["prompt_size"]),
                batch_size=int(rec["batch_size"]),
                token_size=int(rec["token_size"]),
                prompt_time_s=float(rec["prompt_time"]) / 1e3,
                token_time_s=float(rec["token_time"]) / 1e3,
            )
        )
    return rows


# One sample: (FLOPs, bytes, seqs, measured seconds). The cost model is evaluated through
# CostModel with unit efficiencies to get the roofline terms, so fit and use share one formula.
_Sample = tuple[float, float, int, float]


def _samples(row: PerfRow, model: ModelSpec, gpu: GpuSpec, phase: str) -> _Sample:
    unit = Calibration(1.0, 1.0, 0.0, 0.0)
    cost = CostModel(model, gpu, row.tensor_parallel, unit)
    b, p = row.batch_size, row.prompt_size
    if phase == "prefill":
        args = (p * b, b * p * (p + 1) / 2.0, b, 0, b)
        measured = row.prompt_time_s
    else:
        ctx = p + row.token_size / 2.0
        args = (b, b * (ctx + 1), b, int(b * ctx), b)
        measured = row.token_time_s
    compute_s, memory_s = _roofline_terms(cost, *args)
    return compute_s, memory_s, b, measured


def _roofline_terms(
    cost: CostModel, tokens: int, pairs: float, seqs: int, kv_read: int, sampled: int
) -> tuple[float, float]:
    """(compute seconds, memory seconds) at efficiency 1 and zero overhead."""
    m, tp, gpu = cost.model, cost.tensor_parallel, cost.gpu
    flops = 2.0 * m.matmul_params * tokens + 2.0 * m.lm_head_params * sampled
    flops += m.attn_flops_per_pair * pairs
    nbytes = m.weight_bytes + m.kv_bytes_per_token * (kv_read + tokens)
    return flops / (tp * gpu.peak_flops), nbytes / (tp * gpu.hbm_bytes_per_s)


def _solve(samples: list[_Sample], ec: float, em: float) -> tuple[float, float, float]:
    """Best (fixed, per-seq) overheads for given efficiencies; returns (sse, fixed, per_seq)."""
    s00 = s01 = s11 = r0 = r1 = 0.0
    for comp, mem, seqs, y in samples:
        resid = y - max(comp / ec, mem / em)
        w = 1.0 / (y * y)
        s00 += w
        s01 += w * seqs
        s11 += w * seqs * seqs
        r0 += w * resid
        r1 += w * resid * seqs
    det = s00 * s11 - s01 * s01
    fixed = max(0.0, (r0 * s11 - r1 * s01) / det)
    per_seq = max(0.0, (s00 * r1 - s01 * r0) / det)
    sse = 0.0
    for comp, mem, seqs, y in samples:
        rel = (fixed + per_seq * seqs + max(comp / ec, mem / em) - y) / y
        sse += rel * rel
    return sse, fixed, per_seq


def _fit_group(samples: list[_Sample]) -> tuple[float, float, float, float]:
    """Coarse grid (step 0.05), then a fine grid (step 0.01) around the best point."""
    best = (float("inf"), 1.0, 1.0, 0.0, 0.0)
    coarse = [i / 20 for i in range(1, 21)]
    for ec in coarse:
        for em in coarse:
            sse, fixed, per_seq = _solve(samples, ec, em)
            if sse < best[0]:
                best = (sse, ec, em, fixed, per_seq)
    _, ec0, em0, _, _ = best
    for i in range(-5, 6):
        for j in range(-5, 6):
            ec, em = round(ec0 + i / 100, 2), round(em0 + j / 100, 2)
            if not (0.0 < ec <= 1.0 and 0.0 < em <= 1.0):
                continue
            sse, fixed, per_seq = _solve(samples, ec, em)
            if sse < best[0]:
                best = (sse, ec, em, fixed, per_seq)
    return best[1], best[2], best[3], best[4]


def fit_calibration(rows: Iterable[PerfRow]) -> CalibrationFit:
    """Fit one :class:`Calibration` per (GPU family, TP) and report error per row group."""
    groups: dict[tuple[str, str, int], list[PerfRow]] = {}
    for row in rows:
        if row.model in FITTED_MODELS and row.hardware in FITTED_HARDWARE:
            groups.setdefault((row.model, row.hardware, row.tensor_parallel), []).append(row)
    calibrations: dict[tuple[str, int], Calibration] = {}
    errors: list[GroupError] = []
    for (model_name, hardware, tp), group in sorted(groups.items()):
        model = get_model(FITTED_MODELS[model_name])
        gpu = get_gpu(FITTED_HARDWARE[hardware])
        fit_samples = [
            _samples(r, model, gpu, phase)
            for r in group
            if not r.suspect
            for phase in ("prefill", "decode")
        ]
        ec, em, fixed_s, per_seq_s = _fit_group(fit_samples)
        calib = Calibration(ec, em, fixed_s / model.num_layers, per_seq_s / model.num_layers)
        calibrations[(gpu.calibration_family, tp)] = calib
        cost = CostModel(model, gpu, tp, calib)
        for phase in ("prefill", "decode"):
            for excluded in (False, True):
                subset = [r for r in group if r.suspect == excluded]
                if subset:
                    errors.append(_group_error(cost, subset, phase, excluded))
    return CalibrationFit(calibrations, tuple(errors))


def predict_row_s(cost: CostModel, row: PerfRow, phase: str) -> float:
    """The cost model's prediction for one row and phase, seconds."""
    b, p = row.batch_size, row.prompt_size
    if phase == "prefill":
        return cost.prefill_s(p, b)
    return cost.decode_step_s(b, int(p + row.token_size / 2))


def _group_error(cost: CostModel, rows: list[PerfRow], phase: str, excluded: bool) -> GroupError:
    errs = []
    for r in rows:
        measured = r.prompt_time_s if phase == "prefill" else r.token_time_s
        errs.append(abs(predict_row_s(cost, r, phase) - measured) / measured * 100.0)
    first = rows[0]
    return GroupError(
        model=first.model,
        hardware=first.hardware,
        tensor_parallel=first.tensor_parallel,
        phase=phase,
        num_rows=len(rows),
        mean_abs_pct=sum(errs) / len(errs),
        max_abs_pct=max(errs),
        excluded=excluded,
    )
