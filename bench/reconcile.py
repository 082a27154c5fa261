"""How the operator's cost grows with the number of InferenceServices, against the emulator.

For each N, a fresh emulated API server (in this process) and a fresh ``tandem operator``
(a subprocess, exactly as deployed, with leader election on) are started; N
InferenceServices are created at once, and the bench prints:

* the time from the first create to every child present, and to every status written;
* API requests per service by kind, against the minimum (one write per child plus one
  status write); Events and the Lease are counted apart;
* writes during a steady-state resync (every service reconciled again; goal: zero);
* the operator's peak RSS;
* whether the cost per service stays flat as N grows (linear total cost).

Run from the repository root: ``python bench/reconcile.py`` (N = 50, 200, 500; a few
minutes) or ``python bench/reconcile.py --quick`` (N = 20, 50).

``--real`` also runs each N against the real control plane of ``e2e/cluster`` (built by
``bash e2e/cluster/build.sh``; processless nodes) and prints its figures under the
emulator's; ``--faults`` runs the fault run there (``--fault-n`` services through a
fault-injecting proxy, with apiserver, etcd and operator restarts) and prints whether
every service converged, with no orphan, no duplicate and no write storm. See
``bench/reconcile_real.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import signal
import socket
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.factories import make_manifest
from tests.support import Emulator, Entry, emulator_url, kubeconfig_for, serve_emulator

ISVCS = "/apis/serving.tandem.dev/v1alpha1/namespaces/{ns}/inferenceservices"
CHILDREN_PER_SERVICE = 14
AGENT = "tandem-operator/bench"
RESYNC_S = 20.0


@dataclass
class Result:
    n: int
    children_s: float
    status_s: float
    requests: Counter[str]
    resync_writes: int
    resync_reconciles: float
    peak_rss_mib: float
    operator_cpu_s: float
    emulator_cpu_s: float


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _kind(entry: Entry) -> str:
    """What a request of the operator process was for."""
    if entry.user_agent.startswith("kopf/"):
        return "kopf"  # Kopf's lists and watches: per resource kind, not per service
    if entry.plural == "leases":
        return "lease"
    if entry.plural == "events":
        return "event"
    if entry.method == "GET":
        return "read"
    if entry.plural == "inferenceservices" and entry.subresource == "status":
        return "status"
    return "child"


def _cpu_s(pid: int | str) -> float:
    """User + system CPU seconds of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _peak_rss_mib(pid: int) -> float:
    text = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"VmHWM:\s+(\d+) kB", text)
    return int(match[1]) / 1024 if match else float("nan")


async def _metric(port: int, name: str, **labels: str) -> float:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}/metrics") as rsp,
    ):
        text = await rsp.text()
    for line in text.splitlines():
        head, _, value = line.rpartition(" ")
        if head.startswith(name) and all(f'{k}="{v}"' in head for k, v in labels.items()):
            return float(value)
    return 0.0


def _ours(k: Emulator, since: int = 0) -> list[Entry]:
    """Requests of the operator process: the reconciler's and Kopf's (its watches)."""
    return [e for e in k.log[since:] if e.user_agent == AGENT or e.user_agent.startswith("kopf/")]


async def _quiet(k: Emulator, quiet_s: float, timeout_s: float) -> None:
    """Until the operator sent nothing but Lease renewals for ``quiet_s``."""
    deadline = time.monotonic() + timeout_s
    last, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        size = sum(1 for e in k.log if e.user_agent == AGENT and e.plural != "leases")
        if size != last:
            last, since = size, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return
        await asyncio.sleep(0.1)
    raise RuntimeError("the operator never went quiet")


