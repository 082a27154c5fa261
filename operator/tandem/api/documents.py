"""Reading InferenceService manifests: YAML text into documents (:func:`parse_documents`),
and the file or stdin into text (:func:`read_documents`, the one file read in ``api``).

The documents are what kubectl would send: JSON values only. YAML that has no JSON form
is refused with the line it is on (binary, sets, ordered maps, infinities), timestamps
stay the strings they were written as (as Go's YAML reads them into JSON), and non-string
keys become strings. The work is bounded: at most :data:`MAX_BYTES` of UTF-8 text, nesting
at most :data:`~tandem.api.limits.MANIFEST_MAX_DEPTH` deep, and at most
:data:`MAX_VALUES` values once YAML aliases are expanded (a "billion laughs" file of a
few kilobytes is refused, not rendered to megabytes).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import yaml

from tandem.api.limits import MANIFEST_MAX_DEPTH

#: Largest file read (the API server takes requests of at most 3 MiB).
MAX_BYTES = 4 * 1024 * 1024
#: Most values (scalars, lists, mappings) one document may expand to.
MAX_VALUES = 200_000


class ManifestError(Exception):
    """A file that cannot be read or is not YAML."""


class _Refused(yaml.YAMLError):
    def __init__(self, message: str, node: yaml.Node | None = None) -> None:
        where = f" (line {node.start_mark.line + 1})" if node is not None else ""
        super().__init__(message + where)


class _Loader(yaml.SafeLoader):
    """SafeLoader with JSON-only values and bounded nesting."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        self._depth += 1
        try:
            if self._depth > MANIFEST_MAX_DEPTH:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise _Refused(
                    f"nested more than {MANIFEST_MAX_DEPTH} levels deep (line {mark.line + 1})"
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _as_string(loader: yaml.SafeLoader, node: yaml.Node) -> str:
    return str(loader.construct_scalar(node))  # type: ignore[arg-type]


def _float(loader: yaml.SafeLoader, node: yaml.Node) -> float:
    value = loader.construct_yaml_float(node)  # type: ignore[arg-type]
    if not math.isfinite(value):
        raise _Refused(f"{node.value!r} is not a JSON number", node)
    return float(value)


def _refuse(what: str) -> Any:
    def construct(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
        raise _Refused(f"{what} has no JSON form; write it as a string or a list", node)

    return construct


_Loader.add_constructor("tag:yaml.org,2002:timestamp", _as_string)
_Loader.add_constructor("tag:yaml.org,2002:float", _float)
for _tag, _what in (
    ("binary", "!!binary"),
    ("set", "a YAML set (!!set or ?-keys)"),
    ("omap", "!!omap"),
    ("pairs", "!!pairs"),
):
    _Loader.add_constructor(f"tag:yaml.org,2002:{_tag}", _refuse(_what))


def _to_json(value: Any) -> Any:
    """A plain tree of ``value`` (aliases copied out, keys made strings), after checking
    that it expands to at most :data:`MAX_VALUES` values."""
    sizes: dict[int, int] = {}
    stack: list[tuple[Any, bool]] = [(value, False)]
    while stack:  # post-order over the graph of shared (aliased) nodes, sizes memoized
        node, done = stack.pop()
        if not isinstance(node, dict | list) or id(node) in sizes:
            continue
        children = list(node.values()) if isinstance(node, dict) else node
        if done:
            total = 1 + sum(sizes.get(id(c), 1) for c in children)
            sizes[id(node)] = total
            if total > MAX_VALUES:
                raise ManifestError(
                    f"expands to more than {MAX_VALUES} values (YAML aliases); write the "
                    "repeated parts out, or drop the aliases"
                )
        else:
            stack.append((node, True))
            stack.extend((c, False) for c in children)

    def copy(node: Any) -> Any:
        if isinstance(node, dict):
            return {_key(k): copy(v) for k, v in node.items()}
        if isinstance(node, list):
            return [copy(v) for v in node]
        return node

    return copy(value)


def _key(key: Any) -> str:
    if isinstance(key, bool):
        return "true" if key else "false"
    if key is None:
        return "null"
    if isinstance(key, dict | list):
        raise ManifestError("a mapping or list used as a key has no JSON form")
    return str(key)


def parse_documents(text: str) -> list[tuple[int, Any]]:
    """Non-empty YAML documents of ``text``, with their index in the stream."""
    try:
        docs = list(yaml.load_all(text, Loader=_Loader))  # a SafeLoader
    except yaml.YAMLError as err:
        raise ManifestError(f"not valid YAML: {err}") from None
    found = [(i, _to_json(d)) for i, d in enumerate(docs) if d is not None]
    if not found:
        raise ManifestError("no YAML document found")
    return found


def decode_text(data: bytes) -> str:
    """``data`` as UTF-8 text; :class:`ManifestError` naming the first bad byte."""
    if len(data) > MAX_BYTES:
        raise ManifestError(
            f"{len(data)} bytes; at most {MAX_BYTES} (the API server takes at most 3 MiB)"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ManifestError(
            f"not UTF-8 text: byte {err.start} is {data[err.start : err.start + 1]!r}; "
            "save the file as UTF-8"
        ) from None


def read_documents(path: Path) -> list[tuple[int, Any]]:
    """Non-empty YAML documents of ``path`` (``-`` is stdin), with their index."""
    try:
        if str(path) == "-":
            data = sys.stdin.buffer.read(MAX_BYTES + 1)
        else:
            with path.open("rb") as file:
                data = file.read(MAX_BYTES + 1)
    except OSError as err:
        raise ManifestError(f"cannot read: {err.strerror or err}") from None
    return parse_documents(decode_text(data))
