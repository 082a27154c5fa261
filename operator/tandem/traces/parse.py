"""Request traces: parsers of their text into arrivals. Pure: text in, requests out.

Two formats:

* **Azure CSV** (Azure LLM inference traces 2023): a header naming ``TIMESTAMP``,
  ``ContextTokens`` and ``GeneratedTokens`` (any order, other columns ignored);
  ``TIMESTAMP`` is wall-clock ``YYYY-MM-DD HH:MM:SS[.fraction]``.
* **JSONL** (Mooncake's published traces): one object per line with ``timestamp``
  (milliseconds from the start), ``input_length`` and ``output_length``. Two optional
  keys describe multi-turn prefix reuse (what :mod:`tandem.traces.generate` writes):
  ``session_id`` (an integer >= 0 shared by the turns of one conversation) and
  ``prefix_tokens`` (how many leading prompt tokens repeat an earlier request of the
  session: its prompt and answer). Other keys (Mooncake's ``hash_ids``) are ignored.

Arrival times are made relative to the first request (seconds) and sorted (stable).
A bad row raises :class:`TraceError` naming its line number and what was expected.
The caller reads the file; nothing here opens one.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
JSONL_KEYS = ("timestamp", "input_length", "output_length")


#: One parsed row: arrival (s), prompt, output, session id, shared prefix tokens.
_Row = tuple[float, int, int, int | None, int]


class TraceError(ValueError):
    """A trace that cannot be read; the message names the line."""


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One request of a trace."""

    arrival_s: float
    """Seconds after the trace's first request."""
    prompt_tokens: int
    output_tokens: int
    """Tokens the answer has (at least 1: a request always produces its first token)."""
    session_id: int | None = None
    """The conversation this request is a turn of (``None``: not known)."""
    prefix_tokens: int = 0
    """Leading prompt tokens shared with an earlier turn of the session (a prefix cache
    could skip their prefill; the simulator does not model one and ignores this)."""


def parse_trace(text: str, name: str = "trace") -> list[TraceRequest]:
    """Either format, told apart by the first non-blank character (``{`` is JSONL)."""
    head = text.lstrip()[:1]
    return parse_jsonl(text, name) if head == "{" else parse_azure_csv(text, name)


def parse_azure_csv(text: str, name: str = "trace") -> list[TraceRequest]:
    """Rows of an Azure LLM inference trace; ``TraceError`` on the first bad row."""
    lines = text.splitlines()
    rows = csv.reader(lines)
    header = next(rows, None)
    if header is None:
        raise TraceError(f"{name}: empty file; expected a header {','.join(AZURE_COLUMNS)}")
    columns = [h.strip() for h in header]
    missing = [c for c in AZURE_COLUMNS if c not in columns]
    if missing:
        raise TraceError(
            f"{name}: line 1: header lacks {', '.join(missing)}; "
            f"expected columns {','.join(AZURE_COLUMNS)} (got {','.join(columns)})"
        )
    i_ts, i_in, i_out = (columns.index(c) for c in AZURE_COLUMNS)
    width = max(i_ts, i_in, i_out) + 1
    raw: list[_Row] = []
    for number, row in enumerate(rows, start=2):
        if not row or all(not cell.strip() for cell in row):
            continue
        where = f"{name}: line {number}"
        if len(row) < width:
            raise TraceError(f"{where}: expected {len(columns)} columns, got {len(row)}")
        raw.append(
            (
                parse_timestamp(row[i_ts], where),
                _tokens(row[i_in], "ContextTokens", where, minimum=1),
                _tokens(row[i_out], "GeneratedTokens", where, minimum=0),
                None,
                0,
            )
        )
    return _relative(raw, name)


