"""Parsing and validating OpenAI-style request bodies the way vLLM does. Pure.

What the simulator acts on is interpreted (prompts, ``n``, limits, ``stop``, ``seed`` and
``temperature``, ``logprobs``, ``echo``, ``response_format``, the P/D fields); other
sampling fields are accepted and ignored, as a real engine would accept them without
changing the simulated timing. Field types are read as vLLM's request models read them
(:mod:`tandem.engine.server.fields`); the checks after that are vLLM's own, with its
messages (``SamplingParams``, the serving layer, the tool-choice and logprobs validators).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from tandem.engine.server.errors import ApiError, invalid, validation_error
from tandem.engine.server.fields import (
    lax_int,
    mapping,
    opt_bool,
    opt_float,
    opt_int,
    stop_strings,
    strict_str,
)
from tandem.engine.server.text import (
    count_text_tokens,
    render_chat,
    text_block_hashes,
    token_block_hashes,
    token_prompt_text,
)

Kind = Literal["completion", "chat"]

#: completions default to 16 output tokens (vLLM's CompletionRequest.max_tokens)
COMPLETION_DEFAULT_MAX_TOKENS = 16
#: vLLM's default ``--max-logprobs``
MAX_LOGPROBS = 20
#: below this temperature vLLM samples greedily
GREEDY_TEMPERATURE = 1e-5
RESPONSE_FORMAT_TYPES = ("text", "json_object", "json_schema", "structural_tag")


@dataclass(frozen=True)
class Prompt:
    """One prompt of a request (completions may carry a list of them)."""

    tokens: int
    key: str
    """Stable text identifying the prompt (seeds greedy output)."""
    text: str
    """What ``echo`` prints: the prompt string, or the sim's text for token ids."""
    block_hashes: tuple[int, ...]


@dataclass(frozen=True)
class ParsedRequest:
    """A validated generation request."""

    kind: Kind
    model: str | None
    prompts: tuple[Prompt, ...]
    n: int
    max_tokens: int | None
    """Requested output cap; None means up to the context limit (chat's default)."""
    stream: bool
    include_usage: bool
    continuous_usage: bool
    priority: int
    seed: int | None
    temperature: float
    ignore_eos: bool
    stop: tuple[str, ...]
    logprobs: int | None
    """Alternatives per token: completions' ``logprobs``, chat's ``top_logprobs`` (0 when
    only ``logprobs: true``); None: no logprobs."""
    echo: bool
    json_schema: Mapping[str, Any] | None
    """``response_format``'s schema (``{}`` for ``json_object``); None: free text."""
    kv_transfer_params: dict[str, Any] | None
    request_id: str | None
    """The body's ``request_id`` (the ``X-Request-Id`` header wins over it)."""
    min_tokens: int = 0
    """Output tokens before an end of text may finish the request (completions and chat)."""
    limit_field: str = "max_tokens"
    """The field ``max_tokens`` came from, as vLLM names it when it is over the context
    (``max_output_tokens`` for the Responses API)."""

    @property
    def prompt_tokens(self) -> int:
        """Tokens of the longest prompt (what ``max_model_len`` is checked against)."""
        return max(p.tokens for p in self.prompts)

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_TEMPERATURE


def common_fields(body: Mapping[str, Any]) -> dict[str, Any]:
    """The fields completions, chat and the Responses API share, read as vLLM reads them."""
    model = body.get("model")
    if model is not None:
        model = strict_str(model, "model")
    raw_options = body.get("stream_options")
    if raw_options and not body.get("stream"):
        # vLLM's validator runs before field parsing and reads the raw values: an empty
        # stream_options passes, and so does "stream": "false" (a non-empty string)
        raise invalid("Stream options can only be defined when `stream=True`.", "stream_options")
    stream = opt_bool(body, "stream")
    options = {} if raw_options is None else mapping(raw_options, "stream_options")
    kv = body.get("kv_transfer_params")
    if kv is not None:
        kv = dict(mapping(kv, "kv_transfer_params"))
    request_id = body.get("request_id")
    if request_id is not None:
        request_id = strict_str(request_id, "request_id")
    temperature = opt_float(body, "temperature")
    return {
        "model": model,
        "stream": stream,
        "include_usage": opt_bool(options, "include_usage"),
        "continuous_usage": opt_bool(options, "continuous_usage_stats"),
        "n": 1 if body.get("n") is None else lax_int(body["n"], "n"),
        "priority": opt_int(body, "priority") or 0,
        "seed": opt_int(body, "seed"),
        "temperature": 1.0 if temperature is None else temperature,
        "ignore_eos": opt_bool(body, "ignore_eos"),
        "stop": stop_strings(body.get("stop")),
        "json_schema": _response_format(body.get("response_format")),
        "kv_transfer_params": kv,
        "request_id": request_id,
    }


