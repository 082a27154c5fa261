"""A stand-in for the Deployment controller and kubelet in the autoscaler's tests. I/O.

The emulator runs no controllers, so :class:`PodFleet` plays them: whenever a pool
Deployment's ``spec.replicas`` differs from the pods it has, it starts a simulated vLLM
engine (the ``tandem engine sim`` server, in process) on a free loopback port and creates
a Pod for it — ``status.podIP: 127.0.0.1``, ``Running``, ``Ready``, the container port
``http`` pointing at that server — or deletes Pods, lowest
``controller.kubernetes.io/pod-deletion-cost`` first, as the ReplicaSet controller does.
It also writes the Deployment's status, as its controller would.

:class:`Load` drives requests straight into the engines of one pool: long prompts and
one output token load prefill; streams with long outputs load decode.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from tandem.engine.model.calibration import Calibration
from tandem.engine.server import build_server_config, create_app
from tandem.engine.server.factory import SimOptions
from tests.operator.helpers import DEPLOY, make_available
from tests.support import Emulator
from tests.support.api_client import Api

PODS = "v1/pods"
COST = "controller.kubernetes.io/pod-deletion-cost"
MODEL = "llama"


@dataclass
class SimPod:
    """One engine pod: the Pod's name and the simulated engine serving for it."""

    name: str
    role: str
    runner: web.AppRunner | None
    port: int
    metrics_fault: bool = False
    """While set, the engine answers ``/metrics`` with HTTP 500 (it serves the rest)."""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def stop_server(self) -> None:
        """The engine stops answering; the Pod stays Ready (a scrape outage)."""
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None


#: How long a stopping engine lets open streams finish before closing them.
POD_GRACE_S = 2.0

#: Decode engines whose step is mostly a fixed part (about 86 ms, plus 5 ms per
#: sequence), so that the test's declared decode profile (a batch of 2 within a 100 ms
#: ITL) describes them: one stream then needs one replica, four need more.
DECODE_CALIBRATION = Calibration(
    compute_efficiency=0.49,
    memory_efficiency=0.85,
    overhead_s_per_layer=0.080 / 32,
    seq_overhead_s_per_layer=0.005 / 32,
)


async def start_engine(
    role: str, *, speedup: float, max_num_seqs: int, fault: Callable[[], bool] = lambda: False
) -> tuple[web.AppRunner, int]:
    """A simulated engine of ``role`` on a free loopback port; ``/metrics`` answers 500
    while ``fault()`` is true."""
    config = build_server_config(
        SimOptions(
            role=role,  # type: ignore[arg-type]
            served_model_names=(MODEL,),
            num_gpu_blocks=4096,
            max_model_len=8192,
            max_num_seqs=max_num_seqs,
            calibration=DECODE_CALIBRATION if role == "decode" else None,
            speedup=speedup,
        )
    )
    app = create_app(config)

    @web.middleware
    async def metrics_fault(request: web.Request, handler: Any) -> web.StreamResponse:
        if request.path == "/metrics" and fault():
            return web.Response(status=500, text="injected metrics failure")
        response: web.StreamResponse = await handler(request)
        return response

    app.middlewares.append(metrics_fault)
    # A deleted pod goes within its grace period: aiohttp's default waits 60 s for open
    # streams on cleanup (and swallows the cancellation meanwhile), which left the
    # fleet stuck deleting a pod with streams still open.
    runner = web.AppRunner(
        app, handler_cancellation=True, access_log=None, shutdown_timeout=POD_GRACE_S
    )
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, int(port)


