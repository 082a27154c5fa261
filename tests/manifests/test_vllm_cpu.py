"""The CPU adaptation of the builders' ``vllm serve`` arguments, and the plan of engines
the real-vLLM test starts for every example (``tests/vllm/test_builder_args.py``)."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from tandem.api.validate import load_inference_service, vllm_serve_flags
from tandem.manifests.vllm_args import build_vllm_args
from tandem.manifests.vllm_cpu import (
    GPU_ONLY_FLAGS,
    WEIGHT_SOURCE_FLAGS,
    adapt_vllm_args_for_cpu,
    drop_flags,
    set_flag,
)
from tests.factories import make_manifest, with_path
from tests.vllm.examples import EXAMPLES, MODEL, load_examples, plan_example_runs

CPU_FLAGS = vllm_serve_flags("0.32.0-cpu")


def _args(**paths: object) -> list[str]:
    manifest = make_manifest()
    for path, value in paths.items():
        manifest = with_path(manifest, path.replace("__", "."), value)
    return build_vllm_args(load_inference_service(manifest), "decode")


def _value(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def test_gpu_only_flags_are_dropped_with_their_values() -> None:
    args = _args(spec__decode={"replicas": {"min": 1, "max": 2}, "gpu": {"count": 4},
                               "tensorParallelSize": 2, "gpuMemoryUtilization": 0.8,
                               "maxNumSeqs": 64})  # fmt: skip
    assert {"--tensor-parallel-size", "--gpu-memory-utilization"} <= set(args)
    adapted = adapt_vllm_args_for_cpu(args)
    assert not set(adapted) & set(GPU_ONLY_FLAGS)
    assert "2" in args and "0.8" in args
    assert "0.8" not in adapted and _value(adapted, "--max-num-seqs") == "64"


def test_the_kv_transfer_goes_through_a_cpu_buffer_and_keeps_its_settings() -> None:
    args = _args(spec__engine__kvTransfer={"connector": "NixlConnector",
                                           "loadFailurePolicy": "recompute",
                                           "extraConfig": {"kv_lease_duration": 60}})  # fmt: skip
    config = json.loads(_value(adapt_vllm_args_for_cpu(args), "--kv-transfer-config"))
    assert config == {
        **json.loads(_value(args, "--kv-transfer-config")),
        "kv_buffer_device": "cpu",
    }
    assert config["kv_load_failure_policy"] == "recompute"


def test_the_model_is_swapped_and_the_weight_source_flags_go() -> None:
    manifest = with_path(make_manifest(), "spec.model.uri", "hf://o/n@rev7")
    args = build_vllm_args(load_inference_service(manifest), "prefill")
    assert _value(args, "--revision") == "rev7"
    adapted = adapt_vllm_args_for_cpu(args, model="/m/tiny")
    assert _value(adapted, "--model") == "/m/tiny"
    assert not set(adapted) & set(WEIGHT_SOURCE_FLAGS)
    s3 = with_path(make_manifest(), "spec.model.uri", "s3://bucket/llama")
    args = build_vllm_args(load_inference_service(s3), "decode")
    assert "--load-format" in args
    assert "--load-format" not in adapt_vllm_args_for_cpu(args, model="/m/tiny")
    assert "--load-format" in adapt_vllm_args_for_cpu(args), "kept without a local model"


def test_max_model_len_is_capped_at_the_local_models_never_raised() -> None:
    args = _args(spec__model={"name": "m", "uri": "hf://o/n", "maxModelLen": 16384})
    assert _value(adapt_vllm_args_for_cpu(args, max_model_len=4096), "--max-model-len") == "4096"
    args = _args(spec__model={"name": "m", "uri": "hf://o/n", "maxModelLen": 1024})
    assert _value(adapt_vllm_args_for_cpu(args, max_model_len=4096), "--max-model-len") == "1024"


def test_shutdown_timeout_in_whole_seconds_rounded_up() -> None:
    args = _args(spec__engine__shutdownTimeout="1500ms")
    assert _value(args, "--shutdown-timeout") == "1.5"
    assert _value(adapt_vllm_args_for_cpu(args), "--shutdown-timeout") == "2"


def test_the_prefix_caching_off_switch_takes_its_032_spelling() -> None:
    args = _args(spec__engine__prefixCaching=False)
    adapted = adapt_vllm_args_for_cpu(args)
    assert "--disable-prefix-caching" in args
    assert "--no-enable-prefix-caching" in adapted and "--disable-prefix-caching" not in adapted


def test_extra_args_and_the_order_are_kept() -> None:
    args = _args(spec__engine__extraArgs=["--enforce-eager", "--seed", "7"])
    adapted = adapt_vllm_args_for_cpu(args)
    assert adapted[-3:] == ["--enforce-eager", "--seed", "7"]
    kept = [a for a in args if a in adapted]
    assert [a for a in adapted if a in kept] == kept


def test_every_adapted_flag_of_every_example_exists_in_the_cpu_build() -> None:
    """What the real-vLLM test runs, checked here without vLLM: the CPU build's parser
    (its flag list, ``serve_flags-0.32.0-cpu.json``) knows every flag."""
    for name, isvc in load_examples().items():
        if isvc.spec.engine.backend != "vllm":
            continue
        for role in isvc.spec.pools():
            adapted = adapt_vllm_args_for_cpu(build_vllm_args(isvc, role), model="/m")
            unknown = [a for a in adapted if a.startswith("-") and a not in CPU_FLAGS]
            assert not unknown, f"{name} {role}: not flags of the CPU build: {unknown}"


def test_every_example_is_planned_once_with_its_own_arguments() -> None:
    runs = plan_example_runs()
    names = [name for run in runs for name in run.examples]
    assert len(names) == len(set(names))
    assert {p.stem for p in EXAMPLES.glob("*.yaml")} <= {n.split("#")[0] for n in names}
    assert len({run.engines for run in runs}) == len(runs), "identical engines run once"
    for run in runs:
        for engine in run.engines:
            assert "--host" not in engine.args and "--port" not in engine.args
            if engine.kind == "vllm":
                assert _value(list(engine.args), "--model") == MODEL
        assert run.disaggregated == (len(run.engines) == 2)


def test_examples_with_identical_engines_share_one_run(tmp_path: Path) -> None:
    text = (EXAMPLES / "chat.yaml").read_text()
    (tmp_path / "a.yaml").write_text(text)
    (tmp_path / "b.yaml").write_text(text.replace("name: chat", "name: chat-two"))
    (tmp_path / "c.yaml").write_text(text.replace("maxNumSeqs: 256", "maxNumSeqs: 64"))
    runs = plan_example_runs(tmp_path)
    assert [run.id for run in runs] == ["a+b", "c"]


FLAG = st.sampled_from(["--a", "--b", "-tp", "--gpu-memory-utilization", "--x"])
VALUE = st.text(alphabet="0123456789abc.", min_size=1, max_size=4)


@given(st.lists(st.tuples(FLAG, VALUE), max_size=8))
def test_drop_flags_removes_exactly_those_flags_and_their_values(
    pairs: list[tuple[str, str]],
) -> None:
    args = [item for pair in pairs for item in pair]
    out = drop_flags(args, {"-tp": 1, "--gpu-memory-utilization": 1})
    assert out == [item for f, v in pairs if f not in ("-tp", "--gpu-memory-utilization")
                   for item in (f, v)]  # fmt: skip


@given(st.lists(st.tuples(FLAG, VALUE), max_size=8), VALUE)
def test_set_flag_leaves_one_value_for_the_flag(pairs: list[tuple[str, str]], value: str) -> None:
    args = [item for pair in pairs for item in pair]
    out = set_flag(args, "--x", value)
    assert out.count("--x") == 1 and out[out.index("--x") + 1] == value
    assert drop_flags(out, {"--x": 1}) == drop_flags(args, {"--x": 1})
