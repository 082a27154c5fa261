"""``tandem validate`` rejects bad manifests with the field path, and never crashes."""

from __future__ import annotations

import datetime
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tandem.api.validate import SpecError, load_inference_service, validate_manifest
from tests.factories import make_manifest, with_path

BASE = make_manifest()
AGG = make_manifest(mode="aggregated")

# (manifest, field path the message must name, words the message must contain)
INVALID: list[tuple[str, dict[str, Any], str, str]] = [
    (
        "wrong type replicas",
        with_path(BASE, "spec.prefill.replicas.min", "two"),
        "spec.prefill.replicas.min",
        "integer",
    ),
    ("unknown spec field", with_path(BASE, "spec.replicas", 3), "spec.replicas", "unknown field"),
    (
        "unknown pool field",
        with_path(BASE, "spec.decode.gpus", 2),
        "spec.decode.gpus",
        "valid fields here",
    ),
    (
        "min > max",
        with_path(BASE, "spec.prefill.replicas", {"min": 4, "max": 2}),
        "spec.prefill.replicas",
        "min (4) must be <= max (2)",
    ),
    (
        "initial outside",
        with_path(BASE, "spec.decode.replicas", {"min": 1, "max": 3, "initial": 5}),
        "spec.decode.replicas.initial",
        "outside",
    ),
    (
        "bad duration",
        with_path(BASE, "spec.autoscaling.interval", "15 seconds"),
        "spec.autoscaling.interval",
        "invalid duration",
    ),
    (
        "bad ttft duration",
        with_path(BASE, "spec.qos.ttft", {"p90": "fast"}),
        "spec.qos.ttft.p90",
        "invalid duration",
    ),
    (
        "negative duration",
        with_path(BASE, "spec.engine.shutdownTimeout", "-5s"),
        "spec.engine.shutdownTimeout",
        "invalid duration",
    ),
    (
        "owned flag",
        with_path(BASE, "spec.engine.extraArgs", ["--max-num-seqs", "8"]),
        "spec.engine.extraArgs[0]",
        "maxNumSeqs",
    ),
    (
        "owned flag with =",
        with_path(BASE, "spec.engine.extraArgs", ["--enforce-eager", "--tensor-parallel-size=2"]),
        "spec.engine.extraArgs[1]",
        "tensorParallelSize",
    ),
    (
        "owned kv flag",
        with_path(BASE, "spec.engine.extraArgs", ["--kv-transfer-config.kv_connector", "X"]),
        "spec.engine.extraArgs[0]",
        "spec.engine.kvTransfer",
    ),
    (
        "unknown vllm flag",
        with_path(BASE, "spec.engine.extraArgs", ["--turbo-mode"]),
        "spec.engine.extraArgs[0]",
        "not a flag",
    ),
    (
        "tp does not divide",
        with_path(BASE, "spec.decode", {"gpu": {"count": 4}, "tensorParallelSize": 3}),
        "spec.decode.tensorParallelSize",
        "valid: [1, 2, 4]",
    ),
    ("aggregated with prefill", with_path(AGG, "spec.prefill", {}), "spec.prefill", "aggregated"),
    ("disaggregated with pool", with_path(BASE, "spec.pool", {}), "spec.pool", "aggregated"),
    (
        "bad mode",
        with_path(BASE, "spec.mode", "split"),
        "spec.mode",
        "'disaggregated' or 'aggregated'",
    ),
    (
        "bad uri scheme",
        with_path(BASE, "spec.model.uri", "http://example/model"),
        "spec.model.uri",
        "hf://org/name[@revision], pvc://claim/path, s3://bucket/path or file:///abs/path",
    ),
    (
        "missing model",
        {**BASE, "spec": {k: v for k, v in BASE["spec"].items() if k != "model"}},
        "spec.model",
        "required",
    ),
    (
        "bad connector",
        with_path(BASE, "spec.engine.kvTransfer.connector", "P2pNcclConnector"),
        "spec.engine.kvTransfer.connector",
        "NixlConnector",
    ),
    (
        "bad backend",
        with_path(BASE, "spec.engine.backend", "tgi"),
        "spec.engine.backend",
        "'vllm' or 'sim'",
    ),
    (
        "gpu util > 1",
        with_path(BASE, "spec.prefill.gpuMemoryUtilization", 1.5),
        "spec.prefill.gpuMemoryUtilization",
        "less than or equal to 1",
    ),
    (
        "bad quantity",
        with_path(BASE, "spec.prefill.memory", "lots"),
        "spec.prefill.memory",
        "invalid quantity",
    ),
    (
        "vllm without gpu",
        with_path(BASE, "spec.decode.gpu", {"count": 0}),
        "spec.decode.gpu.count",
        "sim",
    ),
    (
        "two percentiles",
        with_path(BASE, "spec.qos.itl", {"p50": "20ms", "p90": "50ms"}),
        "spec.qos.itl",
        "exactly one",
    ),
    (
        "per-token allowance without a unit",
        with_path(BASE, "spec.qos.ttft", {"p90": "1s", "perPromptToken": "50"}),
        "spec.qos.ttft.perPromptToken",
        "us, ms, s, m or h",
    ),
    (
        "per-token allowance over a second",
        with_path(BASE, "spec.qos.ttft", {"p90": "1s", "perPromptToken": "2s"}),
        "spec.qos.ttft.perPromptToken",
        "less than or equal to 1",
    ),
    (
        "per-token allowance without a percentile",
        with_path(BASE, "spec.qos.ttft", {"perPromptToken": "50us"}),
        "spec.qos.ttft",
        "exactly one percentile",
    ),
    (
        "per-token allowance on ITL",
        with_path(BASE, "spec.qos.itl", {"p90": "50ms", "perPromptToken": "1us"}),
        "spec.qos.itl.perPromptToken",
        "unknown field",
    ),
    (
        "microseconds where only ms, s, m, h are durations",
        with_path(BASE, "spec.qos.ttft", {"p90": "500000us"}),
        "spec.qos.ttft.p90",
        "ms, s, m or h",
    ),
    (
        "duplicate class",
        with_path(BASE, "spec.qos.priorityClasses", [{"name": "a"}, {"name": "a"}]),
        "spec.qos.priorityClasses[1].name",
        "duplicate",
    ),
    (
        "unknown default class",
        with_path(BASE, "spec.qos", {"defaultClass": "vip", "priorityClasses": [{"name": "a"}]}),
        "spec.qos.defaultClass",
        "valid: a",
    ),
    (
        "priority under fcfs",
        with_path(BASE, "spec.qos.priorityClasses", [{"name": "a", "priority": 5}]),
        "spec.engine.schedulingPolicy",
        "'priority'",
    ),
    (
        "bad objective",
        with_path(BASE, "spec.qos.objective", "cheap"),
        "spec.qos.objective",
        "'latency', 'balanced' or 'throughput'",
    ),
    (
        "bad policy",
        with_path(BASE, "spec.autoscaling.policy", "hpa"),
        "spec.autoscaling.policy",
        "'slo', 'queue' or 'static'",
    ),
    (
        "prometheus without url",
        with_path(BASE, "spec.autoscaling.metrics", {"source": "prometheus"}),
        "spec.autoscaling.metrics.url",
        "required",
    ),
    (
        "ratio min > max",
        with_path(BASE, "spec.autoscaling.prefillDecodeRatio", {"min": 4, "max": 1}),
        "spec.autoscaling.prefillDecodeRatio",
        "min (4.0) must be <= max (1.0)",
    ),
    (
        "bad name",
        with_path(BASE, "metadata.name", "Chat_Service"),
        "metadata.name",
        "lowercase DNS-1035 label",
    ),
    ("wrong kind", {**BASE, "kind": "Deployment"}, "kind", "InferenceService"),
    (
        "max step zero",
        with_path(BASE, "spec.autoscaling.maxStep", {"up": 0}),
        "spec.autoscaling.maxStep.up",
        "greater than or equal to 1",
    ),
    (
        "class name invalid",
        with_path(BASE, "spec.qos.priorityClasses", [{"name": "VIP Users"}]),
        "spec.qos.priorityClasses[0].name",
        "lowercase DNS label",
    ),
    (
        "toleration effect",
        with_path(BASE, "spec.decode.tolerations", [{"effect": "Sometimes"}]),
        "spec.decode.tolerations[0].effect",
        "NoSchedule",
    ),
    # Specs that passed but could not work (each names the field and what would be valid).
    (
        "gpu resource overriding memory",
        with_path(BASE, "spec.decode.gpu.resourceName", "memory"),
        "spec.decode.gpu.resourceName",
        "'nvidia.com/gpu'",
    ),
    (
        "gpu resource overriding cpu",
        with_path(BASE, "spec.prefill.gpu.resourceName", "cpu"),
        "spec.prefill.gpu.resourceName",
        "domain-qualified extended resource",
    ),
    (
        "long prefill cap above the context",
        with_path(
            with_path(BASE, "spec.model.maxModelLen", 4096),
            "spec.prefill.longPrefillTokenThreshold",
            8192,
        ),
        "spec.prefill.longPrefillTokenThreshold",
        "use 0 (no cap) to 4096",
    ),
    (
        "gpu resource in kubernetes.io",
        with_path(BASE, "spec.prefill.gpu.resourceName", "kubernetes.io/gpu"),
        "spec.prefill.gpu.resourceName",
        "kubernetes.io domain",
    ),
    (
        "name starting with a digit",
        with_path(BASE, "metadata.name", "1chat"),
        "metadata.name",
        "a letter first",
    ),
    (
        "idle stream beyond int64 seconds",
        with_path(BASE, "spec.router.timeouts", {"idleStream": "9999999999999999h"}),
        "spec.router.timeouts.idleStream",
        "at most 1h",
    ),
    ("memory zero", with_path(BASE, "spec.decode.memory", "0"), "spec.decode.memory", "zero"),
    (
        "memory zero as integer",
        with_path(BASE, "spec.decode.memory", 0),
        "spec.decode.memory",
        "zero",
    ),
    (
        "pvc path escaping its claim",
        with_path(BASE, "spec.model.uri", "pvc://claim/../../etc"),
        "spec.model.uri",
        "without '.' or '..' path segments",
    ),
    (
        "file uri with a host",
        with_path(BASE, "spec.model.uri", "file://laptop/models/tiny"),
        "spec.model.uri",
        "file:///abs/path",
    ),
    (
        "file uri that is relative",
        with_path(BASE, "spec.model.uri", "file://models/tiny"),
        "spec.model.uri",
        "file:///abs/path",
    ),
    (
        "file uri climbing out",
        with_path(BASE, "spec.model.uri", "file:///models/../etc"),
        "spec.model.uri",
        "without '.' or '..' path segments",
    ),
    (
        "spec too large for last-applied",
        with_path(BASE, "spec.engine.extraArgs", ["--enforce-eager=" + "x" * 1000] * 40),
        "spec",
        "256 KiB",
    ),
    (
        "duration as a bare number",
        with_path(BASE, "spec.autoscaling.interval", 15),
        "spec.autoscaling.interval",
        "'15s'",
    ),
    (
        "integer as a string",
        with_path(BASE, "spec.decode.maxNumSeqs", "8"),
        "spec.decode.maxNumSeqs",
        "valid integer",
    ),
    (
        "quantity as a fraction",
        with_path(BASE, "spec.decode.cpu", 0.5),
        "spec.decode.cpu",
        "a string or an integer",
    ),
    (
        "duration with unicode digits",
        with_path(BASE, "spec.autoscaling.interval", "\u0665s"),
        "spec.autoscaling.interval",
        "invalid duration",
    ),
    (
        "free-form nested too deep",
        with_path(
            BASE, "spec.engine.kvTransfer.extraConfig", {"a": [[[[[[[[[[[[[[[[{}]]]]]]]]]]]]]]]]}
        ),
        "spec.engine.kvTransfer.extraConfig",
        "at most 16",
    ),
    (
        "free-form too many keys",
        with_path(BASE, "spec.decode.affinity", {f"k{i}": i for i in range(65)}),
        "spec.decode.affinity",
        "at most 64",
    ),
    (
        "free-form infinity",
        with_path(BASE, "spec.engine.kvTransfer.extraConfig", {"rate": float("inf")}),
        "spec.engine.kvTransfer.extraConfig.rate",
        "not a JSON number",
    ),
    (
        "free-form date",
        with_path(BASE, "spec.engine.kvTransfer.extraConfig", {"day": datetime.date(2024, 1, 2)}),
        "spec.engine.kvTransfer.extraConfig.day",
        "write it as a string",
    ),
    # An unknown key is named itself, with the fields valid beside it.
    (
        "dashed unknown key",
        with_path(BASE, "spec.decode.max-num-seqs", 8),
        "spec.decode.max-num-seqs",
        "did you mean maxNumSeqs?); valid fields here: affinity, cpu, gpu",
    ),
    (
        "unknown key with a dot",
        with_path(BASE, "spec.decode.gpu", {"count": 1, "nvidia.com/gpu": 1}),
        "spec.decode.gpu['nvidia.com/gpu']",
        "valid fields here: count, resourceName, type",
    ),
]


