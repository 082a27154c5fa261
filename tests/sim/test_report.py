"""The summary table and the JSON document."""

from __future__ import annotations

import json
import math
from dataclasses import replace

from tandem.sim.compare.report import build_report, format_table
from tandem.sim.compare.results import RunResult, percentile, weighted_percentiles
from tandem.sim.compare.runs import Scenario
from tandem.sim.fleet.simulation import Simulation


def test_percentiles() -> None:
    assert percentile([], 0.9) != percentile([], 0.9)  # NaN
    assert percentile([1.0, 2.0, 3.0], 0.5) == 2.0
    assert weighted_percentiles([0.3, 0.1], [1, 3], [0.5, 0.75, 1.0]) == [0.1, 0.1, 0.3]


def test_report_shape_and_missing_numbers_are_null(
    bursty: Scenario, bursty_runs: dict[str, tuple[RunResult, Simulation]]
) -> None:
    results = {name: r for name, (r, _) in bursty_runs.items()}
    results["empty"] = replace(results["static"], ttft_p90_s=math.nan)
    report = build_report(bursty.oracle, results, targets=bursty.plan.targets, meta={"seed": 0})
    text = json.dumps(report, allow_nan=False)
    back = json.loads(text)
    assert back["seed"] == 0
    assert back["oracle"]["gpu_hours"] == bursty.oracle.gpu_hours
    assert back["policies"]["empty"]["ttft_p90_s"] is None
    tandem = back["policies"]["tandem"]
    assert {"attainment", "gpu_hours", "ttft_p90_s", "itl_p90_s"} <= set(tandem)
    assert tandem["gpu_hours_vs_oracle"] == tandem["gpu_hours"] / bursty.oracle.gpu_hours
    assert set(tandem["gpu_hours_by_pool"]) == {"prefill", "decode"}


def test_table_lists_every_policy_and_the_oracle(
    bursty: Scenario, bursty_runs: dict[str, tuple[RunResult, Simulation]]
) -> None:
    results = {name: r for name, (r, _) in bursty_runs.items()}
    table = format_table(bursty.oracle, results)
    lines = table.splitlines()
    assert lines[0].split()[:3] == ["policy", "attain", "GPU-h"]
    assert [line.split()[0] for line in lines[2:]] == [*results, "oracle"]
