"""The text of one choice: its tokens, where a stop string or a JSON schema ends it, what a
stream may show so far, and the logprobs of each token. Pure.

A choice's tokens are the sim's four-character words drawn from its seed
(:func:`~tandem.engine.server.text.token_text`), or, under ``response_format``, the
pieces of a JSON document that follows the schema (which ends the output, finish
``stop``, as vLLM's structured output does). With ``stop`` strings the output ends at
the token that completes the first match, and the text is cut before the match (vLLM's
default, ``include_stop_str_in_output: false``); while a stream runs, the last
``longest stop - 1`` characters are held back, as vLLM's detokenizer does, so no prefix
of a stop string is ever shown and then taken back.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from tandem.engine.server.text import VOCAB, token_text

#: tokens of JSON per four characters, as the sim's tokenizer counts text
CHARS_PER_TOKEN = 4
#: nesting beyond which a schema's objects are left empty
MAX_SCHEMA_DEPTH = 4


def _mix(seed: int, index: int, salt: int) -> int:
    x = seed * 0x9E3779B97F4A7C15 + index * 0xBF58476D1CE4E5B9 + salt * 0x94D049BB133111EB
    x &= 0xFFFFFFFFFFFFFFFF
    x ^= x >> 29
    x = (x * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    return x ^ (x >> 32)


def _unit(seed: int, index: int, salt: int) -> float:
    """A number in [0, 1) drawn from (seed, index, salt)."""
    return (_mix(seed, index, salt) >> 11) / float(1 << 53)


def value_for_schema(schema: Mapping[str, Any], seed: int, depth: int = 0) -> Any:
    """A small JSON value that satisfies the common JSON-schema keywords of ``schema``.

    >>> value_for_schema({"type": "object", "properties": {"a": {"type": "integer"}},
    ...                   "required": ["a"]}, 7)
    {'a': 7}
    """
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][seed % len(schema["enum"])]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind is None and "properties" in schema:
        kind = "object"
    if kind == "object" or kind is None:
        props = schema.get("properties")
        if not isinstance(props, Mapping) or depth >= MAX_SCHEMA_DEPTH:
            return {}
        required = schema.get("required")
        keys = [k for k in required if k in props] if isinstance(required, list) else list(props)
        return {k: value_for_schema(props[k], seed + i, depth + 1) for i, k in enumerate(keys)}
    if kind == "array":
        items = schema.get("items")
        count = int(schema.get("minItems") or 0)
        item_schema = items if isinstance(items, Mapping) else {}
        return [value_for_schema(item_schema, seed + i, depth + 1) for i in range(count)]
    if kind == "string":
        return token_text(seed, 0).strip()
    if kind == "integer":
        low = schema.get("minimum")
        return (low if isinstance(low, int) else 0) + seed % 1000
    if kind == "number":
        return (seed % 1000) / 10
    if kind == "boolean":
        return seed % 2 == 0
    return None


def json_tokens(schema: Mapping[str, Any], seed: int) -> tuple[str, ...]:
    """The JSON output for ``schema`` cut into the sim's tokens."""
    text = json.dumps(value_for_schema(schema, seed))
    return tuple(text[i : i + CHARS_PER_TOKEN] for i in range(0, len(text), CHARS_PER_TOKEN))


class ChoiceText:
    """Text, end and logprobs of one choice's output; ``limit`` tokens at most."""

    __slots__ = ("_sizes", "_text", "forced", "hold", "seed", "stop_at", "stop_cut", "stop_reason",
                 "stops")  # fmt: skip

    def __init__(
        self,
        seed: int,
        limit: int,
        stops: tuple[str, ...] = (),
        forced: tuple[str, ...] | None = None,
    ) -> None:
        self.seed = seed
        self.forced = forced
        self.stops = stops
        self.hold = max((len(s) for s in stops), default=1) - 1
        self._text = ""
        self._sizes: list[int] = []
        self.stop_at: int | None = len(forced) if forced is not None else None
        """Output tokens after which the choice ends by itself (schema or stop string)."""
        self.stop_cut: int | None = None
        """Characters of the text kept when a stop string ended it."""
        self.stop_reason: str | None = None
        if stops:
            self._find_stop(limit if self.stop_at is None else min(limit, self.stop_at))

    def token(self, index: int) -> str:
        if self.forced is not None:
            return self.forced[index] if index < len(self.forced) else ""
        return token_text(self.seed, index)

    def _extend(self, n: int) -> None:
        while len(self._sizes) < n:
            piece = self.token(len(self._sizes))
            self._text += piece
            self._sizes.append(len(self._text))

    def _find_stop(self, limit: int) -> None:
        longest = max(len(s) for s in self.stops)
        for i in range(limit):
            before = len(self._text)
            self._extend(i + 1)
            window_start = max(0, before - longest + 1)
            window = self._text[window_start:]
            for stop in self.stops:
                at = window.find(stop)
                if at != -1:
                    self.stop_at = i + 1
                    self.stop_cut = window_start + at
                    self.stop_reason = stop
                    return

    def text(self, n: int) -> str:
        """The whole text of the first ``n`` tokens, as a finished choice shows it."""
        self._extend(n)
        end = self._sizes[n - 1] if n else 0
        if self.stop_cut is not None and self.stop_at is not None and n >= self.stop_at:
            end = min(end, self.stop_cut)
        return self._text[:end]

    def shown(self, n: int, finished: bool) -> str:
        """What a stream may have shown after ``n`` tokens."""
        full = self.text(n)
        if finished or not self.stops:
            return full
        return full[: max(0, len(full) - self.hold)]

    def span(self, start: int, stop: int) -> str:
        """Text of tokens ``start``..``stop - 1`` (no stop strings: the fast path)."""
        if self.forced is None:
            return "".join([token_text(self.seed, i) for i in range(start, stop)])
        return "".join(self.forced[start:stop])

    def offset(self, index: int) -> int:
        """Characters before token ``index``."""
        self._extend(index)
        return self._sizes[index - 1] if index else 0

    def logprobs(self, index: int, k: int, greedy: bool) -> tuple[float, list[tuple[str, float]]]:
        """(logprob of token ``index``, the ``k`` most likely tokens with theirs).

        Greedy: the sampled token is the most likely one. Sampled: it is below the top
        ``k`` (as with a random-weight model), so vLLM's completions list ``k + 1``.
        """
        token = self.token(index)
        base = _mix(self.seed, index, 3)
        alternatives: list[str] = []
        j = 0
        while len(alternatives) < k:
            word = VOCAB[(base + 37 * j) % len(VOCAB)]
            j += 1
            if word != token and word not in alternatives:
                alternatives.append(word)
        if greedy:
            lp = -0.05 - 2.0 * _unit(self.seed, index, 4)
            top = [(w, lp - 0.5 * (i + 1)) for i, w in enumerate(alternatives)]
            return lp, [(token, lp), *top[: max(0, k - 1)]]
        lp = -3.0 - 3.0 * _unit(self.seed, index, 4)
        top = [(w, -0.5 - 0.4 * i - 0.3 * _unit(self.seed, index, 5 + i))
               for i, w in enumerate(alternatives)]  # fmt: skip
        return lp, top
