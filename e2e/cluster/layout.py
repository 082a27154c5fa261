"""The state directory of one cluster run and its description file. Pure, except
``ClusterInfo.load``/``save``, which read and write ``cluster.json``.

Everything a run writes lives under one directory, so ``down`` (or a test's teardown)
leaves nothing behind elsewhere, and a run's evidence (logs, audit log) is in one place::

    cluster.json        ClusterInfo: ports, programs, nodes, the supervisor's pid
    ready | failed      written by the supervisor when started / when start failed
    control.sock        the supervisor's control socket (restart a component)
    pki/                CA, serving and client certificates, the SA signing key
    kubeconfig/         admin.yaml, one per component and node, sa-<ns>-<name>.yaml
    etcd/               etcd's data directory
    audit/              policy.yaml and audit.log (JSON lines)
    logs/               one log per component, nodeagent.log, supervisor.log
    pods/<ns>_<name>_<uid>/  a pod's token directory, emptyDirs and container logs
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
NODE_MODES = ("process", "processless")


@dataclass(frozen=True)
class Layout:
    """Paths inside a state directory."""

    root: Path

    @property
    def info(self) -> Path:
        return self.root / "cluster.json"

    @property
    def ready(self) -> Path:
        return self.root / "ready"

    @property
    def failed(self) -> Path:
        return self.root / "failed"

    @property
    def control_socket(self) -> Path:
        return self.root / "control.sock"

    @property
    def pki(self) -> Path:
        return self.root / "pki"

    @property
    def kubeconfigs(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.kubeconfigs / "admin.yaml"

    def node_kubeconfig(self, node: str) -> Path:
        return self.kubeconfigs / f"node-{node}.yaml"

    @property
    def etcd_data(self) -> Path:
        return self.root / "etcd"

    @property
    def audit_policy(self) -> Path:
        return self.root / "audit" / "policy.yaml"

    @property
    def audit_log(self) -> Path:
        return self.root / "audit" / "audit.log"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    def log(self, name: str) -> Path:
        return self.logs / f"{name}.log"

    @property
    def pods(self) -> Path:
        return self.root / "pods"


GPU_LABELS = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.present": "true"}
"""What NVIDIA's GPU feature discovery labels an H100 node with; manifests select on them."""

PROCESSLESS_TAINT = "tandem.dev/processless"
"""Taint (NoSchedule) of the extra processless nodes of a mixed cluster: only pods that
tolerate it (scale runs) land there; everything else runs as processes."""


@dataclass
class NodeSpec:
    """What the node agent registers: names, modes and per-node capacity."""

    names: list[str]
    """Nodes in ``mode``."""
    # An 8-GPU server's capacity: the scheduler counts requests against it; nothing
    # enforces it on this machine.
    cpu: str = "128"
    memory: str = "1Ti"
    gpus: int = 8
    max_pods: int = 250
    mode: str = "process"
    processless_names: list[str] = field(default_factory=list)
    """Extra nodes in processless mode, tainted ``PROCESSLESS_TAINT`` (mixed clusters)."""
    labels: dict[str, str] = field(default_factory=lambda: dict(GPU_LABELS))
    """Labels of every node, besides the well-known ones the agent sets."""

    @property
    def all_names(self) -> list[str]:
        return [*self.names, *self.processless_names]

    def mode_of(self, node: str) -> str:
        return "processless" if node in self.processless_names else self.mode

    def tainted(self, node: str) -> bool:
        return node in self.processless_names


@dataclass
class ClusterInfo:
    """What ``cluster.json`` records about a run; enough for another process to use it."""

    state_dir: str
    bin_dir: str
    ports: dict[str, int]
    nodes: NodeSpec
    service_cluster_ip_range: str = "10.96.0.0/16"
    supervisor_pid: int = 0
    pids: dict[str, int] = field(default_factory=dict)

    @property
    def apiserver_url(self) -> str:
        return f"https://127.0.0.1:{self.ports['kube-apiserver']}"

    @property
    def layout(self) -> Layout:
        return Layout(Path(self.state_dir))

    def save(self) -> None:
        path = self.layout.info
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2) + "\n")
        tmp.replace(path)

    @classmethod
    def load(cls, state_dir: Path) -> ClusterInfo:
        raw = json.loads(Layout(state_dir).info.read_text())
        raw["nodes"] = NodeSpec(**raw["nodes"])
        return cls(**raw)