@dataclass
class PodFleet:
    """Keeps each pool's Pods at its Deployment's ``spec.replicas`` (see the module)."""

    k: Emulator
    api: Api
    service: str
    roles: tuple[str, ...] = ("prefill", "decode")
    namespace: str = "default"
    speedup: float = 1.0
    max_num_seqs: int = 8
    faulty: set[tuple[str, int]] = field(default_factory=set)
    """(role, n): the n-th pod of that pool starts with ``metrics_fault`` set."""
    pods: dict[str, list[SimPod]] = field(default_factory=dict)
    deleted: list[tuple[str, int]] = field(default_factory=list)
    """(pod, its deletion cost) of the pods removed on scale-down, in order."""
    created: list[str] = field(default_factory=list)
    """Every pod started, in order."""
    _task: asyncio.Task[None] | None = None
    _stopping: bool = False
    _names: itertools.count[int] = field(default_factory=itertools.count)

    async def __aenter__(self) -> PodFleet:
        self.pods = {role: [] for role in self.roles}
        self._task = asyncio.create_task(self._run(), name="pod-fleet")
        return self

    async def __aexit__(self, *exc: object) -> None:
        # A cancellation that lands inside an engine's cleanup is swallowed by aiohttp
        # (it waits out open streams under a suppress): the flag ends the loop anyway.
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for pods in self.pods.values():
            for pod in pods:
                await pod.stop_server()

    def replicas(self, role: str) -> int | None:
        """The pool Deployment's ``spec.replicas`` (None before it exists)."""
        obj = self.k.fetch(DEPLOY, self.namespace, f"{self.service}-{role}")
        return None if obj is None else int(obj["spec"].get("replicas", 1))

    def urls(self, role: str) -> list[str]:
        return [p.url for p in self.pods.get(role, []) if p.runner is not None]

    def pod_object(self, name: str) -> dict[str, Any] | None:
        return self.k.fetch(PODS, self.namespace, name)

    async def _run(self) -> None:
        while not self._stopping:
            for role in self.roles:
                await self._sync(role)
            await asyncio.sleep(0.05)

    async def _sync(self, role: str) -> None:
        want = self.replicas(role)
        if want is None:
            return
        have = self.pods[role]
        changed = False
        while len(have) < want:
            pod = await self._create(role, faulty=(role, len(have)) in self.faulty)
            have.append(pod)
            self.created.append(pod.name)
            changed = True
        if len(have) > want:
            costs = {p.name: self._cost(p.name) for p in have}
            # Lowest cost first; among equals the newest, as the ReplicaSet controller.
            order = {p.name: i for i, p in enumerate(have)}
            ranked = sorted(have, key=lambda p: (costs[p.name], -order[p.name]))
            doomed = ranked[: len(have) - want]
            for pod in doomed:
                have.remove(pod)
                self.k.delete_object(PODS, self.namespace, pod.name)
                self.deleted.append((pod.name, costs[pod.name]))
                await pod.stop_server()
            changed = True
        deployment = self.k.fetch(DEPLOY, self.namespace, f"{self.service}-{role}")
        assert deployment is not None
        status = deployment.get("status") or {}
        observed = status.get("observedGeneration") == deployment["metadata"]["generation"]
        if changed or not observed or status.get("replicas") != want:
            make_available(self.k, f"{self.service}-{role}", self.namespace, ready=want)

    def _cost(self, name: str) -> int:
        obj = self.pod_object(name) or {}
        return int(((obj.get("metadata") or {}).get("annotations") or {}).get(COST, "0"))

    async def _create(self, role: str, *, faulty: bool) -> SimPod:
        name = f"{self.service}-{role}-{next(self._names)}"
        pod = SimPod(name, role, None, 0, metrics_fault=faulty)
        pod.runner, pod.port = await start_engine(
            role,
            speedup=self.speedup,
            max_num_seqs=self.max_num_seqs,
            fault=lambda: pod.metrics_fault,
        )
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "labels": {
                    "serving.tandem.dev/service": self.service,
                    "serving.tandem.dev/role": role,
                    "app.kubernetes.io/managed-by": "tandem",
                },
            },
            "spec": {
                "containers": [
                    {
                        "name": "engine",
                        "image": "sim",
                        "ports": [{"name": "http", "containerPort": pod.port, "protocol": "TCP"}],
                    }
                ]
            },
        }
        status, answer = await self.api.create(f"/api/v1/namespaces/{self.namespace}/pods", body)
        assert status == 201, answer
        self.k.patch_object(
            PODS,
            self.namespace,
            name,
            {
                "status": {
                    "phase": "Running",
                    "podIP": "127.0.0.1",
                    "conditions": [{"type": "Ready", "status": "True"}],
                }
            },
            subresource="status",
        )
        return pod


@dataclass
class Load:
    """Requests against one pool's engines until stopped: ``concurrency`` of them always
    in flight (closed loop), or with ``rate_per_s`` a new one that often whatever the
    engines do (open loop, so the offered load does not depend on how fast they run)."""

    urls: Callable[[], list[str]]
    prompt_tokens: int
    max_tokens: int
    concurrency: int = 1
    rate_per_s: float | None = None
    stream: bool = False
    completed: int = 0
    errors: list[str] = field(default_factory=list)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def __aenter__(self) -> Load:
        self._session = aiohttp.ClientSession()
        if self.rate_per_s is not None:
            self._spawn(self._open_loop())
        else:
            for i in range(self.concurrency):
                self._spawn(self._closed_loop(i))
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop(wait_s=0)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def stop(self, wait_s: float = 10.0) -> None:
        """Stop sending; requests in flight get ``wait_s`` seconds to finish."""
        self._stop.set()
        tasks = list(self._tasks)
        if tasks and wait_s > 0:
            await asyncio.wait(tasks, timeout=wait_s)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if not self._session.closed:
            await self._session.close()

    async def _open_loop(self) -> None:
        assert self.rate_per_s is not None
        for n in itertools.count():
            if self._stop.is_set():
                return
            self._spawn(self._one(n))
            await asyncio.sleep(1 / self.rate_per_s)

    async def _closed_loop(self, i: int) -> None:
        for n in itertools.count(i):
            if self._stop.is_set():
                return
            if not await self._one(n):
                await asyncio.sleep(0.05)

    async def _one(self, n: int) -> bool:
        urls = self.urls()
        if not urls:
            return False
        url = urls[n % len(urls)]
        body = {
            "model": MODEL,
            "prompt": [1] * self.prompt_tokens,
            "max_tokens": self.max_tokens,
            "stream": self.stream,
        }
        try:
            async with self._session.post(f"{url}/v1/completions", json=body) as resp:
                async for _ in resp.content.iter_any():
                    pass
                if resp.status == 200:
                    self.completed += 1
                    return True
                self._error(f"{url}: HTTP {resp.status}")
        except aiohttp.ClientError as err:  # an engine stopped under the request
            self._error(f"{url}: {err!r}")
        return False

    def _error(self, what: str) -> None:
        if len(self.errors) < 20:
            self.errors.append(what)
