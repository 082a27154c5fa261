"""The autoscaler inside the operator, against the emulator and live simulated engines.

Each test runs the real operator (autoscaler on, 1 s ticks) and plays the Deployment
controller itself (:class:`tests.operator.fleet.PodFleet`): every pool Deployment's
``spec.replicas`` becomes that many Pods, each backed by a ``tandem engine sim`` server
on loopback that the autoscaler scrapes over real HTTP. Load goes straight into one
pool's engines, so each pool's growth can be told apart.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from tandem.control.restrictions import Restrictions
from tandem.local.processes import free_port
from tests.factories import make_manifest
from tests.observe.prometheus_server import running_prometheus
from tests.operator.fleet import COST, Load, PodFleet
from tests.operator.helpers import DEPLOY, ISVCS, condition, create, isvc, patch_spec
from tests.support import Emulator, eventually
from tests.support.api_client import Api
from tests.support.operator_harness import RunningOperator

#: Declared capacities small enough that a light load needs a second replica and far
#: from the policy's panic threshold (twice the capacity), whose hold outlasts a test.
PREFILL_TOKENS_PER_S = 15_000
MAX_BATCH_AT_ITL = 2


def autoscaled(
    name: str = "chat",
    *,
    window: str = "2s",
    prefill: dict[str, Any] | None = None,
    decode: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A sim-backend service with 1 s ticks, a short scale-down window, no burst memory
    (the pools come all the way down once the window passed) and profiles."""
    manifest = make_manifest(
        name,
        backend="sim",
        autoscaling={
            "policy": "slo",
            "interval": "1s",
            "scaleDownStabilization": window,
            "coldStart": "1s",
            "burstMemory": "0s",
            "maxStep": {"up": 4, "down": 4},
        },
        qos={"ttft": {"p90": "2s"}, "itl": {"p90": "100ms"}},
    )
    spec = manifest["spec"]
    spec["prefill"] |= {
        "replicas": {"min": 1, "max": 3},
        "profile": {"prefillTokensPerS": PREFILL_TOKENS_PER_S},
        **(prefill or {}),
    }
    spec["decode"] |= {
        "replicas": {"min": 1, "max": 3},
        "maxNumSeqs": 8,
        "profile": {"maxBatchAtItl": MAX_BATCH_AT_ITL},
        **(decode or {}),
    }
    return manifest


async def start(operators: Callable[..., Any]) -> RunningOperator:
    op: RunningOperator = await operators(autoscaler=True)
    return op


def scale_writes(k: Emulator, deployment: str) -> list[Any]:
    return [
        e.body
        for e in k.writes(plural="deployments")
        if e.name == deployment and e.subresource == "scale"
    ]


def events(k: Emulator, service: str, reason: str) -> list[str]:
    return [
        e["message"]
        for e in k.list("v1/events", "default")
        if e["involvedObject"]["name"] == service and e["reason"] == reason
    ]


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse_samples(text: str) -> Samples:
    """A metrics page as (sample name, sorted labels) → value."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def scrape_operator(op: RunningOperator) -> Samples:
    """The operator's /metrics, over HTTP as Prometheus reads it."""
    assert op.operator is not None and op.operator.metrics_port
    url = f"http://127.0.0.1:{op.operator.metrics_port}/metrics"
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        assert resp.status == 200
        return parse_samples(await resp.text())


def exported(op: RunningOperator) -> Samples:
    """The same page, read in process (for polling)."""
    assert op.operator is not None
    return parse_samples(op.operator.metrics.exposition().decode())


def series(samples: Samples, name: str, **labels: str) -> list[float]:
    return [
        v for (n, lbls), v in samples.items() if n == name and labels.items() <= dict(lbls).items()
    ]


def pool_status(k: Emulator, service: str, role: str) -> dict[str, Any]:
    return dict(((isvc(k, service).get("status") or {}).get("pools") or {}).get(role) or {})


