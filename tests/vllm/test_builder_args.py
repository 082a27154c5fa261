"""The builders' engine arguments, run for real: every example's engines start from the
exact arguments Tandem renders (:mod:`tests.vllm.examples`: the tiny model, the CPU
adaptation) and serve a request with the example's own served model name.

Real vLLM (CPU build) for ``engine.backend: vllm``, ``tandem engine sim`` for ``sim``. A
disaggregated example's prefill and decode engines start side by side (two at most run at
once) and serve one request through both legs of the handoff: the decode engine's prompt
tokens arrive as ``external_kv_transfer``, so the KV-transfer configuration each role got
really moves the KV. An aggregated pool serves a completion and a chat request.

One flag is added after the rendered ones, here only: ``--enforce-eager``. vLLM's CPU
build compiles the model with torch.compile at start, for each new set of scheduler
limits (each example has its own): one to four minutes on a busy two-core machine, to
speed up the two requests each engine serves here. It sets nothing the rendered
arguments set.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from tests.contract.fleet import Engine, spawn_sim_args, warm_handshakes
from tests.contract.http import call, metric_sum, metrics_of
from tests.vllm.engines import Role, VllmInstall, free_port, spawn_serve
from tests.vllm.examples import TINY_MAX_MODEL_LEN, ExampleRun, RoleArgs, plan_example_runs
from tests.vllm.timing import RUNNING, STARTUPS

pytestmark = pytest.mark.timeout(1200)

RUNS = plan_example_runs()
START_TIMEOUT_S = 600.0
#: added to every real engine's arguments, after the rendered ones (see the docstring)
TEST_ONLY_FLAGS = ("--enforce-eager",)
HANDOFF = {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
           "remote_block_ids": None, "remote_host": None, "remote_port": None}  # fmt: skip
#: token ids, not text: the prompt's length is exact whatever the tokenizer
PROMPT_IDS = [(7 * i + 11) % 400 + 20 for i in range(300)]


def spawn(role: RoleArgs, model_dir: Path, log_dir: Path, install: VllmInstall | None) -> Engine:
    port, side_channel = free_port(), free_port()
    name = f"{role.kind}-{role.role}-{port}"
    listen = ["--host", "127.0.0.1", "--port", str(port)]
    engine_role: Role = "aggregated" if role.role == "pool" else role.role
    if role.kind == "sim":
        return spawn_sim_args(name, engine_role, [*role.args, *listen], log_dir, port)
    assert install is not None
    args = ["serve", *role.with_model(model_dir), *listen, *TEST_ONLY_FLAGS]
    real = spawn_serve(install, args, log_dir, name, engine_role, port, side_channel)
    return Engine("vllm", name, engine_role, port, side_channel, real.process, real.log_path, real)


def start(run: ExampleRun, model_dir: Path, log_dir: Path, install: VllmInstall | None
          ) -> list[Engine]:  # fmt: skip
    """Every engine of ``run``, side by side (a run has one or two), ready."""
    engines = [spawn(role, model_dir, log_dir, install) for role in run.engines]
    RUNNING.extend(e for e in engines if e.kind == "vllm")
    try:
        for engine in engines:
            engine.wait_ready(START_TIMEOUT_S)
            if engine.kind == "vllm":
                STARTUPS.append((f"example {run.id}: {engine.role}", engine.startup_s or 0.0))
    except RuntimeError as err:
        stop(engines)
        pytest.fail(f"{run.id}: {err}", pytrace=False)
    return engines


def stop(engines: list[Engine]) -> None:
    for engine in engines:
        engine.stop(grace_s=40.0)
        if engine in RUNNING:
            RUNNING.remove(engine)


async def serve_aggregated(engine: Engine, served: str) -> None:
    body = {"model": served, "prompt": PROMPT_IDS, "max_tokens": 8}
    answer = await call(engine, "/v1/completions", body)
    assert answer.status == 200, answer.body
    assert answer.body["usage"] == {"prompt_tokens": 300, "completion_tokens": 8,
                                    "total_tokens": 308, **answer.body["usage"]}  # fmt: skip
    chat = {"model": served, "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 4}
    answer = await call(engine, "/v1/chat/completions", chat)
    assert answer.status == 200, answer.body
    assert answer.body["usage"]["completion_tokens"] == 4


async def serve_disaggregated(prefill: Engine, decode: Engine, served: str) -> None:
    """Both legs of a handoff, as the router sends them; the KV must have moved."""
    before = metric_sum(await metrics_of(decode), "vllm:prompt_tokens_by_source_total",
                        source="external_kv_transfer")  # fmt: skip
    request_id = f"example-{time.monotonic_ns()}"
    body: dict[str, Any] = {"model": served, "prompt": PROMPT_IDS, "max_tokens": 8}
    leg = {**body, "max_tokens": 1, "kv_transfer_params": HANDOFF}
    first = await call(prefill, "/v1/completions", leg, headers={"X-Request-Id": request_id})
    assert first.status == 200, first.body
    params = first.body["kv_transfer_params"]
    assert params["do_remote_prefill"] is True, params
    second = await call(decode, "/v1/completions", {**body, "kv_transfer_params": params},
                        headers={"X-Request-Id": request_id})  # fmt: skip
    assert second.status == 200, second.body
    assert second.body["usage"]["completion_tokens"] == 8
    after = metric_sum(await metrics_of(decode), "vllm:prompt_tokens_by_source_total",
                       source="external_kv_transfer")  # fmt: skip
    # vLLM recomputes the prompt's last token on the decode side; the rest came over.
    assert after - before >= len(PROMPT_IDS) - 1, (before, after)


async def check_served(engine: Engine, served: str, max_model_len: int | None) -> None:
    answer = await call(engine, "/v1/models", method="GET")
    assert answer.status == 200, answer.body
    model = answer.body["data"][0]
    assert model["id"] == served
    if max_model_len is not None:
        assert model["max_model_len"] == max_model_len


def expected_max_model_len(role: RoleArgs) -> int | None:
    if "--max-model-len" not in role.args:
        return TINY_MAX_MODEL_LEN if role.kind == "vllm" else None
    return int(role.args[role.args.index("--max-model-len") + 1])


@pytest.mark.parametrize("run", RUNS, ids=[run.id for run in RUNS])
async def test_the_rendered_arguments_start_engines_that_serve(
    run: ExampleRun, request: pytest.FixtureRequest, vllm_log_dir: Path
) -> None:
    install: VllmInstall | None = None
    model_dir = Path("unused")
    if any(role.kind == "vllm" for role in run.engines):
        install = request.getfixturevalue("vllm_install")
        model_dir = request.getfixturevalue("tiny_model")
    engines = start(run, model_dir, vllm_log_dir, install)
    try:
        served = run.engines[0].served_name
        for role, engine in zip(run.engines, engines, strict=True):
            await check_served(engine, role.served_name, expected_max_model_len(role))
        if run.disaggregated:
            by_role = {role.role: e for role, e in zip(run.engines, engines, strict=True)}
            if any(e.kind == "vllm" for e in engines):  # the first handshake may be late
                await asyncio.to_thread(warm_handshakes, engines, served)
            await serve_disaggregated(by_role["prefill"], by_role["decode"], served)
        else:
            await serve_aggregated(engines[0], served)
    finally:
        stop(engines)
