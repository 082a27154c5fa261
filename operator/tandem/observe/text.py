"""A parser for the Prometheus text exposition formats. Pure.

Reads both formats a ``/metrics`` endpoint serves: the classic text format
(``text/plain; version=0.0.4``) and OpenMetrics 1.0 (``application/openmetrics-text``).
That covers ``# HELP``/``# TYPE``/``# UNIT`` lines and other comments, label values
with escaped ``\\"``, ``\\\\`` and ``\\n``, quoted (UTF-8) metric and label names,
``+Inf``/``-Inf``/``NaN`` values, optional timestamps (milliseconds in the classic
format, seconds in OpenMetrics; kept as written), exemplars after `` # `` and the
terminating ``# EOF``.

Names are kept as written. vLLM's ``vllm:num_requests_waiting`` is served with colons
in the classic format and as ``vllm_num_requests_waiting`` in OpenMetrics;
:func:`canonical_name` folds both spellings into one so lookups accept either.

A malformed line raises :class:`ExpositionError` naming the line, as Prometheus fails
the whole scrape: a page that cannot be read is a failed pod, not a partial one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_QUOTED = re.compile(r'"((?:[^"\\\n]|\\.)*)"')
_PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\.)*)"(,?)')
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}
_ESCAPE = re.compile(r"\\(.)")
_NUMBER = re.compile(r"[+-]?(?:inf|infinity|nan|(?:\d+\.?\d*|\.\d+)(?:e[+-]?\d+)?)", re.I)


class ExpositionError(ValueError):
    """The text is not valid exposition format; says which line and why."""

    def __init__(self, line_no: int, line: str, reason: str) -> None:
        shown = line if len(line) <= 120 else line[:117] + "..."
        super().__init__(f"line {line_no}: {reason}: {shown!r}")
        self.line_no = line_no
        self.reason = reason


@dataclass(frozen=True)
class Sample:
    """One sample line: ``name{labels} value [timestamp]``."""

    name: str
    """The series name as written (``vllm:prompt_tokens_total``, ``..._bucket``)."""
    labels: Mapping[str, str]
    value: float
    timestamp: float | None = None
    """As written: milliseconds in the classic format, seconds in OpenMetrics."""


@dataclass(frozen=True)
class Exposition:
    """Every sample of one page, in page order, plus the declared family types."""

    samples: tuple[Sample, ...]
    types: Mapping[str, str] = field(default_factory=dict)
    """Family name (canonical) → ``counter``, ``gauge``, ``histogram``, ..."""

    def by_name(self) -> dict[str, list[Sample]]:
        """Samples grouped by :func:`canonical_name` of their series name."""
        out: dict[str, list[Sample]] = {}
        for sample in self.samples:
            out.setdefault(canonical_name(sample.name), []).append(sample)
        return out


def canonical_name(name: str) -> str:
    """The spelling-independent name: colons become underscores.

    >>> canonical_name("vllm:kv_cache_usage_perc") == canonical_name("vllm_kv_cache_usage_perc")
    True
    """
    return name.replace(":", "_")


def parse_exposition(text: str, only: Iterable[str] | None = None) -> Exposition:
    """Every sample of a ``/metrics`` page in either text format.

    ``only``: metric names (either spelling) whose samples are wanted; a line that
    cannot belong to one of them is skipped unread, so a large page costs little.
    ``vllm:x`` selects ``vllm:x``, ``vllm_x`` and their ``_bucket``/``_count``/... lines.
    """
    prefixes = None if only is None else _prefixes(only)
    samples: list[Sample] = []
    types: dict[str, str] = {}
    for line_no, raw in enumerate(text.split("\n"), start=1):
        line = raw.rstrip("\r")
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            if stripped == "# EOF":
                break
            _read_comment(stripped, types)
            continue
        if prefixes is not None and not stripped.startswith(prefixes):
            continue
        try:
            samples.append(_read_sample(stripped))
        except _LineError as err:
            raise ExpositionError(line_no, line, str(err)) from None
    return Exposition(samples=tuple(samples), types=types)


def _prefixes(names: Iterable[str]) -> tuple[str, ...]:
    """Line prefixes for ``names`` in both spellings, plus ``{`` (a quoted name)."""
    out = {"{"}
    for name in names:
        out.add(name)
        out.add(canonical_name(name))
        if name.startswith("vllm_"):
            out.add("vllm:" + name.removeprefix("vllm_"))
    return tuple(sorted(out))


class _LineError(Exception):
    pass


def _read_comment(line: str, types: dict[str, str]) -> None:
    parts = line[1:].split(None, 3)
    if len(parts) >= 3 and parts[0] == "TYPE":
        types[canonical_name(parts[1])] = parts[2].lower()


def _unescape(value: str) -> str:
    def replace(match: re.Match[str]) -> str:
        char = match.group(1)
        if char not in _ESCAPES:
            raise _LineError(f"invalid escape \\{char} in a quoted string")
        return _ESCAPES[char]

    return _ESCAPE.sub(replace, value) if "\\" in value else value


def _read_sample(line: str) -> Sample:
    name: str | None = None
    match = _NAME.match(line)
    pos = 0
    if match:
        name, pos = match.group(0), match.end()
    labels: dict[str, str] = {}
    brace = _skip_space(line, pos)
    if brace < len(line) and line[brace] == "{":
        pos, quoted_name = _read_labels(line, brace + 1, labels, allow_name=name is None)
        if quoted_name is not None:
            name = quoted_name
    if name is None:
        raise _LineError("no metric name")
    rest = line[pos:]
    if rest and rest[0] not in " \t":
        raise _LineError("expected a space before the value")
    exemplar = rest.find(" # ")
    if exemplar != -1:
        rest = rest[:exemplar]
    fields = rest.split()
    if not fields or len(fields) > 2:
        raise _LineError("expected a value and an optional timestamp")
    value = _read_number(fields[0])
    timestamp = _read_number(fields[1]) if len(fields) == 2 else None
    return Sample(name=name, labels=labels, value=value, timestamp=timestamp)


def _read_labels(
    line: str, pos: int, labels: dict[str, str], *, allow_name: bool
) -> tuple[int, str | None]:
    """Read ``key="value",...}`` from ``pos``; returns the position after ``}`` and a
    metric name given as a bare quoted string inside the braces (OpenMetrics 2.0 style)."""
    quoted_name: str | None = None
    while True:
        pair = _PAIR.match(line, pos)  # the usual `key="value",` without spaces
        if pair is not None:
            key, value, comma = pair.groups()
            if key in labels:
                raise _LineError(f"duplicate label {key!r}")
            labels[key] = _unescape(value)
            pos = pair.end()
            if comma:
                continue
            pos = _skip_space(line, pos)
            if pos < len(line) and line[pos] == "}":
                return pos + 1, quoted_name
            raise _LineError("expected ',' or '}' after a label")
        pos = _skip_space(line, pos)
        if pos < len(line) and line[pos] == "}":
            return pos + 1, quoted_name
        key_match = _LABEL_NAME.match(line, pos) or _QUOTED.match(line, pos)
        if key_match is None:
            raise _LineError("expected a label name")
        key = key_match.group(0) if key_match.re is _LABEL_NAME else _unescape(key_match.group(1))
        pos = _skip_space(line, key_match.end())
        if (
            key_match.re is _QUOTED
            and allow_name
            and quoted_name is None
            and (pos < len(line) and line[pos] in ",}")
        ):
            quoted_name = key
        else:
            if pos >= len(line) or line[pos] != "=":
                raise _LineError(f"expected '=' after label {key!r}")
            pos = _skip_space(line, pos + 1)
            value_match = _QUOTED.match(line, pos)
            if value_match is None:
                raise _LineError(f"expected a quoted value for label {key!r}")
            if key in labels:
                raise _LineError(f"duplicate label {key!r}")
            labels[key] = _unescape(value_match.group(1))
            pos = _skip_space(line, value_match.end())
        if pos < len(line) and line[pos] == ",":
            pos += 1
        elif pos >= len(line) or line[pos] != "}":
            raise _LineError("expected ',' or '}' after a label")


def _skip_space(line: str, pos: int) -> int:
    while pos < len(line) and line[pos] in " \t":
        pos += 1
    return pos


def _read_number(text: str) -> float:
    if not _NUMBER.fullmatch(text):
        raise _LineError(f"not a number: {text!r}")
    return float(text)
