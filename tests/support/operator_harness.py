"""Running the real operator against the emulator, in its own thread and event loop.

Does I/O. Kopf must not run inside pytest's loop (on stop it cancels every task created
after it started, pytest's included), so each operator gets a thread with a fresh loop,
while the emulator keeps serving in the test's loop. Tests ``await`` everything here so
the emulator is never blocked.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from tandem.control import KopfTuning, LeaseConfig, Operator, OperatorConfig, Runtime
from tandem.kube import KubeClient
from tests.support.kube_emulator import Emulator
from tests.support.waiting import eventually

#: Fast settings for component tests: short watches, quick retries, quick handover.
TEST_CONFIG = OperatorConfig(
    metrics_port=0,
    liveness=None,
    leader_election=False,
    workers=8,
    resync_interval_s=3600.0,
    event_dedupe_s=300.0,
    retry_base_s=0.05,
    retry_max_s=1.0,
    kopf=KopfTuning.for_tests(),
    stop_timeout_s=10.0,
    autoscaler=False,  # the autoscaler's tests turn it on (tests/operator/test_autoscale*.py)
)


def lease_for_tests(identity: str) -> LeaseConfig:
    return LeaseConfig(identity, lease_duration_s=3.0, renew_deadline_s=2.0, retry_period_s=0.25)


@dataclass
class RunningOperator:
    """An operator in a background thread; ``stop()`` it (awaitable) when done."""

    identity: str
    thread: threading.Thread
    started: threading.Event = field(default_factory=threading.Event)
    loop: asyncio.AbstractEventLoop | None = None
    stop_event: asyncio.Event | None = None
    operator: Operator | None = None
    exit_code: int | None = None
    error: BaseException | None = None

    @property
    def runtime(self) -> Runtime | None:
        return None if self.operator is None else self.operator.runtime

    @property
    def user_agent(self) -> str:
        return f"tandem-operator/{self.identity}"

    def leading(self) -> bool:
        return self.operator is not None and self.operator.role == "leader"

    def ready(self) -> bool:
        return self.operator is not None and self.operator.kopf_ready.is_set()

    def idle(self) -> bool:
        runtime = self.runtime
        return runtime is not None and runtime.idle() and runtime.events._queue.empty()

    async def stop(self, timeout_s: float = 20.0) -> int | None:
        if self.loop is not None and self.stop_event is not None and self.thread.is_alive():
            self.loop.call_soon_threadsafe(self.stop_event.set)
        await asyncio.to_thread(self.thread.join, timeout_s)
        if self.thread.is_alive():
            raise AssertionError(f"operator {self.identity} did not stop in {timeout_s}s")
        if self.error is not None:
            raise self.error
        return self.exit_code


def start_operator(
    url: str,
    *,
    identity: str = "op",
    config: OperatorConfig | None = None,
    setup: Callable[[Runtime], None] | None = None,
    client_timeout_s: float = 5.0,
    **overrides: Any,
) -> RunningOperator:
    """Start an operator for ``url``; ``overrides`` replace fields of the test config."""
    cfg = replace(config or TEST_CONFIG, **overrides)
    if cfg.leader_election and cfg.lease.identity != identity:
        cfg = replace(cfg, lease=lease_for_tests(identity))
    running = RunningOperator(identity, threading.Thread(name=f"operator-{identity}", daemon=True))

    async def main() -> None:
        client = KubeClient.for_url(url, user_agent=running.user_agent, timeout_s=client_timeout_s)
        running.operator = Operator(client, cfg, setup=setup)
        running.stop_event = asyncio.Event()
        running.loop = asyncio.get_running_loop()
        running.started.set()
        try:
            running.exit_code = await running.operator.run(running.stop_event)
        finally:
            await client.close()

    def target() -> None:
        try:
            asyncio.run(main())
        except BaseException as err:  # surfaced by stop()
            running.error = err
            running.started.set()

    running.thread.run = target  # type: ignore[method-assign]
    running.thread.start()
    return running


async def wait_ready(
    op: RunningOperator,
    emulator: Emulator | None = None,
    *,
    watches: int = 1,
    timeout_s: float = 15.0,
) -> None:
    """Wait until Kopf runs and (with ``emulator``) ``watches`` InferenceService watches
    and as many Deployment watches are open — stopping Kopf before its startup is over
    costs seconds."""
    await asyncio.to_thread(op.started.wait, timeout_s)
    await eventually(
        lambda: op.ready() or op.error,
        timeout_s=timeout_s,
        what=f"operator {op.identity} to start watching",
    )
    if op.error is not None:
        raise op.error
    if emulator is not None:
        await eventually(
            lambda: (
                emulator.open_watches("inferenceservices") >= watches
                and emulator.open_watches("deployments") >= watches
            ),
            timeout_s=timeout_s,
            what="the watch streams to open",
        )


async def settle(
    op: RunningOperator, emulator: Emulator, *, quiet_s: float = 0.5, timeout_s: float = 20.0
) -> None:
    """Wait until the operator is idle and made no request (Lease renewals aside) for
    ``quiet_s``."""
    deadline = time.monotonic() + timeout_s
    last, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        size = sum(
            1 for e in emulator.log if e.user_agent == op.user_agent and e.plural != "leases"
        )
        if size != last or not op.idle():
            last, since = size, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"operator {op.identity} never settled")
