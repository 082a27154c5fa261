"""The engine figures the router reads, parsed from Prometheus text. Pure.

Selection reads three gauges: ``vllm:num_requests_waiting``, ``vllm:num_requests_running``
and ``vllm:kv_cache_usage_perc``. Timing a non-streaming answer reads two counters,
``vllm:prompt_tokens_total`` and ``vllm:generation_tokens_total``: while their sum moves,
the engine is working. vLLM writes them with colons in the plain text format and with
underscores (``vllm_num_requests_waiting``) in OpenMetrics; both spellings are accepted.
An engine with several data-parallel ranks reports one sample per ``engine`` label:
queue depths and counters are summed, KV usage averaged. Only the needed lines are
looked at, so a 100 kB page of histograms costs a fraction of a millisecond.
"""

from __future__ import annotations

from dataclasses import dataclass

WAITING = "num_requests_waiting"
RUNNING = "num_requests_running"
KV_USAGE = "kv_cache_usage_perc"
PROMPT_TOKENS = "prompt_tokens_total"
GENERATION_TOKENS = "generation_tokens_total"
_WANTED = (WAITING, RUNNING, KV_USAGE, PROMPT_TOKENS, GENERATION_TOKENS)
_PREFIXES = tuple(f"vllm{sep}{name}" for name in _WANTED for sep in (":", "_"))


@dataclass(frozen=True)
class EngineGauges:
    """One scrape's figures; ``None`` where the page did not have the metric."""

    waiting: float | None
    running: float | None
    kv_usage: float | None
    tokens_total: float | None = None
    """Prompt plus generated tokens the engine has processed since it started."""


def parse_engine_gauges(text: str) -> EngineGauges:
    """The three gauges of a ``/metrics`` page.

    >>> page = 'vllm:num_requests_waiting{engine="0"} 3.0\\nvllm_kv_cache_usage_perc 0.25\\n'
    >>> parse_engine_gauges(page)
    EngineGauges(waiting=3.0, running=None, kv_usage=0.25, tokens_total=None)
    >>> parse_engine_gauges('vllm:prompt_tokens_total 10\\nvllm:generation_tokens_total 5\\n')
    EngineGauges(waiting=None, running=None, kv_usage=None, tokens_total=15.0)
    """
    values: dict[str, list[float]] = {name: [] for name in _WANTED}
    for line in text.splitlines():
        if not line.startswith(_PREFIXES):
            continue
        name, value = _parse_sample(line)
        if name is not None and value is not None:
            values[name].append(value)
    waiting, running, kv = values[WAITING], values[RUNNING], values[KV_USAGE]
    tokens = values[PROMPT_TOKENS] + values[GENERATION_TOKENS]
    return EngineGauges(
        waiting=sum(waiting) if waiting else None,
        running=sum(running) if running else None,
        kv_usage=sum(kv) / len(kv) if kv else None,
        tokens_total=sum(tokens) if tokens else None,
    )


def _parse_sample(line: str) -> tuple[str | None, float | None]:
    """``(metric, value)`` of one sample line, or Nones for a look-alike or a bad value."""
    end = len(line)
    for stop in ("{", " "):
        at = line.find(stop)
        if at != -1:
            end = min(end, at)
    name = line[5:end]  # after "vllm:" or "vllm_"
    if name not in _WANTED:
        return None, None  # e.g. vllm:num_requests_waiting_by_reason
    rest = line[end:]
    if rest.startswith("{"):
        close = rest.rfind("}")
        if close == -1:
            return None, None
        rest = rest[close + 1 :]
    fields = rest.split()
    if not fields:
        return None, None
    try:
        value = float(fields[0])
    except ValueError:
        return None, None
    return name, value if value == value else None  # NaN: no information
