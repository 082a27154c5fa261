"""``bash e2e/kube COMMAND`` (``python -m cluster COMMAND``): up, down, status, restart,
sa-kubeconfig, and serve (the supervisor itself). Does process and file I/O.

``up`` builds or reuses the programs, starts a supervisor in the background (it outlives
``up``) and waits until the cluster is ready; it prints ``HELM=``, ``KUBECTL=``,
``TANDEM_E2E_CLUSTER=`` (the state directory, for the pytest fixture to reuse) and, last,
``KUBECONFIG=``. ``down`` stops the supervisor and so everything it started; the state
directory stays for its logs until the next ``up``.
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

from cluster.binaries import BinariesMissing, build_binaries, cache_root, find_binaries
from cluster.layout import GPU_LABELS, NODE_MODES, ClusterInfo, NodeSpec
from cluster.spawn import kill_leftovers
from cluster.supervisor import (
    UP_TIMEOUT_S,
    launch,
    request,
    running_info,
    serve,
    stop_supervisor,
    wait_ready,
)


def default_state_dir() -> Path:
    return cache_root() / "run"


def node_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nodes", type=int, default=2, help="how many nodes (default 2)")
    p.add_argument("--node-mode", choices=NODE_MODES, default="process")
    p.add_argument(
        "--processless-nodes",
        type=int,
        default=1,
        help="extra processless nodes, tainted tandem.dev/processless:NoSchedule: only pods "
        "that tolerate it land there (default 1)",
    )
    p.add_argument("--node-cpu", default="128", help="cpu capacity per node (default 128)")
    p.add_argument("--node-memory", default="1Ti", help="memory per node (default 1Ti)")
    p.add_argument("--node-gpus", type=int, default=8, help="nvidia.com/gpu per node (default 8)")
    p.add_argument("--max-pods", type=int, default=250, help="pods per node (default 250)")
    p.add_argument(
        "--node-label",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a label of every node, besides nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3 and "
        "nvidia.com/gpu.present=true (KEY= removes one); repeatable",
    )


def node_spec(args: argparse.Namespace) -> NodeSpec:
    if args.nodes < 0 or args.processless_nodes < 0 or args.nodes + args.processless_nodes < 1:
        raise SystemExit("--nodes and --processless-nodes: at least one node in all")
    labels = dict(GPU_LABELS)
    for item in args.node_label:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise SystemExit(f"--node-label {item!r}: expected KEY=VALUE")
        if value:
            labels[key] = value
        else:
            labels.pop(key, None)
    return NodeSpec(
        labels=labels,
        names=[f"node-{i}" for i in range(args.nodes)],
        cpu=args.node_cpu,
        memory=args.node_memory,
        gpus=args.node_gpus,
        max_pods=args.max_pods,
        mode=args.node_mode,
        processless_names=[f"processless-{i}" for i in range(args.processless_nodes)],
    )


def print_handles(info: ClusterInfo) -> None:
    bin_dir = Path(info.bin_dir)
    print(f"HELM={bin_dir / 'helm'}")
    print(f"KUBECTL={bin_dir / 'kubectl'}")
    print(f"TANDEM_E2E_CLUSTER={info.state_dir}")
    print(f"KUBECONFIG={info.layout.admin_kubeconfig}")


def cmd_up(args: argparse.Namespace) -> int:
    state_dir = args.state_dir.resolve()
    info = running_info(state_dir)
    if info is not None:
        print(
            f"kube: already up in {state_dir} (supervisor {info.supervisor_pid})", file=sys.stderr
        )
        print_handles(info)
        return 0
    stop_supervisor(state_dir)
    t0 = time.monotonic()
    try:
        binaries = find_binaries()
    except BinariesMissing:
        print("kube: building the control-plane programs", file=sys.stderr)
        binaries = build_binaries()
    print(
        f"kube: programs ready in {time.monotonic() - t0:.1f} s ({binaries.bin_dir})",
        file=sys.stderr,
    )
    t1 = time.monotonic()
    proc = launch(state_dir, binaries.bin_dir, node_spec(args), detach=True)
    info = wait_ready(state_dir, proc, UP_TIMEOUT_S)
    print(
        f"kube: cluster up in {time.monotonic() - t1:.1f} s "
        f"({len(info.nodes.names)} {info.nodes.mode} nodes, "
        f"{len(info.nodes.processless_names)} processless; logs in {info.layout.logs})",
        file=sys.stderr,
    )
    print_handles(info)
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    """Stop the supervisor (and so everything it started), then prove it: any process
    still carrying the run's name is killed and listed, and the exit status is 1."""
    t0 = time.monotonic()
    state_dir = args.state_dir.resolve()
    if stop_supervisor(state_dir):
        print(f"kube: down in {time.monotonic() - t0:.1f} s", file=sys.stderr)
    else:
        print(f"kube: nothing running in {args.state_dir}", file=sys.stderr)
    leftovers = kill_leftovers(state_dir)
    if leftovers:
        print(
            f"kube: {len(leftovers)} process(es) of the run outlived it (killed now):",
            *leftovers,
            sep="\n  ",
            file=sys.stderr,
        )
        return 1
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    info = running_info(args.state_dir.resolve())
    if info is None:
        print(f"kube: not up ({args.state_dir})")
        return 1
    answer = request(info.layout.root, {"op": "status"}, timeout_s=10)
    print(f"kube: up, supervisor {info.supervisor_pid}, running {', '.join(answer['running'])}")
    print_handles(info)
    return 0


