"""pytest fixtures for the real control plane. Starts and stops processes; API I/O.

``cluster`` (session): a cluster of 2 process-backed nodes and 1 processless node
(tainted ``tandem.dev/processless``), started in a temporary directory and stopped at the
end of the session; or one already up, left running: the one whose state directory
``TANDEM_E2E_CLUSTER`` names, else the one whose admin kubeconfig ``KUBECONFIG`` is
(``bash e2e/kube up`` prints both). Without the built programs the fixture fails, saying
how to build them. ``namespace`` (function): a fresh
namespace, deleted afterwards.

Use from a conftest: ``from cluster.fixtures import cluster, namespace``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

from cluster import audit
from cluster.binaries import BinariesMissing, find_binaries
from cluster.kubeapi import api_client, call_json, core
from cluster.kubeconfig import write_sa_kubeconfig
from cluster.layout import ClusterInfo, NodeSpec
from cluster.spawn import kill_leftovers
from cluster.supervisor import (
    UP_TIMEOUT_S,
    launch,
    request,
    running_info,
    stop_supervisor,
    wait_ready,
)

REUSE_ENV = "TANDEM_E2E_CLUSTER"
T = TypeVar("T")


def wait_for(
    check: Callable[[], T | None], *, timeout_s: float, what: str, every_s: float = 0.25
) -> T:
    """Poll ``check`` until it returns something truthy; fail naming ``what`` and the last
    value after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    last: T | None = None
    while True:
        last = check()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {timeout_s:g} s waiting for {what}; last: {last!r}"
            )
        time.sleep(every_s)


@dataclass
class Cluster:
    """Handles on a running cluster."""

    info: ClusterInfo
    owned: bool
    """Started by this session (and stopped at its end)."""
    _api: Any = field(default=None, repr=False)

    @property
    def state_dir(self) -> Path:
        return self.info.layout.root

    @property
    def kubeconfig(self) -> Path:
        """The admin's kubeconfig (``system:masters``)."""
        return self.info.layout.admin_kubeconfig

    @property
    def kubectl(self) -> Path:
        return Path(self.info.bin_dir) / "kubectl"

    @property
    def helm(self) -> Path:
        return Path(self.info.bin_dir) / "helm"

    @property
    def audit_log(self) -> Path:
        return self.info.layout.audit_log

    @property
    def apiserver_url(self) -> str:
        return self.info.apiserver_url

    @property
    def ca(self) -> Path:
        return self.info.layout.pki / "ca.crt"

    def api(self) -> Any:
        """A ``kubernetes.client.ApiClient`` as the admin (shared; do not close it)."""
        if self._api is None:
            self._api = api_client(self.kubeconfig)
        return self._api

    def sa_kubeconfig(self, namespace: str, name: str, expiration_s: int = 3600) -> Path:
        """A kubeconfig acting as ServiceAccount ``namespace/name`` (it must exist)."""
        return write_sa_kubeconfig(
            self.info.layout.kubeconfigs,
            admin_kubeconfig=self.kubeconfig,
            server=self.apiserver_url,
            ca=self.ca,
            namespace=namespace,
            service_account=name,
            expiration_s=expiration_s,
        )

    def env(self, kubeconfig: Path | None = None) -> dict[str, str]:
        """Environment for kubectl, helm or a client process: KUBECONFIG set."""
        return {**os.environ, "KUBECONFIG": str(kubeconfig or self.kubeconfig)}

    def run_kubectl(
        self, *args: str, kubeconfig: Path | None = None, timeout_s: float = 60, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        out = subprocess.run(
            [str(self.kubectl), *args],
            env=self.env(kubeconfig),
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        if check and out.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(args)} failed ({out.returncode}): {out.stderr}"
            )
        return out

    def restart(self, component: str, down_s: float = 0.0, grace_s: float = 5.0) -> float:
        """Restart etcd or a control-plane component (``grace_s`` 0: kill it, as a crash);
        seconds until it, and the apiserver, are healthy again."""
        payload = {"op": "restart", "component": component, "down_s": down_s, "grace_s": grace_s}
        answer = request(self.state_dir, payload)
        return float(answer["elapsed_s"])

    def pod_dir(self, namespace: str, name: str) -> Path | None:
        """The node agent's directory of a pod (volumes, container logs); None if none."""
        found = sorted(self.info.layout.pods.glob(f"{namespace}_{name}_*"))
        return found[-1] if found else None

    def container_log(self, namespace: str, name: str, container: str) -> str:
        directory = self.pod_dir(namespace, name)
        if directory is None:
            return ""
        path = directory / f"{container}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def kill_container(
        self, namespace: str, name: str, container: str, sig: signal.Signals = signal.SIGKILL
    ) -> int:
        """Send ``sig`` to a running container's process group, as the kernel's OOM killer
        or a crash would end it (the node agent then restarts it per ``restartPolicy``);
        the process id signalled."""
        directory = self.pod_dir(namespace, name)
        pid_file = directory / f"{container}.pid" if directory else None
        if pid_file is None or not pid_file.exists():
            raise AssertionError(f"container {container} of pod {namespace}/{name} never started")
        pid = int(pid_file.read_text())
        os.killpg(pid, sig)
        return pid

    def audit_events(self) -> list[audit.Event]:
        return list(audit.read_events(self.audit_log))


def default_nodes() -> NodeSpec:
    return NodeSpec(names=["node-0", "node-1"], processless_names=["processless-0"])


def start_cluster(state_dir: Path, nodes: NodeSpec | None = None) -> Cluster:
    """Start a cluster owned by the caller (fails with the build command when the
    programs are missing)."""
    try:
        binaries = find_binaries()
    except BinariesMissing as err:
        pytest.fail(str(err), pytrace=False)
    proc = launch(state_dir, binaries.bin_dir, nodes or default_nodes(), detach=False)
    try:
        info = wait_ready(state_dir, proc, UP_TIMEOUT_S)
    except RuntimeError as err:
        pytest.fail(str(err), pytrace=False)
    return Cluster(info, owned=True)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    reuse = os.environ.get(REUSE_ENV)
    if not reuse and os.environ.get("KUBECONFIG"):
        # <state>/kubeconfig/admin.yaml of a running harness cluster.
        state = Path(os.environ["KUBECONFIG"]).resolve().parent.parent
        if running_info(state) is not None:
            reuse = str(state)
    if reuse:
        info = running_info(Path(reuse))
        if info is None:
            pytest.fail(
                f"{REUSE_ENV}={reuse} is not a running cluster: start one with "
                "`bash e2e/kube up`, or unset it to let the tests start their own",
                pytrace=False,
            )
        yield Cluster(info, owned=False)
        return
    handle = start_cluster(tmp_path_factory.mktemp("cluster"))
    try:
        yield handle
    finally:
        if handle._api is not None:
            handle._api.close()
        stop_supervisor(handle.state_dir)
        leftovers = kill_leftovers(handle.state_dir)
        if leftovers:
            warnings.warn(f"processes of the cluster outlived it: {leftovers}", stacklevel=1)


@pytest.fixture
def namespace(cluster: Cluster) -> Iterator[str]:
    """A fresh namespace, deleted (pods and all) after the test."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    v1 = core(cluster.api())
    v1.create_namespace({"metadata": {"name": name}}, _request_timeout=30)
    wait_for(
        lambda: call_json(v1.read_namespaced_service_account, "default", name),
        timeout_s=30,
        what=f"the default ServiceAccount of namespace {name}",
    )
    try:
        yield name
    finally:
        v1.delete_namespace(name, _request_timeout=30)