def _response_format(value: Any) -> Mapping[str, Any] | None:
    """The schema the output must follow: ``{}`` for any JSON object, None for free text."""
    if value is None:
        return None
    fmt = mapping(value, "response_format")
    kind = fmt.get("type")
    if kind not in RESPONSE_FORMAT_TYPES:
        expected = "'text', 'json_object' or 'json_schema'"
        raise validation_error(
            "literal_error", "response_format.type", f"Input should be {expected}", kind,
            {"expected": expected},
        )  # fmt: skip
    if kind == "json_object":
        return {}
    if kind == "json_schema":
        spec = fmt.get("json_schema")
        if spec is None:
            raise invalid(
                "When response_format type is 'json_schema', the 'json_schema' field must "
                "be provided.",
                "response_format",
            )
        schema = mapping(spec, "response_format.json_schema").get("schema")
        return mapping(schema, "response_format.json_schema.schema") if schema else {}
    return None


def _string_prompt(text: str, block_size: int) -> Prompt:
    tokens = count_text_tokens(text)
    return Prompt(tokens, text, text, text_block_hashes(text, block_size, tokens))


def _token_prompt(ids: list[int], block_size: int) -> Prompt:
    key = ",".join(map(str, ids))
    return Prompt(len(ids), key, token_prompt_text(ids), token_block_hashes(ids, block_size))


def _is_token_list(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in value
    )


def _prompts(value: Any, block_size: int) -> tuple[Prompt, ...]:
    """``prompt``: a string, token ids, or a list of either (one choice set per prompt)."""
    missing = invalid("Either prompt or prompt_embeds must be provided and non-empty.", "prompt")
    if value is None or value == "" or value == []:
        raise missing
    if isinstance(value, str):
        return (_string_prompt(value, block_size),)
    if _is_token_list(value):
        return (_token_prompt(value, block_size),)
    if isinstance(value, list):
        out = []
        for item in value:
            if isinstance(item, str) and item:
                out.append(_string_prompt(item, block_size))
            elif _is_token_list(item) and item:
                out.append(_token_prompt(item, block_size))
            elif item in ("", []):
                raise missing
            else:
                raise validation_error("string_type", "prompt", "Input should be a valid string",
                                       item)  # fmt: skip
        return tuple(out)
    raise validation_error("list_type", "prompt", "Input should be a valid list", value)


def parse_completion(body: Any, block_size: int) -> ParsedRequest:
    """``POST /v1/completions``."""
    body = mapping(body, "")
    common = common_fields(body)
    prompts = _prompts(body.get("prompt"), block_size)
    max_tokens = opt_int(body, "max_tokens")
    logprobs = opt_int(body, "logprobs")
    return ParsedRequest(
        kind="completion",
        prompts=prompts,
        max_tokens=COMPLETION_DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens,
        logprobs=None if logprobs is None else (MAX_LOGPROBS if logprobs == -1 else logprobs),
        echo=opt_bool(body, "echo"),
        min_tokens=opt_int(body, "min_tokens") or 0,
        **common,
    )


def _check_tools(body: Mapping[str, Any]) -> None:
    """vLLM's ``tool_choice`` validation, then its serving layer: without a tool-call
    parser (the simulated engine has none, like ``vllm serve`` without tool flags) any
    choice but ``none`` is refused."""
    tools = body.get("tools")
    choice = body.get("tool_choice", "auto" if tools else None)
    if choice is None or choice == "none":
        return
    if tools is None:
        raise invalid("When using `tool_choice`, `tools` must be set.", "tool_choice")
    if choice not in ("auto", "required") and not isinstance(choice, Mapping):
        raise invalid(
            f'Invalid value for `tool_choice`: {choice}! Only named tools, "none", "auto" '
            'or "required" are supported.',
            "tool_choice",
        )
    if choice == "auto":
        raise ApiError(400, '"auto" tool choice requires --enable-auto-tool-choice and '
                       "--tool-call-parser to be set", "BadRequestError")  # fmt: skip
    if choice == "required":
        raise ApiError(400, 'tool_choice="required" requires --tool-call-parser to be set',
                       "BadRequestError")  # fmt: skip
    assert isinstance(choice, Mapping)
    function = choice.get("function")
    name = function.get("name") if isinstance(function, Mapping) else None
    names = [
        t.get("function", {}).get("name") for t in tools if isinstance(t, Mapping)
    ] if isinstance(tools, list) else []  # fmt: skip
    if name not in names:
        raise invalid(
            "The tool specified in `tool_choice` does not match any of the specified `tools`",
            "tool_choice",
        )
    raise ApiError(400, f'tool_choice=function "{name}" requires --tool-call-parser to be set',
                   "BadRequestError")  # fmt: skip