async def test_prefill_load_grows_only_prefill_and_it_shrinks_after(
    k: Emulator, api: Api, operators: Callable[..., Any]
) -> None:
    op = await start(operators)
    await create(api, autoscaled())
    await eventually(lambda: k.fetch(DEPLOY, "default", "chat-decode"), what="the pools")
    async with PodFleet(k, api, "chat") as fleet:
        await eventually(lambda: condition(isvc(k, "chat"), "ScalingActive"), what="a tick")
        # 10 prompts/s of 2,000 tokens: 20k tokens/s over 0.75 x 15k per replica = 2.
        async with Load(lambda: fleet.urls("prefill"), 2000, 1, rate_per_s=10) as load:
            await eventually(
                lambda: (fleet.replicas("prefill") or 0) >= 2,
                timeout_s=20,
                what="prefill to grow",
            )
        assert load.completed > 0, load.errors
        await eventually(
            lambda: fleet.replicas("prefill") == 1 and len(fleet.pods["prefill"]) == 1,
            timeout_s=25,
            what="prefill to come back to 1 after the window",
        )
        assert scale_writes(k, "chat-decode") == [], "decode was resized without load"
        assert fleet.replicas("decode") == 1

        # One Event per change (Events are posted in the background).
        changes = len(scale_writes(k, "chat-prefill"))
        await eventually(
            lambda: len(events(k, "chat", "ScaledUp") + events(k, "chat", "ScaledDown")) == changes,
            what="an Event per scale write",
        )
        up = events(k, "chat", "ScaledUp")
        down = events(k, "chat", "ScaledDown")
        assert up and up[0].startswith("prefill 1→"), up
        assert all(m.startswith("prefill ") for m in up), up
        assert down and all(m.startswith("prefill ") for m in down), down

        # The status of the tick that scaled down follows its scale write.
        prefill = await eventually(
            lambda: (p := pool_status(k, "chat", "prefill")).get("desiredReplicas") == 1 and p,
            what="status of the last scale-down",
        )
        assert prefill["lastDecision"]["toReplicas"] == 1
        assert prefill["lastDecision"]["reason"].startswith("prefill ")
        assert prefill["lastScaleTime"] == prefill["lastDecision"]["time"]
        # The reconciler's fields of the same entry survive the autoscaler's writes.
        await eventually(
            lambda: pool_status(k, "chat", "prefill").get("readyReplicas") == 1,
            what="the reconciler's readyReplicas",
        )
        status = isvc(k, "chat")["status"]
        types = {c["type"] for c in status["conditions"]}
        assert {"Ready", "PrefillReady", "DecodeReady", "RouterReady"} <= types
        assert {"ScalingActive", "MetricsAvailable"} <= types
        assert condition(isvc(k, "chat"), "ScalingActive")["status"] == "True"  # type: ignore[index]

        samples = await scrape_operator(op)
        assert series(samples, "tandem_autoscaler_desired_replicas", pool="prefill") == [1.0]
        # What drove prefill up is a prefill signal, as a bounded code.
        ups = {
            dict(labels)["reason"]
            for (name, labels), v in samples.items()
            if name == "tandem_autoscaler_decisions_total"
            and dict(labels).get("pool") == "prefill"
            and dict(labels).get("direction") == "up"
            and v >= 1
        }
        assert ups and ups <= {"demand", "backlog", "latency"}, ups
        assert (
            series(samples, "tandem_autoscaler_decisions_total", pool="decode", direction="up")
            == []
        )
        assert series(samples, "tandem_autoscaler_metrics_available", pool="decode") == [1.0]
        assert series(samples, "tandem_autoscaler_max_replicas", pool="prefill") == [3.0]
        assert series(samples, "tandem_autoscaler_signal", pool="prefill", signal="capacity") == [
            float(PREFILL_TOKENS_PER_S)
        ]
        assert series(
            samples, "tandem_autoscaler_slo_target_seconds", pool="prefill", signal="ttft"
        ) == [2.0]
        assert series(
            samples, "tandem_autoscaler_slo_objective_ratio", pool="decode", signal="itl"
        ) == [0.9]

    # A replica that stops leading exports no autoscaler series (a standby has none).
    await op.stop()
    assert not [name for name, _ in exported(op) if name.startswith("tandem_autoscaler_")]


