"""Requests written as the JSON lines :func:`tandem.traces.parse.parse_jsonl` reads. Pure:
requests in, text out; the caller writes the file.

One object per request, in arrival order: ``timestamp`` (milliseconds from the first
request; whole milliseconds are written as integers, as Mooncake's traces have them),
``input_length``, ``output_length``, then ``session_id`` and ``prefix_tokens`` when the
request belongs to a known conversation. Reading the text back gives the same requests
(for arrivals in whole milliseconds, which is what :mod:`tandem.traces.generate` draws).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from tandem.traces.parse import TraceRequest


def format_jsonl(requests: Iterable[TraceRequest]) -> str:
    """The requests as JSON lines, each ending in a newline.

    >>> print(format_jsonl([TraceRequest(0.25, 900, 40, 3, 512)]), end="")
    {"timestamp": 250, "input_length": 900, "output_length": 40, "session_id": 3, "prefix_tokens": 512}
    """  # noqa: E501
    lines: list[str] = []
    for r in requests:
        ms = r.arrival_s * 1000.0
        whole = round(ms)
        obj: dict[str, Any] = {
            "timestamp": whole if abs(ms - whole) < 1e-6 else round(ms, 3),
            "input_length": r.prompt_tokens,
            "output_length": r.output_tokens,
        }
        if r.session_id is not None:
            obj["session_id"] = r.session_id
            obj["prefix_tokens"] = r.prefix_tokens
        lines.append(json.dumps(obj) + "\n")
    return "".join(lines)
