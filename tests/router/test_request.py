"""Reading request bodies as vLLM's request models read them (pydantic's lax mode), and the
bodies the router leaves to the decode engine to judge."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tandem.engine.server.errors import ApiError
from tandem.router.request import Kind, ParsedRequest, parse_request


def parse(body: object, kind: Kind = "chat") -> ParsedRequest:
    return parse_request(json.dumps(body).encode(), kind, prefix_chars=256)


CHAT_MESSAGES = [{"role": "user", "content": "hello"}]


@pytest.mark.parametrize(
    ("body", "kind", "stream"),
    [
        ({"prompt": "x", "max_tokens": "5", "stream": "true"}, "completions", True),
        ({"prompt": "x", "stream": "off"}, "completions", False),
        ({"prompt": "x", "stream": 1}, "completions", True),
        ({"messages": CHAT_MESSAGES, "max_completion_tokens": 3.0}, "chat", False),
        ({"input": "hi", "max_output_tokens": "7", "stream": "yes"}, "responses", True),
        # vLLM's stream_options check reads the raw values: an empty object passes, and so
        # does any non-empty string for stream
        ({"prompt": "x", "stream_options": {}}, "completions", False),
        ({"prompt": "x", "stream": "false", "stream_options": {"a": 1}}, "completions", False),
    ],
)
def test_lax_values_vllm_accepts_go_through_both_legs(
    body: dict[str, Any], kind: Kind, stream: bool
) -> None:
    parsed = parse(body, kind)
    assert parsed.stream is stream
    assert not parsed.skip_prefill


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        # values the prefill rewrite would hide from the prefill engine: the decode engine
        # judges them at once, with vLLM's own answer
        ({"prompt": "x", "max_tokens": 0}, "completions"),
        ({"prompt": "x", "max_tokens": "ten"}, "completions"),
        ({"prompt": "x", "max_tokens": 1.5}, "completions"),
        ({"messages": CHAT_MESSAGES, "max_completion_tokens": -1}, "chat"),
        ({"messages": CHAT_MESSAGES, "max_tokens": 3, "min_tokens": 5}, "chat"),
        ({"messages": CHAT_MESSAGES, "min_tokens": -1}, "chat"),
        ({"messages": CHAT_MESSAGES, "stream": "maybe"}, "chat"),
        ({"messages": CHAT_MESSAGES, "stream_options": {"include_usage": True}}, "chat"),
        ({"input": "hi", "max_output_tokens": 0}, "responses"),
        ({"input": "hi", "background": True}, "responses"),
        # no prompt: the engine's refusal names the body's size, which must be the client's
        ({}, "responses"),
        ({"model": "m"}, "chat"),
        ({"max_tokens": 3}, "completions"),
    ],
)
def test_bodies_the_prefill_rewrite_would_hide_skip_prefill(
    body: dict[str, Any], kind: Kind
) -> None:
    assert parse(body, kind).skip_prefill


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        ({"messages": []}, "chat"),
        ({"messages": [{"content": "x"}]}, "chat"),
        ({"messages": "hi"}, "chat"),
        ({"prompt": 3}, "completions"),
        ({"prompt": [True]}, "completions"),
        ({"model": 5, "prompt": "x"}, "completions"),
        ({"input": 7}, "responses"),
    ],
)
def test_fields_the_router_does_not_need_are_the_engines_to_judge(
    body: dict[str, Any], kind: Kind
) -> None:
    parsed = parse(body, kind)
    assert not parsed.skip_prefill  # the prefill engine refuses them as vLLM does
    assert parsed.prompt_tokens >= 1


def test_a_body_that_is_not_an_object_is_vllms_400() -> None:
    with pytest.raises(ApiError) as err:
        parse([1, 2])
    assert err.value.status == 400 and err.value.err_type == "Bad Request"
    assert err.value.param == "body"
    assert "'type': 'model_attributes_type'" in err.value.message
    assert "'input': '<list of 2 items>'" in err.value.message


def test_malformed_json_is_vllms_json_invalid_at_the_offset() -> None:
    raw = b'{"model": "m", "prompt": "x", "max_tokens": }'
    with pytest.raises(ApiError) as err:
        parse_request(raw, "completions", prefix_chars=0)
    assert err.value.param == f"body.{raw.index(b'}')}"
    assert "'type': 'json_invalid'" in err.value.message
    assert "'ctx': {'error': 'Expecting value'}" in err.value.message


def test_not_utf8_and_deep_nesting_are_400() -> None:
    for raw in (b"\xff\xfe", b"{", b"[" * 100_000 + b"]" * 100_000):
        with pytest.raises(ApiError) as err:
            parse_request(raw, "chat", prefix_chars=0)
        assert err.value.status == 400 and err.value.err_type == "Bad Request"


def test_prompt_token_estimates() -> None:
    assert parse({"prompt": [1, 2, 3]}, "completions").prompt_tokens == 3
    assert parse({"prompt": [[1, 2], [3]]}, "completions").prompt_tokens == 3
    assert parse({"prompt": "x" * 4000}, "completions").prompt_tokens == 1001
    chat = parse({"messages": [{"role": "user", "content": "y" * 400}]})
    assert chat.prompt_tokens == 100 + 4 + 1
    responses = parse({"instructions": "z" * 40, "input": "y" * 359}, "responses")
    assert responses.prompt_tokens == 100 + 1
    items = [{"role": "user", "content": [{"type": "input_text", "text": "y" * 400}]}]
    assert parse({"input": items}, "responses").prompt_tokens == 100 + 4 + 1


def test_prefix_is_the_leading_prompt_text() -> None:
    parsed = parse_request(
        json.dumps({"prompt": "abc" * 200}).encode(), "completions", prefix_chars=10
    )
    assert parsed.prefix == b"abcabcabca"
    responses = parse_request(
        json.dumps({"instructions": "sys", "input": "question"}).encode(),
        "responses",
        prefix_chars=6,
    )
    assert responses.prefix == b"sys\nqu"
