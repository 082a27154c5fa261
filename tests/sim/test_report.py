"""The summary table and the JSON document."""

from __future__ import annotations

import json
import math
from dataclasses import replace

from tandem.sim.bounds.hindsight import FixedFleetSearch
from tandem.sim.compare.report import build_report, describe_hindsight, format_table
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


def test_the_fixed_fleet_entry_adds_its_sizes_and_search(
    bursty: Scenario, bursty_runs: dict[str, tuple[RunResult, Simulation]]
) -> None:
    results = {name: r for name, (r, _) in bursty_runs.items()}
    fixed = replace(results["static"], policy="fixed-hindsight")
    search = FixedFleetSearch(
        sizes={"prefill": 3, "decode": 2},
        result=fixed,
        goal=0.9,
        met=True,
        exhausted=False,
        tried=(({"prefill": 8, "decode": 8}, fixed), ({"prefill": 3, "decode": 2}, fixed)),
    )
    both = {"tandem": results["tandem"], "fixed-hindsight": fixed}
    report = build_report(bursty.oracle, both, targets=bursty.plan.targets, hindsight=search)
    entry = json.loads(json.dumps(report, allow_nan=False))["policies"]["fixed-hindsight"]
    assert (entry["prefill"], entry["decode"], entry["target_attainment"]) == (3, 2, 0.9)
    assert entry["met"] and entry["replays"] == 2 and not entry["search_exhausted"]
    ratio = results["tandem"].gpu_hours / fixed.gpu_hours
    assert entry["tandem_gpu_hours_vs_this"] == ratio
    line = describe_hindsight(search, results["tandem"])
    assert line.startswith("fixed-hindsight: 3 prefill + 2 decode reach")
    assert f"tandem spends {ratio:.2f}x this" in line and "[2 replays]" in line
    missed = describe_hindsight(replace(search, met=False, exhausted=True), None)
    assert "no fixed fleet within the pools' bounds reaches 90.00%" in missed
    assert "stopped at the cap" in missed
