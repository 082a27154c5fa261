"""``tandem operator`` as a process: flags, kubeconfig login, structured logs, SIGTERM."""

from __future__ import annotations

import asyncio
import json
import signal
import sys

import pytest

from tandem.cli import build_parser
from tests.factories import make_manifest
from tests.operator.helpers import children, condition, create, isvc
from tests.support import Emulator, emulator_url, eventually, kubeconfig_for
from tests.support.api_client import Api


def test_flags_parse_as_the_chart_passes_them() -> None:
    args = build_parser().parse_args(
        [
            "operator",
            "--namespace=a",
            "--namespace=b",
            "--metrics-port=9090",
            "--liveness=http://0.0.0.0:8081/healthz",
            "--leader-election",
            "--lease-name=tandem",
            "--lease-namespace=system",
            "--verbose",
        ]
    )
    assert args.namespaces == ["a", "b"] and args.metrics_port == 9090
    assert args.leader_election and args.lease_name == "tandem" and args.verbose


def test_leader_election_is_on_unless_turned_off() -> None:
    """The safe default: two operators started alike never both write."""
    assert build_parser().parse_args(["operator"]).leader_election
    assert not build_parser().parse_args(["operator", "--no-leader-election"]).leader_election


def test_the_defaults_are_the_configurations_own() -> None:
    from tandem.control.config import OperatorConfig
    from tandem.controller.config import KopfTuning, LeaseConfig

    args, config = build_parser().parse_args(["operator"]), OperatorConfig(lease=LeaseConfig("x"))
    assert (args.workers, args.resync_interval) == (config.workers, config.resync_interval_s)
    assert (args.metrics_port, args.liveness) == (config.metrics_port, config.liveness)
    assert args.lease_duration == LeaseConfig("x").lease_duration_s
    assert args.watch_timeout == KopfTuning().watch_server_timeout_s


def test_the_autoscaler_is_on_unless_turned_off() -> None:
    assert build_parser().parse_args(["operator"]).autoscaler is True
    assert build_parser().parse_args(["operator", "--no-autoscaler"]).autoscaler is False


def test_namespaces_and_all_namespaces_exclude_each_other() -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["operator", "-n", "a", "--all-namespaces"])


async def test_the_command_reconciles_logs_json_and_stops_on_sigterm(k: Emulator, api: Api) -> None:
    with kubeconfig_for(emulator_url(k)) as kubeconfig:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tandem.cli",
            "operator",
            "--kubeconfig",
            kubeconfig,
            "--all-namespaces",
            "--metrics-port=0",
            "--liveness=none",
            "--log-format=json",
            "--watch-timeout=5",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        try:
            await eventually(
                lambda: k.open_watches("deployments"), timeout_s=20, what="the operator to watch"
            )
            await create(api, make_manifest("chat", autoscaling={"interval": "1s"}))
            await eventually(lambda: len(children(k)) == 14, timeout_s=20)
            # The command runs the autoscaler: no engine pod is ready yet (the emulator
            # runs no controllers), so it holds and says why, without calling it missing.
            held = await eventually(
                lambda: condition(isvc(k, "chat"), "ScalingActive"),
                timeout_s=20,
                what="an autoscaler tick",
            )
            assert "none ready yet" in held["message"], held
            metrics = condition(isvc(k, "chat"), "MetricsAvailable")
            assert metrics is not None and metrics["status"] == "True", metrics
            await asyncio.sleep(0.5)
            proc.send_signal(signal.SIGTERM)
            out, _ = await asyncio.wait_for(proc.communicate(), 30)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    assert proc.returncode == 0, out.decode()
    records = [json.loads(line) for line in out.decode().splitlines() if line.startswith("{")]
    created = [r for r in records if r.get("message", "").startswith("created Deployment")]
    assert len(created) == 3
    assert all(
        r["object"]["name"] == "chat" and r["object"]["namespace"] == "default" for r in created
    )
