"""Bad requests: status, error type, ``param`` and message, held against both engines.

vLLM answers in two families (``tandem.engine.server.errors``): its own checks
(``BadRequestError``, the bare field, a `` (parameter=...)`` suffix) and request-model
validation (``Bad Request``, ``body.<field>``, pydantic's printed list). Messages are
compared where they are part of the contract (a client or the router shows them);
where 0.32 and 0.34 word them differently, :data:`tests.contract.versions.MESSAGES`
holds each version's.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.contract.fleet import Engine
from tests.contract.http import call, chat_body, completion_body
from tests.contract.versions import MESSAGES
from tests.vllm.engines import SERVED_NAME

pytestmark = pytest.mark.timeout(600)

LONG = "the quick brown fox jumps over the lazy dog " * 400  # over 2048 tokens on both
TOOLS = [{"type": "function", "function": {"name": "get_weather",
                                           "parameters": {"type": "object"}}}]  # fmt: skip
COMPLETIONS, CHAT = "/v1/completions", "/v1/chat/completions"

#: name -> (path, body, status, type, param, message prefix or None)
CASES: dict[str, tuple[str, Any, int, str, str | None, str | None]] = {
    "unknown model": (COMPLETIONS, completion_body(model="nope"), 404, "NotFoundError", "model",
                      "The model `nope` does not exist."),
    "unknown model (chat)": (CHAT, chat_body(model="nope"), 404, "NotFoundError", "model",
                             "The model `nope` does not exist."),
    "prompt over max_model_len": (COMPLETIONS, completion_body(LONG, max_tokens=1), 400,
                                  "BadRequestError", "input_tokens",
                                  "This model's maximum context length is 2048 tokens. However, "
                                  "your prompt contains "),
    "prompt over max_model_len (chat)": (CHAT, chat_body(LONG, max_tokens=1), 400,
                                         "BadRequestError", "input_tokens",
                                         "This model's maximum context length is 2048 tokens."),
    "malformed JSON": (COMPLETIONS, b'{"model": "tiny-llama", "prompt": ', 400, "Bad Request",
                       "body.34", "1 validation error:\n  {'type': 'json_invalid'"),
    "malformed JSON (chat)": (CHAT, b"{not json", 400, "Bad Request", "body.1", None),
    "max_tokens not a number": (COMPLETIONS, completion_body(max_tokens="ten"), 400,
                                "Bad Request", "body.max_tokens",
                                "1 validation error:\n  {'type': 'int_parsing', "
                                "'loc': 'body.max_tokens', 'msg': 'Input should be a valid "
                                "integer, unable to parse string as an integer', "
                                "'input': 'ten'}"),
    "messages not a list": (CHAT, {"model": SERVED_NAME, "messages": "hi"}, 400, "Bad Request",
                            "body.messages", "1 validation error:\n  {'type': 'list_type'"),
    "prompt a number": (COMPLETIONS, completion_body(5), 400, "Bad Request", "body.prompt", None),
    "logprobs not a boolean (chat)": (CHAT, chat_body(logprobs=2), 400, "Bad Request",
                                      "body.logprobs", None),
    "more than 4 stop strings": (CHAT, chat_body(stop=list("abcdef")), 400, "Bad Request",
                                 "body.stop", None),
    "response_format of no known type": (CHAT, chat_body(response_format={"type": "bogus"}),
                                         400, "Bad Request", "body.response_format.type", None),
    "no prompt": (COMPLETIONS, {"model": SERVED_NAME}, 400, "BadRequestError", "prompt",
                  "Either prompt or prompt_embeds must be provided and non-empty. "
                  "(parameter=prompt)"),
    "empty messages": (CHAT, chat_body() | {"messages": []}, 400, "BadRequestError", None,
                       "Cannot apply chat template to an empty conversation."),
    "temperature -1": (COMPLETIONS, completion_body(temperature=-1), 400, "BadRequestError",
                       "temperature", "temperature must be non-negative, got -1.0. "
                       "(parameter=temperature, value=-1.0)"),
    "temperature -1 (chat)": (CHAT, chat_body(temperature=-1), 400, "BadRequestError",
                              "temperature", "temperature must be non-negative"),
    "top_p 0": (COMPLETIONS, completion_body(top_p=0), 400, "BadRequestError", "top_p",
                "top_p must be in (0, 1], got 0.0."),
    "max_tokens 0": (COMPLETIONS, completion_body(max_tokens=0), 400, "BadRequestError",
                     "max_tokens", "max_tokens must be at least 1, got 0. "
                     "(parameter=max_tokens, value=0)"),
    "max_tokens over max_model_len": (COMPLETIONS, completion_body(max_tokens=5000), 400,
                                      "BadRequestError", "max_tokens",
                                      "max_tokens=5000 cannot be greater than "
                                      "max_model_len=2048."),
    "n 0": (COMPLETIONS, completion_body(n=0), 400, "BadRequestError", None,
            "n must be at least 1, got 0."),
    "n 2 with greedy sampling": (COMPLETIONS, completion_body(n=2, temperature=0), 400,
                                 "BadRequestError", None,
                                 "n must be 1 when using greedy sampling, got 2."),
    "logprobs over 20": (COMPLETIONS, completion_body(logprobs=21), 400, "BadRequestError",
                         "logprobs", "Requested sample logprobs of 21, which is greater than "
                         "max allowed: 20"),
    "top_logprobs without logprobs": (CHAT, chat_body(top_logprobs=2), 400, "BadRequestError",
                                      "top_logprobs", "when using `top_logprobs`, `logprobs` "
                                      "must be set to true. (parameter=top_logprobs)"),
    "stream_options without stream": (COMPLETIONS,
                                      completion_body(stream_options={"include_usage": True}),
                                      400, "BadRequestError", "stream_options",
                                      "Stream options can only be defined when `stream=True`."),
    'tool_choice "auto" without tool flags': (CHAT, chat_body(tools=TOOLS, tool_choice="auto"),
                                              400, "BadRequestError", None,
                                              '"auto" tool choice requires '
                                              "--enable-auto-tool-choice and --tool-call-parser "
                                              "to be set"),
    "tools without tool_choice (auto)": (CHAT, chat_body(tools=TOOLS), 400, "BadRequestError",
                                         None, '"auto" tool choice requires'),
    'tool_choice "required" without a parser': (CHAT, chat_body(tools=TOOLS,
                                                                tool_choice="required"),
                                                400, "BadRequestError", None,
                                                'tool_choice="required" requires '
                                                "--tool-call-parser to be set"),
    "tool_choice without tools": (CHAT, chat_body(tool_choice="required"), 400,
                                  "BadRequestError", "tool_choice",
                                  "When using `tool_choice`, `tools` must be set."),
    "tool_choice naming no tool": (CHAT, chat_body(tools=TOOLS, tool_choice={
        "type": "function", "function": {"name": "nope"}}), 400, "BadRequestError",
        "tool_choice", "The tool specified in `tool_choice` does not match any of the "
        "specified `tools`"),
    "json_schema without its schema": (CHAT, chat_body(response_format={"type": "json_schema"}),
                                       400, "BadRequestError", "response_format",
                                       "When response_format type is 'json_schema', the "
                                       "'json_schema' field must be provided."),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
async def test_bad_request(aggregated: Engine, case: str) -> None:
    path, body, status, err_type, param, prefix = CASES[case]
    answer = await call(aggregated, path, body)
    assert answer.status == status, answer.body
    assert answer.headers["Content-Type"].startswith("application/json")
    err = answer.error
    assert set(err) == {"message", "type", "param", "code"}
    assert (err["type"], err["param"], err["code"]) == (err_type, param, status), err
    exact = MESSAGES.get((case, aggregated.version))
    if exact is not None:
        assert err["message"] == exact
    elif prefix is not None:
        assert err["message"].startswith(prefix), err["message"]
