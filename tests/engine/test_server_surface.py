"""The simulated engine's Responses API, ``/tokenize`` and ``/detokenize``, and its answers
for what it does not serve, in vLLM's shapes (what real vLLM 0.32 CPU answered, recorded
in docs/vllm-differences.md; the contract suite holds both engines to it)."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from aiohttp.test_utils import TestClient
from hypothesis import given, settings
from hypothesis import strategies as st

from tandem.engine.server.responses_protocol import parse_responses
from tandem.engine.server.text import (
    count_text_tokens,
    decode_tokens,
    encode_chat,
    encode_text,
    render_chat,
)

from .conftest import MODEL_NAME, StartServer

PROMPT = "The quick brown fox jumps over the lazy dog. " * 20
PREFILL_FIELDS = {"do_remote_decode": True, "do_remote_prefill": False,
                  "remote_engine_id": None, "remote_block_ids": None, "remote_host": None,
                  "remote_port": None}  # fmt: skip


def oai(client: TestClient[Any, Any]) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=str(client.make_url("/v1")), api_key="sim", max_retries=0)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60))
def test_detokenize_gives_back_what_tokenize_read(text: str) -> None:
    ids = encode_text(text)
    assert decode_tokens(ids) == text
    assert len(ids) == (count_text_tokens(text) if text else 0)
    assert all(t >= 256 for t in ids)  # never a special token's id


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["system", "user", "assistant", "x"]),
                          st.text(max_size=30)), max_size=5))  # fmt: skip
def test_a_conversation_has_as_many_tokens_as_usage_counts(turns: list[tuple[str, str]]) -> None:
    messages = [{"role": role, "content": text} for role, text in turns]
    assert len(encode_chat(messages)) == render_chat(messages)[1]
    assert len(encode_chat(messages, add_generation_prompt=False)) == render_chat(messages)[1] - 4


async def test_tokenize_and_detokenize(start_server: StartServer) -> None:
    client = await start_server()
    resp = await client.post("/tokenize", json={"prompt": "Hello there", "return_token_strs": True})
    answer = await resp.json()
    assert answer["count"] == 3 == len(answer["tokens"]) and answer["max_model_len"] == 4096
    assert "".join(answer["token_strs"]) == "Hello there"
    back = await client.post("/detokenize", json={"tokens": answer["tokens"]})
    assert await back.json() == {"prompt": "Hello there"}
    usage = await oai(client).chat.completions.create(
        model=MODEL_NAME, messages=[{"role": "user", "content": "Hello there"}], max_tokens=1
    )
    messages = [{"role": "user", "content": "Hello there"}]
    chat = await client.post("/tokenize", json={"messages": messages})
    assert usage.usage is not None and (await chat.json())["count"] == usage.usage.prompt_tokens


@pytest.mark.parametrize(
    ("path", "body", "status", "err_type", "param"),
    [
        ("/tokenize", {}, 400, "Bad Request", "body.prompt"),
        ("/tokenize", {"prompt": 5}, 400, "Bad Request", "body.prompt"),
        ("/tokenize", {"model": "nope", "prompt": "x"}, 404, "NotFoundError", "model"),
        ("/tokenize", {"messages": [{"role": "user", "content": "x"}],
                       "continue_final_message": True}, 400, "BadRequestError", None),
        ("/detokenize", {"tokens": [-1]}, 400, "Bad Request", "body.tokens.0"),
        ("/detokenize", {"tokens": "x"}, 400, "Bad Request", "body.tokens"),
        ("/detokenize", {}, 400, "Bad Request", "body.tokens"),
    ],
)  # fmt: skip
async def test_tokenize_errors(
    start_server: StartServer,
    path: str,
    body: dict[str, Any],
    status: int,
    err_type: str,
    param: str | None,
) -> None:
    client = await start_server()
    resp = await client.post(path, json=body)
    error = (await resp.json())["error"]
    assert (resp.status, error["type"], error["param"]) == (status, err_type, param)


async def test_responses_non_streaming(start_server: StartServer) -> None:
    client = await start_server()
    res = await oai(client).responses.create(
        model=MODEL_NAME, instructions="Be brief.", input="Hello there", max_output_tokens=5,
        temperature=0.5, metadata={"k": "v"},
    )  # fmt: skip
    assert res.id.startswith("resp_") and res.object == "response"
    assert res.status == "incomplete" and res.incomplete_details is not None
    assert res.incomplete_details.reason == "max_output_tokens"
    assert len(res.output_text) == 5 * 4 and res.temperature == 0.5
    assert res.instructions == "Be brief." and res.metadata == {"k": "v"}
    assert res.usage is not None and res.usage.output_tokens == 5
    system_and_user = render_chat([{"role": "system", "content": "Be brief."},
                                   {"role": "user", "content": "Hello there"}])[1]  # fmt: skip
    assert res.usage.input_tokens == system_and_user
    raw = await client.post("/v1/responses", json={"input": "Hi", "max_output_tokens": 2,
                                                   "request_id": "mine"})  # fmt: skip
    body = await raw.json()
    assert body["id"] == "mine" and body["kv_transfer_params"] is None
    assert list(body) == [
        "id", "created_at", "incomplete_details", "instructions", "metadata", "model",
        "object", "output", "parallel_tool_calls", "temperature", "tool_choice", "tools",
        "top_p", "background", "max_output_tokens", "max_tool_calls", "previous_response_id",
        "prompt", "reasoning", "service_tier", "status", "text", "top_logprobs", "truncation",
        "usage", "user", "presence_penalty", "frequency_penalty", "kv_transfer_params",
        "ec_transfer_params", "input_messages", "output_messages",
    ]  # fmt: skip


async def test_responses_stop_string_completes(start_server: StartServer) -> None:
    client = await start_server()
    first = await oai(client).responses.create(
        model=MODEL_NAME, input="Hello", max_output_tokens=6, temperature=0
    )
    word = first.output_text[4:8]  # the second token's text
    body = {"input": "Hello", "max_output_tokens": 6, "temperature": 0, "stop": [word]}
    stopped = await client.post("/v1/responses", json=body)
    body = await stopped.json()
    assert body["status"] == "completed" and body["incomplete_details"] is None
    assert body["output"][0]["content"][0]["text"] == first.output_text[:4]


async def test_responses_streaming_events(start_server: StartServer) -> None:
    client = await start_server()
    stream = await oai(client).responses.create(
        model=MODEL_NAME,
        input="Hello there",
        max_output_tokens=4,
        stream=True,
        extra_body={"seed": 1},
    )
    events = [e async for e in stream]
    kinds = [e.type for e in events]
    assert kinds == ["response.created", "response.in_progress", "response.output_item.added",
                     "response.content_part.added", *["response.output_text.delta"] * 4,
                     "response.output_text.done", "response.content_part.done",
                     "response.output_item.done", "response.completed"]  # fmt: skip
    assert [e.sequence_number for e in events] == list(range(len(events)))
    final = events[-1].response  # type: ignore[union-attr]
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert final.output_text == deltas and final.status == "incomplete"
    same = await oai(client).responses.create(
        model=MODEL_NAME, input="Hello there", max_output_tokens=4, extra_body={"seed": 1}
    )
    assert same.output_text == deltas  # the same seed, the same text, streamed or not
    raw = await client.post("/v1/responses", json={"input": "x", "max_output_tokens": 2,
                                                   "stream": True})  # fmt: skip
    text = (await raw.read()).decode()
    assert raw.headers["Content-Type"].startswith("text/event-stream")
    assert "[DONE]" not in text and text.endswith("\n\n")


@pytest.mark.parametrize(
    ("body", "status", "err_type", "param", "message"),
    [
        ({"max_output_tokens": 2}, 400, "Bad Request", "body.input", None),
        ({"input": "x", "max_output_tokens": 0}, 400, "BadRequestError", "max_tokens",
         "max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)"),
        ({"input": "x", "max_output_tokens": 5000}, 400, "BadRequestError", "max_output_tokens",
         "max_output_tokens=5000 cannot be greater than max_model_len=4096. Please request "
         "fewer output tokens. (parameter=max_output_tokens, value=5000)"),
        ({"input": "x", "max_output_tokens": "x"}, 400, "Bad Request", "body.max_output_tokens",
         None),
        ({"input": "x", "background": True, "store": False}, 400, "BadRequestError",
         "background", "background can only be used when `store` is true (parameter=background)"),
        ({"input": "x", "model": "nope"}, 404, "NotFoundError", "model", None),
        ({"input": "x", "background": True}, 400, "invalid_request_error", "background",
         "This vLLM engine does not support `store=True` and therefore does not support the "
         "background mode. To enable these features, set the environment variable "
         "`VLLM_ENABLE_RESPONSES_API_STORE=1` when launching the vLLM server."),
        ({"input": "x", "previous_response_id": "resp_gone"}, 404, "invalid_request_error",
         "response_id", "Response with id 'resp_gone' not found."),
    ],
)  # fmt: skip
async def test_responses_errors(
    start_server: StartServer,
    body: dict[str, Any],
    status: int,
    err_type: str,
    param: str,
    message: str | None,
) -> None:
    client = await start_server()
    resp = await client.post("/v1/responses", json=body)
    error = (await resp.json())["error"]
    assert (resp.status, error["type"], error["param"]) == (status, err_type, param)
    if message is not None:
        assert error["message"] == message


async def test_responses_hand_off_kv_from_prefill_to_decode(start_server: StartServer) -> None:
    p = await start_server("prefill", engine_id="engine-p")
    d = await start_server("decode")
    leg = {"input": PROMPT, "max_output_tokens": 1, "stream": False, "store": False,
           "kv_transfer_params": PREFILL_FIELDS}  # fmt: skip
    first = await (await p.post("/v1/responses", json=leg)).json()
    params = first["kv_transfer_params"]
    assert params["do_remote_prefill"] is True and params["remote_engine_id"] == "engine-p"
    # the decode engine reaches the prefill engine at the host and port it advertises
    params["remote_host"], params["remote_port"] = p.host, p.port
    second = await d.post("/v1/responses", json={"input": PROMPT, "max_output_tokens": 3,
                                                 "kv_transfer_params": params})  # fmt: skip
    answer = await second.json()
    assert answer["usage"]["output_tokens"] == 3
    stats = await (await d.get("/tandem/stats")).json()
    assert stats["engine"]["prompt_tokens_external_total"] == answer["usage"]["input_tokens"] - 1


async def test_stored_responses_are_not_found(start_server: StartServer) -> None:
    client = await start_server()
    for method, path in (("GET", "/v1/responses/resp_1"), ("POST", "/v1/responses/resp_1/cancel")):
        resp = await client.request(method, path)
        assert resp.status == 404
        assert (await resp.json())["error"] == {
            "message": "Response with id 'resp_1' not found.", "type": "invalid_request_error",
            "param": "response_id", "code": 404,
        }  # fmt: skip


async def test_unknown_paths_and_methods_are_json_as_vllms(start_server: StartServer) -> None:
    client = await start_server()
    resp = await client.get("/nope")
    assert (resp.status, await resp.json()) == (404, {"detail": "Not Found"})
    resp = await client.get("/v1/completions")
    assert (resp.status, await resp.json()) == (405, {"detail": "Method Not Allowed"})
    assert resp.headers["Allow"] == "POST"


def test_responses_parse_reads_lax_values_and_items() -> None:
    items = [{"type": "message", "role": "user", "content": [{"type": "input_text",
                                                              "text": "abcd"}]},
             {"type": "function_call_output", "call_id": "c", "output": "ignored"}]  # fmt: skip
    tools = [{"type": "function", "name": "f"}]
    body = {"input": items, "max_output_tokens": "4", "stream": "true", "tools": tools}
    parsed, echo = parse_responses(body, 16, "r")
    assert parsed.stream and parsed.max_tokens == 4 and parsed.n == 1
    assert parsed.prompt_tokens == render_chat([{"role": "user", "content": "abcd"}])[1]
    assert echo.tool_choice == "auto" and echo.response_id == "r"
    assert json.dumps(echo.tools)
