"""What each local engine runs: the cluster's own arguments, adapted to one machine (pure)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tandem.api.validate import load_inference_service, vllm_serve_flags
from tandem.local.engines import (
    EngineLaunch,
    LocalModelError,
    build_vllm_command,
    check_local_model,
)
from tandem.local.processes import PORT_SPAN, ephemeral_low, free_port
from tandem.manifests.vllm_args import build_vllm_args
from tandem.manifests.vllm_cpu import GPU_ONLY_FLAGS, adapt_vllm_args_for_cpu
from tests.factories import make_manifest, with_path

#: The CPU build the real-engine tests run (``.ci/install-vllm``).
CPU_FLAGS = "0.32.0-cpu"


def _manifests(repo_root: Path) -> list[tuple[str, dict[str, Any]]]:
    """The vLLM examples and an aggregated service, each serving a local folder."""
    found = [
        (path.name, doc)
        for path in sorted((repo_root / "examples").glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc and doc["spec"].get("engine", {}).get("backend", "vllm") == "vllm"
    ]
    found.append(("aggregated", make_manifest(mode="aggregated")))
    return [(n, with_path(m, "spec.model.uri", "file:///home/me/models/m")) for n, m in found]


def test_every_example_becomes_vllm_cpu_arguments(repo_root: Path) -> None:
    """Each role of each example, as ``tandem up --engine vllm`` starts it: every flag is
    one of the CPU build's (0.32 spells ``--disable-prefix-caching`` its own way), no
    GPU-only flag is left, KV moves through a CPU buffer, and the engine listens on
    loopback at the port it was given."""
    flags = vllm_serve_flags(CPU_FLAGS)
    for name, manifest in _manifests(repo_root):
        isvc = load_inference_service(manifest)
        for role in isvc.spec.pools():
            command = build_vllm_command(isvc, role, 8123, 5601, "/v/bin/vllm", {}, flags)
            argv = list(command.argv)
            assert argv[:2] == ["/v/bin/vllm", "serve"], name
            emitted = [a.split("=", 1)[0] for a in argv[2:] if a.startswith("--")]
            assert not [f for f in emitted if f not in flags], (name, role, emitted)
            assert not set(emitted) & set(GPU_ONLY_FLAGS), (name, role)
            assert argv[argv.index("--model") + 1] == "/home/me/models/m"
            assert argv[-4:] == ["--host", "127.0.0.1", "--port", "8123"]
            assert argv.count("--port") == 1 and argv.count("--host") == 1
            if role != "pool":
                kv = json.loads(argv[argv.index("--kv-transfer-config") + 1])
                assert kv["kv_buffer_device"] == "cpu"
                assert kv["kv_role"] == {"prefill": "kv_producer", "decode": "kv_consumer"}[role]


def test_the_cpu_adaptation_keeps_everything_else_in_order() -> None:
    manifest = make_manifest(engine={"backend": "vllm", "extraArgs": ["--enforce-eager"]})
    manifest["spec"]["decode"].update(gpu={"count": 4}, gpuMemoryUtilization=0.85)
    isvc = load_inference_service(manifest)
    cluster = build_vllm_args(isvc, "decode")
    local = adapt_vllm_args_for_cpu(cluster)
    assert "--tensor-parallel-size" in cluster and "--gpu-memory-utilization" in cluster
    assert len(cluster) - len(local) == 4  # each GPU-only flag with its value
    kept = [a for a in cluster if a not in ("--tensor-parallel-size", "4",
                                            "--gpu-memory-utilization", "0.85")]  # fmt: skip
    changed = [(a, b) for a, b in zip(kept, local, strict=True) if a != b]
    assert [b for _, b in changed] == [local[local.index("--kv-transfer-config") + 1]]
    assert local[-1] == "--enforce-eager"  # extraArgs stay, as written, last


@pytest.mark.parametrize(("given", "local"), [("30s", "30"), ("1500ms", "2"), ("2m", "120")])
def test_the_shutdown_timeout_becomes_whole_seconds(given: str, local: str) -> None:
    manifest = make_manifest(engine={"backend": "vllm", "shutdownTimeout": given})
    args = adapt_vllm_args_for_cpu(build_vllm_args(load_inference_service(manifest), "decode"))
    assert args[args.index("--shutdown-timeout") + 1] == local


def test_each_engine_gets_its_own_nixl_side_channel_and_the_users_env_wins() -> None:
    isvc = load_inference_service(with_path(make_manifest(), "spec.model.uri", "file:///m"))
    base = {"OMP_NUM_THREADS": "8", "VLLM_CPU_KVCACHE_SPACE": "4", "UCX_TLS": "rc"}
    prefill = build_vllm_command(isvc, "prefill", 8001, 5601, "vllm", base)
    decode = build_vllm_command(isvc, "decode", 8002, 5602, "vllm", base)
    assert prefill.env["VLLM_NIXL_SIDE_CHANNEL_PORT"] == "5601"
    assert decode.env["VLLM_NIXL_SIDE_CHANNEL_PORT"] == "5602"
    for env in (prefill.env, decode.env):
        assert env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == "127.0.0.1"
        assert env["UCX_TLS"] == "tcp,self,sm"  # no RDMA device on one machine
        assert env["OMP_NUM_THREADS"] == "8" and env["VLLM_CPU_KVCACHE_SPACE"] == "4"
        assert env["HF_HUB_OFFLINE"] == "1" and env["VLLM_NO_USAGE_STATS"] == "1"
    assert prefill.env_drop == ("VIRTUAL_ENV", "PYTHON")
    hub = load_inference_service(make_manifest())  # hf://: vLLM may download it
    assert "HF_HUB_OFFLINE" not in build_vllm_command(hub, "decode", 1, 2, "vllm", {}).env


@pytest.mark.parametrize("uri", ["pvc://weights/llama", "s3://bucket-a/llama"])
def test_a_model_only_a_cluster_has_is_refused_naming_the_field(uri: str) -> None:
    with pytest.raises(LocalModelError, match=r"spec\.model\.uri: .*file:///abs/path"):
        check_local_model(uri)
    isvc = load_inference_service(with_path(make_manifest(), "spec.model.uri", uri))
    with pytest.raises(LocalModelError):
        EngineLaunch("vllm", "vllm").command(isvc, "decode", 1, 2, {})


def test_sim_engines_drain_for_the_services_shutdown_timeout() -> None:
    manifest = make_manifest(backend="sim", engine={"backend": "sim", "shutdownTimeout": "45s"})
    command = EngineLaunch("sim", "python3", 2.0).command(
        load_inference_service(manifest), "decode", 8123, 0, {}
    )
    argv = list(command.argv)
    assert argv[argv.index("--shutdown-timeout") + 1] == "45"
    assert argv[argv.index("--startup-delay") + 1] == "2"
    assert argv.count("--port") == 1 and argv[argv.index("--port") + 1] == "8123"


def test_an_off_switch_is_spelled_as_the_installed_vllm_spells_it() -> None:
    manifest = make_manifest(engine={"backend": "vllm", "prefixCaching": False})
    isvc = load_inference_service(with_path(manifest, "spec.model.uri", "file:///m"))
    for version, spelling in (
        (CPU_FLAGS, "--no-enable-prefix-caching"),
        ("0.34.0", "--disable-prefix-caching"),
    ):
        flags = vllm_serve_flags(version)
        argv = build_vllm_command(isvc, "decode", 1, 2, "vllm", {}, flags).argv
        assert spelling in argv and not {
            "--disable-prefix-caching",
            "--no-enable-prefix-caching",
        } - {spelling} & set(argv)


def test_engine_ports_come_from_below_the_ephemeral_range_and_never_twice(
    tmp_path: Path,
) -> None:
    """An engine binds its ports long after it is given them: ports from the ephemeral
    range could be taken meanwhile by outgoing connections (Address already in use)."""
    low = ephemeral_low()
    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == 50
    assert all(max(1024, low - PORT_SPAN) <= p < low for p in ports), (low, ports)
    odd = tmp_path / "range"
    odd.write_text("not numbers")
    assert ephemeral_low(odd) == 32768
    odd.write_text("40000\t60999\n")
    assert ephemeral_low(odd) == 40000
