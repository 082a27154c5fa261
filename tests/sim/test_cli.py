"""``tandem simulate``: the flags and the JSON shape are a contract."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tandem.cli import build_parser, main
from tandem.commands.simulate import DEFAULT_POLICIES
from tandem.sim.compare.runs import FIXED_HINDSIGHT, POLICIES
from tests.sim.factories import CONV

MANIFEST = {
    "apiVersion": "serving.tandem.dev/v1alpha1",
    "kind": "InferenceService",
    "metadata": {"name": "chat"},
    "spec": {
        "model": {"name": "llama", "uri": "hf://meta-llama/Llama-3.1-8B-Instruct"},
        "prefill": {"replicas": {"min": 1, "max": 4}, "gpu": {"count": 1, "type": "H100"}},
        "decode": {"replicas": {"min": 1, "max": 4}, "gpu": {"count": 1, "type": "H100"}},
        "qos": {"ttft": {"p90": "1s"}, "itl": {"p90": "50ms"}},
        "autoscaling": {"coldStart": "30s"},
    },
}


@pytest.fixture
def manifest(tmp_path: Path) -> Path:
    path = tmp_path / "chat.yaml"
    path.write_text(yaml.safe_dump(MANIFEST))
    return path


def test_default_policies_are_every_policy_and_the_fixed_fleet_in_hindsight() -> None:
    assert (*POLICIES, FIXED_HINDSIGHT) == DEFAULT_POLICIES


def test_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["simulate", "--help"])
    text = capsys.readouterr().out
    for flag in (
        "--trace", "--rate-scale", "--policy", "--seed", "--json", "--plot",
        "--hindsight-attainment", "--hindsight-replays",
    ):  # fmt: skip
        assert flag in text


def test_json_shape_and_plot(
    manifest: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, png = tmp_path / "out.json", tmp_path / "out.png"
    args = [
        "simulate", str(manifest), "--trace", str(CONV), "--duration", "90", "--warmup", "30",
        "--rate-scale", "0.5", "--seed", "3", "--policy", "tandem", "static",
        "--policy", "aggregated", "--json", str(out), "--plot", str(png), "--quiet",
    ]  # fmt: skip
    assert main(args) == 0
    report = json.loads(out.read_text())
    assert isinstance(report["oracle"]["gpu_hours"], float)
    assert list(report["policies"]) == ["tandem", "static", "aggregated"]
    for entry in report["policies"].values():
        assert 0.0 <= entry["attainment"] <= 1.0
        assert entry["gpu_hours"] > 0
        assert entry["ttft_p90_s"] > 0 and entry["itl_p90_s"] > 0
        # conversation prompts fit 1 s on an H100: every request is feasible
        assert entry["infeasible_requests"] == 0
        assert entry["attainment_feasible"] == entry["attainment"]
        assert isinstance(entry["absorbed_requests"], int)
    assert report["trace"]["rate_scale"] == 0.5 and report["seed"] == 3
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = capsys.readouterr().out
    assert "tandem" in table and "oracle" in table and "aggregated" in table


def test_fixed_hindsight_is_searched_for_tandems_attainment(
    manifest: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out.json"
    args = [
        "simulate", str(manifest), "--trace", str(CONV), "--duration", "120", "--warmup", "30",
        "--rate-scale", "6", "--policy", "fixed-hindsight", "tandem", "--json", str(out),
        "--quiet",
    ]  # fmt: skip
    assert main(args) == 0
    report = json.loads(out.read_text())
    assert list(report["policies"]) == ["fixed-hindsight", "tandem"]
    tandem, fixed = report["policies"]["tandem"], report["policies"]["fixed-hindsight"]
    assert fixed["target_attainment"] == tandem["attainment"]
    assert fixed["met"] and fixed["attainment"] >= tandem["attainment"]
    sizes = {"prefill": fixed["prefill"], "decode": fixed["decode"]}
    assert fixed["peak_replicas"] == sizes and min(sizes.values()) >= 1
    assert max(sizes.values()) <= 4  # the manifest's pool maximum
    assert fixed["replays"] == len(fixed["tried"]) >= 2
    assert {**sizes, "attainment": fixed["attainment"], "gpu_hours": fixed["gpu_hours"]} in (
        fixed["tried"]
    )
    assert fixed["tandem_gpu_hours_vs_this"] == tandem["gpu_hours"] / fixed["gpu_hours"]
    for entry in (tandem, fixed):  # the contract's per-pool peaks
        assert set(entry["peak_replicas"]) == {"prefill", "decode"}
    said = capsys.readouterr().out
    assert f"fixed-hindsight: {sizes['prefill']} prefill + {sizes['decode']} decode reach" in said


def test_fixed_hindsight_takes_a_goal_of_its_own(manifest: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    args = [
        "simulate", str(manifest), "--trace", str(CONV), "--duration", "60", "--warmup", "0",
        "--policy", "fixed-hindsight", "--hindsight-attainment", "0.5", "--json", str(out),
        "--quiet",
    ]  # fmt: skip
    assert main(args) == 0
    fixed = json.loads(out.read_text())["policies"]["fixed-hindsight"]
    assert fixed["target_attainment"] == 0.5 and fixed["attainment"] >= 0.5
    assert "tandem_gpu_hours_vs_this" not in fixed


def test_same_seed_same_report(manifest: Path, tmp_path: Path) -> None:
    reports = []
    for name in ("a.json", "b.json"):
        args = [
            "simulate", str(manifest), "--trace", str(CONV), "--duration", "60", "--warmup", "0",
            "--policy", "hpa", "--json", str(tmp_path / name), "--quiet",
        ]  # fmt: skip
        assert main(args) == 0
        report = json.loads((tmp_path / name).read_text())
        del report["policies"]["hpa"]["simulation_cpu_s"]
        reports.append(report)
    assert reports[0] == reports[1]


def test_bad_inputs_fail_with_a_reason(
    manifest: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-01-01 00:00:00,x,1\n")
    assert main(["simulate", str(manifest), "--trace", str(bad), "--quiet"]) == 1
    assert "line 2: ContextTokens must be an integer" in capsys.readouterr().err
    assert main(["simulate", str(manifest), "--trace", str(CONV), "--policy", "nope"]) == 1
    assert "unknown policy 'nope'" in capsys.readouterr().err
    for flag, value, message in (
        ("--hindsight-attainment", "99", "--hindsight-attainment is a share of requests in"),
        ("--hindsight-replays", "0", "--hindsight-replays must be at least 1"),
    ):
        assert main(["simulate", str(manifest), "--trace", str(CONV), flag, value]) == 1
        assert message in capsys.readouterr().err
    only_tandem = ["--policy", "tandem", "--hindsight-attainment", "0.9"]
    assert main(["simulate", str(manifest), "--trace", str(CONV), *only_tandem]) == 1
    assert "--hindsight-attainment needs fixed-hindsight among --policy" in capsys.readouterr().err
    broken = tmp_path / "broken.yaml"
    broken.write_text(yaml.safe_dump({**MANIFEST, "spec": {"model": {}}}))
    assert main(["simulate", str(broken), "--trace", str(CONV)]) == 1
    assert "spec.model" in capsys.readouterr().err
