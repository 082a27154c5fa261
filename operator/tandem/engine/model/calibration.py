"""Measured efficiency factors of the cost model, per GPU family and tensor-parallel size. Pure.

The constants below were fitted by :func:`tandem.engine.model.calibrate.fit_calibration` on
the SplitwiseSim profiling table (vLLM serving Llama-2-70B on A100-80GB and H100-80GB at
TP 2, 4 and 8; ``examples/calibration/perf_model.csv`` in the repository); the
fit is reproducible and ``bench/engine.py`` prints its error per row group. GPUs without
measurements borrow the nearest family (H200 uses H100's factors, L40S uses A100's) and a
TP size without measurements uses the nearest measured one (TP 1 uses TP 2: conservative,
since TP 1 has no all-reduce). Overheads are per layer, so they scale to smaller models.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Calibration:
    """Efficiency factors and overheads of one (GPU family, TP) configuration."""

    compute_efficiency: float
    """Achieved / peak FLOP/s in compute-bound passes (prefill), 0-1."""
    memory_efficiency: float
    """Achieved / peak HBM bytes/s in memory-bound passes (decode), 0-1."""
    overhead_s_per_layer: float
    """Fixed cost per layer per iteration (kernel launches, all-reduce latency), seconds."""
    seq_overhead_s_per_layer: float
    """Cost per sequence per layer per iteration (attention setup, sampling), seconds."""

    def __post_init__(self) -> None:
        for name in ("compute_efficiency", "memory_efficiency"):
            value = getattr(self, name)
            if not 0.0 < value <= 1.0:
                raise ValueError(f"{name} must be in (0, 1], got {value}")
        if self.overhead_s_per_layer < 0 or self.seq_overhead_s_per_layer < 0:
            raise ValueError("overheads must be >= 0")


#: (GPU family, TP) -> fitted factors. Regenerate with ``bench/engine.py --refit``.
CALIBRATIONS: dict[tuple[str, int], Calibration] = {
    # (family, tp): Calibration(compute_eff, memory_eff, overhead/layer s, per-seq/layer s)
    ("a100", 2): Calibration(0.62, 0.9, 240.08e-6, 5.830e-6),
    ("a100", 4): Calibration(0.44, 0.39, 11.38e-6, 3.929e-6),
    ("a100", 8): Calibration(0.34, 0.25, 138.75e-6, 3.947e-6),
    ("h100", 2): Calibration(0.49, 0.85, 160.58e-6, 4.978e-6),
    ("h100", 4): Calibration(0.35, 0.57, 140.67e-6, 3.514e-6),
    ("h100", 8): Calibration(0.24, 0.4, 218.20e-6, 3.436e-6),
}


def lookup_calibration(family: str, tensor_parallel: int) -> Calibration:
    """The fitted factors for ``family`` at the measured TP nearest to ``tensor_parallel``."""
    sizes = sorted(tp for fam, tp in CALIBRATIONS if fam == family)
    if not sizes:
        families = sorted({fam for fam, _ in CALIBRATIONS})
        raise KeyError(f"no calibration for GPU family {family!r}; families: {families}")
    nearest = min(sizes, key=lambda tp: (abs(tp - tensor_parallel), tp))
    return CALIBRATIONS[(family, nearest)]
