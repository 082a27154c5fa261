"""Recompute the cost-model calibration from a profiling table on disk. Reads one file.

The fitting itself is pure (``tandem.engine.model.calibrate``); this is the thin shell that
opens the CSV, so the pure layer stays free of I/O.
"""

from __future__ import annotations

from pathlib import Path

from tandem.engine.model.calibrate import CalibrationFit, fit_calibration, parse_perf_rows


def fit_calibration_file(path: Path) -> CalibrationFit:
    """Fit the factors to ``path`` (SplitwiseSim's ``perf_model.csv`` format) and report the
    error per (hardware, TP, phase) row group."""
    with path.open(newline="") as fh:
        return fit_calibration(parse_perf_rows(fh))
