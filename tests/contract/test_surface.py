"""The surface beyond completions and chat, held against both engines: the Responses API
(its object, its event stream, its errors, its P/D handoff), ``/tokenize`` and
``/detokenize``, ``/version``, ``/ping``, what an unknown path answers, and details of
request validation a router relies on (``stream_options``, ``min_tokens``, a body that is
not an object). Then the router in front of each kind's prefill and decode engines: the
``openai`` client's ``responses.create`` streaming and not with the KV moved, the utility
calls relayed, refusals that are the engine's own, and one trace across the router and
both engines.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import openai
import pytest

from tandem.router.app import build_app, start_router
from tandem.router.config import RouterConfig, Timeouts
from tandem.router.discovery import StaticDiscovery
from tandem.router.tracing import Tracing, TracingSettings
from tests.contract.collector import Collector, Span
from tests.contract.fleet import Engine
from tests.contract.http import call, chat_body, completion_body, metric_sum, metrics_of
from tests.contract.versions import EXTERNAL_PROMPT_TOKENS
from tests.router.conftest import RouterHandle, start_static_router
from tests.vllm.engines import SERVED_NAME

pytestmark = pytest.mark.timeout(900)

RESPONSES = "/v1/responses"
BOUND_S = 120.0
#: the keys of a response object, in vLLM's order (both versions)
RESPONSE_KEYS = [
    "id", "created_at", "incomplete_details", "instructions", "metadata", "model", "object",
    "output", "parallel_tool_calls", "temperature", "tool_choice", "tools", "top_p",
    "background", "max_output_tokens", "max_tool_calls", "previous_response_id", "prompt",
    "reasoning", "service_tier", "status", "text", "top_logprobs", "truncation", "usage",
    "user", "presence_penalty", "frequency_penalty", "kv_transfer_params",
    "ec_transfer_params", "input_messages", "output_messages",
]  # fmt: skip
HANDOFF = {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
           "remote_block_ids": None, "remote_host": None, "remote_port": None}  # fmt: skip
SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")


def responses_body(text: str = "Hello there", **fields: Any) -> dict[str, Any]:
    return {"model": SERVED_NAME, "input": text, **fields}


def unique(text: str) -> str:
    """A prompt no engine has cached yet."""
    return f"{time.monotonic_ns()} {text}"


async def test_a_response_object(aggregated: Engine) -> None:
    body = responses_body(max_output_tokens=5, instructions="Be brief.")
    answer = await call(aggregated, RESPONSES, body)
    assert answer.status == 200, answer.body
    body = answer.body
    assert list(body) == RESPONSE_KEYS
    assert body["object"] == "response" and body["id"].startswith("resp_")
    assert (body["status"], body["incomplete_details"]) == (
        "incomplete", {"reason": "max_output_tokens"})  # fmt: skip
    assert body["instructions"] == "Be brief." and body["max_output_tokens"] == 5
    assert (body["tool_choice"], body["tools"], body["kv_transfer_params"]) == ("none", [], None)
    (item,) = body["output"]
    assert (item["type"], item["role"], item["status"]) == ("message", "assistant", "completed")
    (part,) = item["content"]
    assert part["type"] == "output_text" and part["text"] and part["annotations"] == []
    usage = body["usage"]
    assert usage["output_tokens"] == 5
    assert usage["total_tokens"] == usage["input_tokens"] + 5
    assert set(usage["input_tokens_details"]) >= {"cached_tokens"}
    named = await call(aggregated, RESPONSES, responses_body(max_output_tokens=1,
                                                             request_id="contract-r1"))  # fmt: skip
    assert named.body["id"] == "contract-r1"


async def test_a_response_stream(aggregated: Engine) -> None:
    answer = await call(aggregated, RESPONSES, responses_body(max_output_tokens=3, stream=True))
    assert answer.status == 200
    assert answer.headers["Content-Type"].startswith("text/event-stream")
    assert "[DONE]" not in answer.events
    names = answer.event_names
    assert names[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert names[-4:] == ["response.output_text.done", "response.content_part.done",
                          "response.output_item.done", "response.completed"]  # fmt: skip
    assert set(names[4:-4]) == {"response.output_text.delta"}
    assert [e["type"] for e in answer.events] == names
    assert [e["sequence_number"] for e in answer.events] == list(range(len(names)))
    final = answer.events[-1]["response"]
    deltas = "".join(e["delta"] for e in answer.events if e["type"].endswith(".delta"))
    assert final["output"][0]["content"][0]["text"] == deltas
    assert final["usage"]["output_tokens"] == 3 and final["status"] == "incomplete"


#: name -> (body, status, type, param, exact message or None)
RESPONSE_ERRORS: dict[str, tuple[dict[str, Any], int, str, str | None, str | None]] = {
    "no input": ({"model": SERVED_NAME, "max_output_tokens": 2}, 400, "Bad Request",
                 "body.input", None),
    "max_output_tokens 0": (responses_body(max_output_tokens=0), 400, "BadRequestError",
                            "max_tokens", "max_tokens must be at least 1, got 0. "
                            "(parameter=max_tokens, value=0)"),
    "max_output_tokens over the context": (
        responses_body(max_output_tokens=5000), 400, "BadRequestError", "max_output_tokens",
        "max_output_tokens=5000 cannot be greater than max_model_len=2048. Please request "
        "fewer output tokens. (parameter=max_output_tokens, value=5000)"),
    "max_output_tokens not a number": (responses_body(max_output_tokens="x"), 400,
                                       "Bad Request", "body.max_output_tokens", None),
    "background without store": (responses_body(background=True, store=False), 400,
                                 "BadRequestError", "background",
                                 "background can only be used when `store` is true "
                                 "(parameter=background)"),
    "background with the store off": (
        responses_body(background=True), 400, "invalid_request_error", "background",
        "This vLLM engine does not support `store=True` and therefore does not support the "
        "background mode. To enable these features, set the environment variable "
        "`VLLM_ENABLE_RESPONSES_API_STORE=1` when launching the vLLM server."),
    "previous_response_id with nothing stored": (
        responses_body(previous_response_id="resp_gone"), 404, "invalid_request_error",
        "response_id", "Response with id 'resp_gone' not found."),
}  # fmt: skip


@pytest.mark.parametrize("case", list(RESPONSE_ERRORS))
async def test_responses_errors(aggregated: Engine, case: str) -> None:
    body, status, err_type, param, message = RESPONSE_ERRORS[case]
    answer = await call(aggregated, RESPONSES, body)
    assert answer.status == status, answer.body
    assert (answer.error["type"], answer.error["param"]) == (err_type, param)
    if message is not None:
        assert answer.error["message"] == message


async def test_stored_responses_are_not_found(aggregated: Engine) -> None:
    for method, path in (("GET", "/v1/responses/resp_x"), ("POST", "/v1/responses/resp_x/cancel")):
        answer = await call(aggregated, path, method=method)
        assert answer.status == 404
        assert answer.error == {"message": "Response with id 'resp_x' not found.",
                                "type": "invalid_request_error", "param": "response_id",
                                "code": 404}  # fmt: skip


async def test_tokenize_and_detokenize(aggregated: Engine) -> None:
    text = "Tokens, please: 42 of them?"
    answer = await call(aggregated, "/tokenize", {"model": SERVED_NAME, "prompt": text,
                                                  "add_special_tokens": False,
                                                  "return_token_strs": True})  # fmt: skip
    assert answer.status == 200
    body = answer.body
    assert list(body) == ["count", "max_model_len", "tokens", "token_strs"]
    assert body["count"] == len(body["tokens"]) == len(body["token_strs"])
    assert body["max_model_len"] == 2048
    back = await call(aggregated, "/detokenize", {"tokens": body["tokens"]})
    assert back.status == 200 and back.body == {"prompt": text}
    chat = await call(aggregated, "/tokenize", {"messages": [{"role": "user", "content": text}]})
    usage = await call(aggregated, "/v1/chat/completions", chat_body(text, max_tokens=1))
    assert chat.body["count"] == usage.body["usage"]["prompt_tokens"]
    assert chat.body["token_strs"] is None


@pytest.mark.parametrize(
    ("path", "body", "status", "err_type", "param"),
    [
        ("/tokenize", {}, 400, "Bad Request", "body.prompt"),
        ("/tokenize", {"model": "nope", "prompt": "x"}, 404, "NotFoundError", "model"),
        ("/detokenize", {"tokens": [-1]}, 400, "Bad Request", "body.tokens.0"),
        ("/detokenize", {"model": "nope", "tokens": [3]}, 404, "NotFoundError", "model"),
    ],
)
async def test_tokenize_errors(
    aggregated: Engine, path: str, body: dict[str, Any], status: int, err_type: str,
    param: str | None,
) -> None:  # fmt: skip
    answer = await call(aggregated, path, body)
    assert answer.status == status, answer.body
    assert (answer.error["type"], answer.error["param"]) == (err_type, param)
    if path == "/tokenize" and not body:
        assert answer.error["message"].startswith("2 validation errors:\n")
        assert "'loc': 'body.messages'" in answer.error["message"]


async def test_version_ping_and_unknown_paths(aggregated: Engine) -> None:
    version = await call(aggregated, "/version", method="GET")
    assert version.status == 200 and version.body == {"version": aggregated.version}
    for method in ("GET", "POST"):
        assert (await call(aggregated, "/ping", method=method)).status == 200
    missing = await call(aggregated, "/nope", method="GET")
    assert (missing.status, missing.body) == (404, {"detail": "Not Found"})
    wrong = await call(aggregated, "/v1/completions", method="GET")
    assert (wrong.status, wrong.body) == (405, {"detail": "Method Not Allowed"})
    assert wrong.headers["Allow"] == "POST"


async def test_validation_details_a_router_relies_on(aggregated: Engine) -> None:
    # stream_options is refused only when non-empty and the raw stream is falsy
    for fields in (
        {"stream_options": {}},
        {"stream": "false", "stream_options": {"include_usage": True}},
    ):
        answer = await call(aggregated, "/v1/chat/completions", chat_body(max_tokens=2, **fields))
        assert answer.status == 200, (fields, answer.body)
    over = await call(aggregated, "/v1/chat/completions", chat_body(max_tokens=3, min_tokens=5))
    assert over.status == 400
    assert over.error == {
        "message": "min_tokens must be less than or equal to max_tokens=3, got 5.",
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    }
    not_object = await call(aggregated, "/v1/completions", b"[1, 2]")
    assert not_object.status == 400 and not_object.error["param"] == "body"
    assert "'type': 'model_attributes_type'" in not_object.error["message"]
    assert "'input': '<list of 2 items>'" in not_object.error["message"]


async def by_source(engine: Engine) -> dict[str, float]:
    text = await metrics_of(engine)
    return {s: metric_sum(text, "vllm:prompt_tokens_by_source_total", source=s) for s in SOURCES}


async def test_a_response_hands_its_kv_from_prefill_to_decode(pd: tuple[Engine, Engine]) -> None:
    prefill, decode = pd
    text = unique("Responses can be disaggregated too. " * 3)
    leg = responses_body(text, max_output_tokens=1, stream=False, store=False,
                         kv_transfer_params=HANDOFF)  # fmt: skip
    first = await call(prefill, RESPONSES, leg, headers={"X-Request-Id": "contract-resp-pd"})
    assert first.status == 200, first.body
    params = first.body["kv_transfer_params"]
    assert params["do_remote_prefill"] is True and params["remote_block_ids"]
    before = await by_source(decode)
    second = await call(decode, RESPONSES, responses_body(text, max_output_tokens=3,
                                                          kv_transfer_params=params))  # fmt: skip
    assert second.status == 200, second.body
    n = second.body["usage"]["input_tokens"]
    moved = {k: v - before[k] for k, v in (await by_source(decode)).items()}
    external = n if EXTERNAL_PROMPT_TOKENS[decode.version] == "n" else n - 1
    assert moved["external_kv_transfer"] == external, (n, moved)


Router = Callable[[tuple[Engine, Engine]], Awaitable[RouterHandle]]


@pytest.fixture
async def router() -> AsyncIterator[Router]:
    handles: list[RouterHandle] = []

    async def start(pd: tuple[Engine, Engine]) -> RouterHandle:
        timeouts = Timeouts(connect_s=5.0, prefill_s=60.0, first_token_s=60.0,
                            idle_stream_s=30.0)  # fmt: skip
        config = RouterConfig(timeouts=timeouts, scrape_interval_s=0.5, prefix_affinity_tokens=0)
        handle = await start_static_router(config, {"prefill": [pd[0].url],
                                                    "decode": [pd[1].url]})  # fmt: skip
        handles.append(handle)
        return handle

    yield start
    for handle in handles:
        await handle.serving.stop()


def client_for(handle: RouterHandle) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=handle.base_url, api_key="unused", max_retries=0,
                              timeout=BOUND_S)  # fmt: skip


async def test_responses_create_through_the_router(
    pd: tuple[Engine, Engine], router: Router
) -> None:
    handle = await router(pd)
    decode = pd[1]
    before = await by_source(decode)
    async with asyncio.timeout(2 * BOUND_S):
        answer = await client_for(handle).responses.create(
            model=SERVED_NAME, instructions="Be brief.", max_output_tokens=4,
            input=unique("Say something about caches."),
        )  # fmt: skip
        stream = await client_for(handle).responses.create(
            model=SERVED_NAME, max_output_tokens=3, stream=True,
            input=[{"role": "user", "content": unique("Stream about caches.")}],
        )  # fmt: skip
        events = [e async for e in stream]
    assert answer.usage is not None and answer.usage.output_tokens == 4 and answer.output_text
    assert events[-1].type == "response.completed"
    final = events[-1].response  # type: ignore[union-attr]
    assert final.usage is not None and final.usage.output_tokens == 3
    moved = {k: v - before[k] for k, v in (await by_source(decode)).items()}
    per_request = EXTERNAL_PROMPT_TOKENS[decode.version]
    prompts = answer.usage.input_tokens + final.usage.input_tokens
    assert moved["external_kv_transfer"] == prompts - (0 if per_request == "n" else 2), moved
    text = await handle.metrics()
    assert metric_sum(text, "tandem_router_requests_total", code="200") == 2
    assert metric_sum(text, "tandem_router_retries_total") == 0


ROUTED_REFUSALS: list[tuple[str, Any]] = [
    ("/v1/chat/completions", chat_body() | {"messages": []}),
    ("/v1/completions", completion_body(max_tokens=0)),
    ("/v1/completions", completion_body(max_tokens="ten")),
    ("/v1/chat/completions", chat_body(max_tokens=3, min_tokens=5)),
    ("/v1/chat/completions", chat_body(stream="maybe")),
    ("/v1/responses", responses_body(max_output_tokens=0)),
    ("/v1/responses", {"model": SERVED_NAME}),
    ("/v1/responses", responses_body(background=True)),
    ("/v1/responses", responses_body(previous_response_id="resp_gone")),
    ("/v1/completions", b'{"model": "tiny-llama", "prompt": '),
    ("/tokenize", {"model": "nope", "prompt": "x"}),
]


async def test_refusals_through_the_router_are_the_engines_own(
    pd: tuple[Engine, Engine], router: Router
) -> None:
    handle = await router(pd)
    prefill, decode = pd
    before = await by_source(prefill)
    for path, body in ROUTED_REFUSALS:
        direct = await call(decode, path, body)
        routed = await call(handle.url, path, body)
        assert direct.status in (400, 404), (path, body, direct.body)
        assert (routed.status, routed.body) == (direct.status, direct.body), (path, body)
    # the refused requests cost the prefill engine nothing
    assert (await by_source(prefill))["local_compute"] == before["local_compute"]
    lax = completion_body(unique("Lax, please."), max_tokens="3", stream="true")
    served = await call(handle.url, "/v1/completions", lax)
    assert served.status == 200 and served.events[-1] == "[DONE]"
    assert (await by_source(prefill))["local_compute"] > before["local_compute"]


async def test_utility_calls_through_the_router(pd: tuple[Engine, Engine], router: Router) -> None:
    handle = await router(pd)
    decode = pd[1]
    for method, path, body in (("POST", "/tokenize", {"prompt": "Hello there"}),
                               ("POST", "/detokenize", {"tokens": [1, 2, 3]}),
                               ("GET", "/version", None)):  # fmt: skip
        direct = await call(decode, path, body, method=method)
        routed = await call(handle.url, path, body, method=method)
        assert direct.status == 200 and (routed.status, routed.body) == (200, direct.body)
    missing = await call(handle.url, "/v1/embeddings", {"input": "x"})
    assert missing.status == 404 and missing.error["type"] == "NotFoundError"


async def test_one_trace_holds_the_router_and_both_engines(
    pd: tuple[Engine, Engine], collector: Collector
) -> None:
    """The client's trace context through a tracing router to real engines exporting their
    own spans (``--otlp-traces-endpoint``): one trace, router → prefill → KV → decode, each
    engine's ``llm_request`` the child of the router's span for its leg. The simulated
    engine exports no spans, so there only the router's are checked."""
    prefill, decode = pd
    trace_id = secrets.token_hex(16)
    tracing = Tracing(TracingSettings(endpoint=collector.url, service_name="tandem-router"))
    urls = {"prefill": [prefill.url], "decode": [decode.url]}
    app = build_app(RouterConfig(prefix_affinity_tokens=0), StaticDiscovery(urls), seed=1,
                    tracing=tracing)  # fmt: skip
    serving = await start_router(app, "127.0.0.1", 0, shutdown_timeout_s=1.0)
    try:
        context = {"traceparent": f"00-{trace_id}-{secrets.token_hex(8)}-01"}
        body = chat_body(unique("Trace me."), max_tokens=3)
        url = f"http://127.0.0.1:{serving.port}"
        answer = await call(url, "/v1/chat/completions", body, headers=context)
        assert answer.status == 200, answer.body
        assert await asyncio.to_thread(tracing.flush)
    finally:
        await serving.stop()
    names = {"POST /v1/chat/completions", "prefill", "decode", "kv_handoff"}
    if prefill.kind == "vllm":
        names.add("llm_request")

    def complete(spans: list[Span]) -> bool:
        mine = [s for s in spans if s.trace_id == trace_id]
        engines = {s.service for s in mine if s.name == "llm_request"}
        return {s.name for s in mine} >= names and (
            prefill.kind == "sim" or engines >= {"vllm-prefill", "vllm-decode"}
        )

    assert await asyncio.to_thread(collector.wait_for, complete, 60.0), [
        s for s in collector.spans if s.trace_id == trace_id
    ]
    spans = [s for s in collector.spans if s.trace_id == trace_id]
    router = {s.name: s for s in spans if s.service == "tandem-router"}
    root = router["POST /v1/chat/completions"]
    assert router["prefill"].parent_span_id == root.span_id
    assert router["decode"].parent_span_id == root.span_id
    assert router["kv_handoff"].parent_span_id == router["decode"].span_id
    if prefill.kind == "vllm":
        engine = {s.service: s for s in spans if s.name == "llm_request"}
        assert engine["vllm-prefill"].parent_span_id == router["prefill"].span_id
        assert engine["vllm-decode"].parent_span_id == router["decode"].span_id