def _chat_logprobs(body: Mapping[str, Any]) -> int | None:
    wanted = opt_bool(body, "logprobs")
    top = opt_int(body, "top_logprobs")
    if top is not None:
        if top < 0 and top != -1:
            raise invalid("`top_logprobs` must be a positive value or -1.", "top_logprobs", top)
        if (top == -1 or top > 0) and not wanted:
            raise invalid("when using `top_logprobs`, `logprobs` must be set to true.",
                          "top_logprobs")  # fmt: skip
    if not wanted:
        return None
    return MAX_LOGPROBS if top == -1 else (top or 0)


def parse_chat(body: Any, block_size: int) -> ParsedRequest:
    """``POST /v1/chat/completions``: ``messages`` rendered with a Llama-3-like template."""
    body = mapping(body, "")
    common = common_fields(body)
    messages = body.get("messages")
    if messages is None:
        raise validation_error("missing", "messages", "Field required", body)
    if not isinstance(messages, list):
        raise validation_error("list_type", "messages", "Input should be a valid list", messages)
    for i, msg in enumerate(messages):
        if not isinstance(msg, Mapping) or not isinstance(msg.get("role"), str):
            raise validation_error("missing", f"messages.{i}.role", "Field required", msg)
    logprobs = _chat_logprobs(body)
    _check_tools(body)
    if not messages:
        raise ApiError(400, "Cannot apply chat template to an empty conversation. Provide at "
                       "least one message.", "BadRequestError")  # fmt: skip
    try:
        text, tokens = render_chat(messages)
    except ValueError as exc:
        raise validation_error("list_type", "messages", str(exc), messages) from exc
    max_tokens = opt_int(body, "max_completion_tokens")
    if max_tokens is None:
        max_tokens = opt_int(body, "max_tokens")
    prompt = Prompt(tokens, text, text, text_block_hashes(text, block_size, tokens))
    return ParsedRequest(
        kind="chat",
        prompts=(prompt,),
        max_tokens=max_tokens,
        logprobs=logprobs,
        echo=False,
        min_tokens=opt_int(body, "min_tokens") or 0,
        **common,
    )


def check_sampling(req: ParsedRequest, max_model_len: int) -> None:
    """vLLM's checks of the sampling parameters (``SamplingParams`` and the serving
    layer), after the model and the prompt length were accepted."""
    if req.n < 1:
        raise ApiError(400, f"n must be at least 1, got {req.n}.", "BadRequestError")
    if req.temperature < 0:
        raise invalid(f"temperature must be non-negative, got {req.temperature}.",
                      "temperature", req.temperature)  # fmt: skip
    if req.max_tokens is not None:
        if req.max_tokens < 1:
            raise invalid(f"max_tokens must be at least 1, got {req.max_tokens}.",
                          "max_tokens", req.max_tokens)  # fmt: skip
        if req.max_tokens > max_model_len:
            raise invalid(
                f"{req.limit_field}={req.max_tokens} cannot be greater than max_model_len="
                f"{max_model_len}. Please request fewer output tokens.",
                req.limit_field, req.max_tokens,
            )  # fmt: skip
    if req.min_tokens < 0:
        raise ApiError(400, f"min_tokens must be greater than or equal to 0, got "
                       f"{req.min_tokens}.", "BadRequestError")  # fmt: skip
    limit = max_model_len - req.prompt_tokens if req.max_tokens is None else req.max_tokens
    if req.min_tokens > limit:
        raise ApiError(400, f"min_tokens must be less than or equal to max_tokens={limit}, got "
                       f"{req.min_tokens}.", "BadRequestError")  # fmt: skip
    if req.logprobs is not None and req.logprobs > MAX_LOGPROBS:
        raise invalid(
            f"Requested sample logprobs of {req.logprobs}, which is greater than max "
            f"allowed: {MAX_LOGPROBS}",
            "logprobs", req.logprobs,
        )  # fmt: skip
    if req.n > 1 and req.greedy:
        raise ApiError(400, f"n must be 1 when using greedy sampling, got {req.n}.",
                       "BadRequestError")  # fmt: skip


def check_top_p(body: Mapping[str, Any]) -> None:
    top_p = opt_float(body, "top_p")
    if top_p is not None and not 0 < top_p <= 1:
        raise invalid(f"top_p must be in (0, 1], got {top_p}.", "top_p", top_p)


def parse_body(kind: Kind, body: Any, block_size: int) -> ParsedRequest:
    parse = parse_chat if kind == "chat" else parse_completion
    parsed = parse(body, block_size)
    check_top_p(body)
    return parsed
