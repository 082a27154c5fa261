"""The P/D rewrites, field by field (vLLM 0.34's NIXL handoff), and how streams end."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from tandem.engine.server.errors import ApiError
from tandem.router.protocol import (
    PREFILL_KV_PARAMS,
    StreamEnd,
    build_decode_body,
    build_prefill_body,
    build_sse_error,
    decide_kv_reusable,
    parse_prefill_answer,
)
from tandem.router.request import parse_request


def parse(body: object, kind: str = "chat") -> object:
    return parse_request(json.dumps(body).encode(), kind, prefix_chars=256)  # type: ignore[arg-type]


CHAT = {
    "model": "m",
    "messages": [{"role": "user", "content": "hello " * 100}],
    "stream": True,
    "stream_options": {"include_usage": True},
    "max_tokens": 64,
    "min_tokens": 4,
}


def test_prefill_body_is_one_token_non_streaming_with_remote_decode() -> None:
    parsed = parse_request(json.dumps(CHAT).encode(), "chat", prefix_chars=256)
    body = build_prefill_body(parsed.body, priority=None)
    assert body["stream"] is False
    assert body["max_tokens"] == 1
    assert "stream_options" not in body and "min_tokens" not in body
    assert body["kv_transfer_params"] == PREFILL_KV_PARAMS
    assert body["kv_transfer_params"]["do_remote_decode"] is True
    assert "priority" not in body
    assert body["messages"] == CHAT["messages"]


def test_prefill_caps_max_completion_tokens_only_when_present() -> None:
    parsed = parse_request(
        json.dumps({**CHAT, "max_completion_tokens": 99}).encode(), "chat", prefix_chars=0
    )
    assert build_prefill_body(parsed.body, None)["max_completion_tokens"] == 1
    plain = parse_request(json.dumps({"prompt": "x"}).encode(), "completions", prefix_chars=0)
    assert "max_completion_tokens" not in build_prefill_body(plain.body, None)


def test_decode_body_is_the_original_plus_returned_params_verbatim() -> None:
    parsed = parse_request(json.dumps(CHAT).encode(), "chat", prefix_chars=256)
    params = {"do_remote_prefill": True, "remote_block_ids": [[1, 2]], "remote_host": "10.0.0.1"}
    body = build_decode_body(parsed.body, params, priority=7)
    assert body["kv_transfer_params"] is params
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 64 and body["min_tokens"] == 4
    assert body["priority"] == 7


def test_client_kv_params_and_priority_are_dropped() -> None:
    evil = {**CHAT, "kv_transfer_params": {"remote_host": "169.254.169.254"}, "priority": -100}
    parsed = parse_request(json.dumps(evil).encode(), "chat", prefix_chars=0)
    assert "kv_transfer_params" not in parsed.body and "priority" not in parsed.body
    assert "kv_transfer_params" not in build_decode_body(parsed.body, None, None)


def test_kv_params_and_prompt_tokens_from_a_prefill_answer() -> None:
    answer = {"choices": [{"text": "x"}], "kv_transfer_params": {"remote_engine_id": "e"}}
    assert parse_prefill_answer(json.dumps(answer).encode())[0] == {"remote_engine_id": "e"}
    assert parse_prefill_answer(b'{"choices": []}') == (None, None)
    assert parse_prefill_answer(b"not json") == (None, None)
    assert parse_prefill_answer(b'{"kv_transfer_params": {}}') == (None, None)
    assert parse_prefill_answer(b'[{"usage": {"prompt_tokens": 3}}]') == (None, None)
    for usage, counted in (({"prompt_tokens": 3}, 3), ({"prompt_tokens": True}, None),
                           ({"prompt_tokens": 0}, None), ([], None)):  # fmt: skip
        assert parse_prefill_answer(json.dumps({"usage": usage}).encode()) == (None, counted)


def test_kv_reuse_only_when_undelivered_and_leased() -> None:
    params = {"remote_blocks_expiry_time": 1000.0}
    assert decide_kv_reusable(params, delivered=False, now_epoch_s=990.0)
    assert not decide_kv_reusable(params, delivered=True, now_epoch_s=990.0)
    assert not decide_kv_reusable(params, delivered=False, now_epoch_s=999.0)
    assert decide_kv_reusable({}, delivered=False, now_epoch_s=0.0)


def test_sse_error_terminates_a_partial_event_and_ends_with_done() -> None:
    raw = build_sse_error("engine gone", status=502, after_partial_event=True)
    assert raw.startswith(b"\n\ndata: {") and raw.endswith(b"data: [DONE]\n\n")
    event = json.loads(raw.split(b"data: ")[1])
    assert event["error"]["code"] == 502 and event["error"]["message"] == "engine gone"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=20,
)
known_keys = st.sampled_from(
    ["model", "prompt", "messages", "stream", "stream_options", "max_tokens",
     "max_completion_tokens", "min_tokens", "kv_transfer_params", "priority"]
)  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(
    st.dictionaries(known_keys, json_values, max_size=6), st.sampled_from(["chat", "completions"])
)
def test_any_body_parses_or_is_a_4xx(body: dict[str, object], kind: str) -> None:
    try:
        parsed = parse(body, kind)
    except ApiError as err:
        assert 400 <= err.status < 500
        return
    built = build_prefill_body(parsed.body, None)  # type: ignore[attr-defined]
    assert built["stream"] is False and built["max_tokens"] == 1
    json.dumps(build_decode_body(parsed.body, {"x": 1}, 0))  # type: ignore[attr-defined]


def test_responses_prefill_is_one_output_token_not_stored() -> None:
    body = {"input": "hi", "max_output_tokens": 50, "stream": True, "store": True}
    built = build_prefill_body(body, priority=3, kind="responses")
    assert built["max_output_tokens"] == 1 and built["store"] is False
    assert built["stream"] is False and "max_tokens" not in built
    assert built["kv_transfer_params"] == PREFILL_KV_PARAMS and built["priority"] == 3
    assert body["max_output_tokens"] == 50  # the client's body is left as it was


def test_responses_sse_error_is_an_error_event_without_done() -> None:
    raw = build_sse_error("engine gone", status=502, after_partial_event=False, kind="responses")
    assert raw.startswith(b"event: error\ndata: {") and b"[DONE]" not in raw
    event = json.loads(raw.split(b"data: ", 1)[1])
    assert event["type"] == "error" and event["error"]["code"] == 502


RESPONSES_STREAM = (
    b'event: response.created\ndata: {"type":"response.created"}\n\n'
    b"event: response.output_text.delta\n"
    b'data: {"delta":"see\\nevent: response.completed\\n","type":"delta"}\n\n'
    b'event: response.completed\ndata: {"response":{"output":'
    b'"event: response.output_text.delta\\n"},"type":"response.completed"}\n\n'
)
CHAT_STREAM = b'data: {"choices":[]}\n\ndata: {"choices":[]}\n\ndata: [DONE]\n\n'


def feed_in_pieces(kind: str, stream: bytes, cuts: list[int]) -> StreamEnd:
    end = StreamEnd(kind)  # type: ignore[arg-type]
    start = 0
    for cut in sorted(set(cuts)):
        end.feed(stream[start:cut])
        start = cut
    end.feed(stream[start:])
    return end


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_stream_end_does_not_depend_on_how_the_stream_was_cut(data: st.DataObject) -> None:
    kind, stream = data.draw(
        st.sampled_from([("responses", RESPONSES_STREAM), ("chat", CHAT_STREAM)])
    )
    cut_at = data.draw(st.integers(min_value=0, max_value=len(stream) - 1))
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=8))
    assert feed_in_pieces(kind, stream, cuts).complete
    # the same stream cut short anywhere is not whole
    assert not feed_in_pieces(kind, stream[:cut_at], cuts).complete


def test_event_text_inside_data_is_not_taken_for_an_event() -> None:
    # the last event's data mentions a delta event; the stream is still whole
    assert feed_in_pieces("responses", RESPONSES_STREAM, []).complete
    # a stream whose last event is a delta is not, even if its text names a final event
    unfinished = RESPONSES_STREAM.split(b"event: response.completed\ndata")[0]
    end = feed_in_pieces("responses", unfinished, [])
    assert not end.complete and not end.partial