def test_there_are_at_least_25_invalid_cases() -> None:
    assert len(INVALID) >= 25


@pytest.mark.parametrize(
    ("manifest", "path", "words"), [c[1:] for c in INVALID], ids=[c[0] for c in INVALID]
)
def test_invalid_manifest_is_rejected_with_its_path(
    manifest: dict[str, Any], path: str, words: str
) -> None:
    problems = validate_manifest(manifest)
    assert problems, "accepted an invalid manifest"
    matching = [p for p in problems if p.path == path]
    assert matching, f"no problem at {path}: {[str(p) for p in problems]}"
    assert any(words in p.message for p in matching), [str(p) for p in matching]


def test_every_problem_is_listed_at_once() -> None:
    manifest = with_path(with_path(BASE, "spec.mode", "split"), "spec.prefill.cpu", "many")
    manifest = with_path(manifest, "spec.autoscaling.interval", "soon")
    paths = {p.path for p in validate_manifest(manifest)}
    assert {"spec.mode", "spec.prefill.cpu", "spec.autoscaling.interval"} <= paths


def test_valid_manifest_loads_with_defaults() -> None:
    isvc = load_inference_service(BASE)
    assert isvc.spec.qos.ttft.seconds == 1.0 and isvc.spec.qos.ttft.percentile == 90
    assert isvc.spec.engine.kv_transfer.connector == "NixlConnector"
    assert set(isvc.spec.pools()) == {"prefill", "decode"}


