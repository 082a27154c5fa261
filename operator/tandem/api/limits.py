"""Bounds on what one manifest may hold, and the checks of free-form values. Pure.

Free-form fields (``engine.kvTransfer.extraConfig``, a pool's ``affinity``) pass through
to children verbatim, so their shape is bounded here: nesting depth, size, keys. The API
server's schema can only bound their top-level keys (``maxProperties``); the rest is
checked by ``tandem validate`` and the operator, which reports a violation on the
resource (``Ready=False``, ``InvalidSpec``) and builds nothing from it.

Worked example of the size budget: every annotation of an object together is limited to
256 KiB by the API server, and a child's ``serving.tandem.dev/last-applied`` annotation
holds the child, free-form values JSON-encoded up to twice (a ``--kv-transfer-config``
argument inside the record). Escaping can grow a character at most 7-fold (``\\x01`` →
``\\u0001`` → ``\\\\u0001``), so a spec of at most 32 KiB stays below 7 × 32 KiB + the
children's fixed parts (about 10 KiB) = 234 KiB.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

#: Deepest nesting of a whole manifest (YAML documents, watch events, API answers).
MANIFEST_MAX_DEPTH = 64
#: Deepest nesting inside one free-form field (``{"a": {"b": 1}}`` is 2 deep).
FREEFORM_MAX_DEPTH = 16
#: Most top-level keys of one free-form field (also the CRD's ``maxProperties``).
FREEFORM_MAX_PROPERTIES = 64
#: Largest free-form field, serialized as compact JSON.
FREEFORM_MAX_BYTES = 16 * 1024
#: Largest ``spec``, serialized as compact JSON (see the module docstring's budget).
SPEC_MAX_BYTES = 32 * 1024
#: The API server's limit on all annotations of one object together.
ANNOTATIONS_MAX_BYTES = 256 * 1024


def compute_depth(value: Any, limit: int) -> int:
    """Nesting depth of ``value`` (a scalar is 0, ``{}`` is 1), counted without recursion
    and at most ``limit + 1`` (deeper values are not walked further).

    >>> compute_depth({"a": [1, {"b": 2}]}, 10), compute_depth(5, 10)
    (3, 0)
    >>> compute_depth([[[[[]]]]], 2)
    3
    """
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict | list):
            depth += 1
            deepest = max(deepest, depth)
            if depth > limit:
                return limit + 1
            children = node.values() if isinstance(node, dict) else node
            stack.extend((child, depth) for child in children)
    return deepest


def iter_non_json(value: Any, path: str) -> Iterator[tuple[str, str]]:
    """``(path, why)`` of every value that has no JSON form: non-string keys, floats
    that are not finite, and non-JSON types (dates, bytes, sets). Iterative."""
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        node, where = stack.pop()
        if isinstance(node, dict):
            for key, child in node.items():
                if not isinstance(key, str):
                    yield where, f"key {key!r} is not a string"
                    continue
                stack.append(
                    (child, f"{where}.{key}" if key.isidentifier() else f"{where}[{key!r}]")
                )
        elif isinstance(node, list):
            stack.extend((child, f"{where}[{i}]") for i, child in enumerate(node))
        elif isinstance(node, float) and not math.isfinite(node):
            yield where, f"{node} is not a JSON number"
        elif node is not None and not isinstance(node, str | int | float | bool):
            yield where, f"a {type(node).__name__} is not a JSON value; write it as a string"


def compute_json_size(value: Any) -> int:
    """Bytes of ``value`` as compact JSON (callers bound its depth first)."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())