async def run_one(n: int, workers: int) -> Result:
    async with serve_emulator(keep_versions=False, history_limit=200_000) as k:
        metrics_port = _free_port()
        with kubeconfig_for(emulator_url(k)) as kubeconfig:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "tandem.cli",
                "operator",
                "--kubeconfig",
                kubeconfig,
                "--all-namespaces",
                f"--metrics-port={metrics_port}",
                "--liveness=none",
                "--leader-election",
                "--identity=bench",
                f"--workers={workers}",
                f"--resync-interval={RESYNC_S}",
                # Reconcile cost only: the autoscaler's status write every tick (one per
                # service per interval) would otherwise count as resync writes.
                "--no-autoscaler",
                "--quiet",
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
            )
            try:
                return await _measure(k, n, proc.pid, metrics_port)
            finally:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
                try:
                    await asyncio.wait_for(proc.wait(), 30)
                except TimeoutError:
                    proc.kill()
                    await proc.wait()


async def _measure(k: Emulator, n: int, pid: int, metrics_port: int) -> Result:
    deadline = time.monotonic() + 60
    while not (k.open_watches("inferenceservices") and k.open_watches("deployments")):
        if time.monotonic() > deadline:
            raise RuntimeError("the operator did not start")
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)
    start_mark = k.mark()
    names = [f"svc-{i:04d}" for i in range(n)]
    url = emulator_url(k) + ISVCS.format(ns="default")
    cpu_before = _cpu_s(pid), _cpu_s("self")
    started = time.monotonic()
    async with aiohttp.ClientSession() as session:

        async def create(name: str) -> None:
            async with session.post(url, json=make_manifest(name)) as rsp:
                assert rsp.status == 201, await rsp.text()

        await asyncio.gather(*(create(name) for name in names))
    children_s = status_s = float("nan")
    want = n * CHILDREN_PER_SERVICE
    seen_children = seen_status = 0
    scanned = start_mark
    while time.monotonic() - started < 600:
        for e in k.log[scanned:]:
            if (
                e.user_agent == AGENT
                and 200 <= e.status < 300
                and e.method == "POST"
                and (e.plural not in ("events", "leases"))
            ):
                seen_children += 1
            if e.user_agent == AGENT and e.subresource == "status" and e.status == 200:
                seen_status += 1
        scanned = len(k.log)
        now = time.monotonic() - started
        if seen_children >= want and children_s != children_s:
            children_s = now
        if seen_status >= n and status_s != status_s:
            status_s = now
        if seen_children >= want and seen_status >= n:
            break
        await asyncio.sleep(0.02)
    operator_cpu_s = _cpu_s(pid) - cpu_before[0]
    emulator_cpu_s = _cpu_s("self") - cpu_before[1]
    await _quiet(k, quiet_s=2.0, timeout_s=300)
    requests = Counter(_kind(e) for e in _ours(k, start_mark))
    reconciles_before = await _metric(
        metrics_port, "tandem_operator_reconciles_total", result="success"
    )
    resync_mark = k.mark()
    await asyncio.sleep(RESYNC_S + 3)
    await _quiet(k, quiet_s=2.0, timeout_s=120)
    resync_writes = sum(1 for e in _ours(k, resync_mark) if e.is_write and e.plural != "leases")
    reconciles = (
        await _metric(metrics_port, "tandem_operator_reconciles_total", result="success")
        - reconciles_before
    )
    return Result(
        n,
        children_s,
        status_s,
        requests,
        resync_writes,
        reconciles,
        _peak_rss_mib(pid),
        operator_cpu_s,
        emulator_cpu_s,
    )


