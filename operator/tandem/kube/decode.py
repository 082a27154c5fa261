"""JSON from the API server, with bounded nesting. Pure.

Python's ``json`` recurses once per nesting level and raises ``RecursionError`` past
about 1,000 levels, while the API server stores custom resources up to 10,000 levels
deep (a free-form field such as ``engine.kvTransfer.extraConfig``). One such object in a
watch or a list would stop every reader. :func:`loads_bounded` never raises for depth:
a value nested deeper than ``max_depth`` keeps its first ``max_depth + 1`` levels and
has its deeper parts replaced by ``null``, so it still names its object and is still
too deep for :mod:`tandem.api.validate`, which reports it on that object.
"""

from __future__ import annotations

import json
import re
from typing import Any

from tandem.api.limits import MANIFEST_MAX_DEPTH

#: A JSON string (skipped whole) or a bracket.
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)


def loads_bounded(data: bytes | str, max_depth: int = MANIFEST_MAX_DEPTH) -> Any:
    """``json.loads(data)``, with everything deeper than ``max_depth + 1`` levels cut.

    >>> loads_bounded('{"a": [[[[1]]]], "b": 2}', max_depth=2)
    {'a': [[None]], 'b': 2}
    >>> loads_bounded(b'[' * 5000 + b']' * 5000, max_depth=3)
    [[[[None]]]]
    """
    text = data.decode() if isinstance(data, bytes) else data
    if _deeper_than(text, max_depth + 1):
        text = _cut(text, max_depth + 1)
    return json.loads(text)


def _deeper_than(text: str, depth: int) -> bool:
    """Whether ``text`` nests brackets deeper than ``depth`` (strings skipped). Cheap
    when the text has few brackets, which is the common case."""
    if text.count("[") + text.count("{") <= depth:
        return False
    level = 0
    for match in _TOKEN.finditer(text):
        char = match.group()
        if char in "[{":
            level += 1
            if level > depth:
                return True
        elif char in "]}":
            level -= 1
    return False


def _cut(text: str, depth: int) -> str:
    """``text`` with every value that opens at level ``depth + 1`` replaced by null."""
    out: list[str] = []
    level, start, kept = 0, -1, 0
    for match in _TOKEN.finditer(text):
        char = match.group()
        if char in "[{":
            level += 1
            if level == depth + 1:
                start = match.start()
        elif char in "]}":
            if level == depth + 1 and start >= 0:
                out += [text[kept:start], "null"]
                kept, start = match.end(), -1
            level -= 1
    out.append(text[kept:])
    return "".join(out)
