"""Golden ``vllm serve`` argument lists per role, and every flag exists in vLLM's parser."""

from __future__ import annotations

import json

import pytest

from tandem.api.validate import VLLM_VERSION, load_inference_service, vllm_serve_flags
from tandem.manifests.images import VLLM_IMAGE
from tandem.manifests.vllm_args import build_sim_args, build_vllm_args, parse_model_uri
from tests.factories import make_manifest, with_path

GOLDEN_POOL_ARGS = [
    "--tensor-parallel-size",
    "2",
    "--max-num-seqs",
    "128",
    "--max-num-batched-tokens",
    "8192",
    "--gpu-memory-utilization",
    "0.9",
]


def _isvc(mode: str = "disaggregated", **spec: object):  # type: ignore[no-untyped-def]
    manifest = make_manifest(mode=mode, **spec)
    manifest["spec"]["model"] = {
        "name": "llama",
        "uri": "hf://meta-llama/Llama-3.1-8B-Instruct@rev1",
        "maxModelLen": 8192,
    }
    for role in ("prefill", "decode", "pool"):
        if role in manifest["spec"]:
            manifest["spec"][role].update(
                gpu={"count": 2},
                tensorParallelSize=2,
                maxNumSeqs=128,
                maxNumBatchedTokens=8192,
                gpuMemoryUtilization=0.9,
            )
    return load_inference_service(manifest)


HEAD = [
    "--model",
    "meta-llama/Llama-3.1-8B-Instruct",
    "--revision",
    "rev1",
    "--served-model-name",
    "llama",
    "--host",
    "0.0.0.0",
    "--port",
    "8000",
    "--max-model-len",
    "8192",
]
TAIL = ["--scheduling-policy", "fcfs", "--enable-prefix-caching"]


def test_golden_prefill_args() -> None:
    assert build_vllm_args(_isvc(), "prefill") == [
        *HEAD,
        *GOLDEN_POOL_ARGS,
        *TAIL,
        "--kv-transfer-config",
        '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}',
        "--shutdown-timeout",
        "30",
    ]


def test_golden_decode_args() -> None:
    assert build_vllm_args(_isvc(), "decode") == [
        *HEAD,
        *GOLDEN_POOL_ARGS,
        *TAIL,
        "--kv-transfer-config",
        '{"kv_connector":"NixlConnector","kv_load_failure_policy":"fail","kv_role":"kv_consumer"}',
        "--shutdown-timeout",
        "30",
    ]


def test_golden_aggregated_args() -> None:
    assert build_vllm_args(_isvc(mode="aggregated"), "pool") == [
        *HEAD,
        *GOLDEN_POOL_ARGS,
        *TAIL,
        "--shutdown-timeout",
        "30",
    ]


def test_kv_transfer_config_is_valid_json_with_extra_config() -> None:
    manifest = with_path(
        make_manifest(),
        "spec.engine.kvTransfer",
        {"connector": "LMCacheConnectorV1", "extraConfig": {"discard_partial_chunks": False}},
    )
    args = build_vllm_args(load_inference_service(manifest), "prefill")
    config = json.loads(args[args.index("--kv-transfer-config") + 1])
    assert config == {
        "kv_connector": "LMCacheConnectorV1",
        "kv_role": "kv_producer",
        "kv_connector_extra_config": {"discard_partial_chunks": False},
    }


def test_extra_args_are_appended_verbatim() -> None:
    manifest = with_path(
        make_manifest(), "spec.engine.extraArgs", ["--enforce-eager", "--seed", "7"]
    )
    assert build_vllm_args(load_inference_service(manifest), "decode")[-3:] == [
        "--enforce-eager",
        "--seed",
        "7",
    ]


def test_prefix_caching_off_uses_the_pinned_flag() -> None:
    manifest = with_path(make_manifest(), "spec.engine.prefixCaching", False)
    assert "--disable-prefix-caching" in build_vllm_args(
        load_inference_service(manifest), "prefill"
    )


@pytest.mark.parametrize(
    "uri", ["hf://o/n", "hf://o/n@v2", "pvc://claim/dir/model", "s3://bucket-1/llama/70b"]
)
@pytest.mark.parametrize("mode", ["disaggregated", "aggregated"])
def test_every_emitted_flag_exists_in_the_pinned_vllm(uri: str, mode: str) -> None:
    flags = vllm_serve_flags()
    manifest = with_path(make_manifest(mode=mode), "spec.model.uri", uri)
    manifest["spec"]["engine"]["prefixCaching"] = uri.startswith("hf")  # both spellings
    for pool in ("prefill", "pool"):
        if pool in manifest["spec"]:
            manifest["spec"][pool]["longPrefillTokenThreshold"] = 2048
    isvc = load_inference_service(manifest)
    for role in isvc.spec.pools():
        emitted = [a for a in build_vllm_args(isvc, role) if a.startswith("--")]
        missing = [f for f in emitted if f not in flags]
        assert not missing, f"{role}: not flags of vllm serve {VLLM_VERSION}: {missing}"


def test_long_prefill_threshold_reaches_its_pool_only() -> None:
    manifest = with_path(make_manifest(), "spec.prefill.longPrefillTokenThreshold", 2048)
    isvc = load_inference_service(manifest)
    for build in (build_vllm_args, build_sim_args):
        prefill, decode = build(isvc, "prefill"), build(isvc, "decode")
        at = prefill.index("--long-prefill-token-threshold")
        assert prefill[at + 1] == "2048"
        assert "--long-prefill-token-threshold" not in decode


def test_packaged_flag_list_is_vllm_serves_own() -> None:
    flags = vllm_serve_flags()
    assert len(flags) > 200 and {"--kv-transfer-config", "--max-num-seqs", "--port"} <= flags


def test_image_pins_the_same_vllm_version() -> None:
    assert VLLM_IMAGE.endswith(f":v{VLLM_VERSION}")


def test_model_uri_parsing() -> None:
    assert parse_model_uri("hf://o/n").revision is None
    assert parse_model_uri("s3://b/p").load_format == "runai_streamer"
    assert parse_model_uri("pvc://c").model == "/models/c"