def report(results: list[Result]) -> None:
    print(
        f"{'N':>5} {'children':>9} {'status':>8} {'req/svc':>8} {'min':>4} {'child':>6} "
        f"{'status':>6} {'reads':>6} {'events':>6} {'resync':>7} {'resynced':>8} "
        f"{'op CPU/svc':>10} {'api CPU/svc':>11} {'peak RSS':>9}"
    )
    for r in results:
        per = {kind: r.requests[kind] / r.n for kind in ("child", "status", "read", "event")}
        total = per["child"] + per["status"] + per["read"]
        print(
            f"{r.n:>5} {r.children_s:>8.2f}s {r.status_s:>7.2f}s {total:>8.2f} "
            f"{CHILDREN_PER_SERVICE + 1:>4} {per['child']:>6.2f} {per['status']:>6.2f} "
            f"{per['read']:>6.2f} {per['event']:>6.2f} {r.resync_writes:>7} "
            f"{r.resync_reconciles:>8.0f} {1000 * r.operator_cpu_s / r.n:>8.1f}ms "
            f"{1000 * r.emulator_cpu_s / r.n:>9.1f}ms {r.peak_rss_mib:>7.1f}MiB"
        )
    print(f"""
children/status: seconds from the first create to every child / every status present.
req/svc: the operator's child writes + status writes + reads per service (its Events
apart); min: one write per child plus one status write. resync: writes while every
service was reconciled again after {RESYNC_S:.0f}s with nothing changed (resynced:
reconciles counted). op CPU/svc, api CPU/svc: CPU the operator process and the emulated
API server spent per service until every status was written (both share 2 cores here).""")
    first, last = results[0], results[-1]

    def per_service(r: Result) -> float:
        return sum(r.requests[kind] for kind in ("child", "status", "read", "event")) / r.n

    req_ratio = per_service(last) / per_service(first)
    cpu_ratio = (last.operator_cpu_s / last.n) / (first.operator_cpu_s / first.n)
    time_ratio = (last.status_s / last.n) / (first.status_s / first.n)
    linear = req_ratio <= 1.1 and cpu_ratio <= 1.5
    print(
        f"\nper service from N={first.n} to N={last.n}: requests x{req_ratio:.2f}, operator "
        f"CPU x{cpu_ratio:.2f}, wall time x{time_ratio:.2f} -> the operator's cost grows "
        f"{'linearly' if linear else 'FASTER than linearly'} with N."
    )


async def main(ns: list[int], workers: int) -> list[Result]:
    results = []
    for n in ns:
        started = time.monotonic()
        results.append(await run_one(n, workers))
        print(f"# N={n} measured in {time.monotonic() - started:.0f}s", file=sys.stderr)
    report(results)
    return results


def main_real(ns: list[int], workers: int, emulated: list[Result]) -> None:
    from reconcile_real import report_real, run_real

    real = []
    for n in ns:
        started = time.monotonic()
        real.append(run_real(n, workers, _free_port))
        print(
            f"# N={n} on the real API server in {time.monotonic() - started:.0f}s", file=sys.stderr
        )
    report_real(real, emulated)


def main_faults(n: int, workers: int, seed: int) -> None:
    from reconcile_real import report_faults, run_faults

    started = time.monotonic()
    result = run_faults(n, workers, _free_port, seed)
    print(f"# fault run of {n} services in {time.monotonic() - started:.0f}s", file=sys.stderr)
    report_faults(result, None)
    if not result.verdict.converged or result.writes_after:
        raise SystemExit(1)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="N = 20, 50")
    parser.add_argument("--n", type=int, action="append", help="service counts to run")
    parser.add_argument("--workers", type=int, default=16, help="operator --workers")
    parser.add_argument(
        "--real", action="store_true", help="each N on the real API server too (e2e/cluster)"
    )
    parser.add_argument(
        "--faults", action="store_true", help="the fault run on the real API server (only)"
    )
    parser.add_argument("--fault-n", type=int, default=100, help="services of the fault run")
    parser.add_argument("--seed", type=int, default=0, help="the fault proxy's seed")
    args = parser.parse_args()
    counts = args.n or ([20, 50] if args.quick else [50, 200, 500])
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    if args.faults:
        main_faults(args.fault_n, args.workers, args.seed)
    else:
        emulated = asyncio.run(main(counts, args.workers))
        if args.real:
            main_real(counts, args.workers, emulated)
