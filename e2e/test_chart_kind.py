"""The Helm chart on a real cluster (kind in CI): install, serve, autoscale, delete.

Needs ``KUBECONFIG`` pointing at the cluster and ``docker``, ``kind``, ``helm`` and
``kubectl`` on PATH. The images are built from this checkout and loaded into the kind
cluster named by ``KIND_CLUSTER`` (default ``kind``); set ``TANDEM_E2E_PREBUILT=1`` when
the images are already in the cluster (any other cluster). Each run uses namespaces of
its own and removes them afterwards.

The test walks what an SRE does: ``helm install`` the chart, wait for the operator,
apply the sim-backend example, wait for ``Ready``, talk OpenAI to the router Service
through a port-forward, drive load until the autoscaler grows both pools, watch them
shrink back after the load with Events, status and metrics saying why, then delete the
InferenceService and see every child go.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

if not os.environ.get("KUBECONFIG"):
    pytest.skip("KUBECONFIG is not set: no cluster to test against", allow_module_level=True)

from tandem.manifests.images import TANDEM_IMAGE

REPO = Path(__file__).resolve().parent.parent
CHART = REPO / "charts" / "tandem"
EXAMPLE = REPO / "examples" / "sim.yaml"
RUN_ID = uuid.uuid4().hex[:6]
OPERATOR_NS = f"tandem-e2e-{RUN_ID}"
SERVICE_NS = f"llm-e2e-{RUN_ID}"
RELEASE = "tandem"
#: Concurrent streaming requests of the load phase, and their size in tokens: enough
#: queued prompt tokens to miss the example's TTFT target on one prefill replica, and
#: enough live sequences to fill one decode replica's KV cache.
CONCURRENCY = int(os.environ.get("TANDEM_E2E_CONCURRENCY", "96"))
PROMPT_TOKENS = 6000
OUTPUT_TOKENS = 1024
#: What an InferenceService of the sim example owns (no monitors: no Prometheus Operator).
CHILD_KINDS = [
    "deployments",
    "services",
    "poddisruptionbudgets",
    "networkpolicies",
    "serviceaccounts",
    "roles",
    "rolebindings",
]
T = TypeVar("T")


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"`{name}` is not on PATH; the chart e2e test needs it", pytrace=False)
    return path


def run(*args: str, stdin: str | None = None, timeout_s: float = 600) -> str:
    out = subprocess.run(
        list(args), input=stdin, capture_output=True, text=True, timeout=timeout_s, check=False
    )
    if out.returncode != 0:
        raise AssertionError(f"{' '.join(args)} failed ({out.returncode}):\n{out.stderr}")
    return out.stdout


def kubectl(*args: str, stdin: str | None = None) -> str:
    return run(tool("kubectl"), *args, stdin=stdin)


def get_json(*args: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(kubectl("get", *args, "-o", "json"))
    return loaded


def wait_for(check: Callable[[], T | None], *, timeout_s: float, what: str) -> T:
    deadline = time.monotonic() + timeout_s
    last: T | None = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(3)
    raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}; last: {last!r}")


@pytest.fixture(scope="module")
def images() -> None:
    """Tandem's image (operator, router, sim engine), built here and loaded into kind."""
    if os.environ.get("TANDEM_E2E_PREBUILT") == "1":
        return
    docker, kind = tool("docker"), tool("kind")
    run(docker, "build", "-f", "operator/Dockerfile", "-t", TANDEM_IMAGE, str(REPO), timeout_s=1200)
    cluster = os.environ.get("KIND_CLUSTER", "kind")
    run(kind, "load", "docker-image", TANDEM_IMAGE, "--name", cluster, timeout_s=600)