def test_a_local_model_folder_is_a_valid_uri() -> None:
    """``file:///abs/path`` is for ``tandem up``: the API takes it (the operator refuses
    it for a cluster, tests/operator/test_restrictions.py)."""
    manifest = with_path(BASE, "spec.model.uri", "file:///home/me/models/tiny-llama")
    assert validate_manifest(manifest) == []
    assert load_inference_service(manifest).spec.model.uri.startswith("file:///")


def test_a_ttft_target_may_grow_with_the_prompt() -> None:
    manifest = with_path(BASE, "spec.qos.ttft", {"p90": "1s", "perPromptToken": "50us"})
    manifest = with_path(
        manifest, "spec.qos.priorityClasses", [{"name": "rag", "ttft": {"p99": "2s"}}]
    )
    isvc = load_inference_service(manifest)
    ttft = isvc.spec.qos.ttft
    assert (ttft.percentile, ttft.seconds, ttft.per_prompt_token_s) == (90, 1.0, 5e-05)
    assert ttft.seconds_for(20_000) == 2.0
    assert isvc.to_manifest()["spec"]["qos"]["ttft"] == {"p90": "1s", "perPromptToken": "50us"}
    assert isvc.spec.qos.priority_classes[0].ttft is not None
    assert isvc.spec.qos.priority_classes[0].ttft.per_prompt_token_s == 0.0


