"""``POST /tokenize`` and ``POST /detokenize``: their request models and answers. Pure.

vLLM's shapes (its ``TokenizeCompletionRequest | TokenizeChatRequest`` and
``DetokenizeRequest``), answered with the sim's tokenizer (:mod:`tandem.engine.server.text`):
a prompt has as many tokens here as the sim's usage counts for it, and detokenizing what
was tokenized gives the text back. The sim's completions count no bos token, so neither
does its ``/tokenize`` (``add_special_tokens`` is read and has no effect).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tandem.engine.server.errors import (
    invalid,
    model_not_found,
    validation_error,
    validation_errors,
)
from tandem.engine.server.fields import lax_int, mapping, opt_bool, strict_str
from tandem.engine.server.text import decode_tokens, encode_chat, encode_text, token_piece

#: vLLM's bound on a token id (``DetokenizeRequest.tokens``: 0 <= id <= 2^63 - 1)
MAX_TOKEN_ID = 2**63 - 1


def _check_model(body: Mapping[str, Any], served: Sequence[str]) -> None:
    model = body.get("model")
    if model is not None and strict_str(model, "model") not in served:
        raise model_not_found(model)


def _messages(value: Any) -> list[Mapping[str, Any]]:
    if not isinstance(value, list):
        raise validation_error("list_type", "messages", "Input should be a valid list", value)
    for i, msg in enumerate(value):
        if not isinstance(msg, Mapping) or not isinstance(msg.get("role"), str):
            raise validation_error("missing", f"messages.{i}.role", "Field required", msg)
    return value


def answer_tokenize(body: Any, served: Sequence[str], max_model_len: int) -> dict[str, Any]:
    """The answer to a ``/tokenize`` body: a completion prompt, or chat ``messages``.

    >>> answer_tokenize({"prompt": "Hello there"}, ["m"], 2048)["count"]
    3
    >>> answer_tokenize({"messages": [{"role": "user", "content": "Hello there"}]},
    ...                 ["m"], 2048)["count"]
    13
    """
    body = mapping(body, "")
    messages = body.get("messages")
    if messages is not None:
        chat = _messages(messages)
        generation = opt_bool(body, "add_generation_prompt", default=True)
        if generation and opt_bool(body, "continue_final_message"):
            raise invalid(
                "Cannot set both `continue_final_message` and `add_generation_prompt` to True."
            )
        _check_model(body, served)
        ids = encode_chat(chat, add_generation_prompt=generation)
    else:
        prompt = body.get("prompt")
        if not isinstance(prompt, str):
            first = (
                ("missing", "prompt", "Field required", body, None)
                if prompt is None
                else ("string_type", "prompt", "Input should be a valid string", prompt, None)
            )
            raise validation_errors([first, ("missing", "messages", "Field required", body, None)])
        opt_bool(body, "add_special_tokens", default=True)
        _check_model(body, served)
        ids = encode_text(prompt)
    strings = None
    if opt_bool(body, "return_token_strs"):
        strings = [token_piece(t).decode("utf-8", "replace") for t in ids]
    return {"count": len(ids), "max_model_len": max_model_len, "tokens": ids,
            "token_strs": strings}  # fmt: skip


def answer_detokenize(body: Any, served: Sequence[str]) -> dict[str, Any]:
    """The answer to a ``/detokenize`` body: the text of its ``tokens``.

    >>> answer_detokenize({"tokens": [5509573740, 6159365224, 23425637]}, ["m"])
    {'prompt': 'Hello there'}
    """
    body = mapping(body, "")
    given = body.get("tokens")
    if given is None:
        raise validation_error("missing", "tokens", "Field required", body)
    if not isinstance(given, list):
        raise validation_error("list_type", "tokens", "Input should be a valid list", given)
    ids = []
    for i, value in enumerate(given):
        token = lax_int(value, f"tokens.{i}")
        if token < 0:
            raise validation_error("greater_than_equal", f"tokens.{i}",
                                   "Input should be greater than or equal to 0", value,
                                   {"ge": 0})  # fmt: skip
        if token > MAX_TOKEN_ID:
            raise validation_error("less_than_equal", f"tokens.{i}",
                                   f"Input should be less than or equal to {MAX_TOKEN_ID}",
                                   value, {"le": MAX_TOKEN_ID})  # fmt: skip
        ids.append(token)
    _check_model(body, served)
    return {"prompt": decode_tokens(ids)}