@pytest.fixture(scope="module")
def release(images: None) -> Iterator[str]:
    """The chart installed as an SRE would on a cluster without the Prometheus Operator."""
    helm = tool("helm")
    values = {
        "replicaCount": 2,
        "metrics": {"serviceMonitor": {"enabled": False}},
        "prometheusRule": {"enabled": False},
        "operator": {"logLevel": "verbose"},
    }
    for ns in (OPERATOR_NS, SERVICE_NS):
        kubectl("create", "namespace", ns)
    try:
        run(
            helm, "install", RELEASE, str(CHART), "--namespace", OPERATOR_NS,
            "--values", "-", "--wait", "--timeout", "5m",
            stdin=yaml.safe_dump(values),
        )  # fmt: skip
        yield RELEASE
    finally:
        logs = subprocess.run(
            [tool("kubectl"), "-n", OPERATOR_NS, "logs", "-l",
             "app.kubernetes.io/name=tandem-operator", "--tail=200", "--prefix"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        print(logs.stdout[-20000:])
        kubectl("delete", "namespace", SERVICE_NS, "--wait=true", "--timeout=5m")
        subprocess.run([helm, "uninstall", RELEASE, "-n", OPERATOR_NS, "--wait"], check=False)
        kubectl("delete", "namespace", OPERATOR_NS, "--wait=true", "--timeout=5m")


def sim_manifest() -> dict[str, Any]:
    manifest: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    manifest["metadata"]["namespace"] = SERVICE_NS
    return manifest


def condition(name: str, kind: str) -> dict[str, Any] | None:
    obj = get_json("inferenceservice", name, "-n", SERVICE_NS)
    conditions = (obj.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == kind), None)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def router_url(release: str) -> Iterator[str]:
    """The InferenceService Ready, and its router Service port-forwarded to loopback."""
    manifest = sim_manifest()
    name = manifest["metadata"]["name"]
    kubectl("apply", "-f", "-", stdin=yaml.safe_dump(manifest))
    wait_for(
        lambda: (c := condition(name, "Ready")) is not None and c["status"] == "True",
        timeout_s=600,
        what=f"InferenceService {name} Ready",
    )
    port = free_port()
    forward = subprocess.Popen(
        [tool("kubectl"), "-n", SERVICE_NS, "port-forward", f"service/{name}", f"{port}:8000"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )

    def listening() -> bool:
        with socket.socket() as sock:
            return sock.connect_ex(("127.0.0.1", port)) == 0

    try:
        wait_for(listening, timeout_s=60, what="the port-forward")
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        forward.terminate()
        forward.wait(timeout=10)


def test_operator_runs_with_a_leader(release: str) -> None:
    deployment = get_json(
        "deployment", "-n", OPERATOR_NS, "-l", "app.kubernetes.io/name=tandem-operator"
    )
    (item,) = deployment["items"]
    assert item["status"].get("readyReplicas") == 2
    lease = get_json("lease", "tandem-operator", "-n", OPERATOR_NS)
    holder = lease["spec"]["holderIdentity"]
    pods = get_json("pods", "-n", OPERATOR_NS, "-l", "app.kubernetes.io/name=tandem-operator")
    assert holder in {p["metadata"]["name"] for p in pods["items"]}


def test_openai_requests_through_the_router(router_url: str) -> None:
    from openai import OpenAI

    model = sim_manifest()["spec"]["model"]["name"]
    client = OpenAI(base_url=router_url, api_key="unused", timeout=120)
    assert model in [m.id for m in client.models.list().data]
    completion = client.completions.create(model=model, prompt="Hello, world", max_tokens=16)
    assert completion.choices[0].text
    assert completion.usage is not None and completion.usage.completion_tokens > 0
    stream = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Count to ten."}],
        max_tokens=32,
        stream=True,
    )
    pieces = [c.choices[0].delta.content or "" for c in stream if c.choices]
    assert "".join(pieces)


def _pool_replicas(name: str) -> dict[str, int]:
    out = {}
    for role in ("prefill", "decode"):
        scale = get_json("deployment", f"{name}-{role}", "-n", SERVICE_NS)
        out[role] = int(scale["spec"].get("replicas") or 0)
    return out


def test_load_scales_both_pools(router_url: str) -> None:
    from openai import OpenAI

    manifest = sim_manifest()
    name, model = manifest["metadata"]["name"], manifest["spec"]["model"]["name"]
    before = _pool_replicas(name)
    assert before == {"prefill": 1, "decode": 1}
    client = OpenAI(base_url=router_url, api_key="unused", timeout=600, max_retries=0)
    stop = threading.Event()
    errors: list[str] = []

    def user() -> None:
        while not stop.is_set():
            try:
                stream = client.completions.create(
                    model=model,
                    prompt=[1] * PROMPT_TOKENS,
                    max_tokens=OUTPUT_TOKENS,
                    stream=True,
                )
                for _ in stream:
                    if stop.is_set():
                        break
            except Exception as err:  # a refused request is load too; keep a sample
                if len(errors) < 20:
                    errors.append(repr(err))
                time.sleep(0.5)

    with ThreadPoolExecutor(max_workers=CONCURRENCY) as pool:
        for _ in range(CONCURRENCY):
            pool.submit(user)
        try:
            grown = wait_for(
                lambda: (r := _pool_replicas(name))["prefill"] > 1 and r["decode"] > 1 and r,
                timeout_s=900,
                what="both pools to scale up",
            )
        finally:
            stop.set()
    status = get_json("inferenceservice", name, "-n", SERVICE_NS)["status"]
    print(
        "scaled to",
        grown,
        "decisions",
        {r: p.get("lastDecision") for r, p in status["pools"].items()},
    )
    for role in ("prefill", "decode"):
        assert status["pools"][role]["desiredReplicas"] >= grown[role] > 1
        assert status["pools"][role]["lastDecision"]["reason"]
    events = get_json("events", "-n", SERVICE_NS, "--field-selector", f"involvedObject.name={name}")
    assert any("prefill" in e.get("message", "") for e in events["items"]), "no scaling Event"


def test_pools_shrink_after_the_load_and_say_why(router_url: str) -> None:
    """After the load: both pools back to their minimum once the example's 1-minute
    scale-down window passes, one Event per change, both writers' status side by side,
    and the decisions on the leader's /metrics."""
    name = sim_manifest()["metadata"]["name"]
    wait_for(
        lambda: _pool_replicas(name) == {"prefill": 1, "decode": 1},
        timeout_s=600,
        what="both pools back to 1 replica",
    )
    status = get_json("inferenceservice", name, "-n", SERVICE_NS)["status"]
    types = {c["type"] for c in status["conditions"]}
    assert {"Ready", "PrefillReady", "DecodeReady", "RouterReady"} <= types, types
    assert {"ScalingActive", "MetricsAvailable"} <= types, types
    for role in ("prefill", "decode"):
        pool = status["pools"][role]
        assert pool["desiredReplicas"] == 1 and pool["lastDecision"]["toReplicas"] == 1, pool
        assert {"replicas", "readyReplicas"} <= set(pool), pool
    events = get_json("events", "-n", SERVICE_NS, "--field-selector", f"involvedObject.name={name}")
    reasons = {e["reason"] for e in events["items"]}
    assert {"ScaledUp", "ScaledDown"} <= reasons, reasons
    holder = get_json("lease", "tandem-operator", "-n", OPERATOR_NS)["spec"]["holderIdentity"]
    metrics = kubectl(
        "get", "--raw", f"/api/v1/namespaces/{OPERATOR_NS}/pods/{holder}:8080/proxy/metrics"
    )
    for series in (
        f'tandem_autoscaler_desired_replicas{{namespace="{SERVICE_NS}",service="{name}"',
        "tandem_autoscaler_decisions_total{",
        "tandem_autoscaler_signal{",
    ):
        assert series in metrics, series


def test_delete_removes_every_child(router_url: str) -> None:
    name = sim_manifest()["metadata"]["name"]
    selector = f"serving.tandem.dev/service={name}"
    kinds = ",".join(CHILD_KINDS)
    assert get_json(kinds, "-n", SERVICE_NS, "-l", selector)["items"]
    kubectl("delete", "inferenceservice", name, "-n", SERVICE_NS, "--wait=true", "--timeout=2m")

    def gone() -> bool:
        left = get_json(f"{kinds},pods", "-n", SERVICE_NS, "-l", selector)["items"]
        return not left

    wait_for(gone, timeout_s=300, what=f"the children of {name} to be garbage-collected")