def cmd_restart(args: argparse.Namespace) -> int:
    answer = request(
        args.state_dir.resolve(),
        {
            "op": "restart",
            "component": args.component,
            "down_s": args.down_s,
            "grace_s": args.grace_s,
        },
    )
    print(f"kube: {args.component} healthy again after {answer['elapsed_s']} s")
    return 0


def cmd_sa_kubeconfig(args: argparse.Namespace) -> int:
    from cluster.kubeconfig import write_sa_kubeconfig

    info = running_info(args.state_dir.resolve())
    if info is None:
        raise SystemExit(f"kube: not up ({args.state_dir})")
    path = write_sa_kubeconfig(
        info.layout.kubeconfigs,
        admin_kubeconfig=info.layout.admin_kubeconfig,
        server=info.apiserver_url,
        ca=info.layout.pki / "ca.crt",
        namespace=args.namespace,
        service_account=args.name,
    )
    print(f"KUBECONFIG={path}")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stdout,
    )
    return serve(args.state_dir.resolve(), args.bin_dir.resolve(), node_spec(args))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bash e2e/kube", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--state-dir",
        type=Path,
        default=Path(os.environ.get("TANDEM_E2E_CLUSTER") or default_state_dir()),
        help="the run's directory (default $TANDEM_E2E_CLUSTER, else ~/.cache/tandem-e2e/run)",
    )
    sub = p.add_subparsers(dest="command", required=True)
    up = sub.add_parser(
        "up", help="build or reuse the programs, start the cluster in the background"
    )
    node_args(up)
    up.set_defaults(func=cmd_up)
    sub.add_parser("down", help="stop everything `up` started").set_defaults(func=cmd_down)
    sub.add_parser("status", help="is it up; the handles").set_defaults(func=cmd_status)
    r = sub.add_parser("restart", help="restart etcd or a control-plane component")
    r.add_argument(
        "component", choices=["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"]
    )
    r.add_argument("--down-s", type=float, default=0.0, help="seconds to keep it stopped")
    r.add_argument(
        "--grace-s",
        type=float,
        default=5.0,
        help="seconds between SIGTERM and SIGKILL; 0 kills it outright (default 5)",
    )
    r.set_defaults(func=cmd_restart)
    s = sub.add_parser("sa-kubeconfig", help="a kubeconfig acting as a ServiceAccount")
    s.add_argument("namespace")
    s.add_argument("name")
    s.set_defaults(func=cmd_sa_kubeconfig)
    serve_p = sub.add_parser("serve", help="run the supervisor in the foreground")
    serve_p.add_argument("--bin-dir", type=Path, required=True)
    node_args(serve_p)
    serve_p.set_defaults(func=cmd_serve)
    args = p.parse_args(argv)
    try:
        rc: int = args.func(args)
    except (RuntimeError, BinariesMissing, subprocess.CalledProcessError) as err:
        print(f"kube: {err}", file=sys.stderr)
        return 1
    return rc