def parse_jsonl(text: str, name: str = "trace") -> list[TraceRequest]:
    """Lines of a Mooncake-style JSONL trace; ``TraceError`` on the first bad line."""
    raw: list[_Row] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{name}: line {number}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as err:
            raise TraceError(f"{where}: not JSON ({err.msg} at column {err.colno})") from None
        if not isinstance(obj, dict):
            raise TraceError(f"{where}: expected an object with {', '.join(JSONL_KEYS)}")
        missing = [k for k in JSONL_KEYS if k not in obj]
        if missing:
            raise TraceError(f"{where}: missing {', '.join(missing)}")
        stamp = obj["timestamp"]
        if isinstance(stamp, bool) or not isinstance(stamp, int | float) or stamp < 0:
            raise TraceError(f"{where}: timestamp must be milliseconds >= 0, got {stamp!r}")
        prompt = _tokens(obj["input_length"], "input_length", where, minimum=1)
        output = _tokens(obj["output_length"], "output_length", where, minimum=0)
        session = obj.get("session_id")
        if session is not None:
            session = _tokens(session, "session_id", where, minimum=0)
        prefix = _tokens(obj.get("prefix_tokens", 0), "prefix_tokens", where, minimum=0)
        if prefix >= prompt:
            raise TraceError(
                f"{where}: prefix_tokens ({prefix}) must be less than input_length ({prompt})"
            )
        raw.append((float(stamp) / 1000.0, prompt, output, session, prefix))
    return _relative(raw, name)


def parse_timestamp(value: str, where: str = "timestamp") -> float:
    """``YYYY-MM-DD HH:MM:SS[.fraction]`` as seconds since the epoch (UTC, any precision).

    >>> parse_timestamp("1970-01-02 00:00:01.2500000")
    86401.25
    """
    text = value.strip()
    try:
        date, clock = text.split(" ", 1) if " " in text else text.split("T", 1)
        year, month, day = (int(p) for p in date.split("-"))
        hour, minute, second = clock.split(":")
        days = dt.date(year, month, day).toordinal() - dt.date(1970, 1, 1).toordinal()
        seconds = float(second)
        if not (0 <= int(hour) < 24 and 0 <= int(minute) < 60 and 0 <= seconds < 61):
            raise ValueError("out of range")
    except ValueError:
        raise TraceError(
            f"{where}: TIMESTAMP {value!r} is not 'YYYY-MM-DD HH:MM:SS.fffffff'"
        ) from None
    return days * 86400.0 + int(hour) * 3600.0 + int(minute) * 60.0 + seconds


def slice_trace(
    requests: Sequence[TraceRequest], start_s: float = 0.0, duration_s: float | None = None
) -> list[TraceRequest]:
    """Requests arriving in ``[start_s, start_s + duration_s)``, times shifted to start at 0."""
    end_s = float("inf") if duration_s is None else start_s + duration_s
    return [
        replace(r, arrival_s=r.arrival_s - start_s)
        for r in requests
        if start_s <= r.arrival_s < end_s
    ]


def trace_span_s(requests: Sequence[TraceRequest]) -> float:
    """Seconds from the first arrival to the last (0 for fewer than two requests)."""
    return requests[-1].arrival_s - requests[0].arrival_s if len(requests) > 1 else 0.0


def _tokens(value: object, field: str, where: str, minimum: int) -> int:
    if isinstance(value, bool):
        raise TraceError(f"{where}: {field} must be an integer >= {minimum}, got {value!r}")
    try:
        number = int(value.strip()) if isinstance(value, str) else value
    except ValueError:
        number = None
    if not isinstance(number, int) or number < minimum:
        raise TraceError(f"{where}: {field} must be an integer >= {minimum}, got {value!r}")
    return number


def _relative(raw: Iterable[_Row], name: str) -> list[TraceRequest]:
    rows = sorted(raw, key=lambda r: r[0])
    if not rows:
        raise TraceError(f"{name}: no requests")
    start = rows[0][0]
    return [TraceRequest(t - start, p, max(o, 1), s, x) for t, p, o, s, x in rows]