def test_spec_error_message_lists_problems() -> None:
    with pytest.raises(SpecError) as err:
        load_inference_service(with_path(BASE, "spec.prefill.replicas", {"min": 3, "max": 1}))
    assert "spec.prefill.replicas: min (3) must be <= max (1)" in str(err.value)


def test_secret_values_never_reach_the_manifest_dump() -> None:
    isvc = load_inference_service(with_path(BASE, "spec.model.secretRef", {"name": "hf"}))
    assert isvc.to_manifest()["spec"]["model"]["secretRef"] == {"name": "hf", "key": "token"}


def test_cli_exits_1_listing_every_problem(tmp_path: Path, repo_root: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        yaml.safe_dump(
            with_path(
                with_path(BASE, "spec.mode", "x"), "spec.prefill.replicas", {"min": 3, "max": 1}
            )
        )
    )
    run = subprocess.run(
        [sys.executable, "-m", "tandem.cli", "validate", str(bad)],
        capture_output=True,
        text=True,
        cwd=repo_root,
    )
    assert run.returncode == 1
    assert "spec.mode:" in run.stderr


def test_cli_accepts_every_example(repo_root: Path) -> None:
    files = sorted(str(p) for p in (repo_root / "examples").glob("*.yaml"))
    run = subprocess.run(
        [sys.executable, "-m", "tandem.cli", "validate", *files],
        capture_output=True,
        text=True,
        cwd=repo_root,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.count("is valid") == len(files)


def test_cli_reports_unreadable_and_non_yaml_files(tmp_path: Path) -> None:
    junk = tmp_path / "junk.yaml"
    junk.write_text("a: [unclosed\n")
    run = subprocess.run(
        [sys.executable, "-m", "tandem.cli", "validate", str(junk), str(tmp_path / "missing.yaml")],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 1
    assert "not valid YAML" in run.stderr and "cannot read" in run.stderr


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=20,
)
spec_keys = st.sampled_from(
    [
        "model",
        "mode",
        "engine",
        "prefill",
        "decode",
        "pool",
        "router",
        "qos",
        "autoscaling",
        "monitoring",
    ]
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(spec_keys, json_values, max_size=6), json_values)
def test_no_generated_input_crashes_the_validator(spec: dict[str, Any], anything: Any) -> None:
    for doc in ({**BASE, "spec": {**BASE["spec"], **spec}}, anything):
        problems = validate_manifest(doc)
        assert all(p.path and p.message for p in problems)


@settings(max_examples=150, deadline=None)
@given(st.integers(-5, 20), st.integers(-5, 20), st.one_of(st.none(), st.integers(-5, 25)))
def test_replica_bounds_are_accepted_exactly_when_ordered(
    lo: int, hi: int, initial: int | None
) -> None:
    bounds: dict[str, Any] = {"min": lo, "max": hi} | (
        {} if initial is None else {"initial": initial}
    )
    problems = validate_manifest(with_path(BASE, "spec.decode.replicas", bounds))
    ok = lo >= 0 and hi >= 1 and lo <= hi and (initial is None or lo <= initial <= hi)
    assert (not problems) == ok, problems
