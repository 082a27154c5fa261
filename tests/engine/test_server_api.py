"""The simulated server speaks vLLM's OpenAI-compatible API (openai client and raw HTTP)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import openai
import pytest
from aiohttp.test_utils import TestClient

from .conftest import MODEL_NAME, StartServer, state_of


def oai(client: TestClient[Any, Any]) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=str(client.make_url("/v1")), api_key="sim", max_retries=0)


async def sse_events(resp: Any) -> list[str]:
    body = (await resp.read()).decode()
    return [block[len("data: ") :] for block in body.split("\n\n") if block.startswith("data: ")]


async def test_completion_non_streaming(start_server: StartServer) -> None:
    client = await start_server()
    res = await oai(client).completions.create(model=MODEL_NAME, prompt="Hello " * 40, max_tokens=7)
    assert res.id.startswith("cmpl-") and res.object == "text_completion"
    choice = res.choices[0]
    assert choice.finish_reason == "length" and len(choice.text) == 7 * 4
    assert res.usage is not None
    assert (res.usage.prompt_tokens, res.usage.completion_tokens) == (60, 7)
    default = await oai(client).completions.create(model=MODEL_NAME, prompt="Hi")
    assert default.usage is not None and default.usage.completion_tokens == 16  # vLLM default


async def test_completion_streaming_matches_non_streaming(start_server: StartServer) -> None:
    client = await start_server()
    api = oai(client)
    full = await api.completions.create(
        model=MODEL_NAME, prompt="same prompt", max_tokens=9, seed=3
    )
    stream = await api.completions.create(
        model=MODEL_NAME,
        prompt="same prompt",
        max_tokens=9,
        seed=3,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [c async for c in stream]
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == full.choices[0].text  # the same seed, the same text
    content = [c for c in chunks if c.choices]
    assert [c.choices[0].finish_reason for c in content][-1] == "length"
    assert all(c.choices[0].finish_reason is None for c in content[:-1])
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 9


async def test_chat_streaming_and_not(start_server: StartServer) -> None:
    client = await start_server()
    api = oai(client)
    messages: Any = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi!"}]
    res = await api.chat.completions.create(
        model=MODEL_NAME, messages=messages, max_tokens=5, temperature=0
    )
    assert res.id.startswith("chatcmpl-") and res.object == "chat.completion"
    assert (
        res.choices[0].message.role == "assistant"
        and len(res.choices[0].message.content or "") == 20
    )
    assert res.usage is not None and res.usage.prompt_tokens == 1 + 5 + 3 + 5 + 1 + 4
    stream = await api.chat.completions.create(
        model=MODEL_NAME, messages=messages, max_tokens=5, stream=True, temperature=0
    )
    chunks = [c async for c in stream]
    assert chunks[0].object == "chat.completion.chunk"
    assert (
        chunks[0].choices[0].delta.role == "assistant" and chunks[0].choices[0].delta.content == ""
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert text == res.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason == "length"


async def test_raw_sse_framing_and_request_id(start_server: StartServer) -> None:
    client = await start_server()
    body = {
        "model": MODEL_NAME,
        "prompt": [1, 2, 3, 4, 5],
        "max_tokens": 3,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    resp = await client.post("/v1/completions", json=body, headers={"X-Request-Id": "abc-1"})
    assert resp.status == 200 and resp.headers["Content-Type"].startswith("text/event-stream")
    events = await sse_events(resp)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert {c["id"] for c in chunks} == {"cmpl-abc-1"}
    assert all(c["usage"]["prompt_tokens"] == 5 for c in chunks)  # token-id prompt, per-chunk usage
    chat = await client.post(
        "/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "x"}], "max_tokens": 2},
        headers={"X-Request-Id": "abc-2"},
    )
    assert (await chat.json())["id"] == "chatcmpl-abc-2"


async def test_seed_makes_output_deterministic(start_server: StartServer) -> None:
    client = await start_server()
    api = oai(client)

    async def text(seed: int, prompt: str = "p") -> str:
        res = await api.completions.create(
            model=MODEL_NAME, prompt=prompt, max_tokens=12, seed=seed
        )
        return res.choices[0].text

    assert await text(1) == await text(1)
    assert await text(1) != await text(2)
    assert await text(1, "other prompt") != await text(1)  # the seed and the prompt decide
    unseeded = [
        (await api.completions.create(model=MODEL_NAME, prompt="p", max_tokens=12)).choices[0].text
        for _ in range(2)
    ]
    assert unseeded[0] != unseeded[1], "without a seed, every request samples afresh"


async def test_eos_model_and_ignore_eos(start_server: StartServer) -> None:
    client = await start_server(eos_mean_tokens=3)
    reasons = set()
    for seed in range(8):
        body = {"prompt": "x", "max_tokens": 200, "seed": seed}
        reasons.add(
            (await (await client.post("/v1/completions", json=body)).json())["choices"][0][
                "finish_reason"
            ]
        )
    assert "stop" in reasons
    body = {"prompt": "x", "max_tokens": 20, "seed": 0, "ignore_eos": True}
    res = await (await client.post("/v1/completions", json=body)).json()
    assert (
        res["choices"][0]["finish_reason"] == "length" and res["usage"]["completion_tokens"] == 20
    )


@pytest.mark.parametrize(
    ("body", "status", "err_type", "param"),
    [
        ({"prompt": "x", "model": "nope"}, 404, "NotFoundError", "model"),
        ({"prompt": [7] * 5000}, 400, "BadRequestError", "input_tokens"),
        (
            {"prompt": "x", "stream_options": {"include_usage": True}},
            400,
            "BadRequestError",
            "stream_options",
        ),
        ({"prompt": ""}, 400, "BadRequestError", "prompt"),
        ({"prompt": "x", "max_tokens": "ten"}, 400, "Bad Request", "body.max_tokens"),
        ({"prompt": "x", "max_tokens": 0}, 400, "BadRequestError", "max_tokens"),
        ({"prompt": ["a", ""]}, 400, "BadRequestError", "prompt"),
        ([1, 2], 400, "Bad Request", "body"),
    ],
)
async def test_errors_like_vllm(
    start_server: StartServer, body: Any, status: int, err_type: str, param: str | None
) -> None:
    client = await start_server()
    resp = await client.post("/v1/completions", json=body)
    assert resp.status == status
    err = (await resp.json())["error"]
    assert (err["type"], err["param"], err["code"]) == (err_type, param, status)
    assert set(err) == {"message", "type", "param", "code"}


async def test_prompt_too_long_message_and_client_exceptions(start_server: StartServer) -> None:
    client = await start_server()
    resp = await client.post("/v1/completions", json={"prompt": [1] * 5000})
    assert (await resp.json())["error"]["message"] == (
        "This model's maximum context length is 4096 tokens. However, your prompt contains "
        "5000 input tokens, which exceeds this limit even without any output tokens. Please "
        "reduce the length of the input prompt."
    )
    with pytest.raises(openai.NotFoundError, match=r"The model `gpt-x` does not exist\."):
        await oai(client).completions.create(model="gpt-x", prompt="x")
    bad = await client.post(
        "/v1/chat/completions", data=b"{not json", headers={"Content-Type": "application/json"}
    )
    assert bad.status == 400
    nomsg = await client.post("/v1/chat/completions", json={"messages": []})
    assert nomsg.status == 400


async def test_max_tokens_is_clamped_to_the_context(start_server: StartServer) -> None:
    client = await start_server(max_model_len=256)
    res = await (
        await client.post("/v1/completions", json={"prompt": [1] * 250, "max_tokens": 100})
    ).json()
    assert res["usage"]["completion_tokens"] == 6


async def test_models_version_load(start_server: StartServer) -> None:
    client = await start_server()
    models = await oai(client).models.list()
    assert [m.id for m in models.data] == [MODEL_NAME]
    raw = await (await client.get("/v1/models")).json()
    assert raw["object"] == "list" and raw["data"][0]["owned_by"] == "vllm"
    assert raw["data"][0]["max_model_len"] == 4096
    assert (await (await client.get("/version")).json())["version"] == "0.34.0"
    assert (await (await client.get("/load")).json()) == {"server_load": 0}


async def test_health_is_503_until_startup_delay(start_server: StartServer) -> None:
    # long enough that a loaded machine still asks before the engine is up
    client = await start_server(startup_delay_s=3.0)
    assert (await client.get("/health")).status == 503
    early = await client.post("/v1/completions", json={"prompt": "x"})
    assert (
        early.status == 503 and (await early.json())["error"]["type"] == "ServiceUnavailableError"
    )
    for _ in range(300):  # bounded: 30 s
        if (await client.get("/health")).status == 200:
            break
        await asyncio.sleep(0.1)
    assert (await client.get("/health")).status == 200
    assert (await client.post("/v1/completions", json={"prompt": "x"})).status == 200


async def _wait_for(cond: Any, timeout_s: float = 3.0) -> None:
    for _ in range(int(timeout_s / 0.01)):
        if cond():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached")


async def test_client_disconnect_aborts_and_frees_kv(start_server: StartServer) -> None:
    client = await start_server(speedup=1.0)
    state = state_of(client)
    body = {"prompt": "x" * 400, "max_tokens": 2000, "stream": True}
    resp = await client.post("/v1/completions", json=body)
    await resp.content.readline()  # the first token arrived
    assert state.engine.num_running == 1 and state.engine.kv_usage > 0
    resp.close()
    await _wait_for(lambda: state.engine.num_running == 0)
    assert state.engine.kv_usage == 0.0
    assert state.engine.stats().finished_by_reason == {"abort": 1}
    # a non-streaming request cut off by a client timeout is aborted too
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(client.post("/v1/completions", json={**body, "stream": False}), 0.2)
    await _wait_for(lambda: state.engine.stats().finished_by_reason.get("abort") == 2)
    assert state.engine.kv_usage == 0.0


async def test_priority_is_honoured(start_server: StartServer) -> None:
    client = await start_server(max_num_seqs=1, scheduling_policy="priority", speedup=5.0)
    state = state_of(client)
    first = asyncio.ensure_future(
        client.post("/v1/completions", json={"prompt": "x", "max_tokens": 40})
    )
    await _wait_for(lambda: state.engine.num_running == 1)
    done: list[str] = []

    async def send(name: str, priority: int) -> None:
        resp = await client.post(
            "/v1/completions", json={"prompt": name, "max_tokens": 3, "priority": priority}
        )
        assert resp.status == 200
        done.append(name)

    low = asyncio.ensure_future(send("low", 5))
    await _wait_for(lambda: state.engine.num_waiting == 1)
    high = asyncio.ensure_future(send("high", 0))
    await asyncio.gather(first, low, high)
    assert done == ["high", "low"]


async def test_queue_limit_answers_503(start_server: StartServer) -> None:
    client = await start_server(max_num_seqs=1, speedup=1.0, max_num_queued_reqs=1)
    state = state_of(client)
    body = {"prompt": "x", "max_tokens": 2000, "stream": True}
    running = await client.post("/v1/completions", json=body)
    await running.content.readline()
    queued = asyncio.ensure_future(client.post("/v1/completions", json=body))
    await _wait_for(lambda: state.engine.num_waiting == 1)
    rejected = await client.post("/v1/completions", json=body)
    assert rejected.status == 503
    assert (await rejected.json())["error"]["type"] == "ServiceUnavailableError"
    running.close()
    (await queued).close()
    text = await (await client.get("/metrics")).text()
    assert (
        'vllm:admission_rejections_total{model_name="sim-model",reason="max_num_queued_reqs"} 1.0'
        in text
    )


async def test_a_measured_front_end_delays_the_first_token_not_the_engine(
    start_server: StartServer,
) -> None:
    """A preset's front end (``frontend_latency_s``, simulated seconds) holds each request
    before the engine sees it: the client's first token comes that much later, the
    engine's own TTFT (``vllm:time_to_first_token_seconds``) does not grow."""
    body = {"prompt": "hello there", "max_tokens": 2, "stream": True}
    timings = {}
    for frontend_s in (0.0, 10.0):  # 10 simulated seconds: 0.2 s of wall time at 50x
        client = await start_server(frontend_latency_s=frontend_s)
        loop = asyncio.get_running_loop()
        sent = loop.time()
        resp = await client.post("/v1/completions", json=body)
        assert resp.status == 200
        await resp.content.readline()  # the first token's event
        timings[frontend_s] = loop.time() - sent
        await resp.read()
        text = await (await client.get("/metrics")).text()
        (line,) = [
            x for x in text.splitlines() if x.startswith("vllm:time_to_first_token_seconds_sum")
        ]
        assert float(line.rsplit(" ", 1)[1]) < 1.0, "the engine's own TTFT leaves it out"
    assert timings[10.0] >= 0.2 > timings[0.0], timings
