"""The OpenAI surface the router and users rely on, held against both engines.

Assertions are on shapes and semantics, never on the generated text: the tiny model
writes random printable text, the simulated engine its own words. Where the two vLLM
versions differ the expectation is taken from :mod:`tests.contract.versions` by the
engine's version (real: 0.32.0 CPU; simulated: 0.34.0, what Tandem pins).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.contract.fleet import MAX_MODEL_LEN, Engine
from tests.contract.http import call, chat_body, completion_body
from tests.vllm.engines import SERVED_NAME

pytestmark = pytest.mark.timeout(600)
STREAM = {"stream": True, "stream_options": {"include_usage": True}}


def usage_ok(usage: dict[str, Any], completion_tokens: int) -> None:
    assert usage["completion_tokens"] == completion_tokens
    assert usage["prompt_tokens"] > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + completion_tokens


async def test_completion(aggregated: Engine) -> None:
    answer = await call(aggregated, "/v1/completions", completion_body(max_tokens=5))
    assert answer.status == 200, answer.body
    body = answer.body
    assert body["object"] == "text_completion" and body["id"].startswith("cmpl-")
    assert body["model"] == SERVED_NAME
    [choice] = body["choices"]
    assert choice["index"] == 0 and isinstance(choice["text"], str) and choice["text"]
    assert choice["finish_reason"] == "length" and choice["stop_reason"] is None
    usage_ok(body["usage"], 5)
    default = await call(aggregated, "/v1/completions", completion_body())
    assert default.body["usage"]["completion_tokens"] == 16, "vLLM's default max_tokens"


async def test_chat(aggregated: Engine) -> None:
    answer = await call(aggregated, "/v1/chat/completions", chat_body(max_completion_tokens=4))
    assert answer.status == 200, answer.body
    body = answer.body
    assert body["object"] == "chat.completion" and body["id"].startswith("chatcmpl-")
    [choice] = body["choices"]
    message = choice["message"]
    assert message["role"] == "assistant" and isinstance(message["content"], str)
    assert choice["finish_reason"] == "length"
    usage_ok(body["usage"], 4)
    with_max_tokens = await call(aggregated, "/v1/chat/completions", chat_body(max_tokens=3))
    usage_ok(with_max_tokens.body["usage"], 3)
    both = chat_body(max_tokens=6, max_completion_tokens=2)
    assert (await call(aggregated, "/v1/chat/completions", both)).body["usage"][
        "completion_tokens"
    ] == 2, "max_completion_tokens wins over max_tokens"


async def test_chat_stream_with_usage(aggregated: Engine) -> None:
    answer = await call(aggregated, "/v1/chat/completions", chat_body(max_tokens=5, **STREAM))
    assert answer.status == 200
    assert answer.events[-1] == "[DONE]"
    chunks = answer.chunks
    assert {c["id"] for c in chunks} == {chunks[0]["id"]}
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    finals = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert [c["choices"][0]["finish_reason"] for c in finals] == ["length"]
    usage = chunks[-1]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 5
    content = [c for c in chunks[1:-1] if c["choices"][0]["delta"].get("content")]
    # one chunk per token, unless the server merged tokens for a client that read late
    assert 1 <= len(content) <= 5


async def test_completion_stream_with_and_without_usage(aggregated: Engine) -> None:
    answer = await call(aggregated, "/v1/completions", completion_body(max_tokens=4, **STREAM))
    assert answer.events[-1] == "[DONE]"
    chunks = answer.chunks
    assert all(c["object"] == "text_completion" for c in chunks)
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "length"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 4
    plain = await call(aggregated, "/v1/completions", completion_body(max_tokens=3, stream=True))
    assert all("usage" not in c or c["usage"] is None for c in plain.chunks)
    assert plain.chunks[-1]["choices"][0]["finish_reason"] == "length"


async def test_n_choices(aggregated: Engine) -> None:
    answer = await call(aggregated, "/v1/completions", completion_body(max_tokens=3, n=2))
    assert answer.status == 200, answer.body
    assert [c["index"] for c in answer.body["choices"]] == [0, 1]
    usage_ok(answer.body["usage"], 6)
    stream = await call(aggregated, "/v1/chat/completions", chat_body(max_tokens=2, n=2, **STREAM))
    chunks = stream.chunks
    roles = [c["choices"][0]["index"] for c in chunks if c["choices"]
             and c["choices"][0]["delta"].get("role")]  # fmt: skip
    assert sorted(roles) == [0, 1], "each choice opens with its role"
    finished = [c["choices"][0]["index"] for c in chunks if c["choices"]
                and c["choices"][0]["finish_reason"]]  # fmt: skip
    assert sorted(finished) == [0, 1]
    assert chunks[-1]["usage"]["completion_tokens"] == 4


async def test_a_list_of_prompts(aggregated: Engine) -> None:
    single = [
        (await call(aggregated, "/v1/completions", completion_body(p, max_tokens=1))).body
        for p in ("Hi", "Hello there")
    ]
    answer = await call(aggregated, "/v1/completions",
                        completion_body(["Hi", "Hello there"], max_tokens=2))  # fmt: skip
    assert answer.status == 200, answer.body
    assert [c["index"] for c in answer.body["choices"]] == [0, 1]
    prompt_tokens = sum(s["usage"]["prompt_tokens"] for s in single)
    assert answer.body["usage"]["prompt_tokens"] == prompt_tokens
    assert answer.body["usage"]["completion_tokens"] == 4
    tokens = await call(aggregated, "/v1/completions",
                        completion_body([[1, 2, 3], [4, 5]], max_tokens=2))  # fmt: skip
    assert tokens.body["usage"]["prompt_tokens"] == 5
    stream = await call(aggregated, "/v1/completions",
                        completion_body(["Hi", "Hello there"], max_tokens=2, **STREAM))  # fmt: skip
    finished = sorted(c["choices"][0]["index"] for c in stream.chunks
                      if c["choices"] and c["choices"][0]["finish_reason"])  # fmt: skip
    assert finished == [0, 1] and stream.chunks[-1]["usage"]["completion_tokens"] == 4


async def test_stop_strings_end_the_output(aggregated: Engine) -> None:
    greedy = completion_body("Tell me", max_tokens=12, temperature=0)
    free = (await call(aggregated, "/v1/completions", greedy)).body["choices"][0]["text"]
    assert len(free) >= 6, free
    stop = free[3:5]
    cut = free[: free.index(stop)]
    answer = await call(aggregated, "/v1/completions", {**greedy, "stop": [stop]})
    [choice] = answer.body["choices"]
    assert (choice["finish_reason"], choice["stop_reason"]) == ("stop", stop)
    assert choice["text"] == cut, "the text ends before the stop string"
    assert answer.body["usage"]["completion_tokens"] < 12
    streamed = await call(aggregated, "/v1/completions", {**greedy, "stop": stop, "stream": True})
    assert "".join(c["choices"][0]["text"] for c in streamed.chunks) == cut
    assert streamed.chunks[-1]["choices"][0]["finish_reason"] == "stop"


async def test_completion_logprobs(aggregated: Engine) -> None:
    answer = await call(aggregated, "/v1/completions", completion_body(max_tokens=3, logprobs=2))
    [choice] = answer.body["choices"]
    lp = choice["logprobs"]
    assert set(lp) == {"text_offset", "token_logprobs", "tokens", "top_logprobs"}
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == 3
    assert "".join(lp["tokens"]) == choice["text"]
    assert lp["text_offset"][0] == 0 and lp["text_offset"] == sorted(lp["text_offset"])
    for token, value, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"],
                                 strict=True):  # fmt: skip
        assert value <= 0 and top[token] == value, "the sampled token is listed first"
        assert len(top) in (2, 3), "the 2 most likely, and the sampled one if not among them"
        assert next(iter(top)) == token
    stream = await call(aggregated, "/v1/completions",
                        completion_body(max_tokens=2, logprobs=1, stream=True))  # fmt: skip
    for chunk in stream.chunks:
        [c] = chunk["choices"]
        assert "".join(c["logprobs"]["tokens"]) == c["text"]


async def test_chat_logprobs(aggregated: Engine) -> None:
    body = chat_body(max_tokens=3, logprobs=True, top_logprobs=2)
    [choice] = (await call(aggregated, "/v1/chat/completions", body)).body["choices"]
    content = choice["logprobs"]["content"]
    assert len(content) == 3
    assert "".join(e["token"] for e in content) == choice["message"]["content"]
    for entry in content:
        assert entry["bytes"] == list(entry["token"].encode())
        assert entry["logprob"] <= 0
        assert len(entry["top_logprobs"]) == 2
        assert entry["top_logprobs"][0]["token"] == entry["token"], "the sampled token first"
    only = chat_body(max_tokens=2, logprobs=True)
    [plain] = (await call(aggregated, "/v1/chat/completions", only)).body["choices"]
    assert [e["top_logprobs"] for e in plain["logprobs"]["content"]] == [[], []]
    stream = await call(aggregated, "/v1/chat/completions", {**body, "stream": True})
    tokens = [e["token"] for c in stream.chunks if c["choices"] and c["choices"][0]["logprobs"]
              for e in c["choices"][0]["logprobs"]["content"]]  # fmt: skip
    assert len(tokens) == 3
    assert [c["choices"][0]["logprobs"] for c in stream.chunks[:1]] == [None], "role chunk"


async def test_seed_fixes_the_sample_and_none_draws_afresh(aggregated: Engine) -> None:
    async def text(**fields: Any) -> str:
        body = completion_body("Once", max_tokens=8, temperature=1.0, **fields)
        answer = await call(aggregated, "/v1/completions", body)
        out: str = answer.body["choices"][0]["text"]
        return out

    assert await text(seed=7) == await text(seed=7)
    assert await text(seed=7) != await text(seed=8)
    assert await text() != await text(), "unseeded sampling draws afresh each time"


async def test_echo(aggregated: Engine) -> None:
    answer = await call(aggregated, "/v1/completions", completion_body("Hi", max_tokens=2,
                                                                      echo=True))  # fmt: skip
    assert answer.body["choices"][0]["text"].startswith("Hi")
    usage = answer.body["usage"]
    logged = completion_body("Hi", max_tokens=2, echo=True, logprobs=1)
    [choice] = (await call(aggregated, "/v1/completions", logged)).body["choices"]
    lp = choice["logprobs"]
    assert len(lp["tokens"]) == usage["prompt_tokens"] + 2, "prompt tokens, then the output"
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    assert choice["text"].startswith("Hi")
    stream = await call(aggregated, "/v1/completions", {**logged, "stream": True,
                                                        "logprobs": None})  # fmt: skip
    assert stream.chunks[0]["choices"][0]["text"].startswith("Hi")


async def test_response_format_makes_json(aggregated: Engine) -> None:
    body = chat_body(max_tokens=60, response_format={"type": "json_object"})
    [choice] = (await call(aggregated, "/v1/chat/completions", body)).body["choices"]
    content = choice["message"]["content"]
    assert content.lstrip().startswith("{"), content
    # the grammar ends the object (finish "stop"), unless a random model's keys run long
    if choice["finish_reason"] == "stop":
        assert isinstance(json.loads(content), dict)
    else:
        assert choice["finish_reason"] == "length" and aggregated.kind == "vllm"
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    body = chat_body(max_tokens=60, response_format=fmt)
    [choice] = (await call(aggregated, "/v1/chat/completions", body)).body["choices"]
    assert isinstance(json.loads(choice["message"]["content"])["a"], int)
    assert choice["finish_reason"] == "stop"
    text = {"type": "text"}
    plain = await call(aggregated, "/v1/chat/completions", chat_body(response_format=text,
                                                                     max_tokens=2))  # fmt: skip
    assert plain.body["choices"][0]["finish_reason"] == "length"


async def test_tools_with_tool_choice_none_are_plain_chat(aggregated: Engine) -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    body = chat_body(max_tokens=2, tools=tools, tool_choice="none")
    answer = await call(aggregated, "/v1/chat/completions", body)
    assert answer.status == 200 and answer.body["choices"][0]["finish_reason"] == "length"


async def test_lax_types_are_accepted(aggregated: Engine) -> None:
    """vLLM's request models coerce as pydantic's lax mode does."""
    answer = await call(aggregated, "/v1/chat/completions", chat_body(max_tokens="3", n="1"))
    assert answer.status == 200 and answer.body["usage"]["completion_tokens"] == 3
    stream = await call(aggregated, "/v1/completions", completion_body(max_tokens=2,
                                                                      stream="true"))  # fmt: skip
    assert stream.events[-1] == "[DONE]"


async def test_request_id_header_names_the_response(aggregated: Engine) -> None:
    headers = {"X-Request-Id": "contract-req-1"}
    answer = await call(aggregated, "/v1/completions", completion_body(max_tokens=1),
                        headers=headers)  # fmt: skip
    assert answer.body["id"] == "cmpl-contract-req-1"
    chat = await call(aggregated, "/v1/chat/completions", chat_body(max_tokens=1),
                      headers={"X-Request-Id": "contract-req-2"})  # fmt: skip
    assert chat.body["id"] == "chatcmpl-contract-req-2"
    stream = await call(aggregated, "/v1/completions", completion_body(max_tokens=2, stream=True),
                        headers={"X-Request-Id": "contract-req-3"})  # fmt: skip
    assert {c["id"] for c in stream.chunks} == {"cmpl-contract-req-3"}


async def test_priority_field_is_accepted(aggregated: Engine) -> None:
    body = completion_body(max_tokens=2, priority=5)
    assert (await call(aggregated, "/v1/completions", body)).status == 200


async def test_prompt_and_max_tokens_over_the_context_is_clamped(aggregated: Engine) -> None:
    prompt_tokens = (await call(aggregated, "/v1/completions", completion_body(max_tokens=1))
                     ).body["usage"]["prompt_tokens"]  # fmt: skip
    body = completion_body(max_tokens=MAX_MODEL_LEN - 2, ignore_eos=True)
    answer = await call(aggregated, "/v1/completions", body)
    assert answer.status == 200
    assert answer.body["usage"]["completion_tokens"] == MAX_MODEL_LEN - prompt_tokens


async def test_models_health_version(aggregated: Engine) -> None:
    models = await call(aggregated, "/v1/models", method="GET")
    assert models.body["object"] == "list"
    [model] = models.body["data"]
    assert (model["id"], model["object"], model["owned_by"]) == (SERVED_NAME, "model", "vllm")
    assert model["max_model_len"] == MAX_MODEL_LEN and model["parent"] is None
    assert model["permission"][0]["object"] == "model_permission"
    health = await call(aggregated, "/health", method="GET")
    assert (health.status, health.body) == (200, "")
    for method in ("GET", "POST"):
        assert (await call(aggregated, "/ping", method=method)).status == 200
    version = await call(aggregated, "/version", method="GET")
    assert version.body == {"version": aggregated.version}