async def test_decode_load_grows_only_decode_and_scale_down_spares_the_busy_pod(
    k: Emulator, api: Api, operators: Callable[..., Any]
) -> None:
    await start(operators)
    await create(api, autoscaled())
    await eventually(lambda: k.fetch(DEPLOY, "default", "chat-decode"), what="the pools")
    async with PodFleet(k, api, "chat") as fleet:
        await eventually(lambda: condition(isvc(k, "chat"), "ScalingActive"), what="a tick")
        # 4 streams on one pod, 106 ms a step: 38 tok/s over 0.9 x (2 sequences per
        # 100 ms) per replica: 2 or 3 replicas (by the p90/mean of the ITL).
        async with Load(lambda: fleet.urls("decode"), 64, 300, concurrency=4, stream=True):
            grown = await eventually(
                lambda: (fleet.replicas("decode") or 0) >= 2 and fleet.replicas("decode"),
                timeout_s=20,
                what="decode to grow",
            )
        assert scale_writes(k, "chat-prefill") == [], "prefill was resized without load"

        # One long stream stays on the newest pod while the pool shrinks around it.
        busy = fleet.pods["decode"][-1]
        async with Load(lambda: [busy.url], 64, 4000, stream=True):
            await eventually(
                lambda: fleet.replicas("decode") == 1 and len(fleet.pods["decode"]) == 1,
                timeout_s=25,
                what="decode to shrink to 1",
            )
            assert fleet.pods["decode"] == [busy]
            kept = fleet.pod_object(busy.name)
            assert kept is not None
            busy_cost = int(kept["metadata"]["annotations"][COST])
            assert busy_cost >= 10  # one running sequence weighs 10
            # Every other decode pod went (the pool may have grown past ``grown`` before
            # the first load ended), each cheaper than the busy one.
            started = {name for name in fleet.created if name.startswith("chat-decode")}
            assert len(started) >= grown
            gone = {name: cost for name, cost in fleet.deleted if name in started}
            assert set(gone) == started - {busy.name}, fleet.deleted
            assert all(cost < busy_cost for cost in gone.values()), fleet.deleted
        assert fleet.replicas("prefill") == 1
        changes = len(scale_writes(k, "chat-decode"))
        await eventually(
            lambda: len(events(k, "chat", "ScaledUp") + events(k, "chat", "ScaledDown")) == changes,
            what="an Event per scale write",
        )
        down = events(k, "chat", "ScaledDown")
        assert down and all(m.startswith("decode ") for m in down), down
        up = events(k, "chat", "ScaledUp")
        assert up and up[0].startswith("decode 1→") and all(m.startswith("decode ") for m in up)


async def test_scrape_outage_holds_sizes_and_names_the_pod(
    k: Emulator, api: Api, operators: Callable[..., Any]
) -> None:
    op = await start(operators)
    # Two idle decode replicas, no window: anything but an outage shrinks them at once.
    manifest = autoscaled(window="0s", decode={"replicas": {"min": 1, "max": 3, "initial": 2}})
    await create(api, manifest)
    await eventually(lambda: k.fetch(DEPLOY, "default", "chat-decode"), what="the pools")
    async with PodFleet(k, api, "chat", faulty={("decode", 1)}) as fleet:
        broken = await eventually(
            lambda: len(fleet.pods["decode"]) == 2 and fleet.pods["decode"][1]
        )
        missing = await eventually(
            lambda: (
                (c := condition(isvc(k, "chat"), "MetricsAvailable"))
                and c["status"] == "False"
                and c
            ),
            what="MetricsAvailable=False",
        )
        assert broken.name in missing["message"] and "HTTP 500" in missing["message"]
        assert missing["reason"] == "MetricsMissing"
        ticks = len(k.writes(plural="inferenceservices"))
        await eventually(
            lambda: len(k.writes(plural="inferenceservices")) >= ticks + 3,
            what="three more ticks",
        )
        assert fleet.replicas("decode") == 2 and scale_writes(k, "chat-decode") == []
        assert pool_status(k, "chat", "decode")["desiredReplicas"] == 2
        active = condition(isvc(k, "chat"), "ScalingActive")
        assert active is not None and "decode 2: holding, metrics unavailable" in active["message"]
        assert series(exported(op), "tandem_autoscaler_metrics_available", pool="decode") == [0.0]
        failures = series(exported(op), "tandem_autoscaler_scrape_failures_total", pool="decode")
        assert failures and failures[0] >= 3

        broken.metrics_fault = False
        await eventually(
            lambda: fleet.replicas("decode") == 1, timeout_s=15, what="the scale-down it held"
        )
        await eventually(
            lambda: (c := condition(isvc(k, "chat"), "MetricsAvailable")) and c["status"] == "True",
            what="MetricsAvailable=True again",
        )


async def test_invalid_service_does_not_stop_a_valid_one_and_deletion_drops_series(
    k: Emulator, api: Api, operators: Callable[..., Any]
) -> None:
    op = await start(operators)
    bad = autoscaled("bad", prefill={"replicas": {"min": 4, "max": 2}})
    await create(api, bad)
    good = autoscaled("good", window="0s", prefill={"replicas": {"min": 1, "max": 3, "initial": 2}})
    await create(api, good)
    await eventually(lambda: k.fetch(DEPLOY, "default", "good-prefill"), what="good's pools")
    async with PodFleet(k, api, "good"):
        await eventually(
            lambda: k.fetch(DEPLOY, "default", "good-prefill")["spec"]["replicas"] == 1,  # type: ignore[index]
            timeout_s=15,
            what="the valid service to be autoscaled",
        )
        ready = await eventually(lambda: condition(isvc(k, "bad"), "Ready"))
        assert ready["reason"] == "InvalidSpec"
        assert condition(isvc(k, "bad"), "ScalingActive") is None
        # The tick that scaled writes its status right after the scale.
        await eventually(
            lambda: (c := condition(isvc(k, "good"), "ScalingActive")) and c["status"] == "True",
            what="the valid service's ScalingActive",
        )

        samples = await scrape_operator(op)
        assert series(samples, "tandem_autoscaler_desired_replicas", service="good")
        assert not series(samples, "tandem_autoscaler_desired_replicas", service="bad")

        status, body = await api.delete(f"{ISVCS.format(ns='default')}/good")
        assert status == 200, body
        await eventually(
            lambda: not [n for n, lbls in exported(op) if dict(lbls).get("service") == "good"],
            what="the deleted service's series to go",
        )


async def test_prometheus_source_holds_while_unreachable_then_drives_the_pools(
    k: Emulator, api: Api, operators: Callable[..., Any], tmp_path: Path
) -> None:
    await operators(
        autoscaler=True, restrictions=Restrictions(prometheus_urls=("http://127.0.0.1",))
    )
    manifest = autoscaled(window="0s", decode={"replicas": {"min": 1, "max": 3, "initial": 2}})
    manifest["spec"]["autoscaling"]["metrics"] = {
        "source": "prometheus",
        "url": f"http://127.0.0.1:{free_port()}",  # nothing listens there yet
        "scrapeTimeout": "1s",
    }
    await create(api, manifest)
    await eventually(lambda: k.fetch(DEPLOY, "default", "chat-decode"), what="the pools")
    async with PodFleet(k, api, "chat") as fleet:
        await eventually(lambda: len(fleet.pods["decode"]) == 2, what="two decode pods")
        missing = await eventually(
            lambda: (c := condition(isvc(k, "chat"), "MetricsAvailable")) and c,
            what="a tick against the missing Prometheus",
        )
        assert missing["status"] == "False", missing
        assert fleet.replicas("decode") == 2 and scale_writes(k, "chat-decode") == []

        targets = [
            (
                f"127.0.0.1:{pod.port}",
                {"namespace": "default", "service": "chat", "pool": role, "pod": pod.name},
            )
            for role, pods in fleet.pods.items()
            for pod in pods
        ]
        async with running_prometheus(tmp_path, targets) as url:
            await patch_spec(api, "chat", {"autoscaling": {"metrics": {"url": url}}})
            await eventually(
                lambda: fleet.replicas("decode") == 1,
                timeout_s=20,
                what="the idle decode pool to shrink on Prometheus's numbers",
            )
            await eventually(
                lambda: (
                    (c := condition(isvc(k, "chat"), "MetricsAvailable")) and c["status"] == "True"
                ),
                what="MetricsAvailable=True from Prometheus",
            )
        assert scale_writes(k, "chat-prefill") == []
