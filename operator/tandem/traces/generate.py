"""Synthetic request traces from a shape and a seed. Pure: parameters in, requests out.

A :class:`TraceShape` says what a trace looks like; :func:`generate_trace` draws one.
Each axis the public Azure traces leave out has a parameter:

* **Heavy-tailed prompt lengths up to 128k tokens.** Every request belongs to a request
  class (:data:`CLASSES`): ``chat``, ``code``, ``generate`` draw lognormal prompts and
  answers; ``long`` draws its prompt from a truncated Pareto law between 12k and 128k
  tokens (shape 0.5: its median is 28k, a quarter of them pass 64k). No prompt and
  answer together exceed :data:`MAX_CONTEXT_TOKENS`, Llama-3.1's 131,072-token context.
* **A long-context share.** The ``long`` class's weight in the mix (0 to 0.3 across
  the family, :mod:`tandem.traces.family`).
* **Diurnal swings.** The arrival rate follows ``mean x (1 - a cos(2 pi t / period))``:
  it starts at its trough ``(1 - a) x mean``, peaks at ``(1 + a) x mean`` half a period
  in, and averages the mean over whole periods (default period: the trace's duration,
  one day folded into it).
* **Bursts.** Burst starts are a Poisson process (``bursts_per_hour``); during each,
  ``burst_s`` long, new conversations arrive ``burst_multiplier`` times faster.
* **Shifts in the prompt/output mix.** The class weights move linearly from
  ``mix_start`` to ``mix_end`` over the trace, e.g. from short prompts with long
  answers (decode-bound) to long prompts with short answers (prefill-bound).
* **Multi-turn prefix reuse.** A conversation has a geometric number of turns (mean
  ``turns_mean``). Each follow-up arrives after the previous answer has streamed (its
  tokens at :data:`STREAM_S_PER_TOKEN`) and the user has thought (exponential, mean
  ``think_s``); its prompt is the previous prompt, the previous answer and a new message,
  and ``prefix_tokens`` counts the part a prefix cache already holds. The conversation
  ends when it would not fit the context or the trace ends.

Conversations start at ``rate_per_s / turns_mean`` (times the diurnal and burst
factors), so requests arrive at about ``rate_per_s`` on average.

Deterministic: every draw comes from one ``random.Random(seed)`` through its
``random()`` method alone, whose sequence Python guarantees across versions (the
distributions are inverted by hand here rather than taken from the module, whose
algorithms may change). Arrivals are whole milliseconds, so a trace written as JSON
lines (:func:`tandem.traces.jsonl.format_jsonl`) and read back is the same trace.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, field

from tandem.traces.parse import TraceRequest

#: Llama-3.1's context: no prompt plus its answer is longer.
MAX_CONTEXT_TOKENS = 131_072
#: Seconds per streamed answer token a user waits before typing the next turn.
STREAM_S_PER_TOKEN = 0.03
#: Longest answer any class draws (a common ``max_tokens`` cap).
MAX_OUTPUT_TOKENS = 4096


@dataclass(frozen=True)
class Lognormal:
    """A lognormal length: ``median x exp(sigma x z)``, ``z`` standard normal, within
    ``[low, high]`` tokens."""

    median: float
    sigma: float
    low: int = 1
    high: int = MAX_CONTEXT_TOKENS

    def draw(self, rng: random.Random) -> int:
        z = _standard_normal(rng)
        return _clamp(round(self.median * math.exp(self.sigma * z)), self.low, self.high)


@dataclass(frozen=True)
class Pareto:
    """A Pareto length of shape ``alpha`` truncated to ``[low, high]`` tokens (inverse
    CDF: ``F(x) = (1 - (low/x)^alpha) / (1 - (low/high)^alpha)``)."""

    alpha: float
    low: int
    high: int

    def draw(self, rng: random.Random) -> int:
        tail = math.pow(self.low / self.high, self.alpha)
        u = rng.random()
        x = self.low / math.pow(1.0 - u * (1.0 - tail), 1.0 / self.alpha)
        return _clamp(round(x), self.low, self.high)

    def survival(self, tokens: float) -> float:
        """Share of draws longer than ``tokens``."""
        if tokens <= self.low:
            return 1.0
        if tokens >= self.high:
            return 0.0
        tail = math.pow(self.low / self.high, self.alpha)
        return (math.pow(self.low / tokens, self.alpha) - tail) / (1.0 - tail)


@dataclass(frozen=True)
class RequestClass:
    """One kind of request: how long its prompts and answers are."""

    prompt: Lognormal | Pareto
    output: Lognormal


#: The request classes a mix weighs. Medians in tokens; ``code`` is shaped after the
#: Azure code trace (long prompts, answers of a few dozen tokens), ``chat`` after the
#: conversation trace, ``generate`` is the decode-bound opposite (short prompts, long
#: answers), ``long`` is long-context work (documents, repositories, long histories).
CLASSES: Mapping[str, RequestClass] = {
    "chat": RequestClass(Lognormal(700, 1.1), Lognormal(220, 0.9, high=MAX_OUTPUT_TOKENS)),
    "code": RequestClass(Lognormal(1500, 0.9), Lognormal(40, 1.0, high=MAX_OUTPUT_TOKENS)),
    "generate": RequestClass(Lognormal(250, 0.8), Lognormal(900, 0.6, high=MAX_OUTPUT_TOKENS)),
    "long": RequestClass(
        Pareto(0.5, 12_288, MAX_CONTEXT_TOKENS), Lognormal(300, 0.8, high=MAX_OUTPUT_TOKENS)
    ),
}

#: A follow-up turn's new user message, tokens.
FOLLOW_UP = Lognormal(150, 1.0, high=8192)


@dataclass(frozen=True)
class TraceShape:
    """What one synthetic trace looks like; :func:`generate_trace` draws it."""

    name: str
    description: str
    rate_per_s: float
    """Mean request arrivals per second (all turns), before diurnal and burst factors."""
    mix_start: Mapping[str, float]
    """Weight of each request class (:data:`CLASSES`) at the start; normalized."""
    mix_end: Mapping[str, float] | None = None
    """Weights at the end, reached linearly (``None``: the mix never shifts)."""
    diurnal_amplitude: float = 0.0
    """``a`` in ``1 - a cos(2 pi t / period)``, 0 to < 1 (0: a flat rate)."""
    diurnal_period_s: float | None = None
    """Period of the swing, seconds (``None``: the trace's duration)."""
    bursts_per_hour: float = 0.0
    """Mean bursts per hour (a Poisson process)."""
    burst_s: float = 10.0
    """Length of one burst, seconds."""
    burst_multiplier: float = 8.0
    """Conversations start this many times faster during a burst."""
    turns_mean: float = 1.0
    """Mean turns per conversation (geometric; 1: every request stands alone)."""
    think_s: float = 30.0
    """Mean user think time between an answer and the next turn, seconds."""
    tags: tuple[str, ...] = field(default_factory=tuple)
    """The axes this shape stresses, for tables."""

    def __post_init__(self) -> None:
        check_shape(self)

    def mix_at(self, share: float) -> dict[str, float]:
        """Normalized class weights ``share`` (0-1) of the way through the trace."""
        end = self.mix_end if self.mix_end is not None else self.mix_start
        names = sorted(set(self.mix_start) | set(end))
        raw = {n: (1 - share) * self.mix_start.get(n, 0.0) + share * end.get(n, 0.0) for n in names}
        total = sum(raw.values())
        return {n: w / total for n, w in raw.items() if w > 0}

    def long_share(self) -> float:
        """Mean weight of the ``long`` class over the trace (the mix is linear in time)."""
        return (self.mix_at(0.0).get("long", 0.0) + self.mix_at(1.0).get("long", 0.0)) / 2


def check_shape(shape: TraceShape) -> None:
    """``ValueError`` naming the first field out of range and what would be valid."""
    problems: list[str] = []
    if not (math.isfinite(shape.rate_per_s) and shape.rate_per_s > 0):
        problems.append(f"rate_per_s must be a number > 0, got {shape.rate_per_s}")
    for label, mix in (("mix_start", shape.mix_start), ("mix_end", shape.mix_end)):
        if mix is None:
            continue
        unknown = sorted(set(mix) - set(CLASSES))
        if unknown:
            problems.append(
                f"{label}: unknown request class {', '.join(unknown)}; classes: "
                f"{', '.join(CLASSES)}"
            )
        if any(not (math.isfinite(w) and w >= 0) for w in mix.values()) or sum(mix.values()) <= 0:
            problems.append(f"{label}: weights must be >= 0 with a positive sum, got {dict(mix)}")
    if not 0 <= shape.diurnal_amplitude < 1:
        problems.append(f"diurnal_amplitude must be in [0, 1), got {shape.diurnal_amplitude}")
    if shape.diurnal_period_s is not None and not shape.diurnal_period_s > 0:
        problems.append(f"diurnal_period_s must be > 0, got {shape.diurnal_period_s}")
    if shape.bursts_per_hour < 0 or shape.burst_s <= 0 or shape.burst_multiplier < 1:
        problems.append(
            "bursts need bursts_per_hour >= 0, burst_s > 0 and burst_multiplier >= 1, got "
            f"{shape.bursts_per_hour}, {shape.burst_s}, {shape.burst_multiplier}"
        )
    if not shape.turns_mean >= 1 or shape.think_s < 0:
        problems.append(
            f"turns_mean must be >= 1 and think_s >= 0, got {shape.turns_mean}, {shape.think_s}"
        )
    if problems:
        raise ValueError(f"trace shape {shape.name!r}: " + "; ".join(problems))


def generate_trace(
    shape: TraceShape, seed: int, duration_s: float, rate_per_s: float | None = None
) -> list[TraceRequest]:
    """The requests of ``shape`` over ``duration_s`` for ``seed``, sorted by arrival, the
    first at 0 (``rate_per_s`` overrides the shape's mean rate)."""
    if not (math.isfinite(duration_s) and duration_s > 0):
        raise ValueError(f"duration must be a number of seconds > 0, got {duration_s}")
    rate = shape.rate_per_s if rate_per_s is None else rate_per_s
    if not (math.isfinite(rate) and rate > 0):
        raise ValueError(f"rate must be a number of requests per second > 0, got {rate}")
    rng = random.Random(seed)
    bursts = _bursts(rng, shape, duration_s)
    starts = _conversation_starts(rng, shape, duration_s, rate / shape.turns_mean, bursts)
    rows: list[tuple[int, int, int, int, int]] = []
    for session, start_s in enumerate(starts):
        klass = CLASSES[_pick(rng, shape.mix_at(start_s / duration_s))]
        rows.extend(_conversation(rng, shape, klass, session, start_s, duration_s))
    if not rows:
        return []
    rows.sort()
    first_ms = rows[0][0]
    return [
        TraceRequest((ms - first_ms) / 1000.0, prompt, output, session, prefix)
        for ms, session, prompt, output, prefix in rows
    ]


def _conversation(
    rng: random.Random,
    shape: TraceShape,
    klass: RequestClass,
    session: int,
    start_s: float,
    duration_s: float,
) -> list[tuple[int, int, int, int, int]]:
    """The turns of one conversation as ``(ms, session, prompt, output, prefix)``."""
    stay = 1.0 - 1.0 / shape.turns_mean  # geometric turns: continue with this probability
    output = klass.output.draw(rng)
    prompt = min(klass.prompt.draw(rng), MAX_CONTEXT_TOKENS - output)
    t, prefix = start_s, 0
    out = [(round(t * 1000), session, prompt, output, prefix)]
    while rng.random() < stay:
        t += output * STREAM_S_PER_TOKEN + _exponential(rng, shape.think_s)
        prefix = prompt + output
        message = FOLLOW_UP.draw(rng)
        output = klass.output.draw(rng)
        prompt = prefix + message
        if t >= duration_s or prompt + output > MAX_CONTEXT_TOKENS:
            break
        out.append((round(t * 1000), session, prompt, output, prefix))
    return out


def _conversation_starts(
    rng: random.Random,
    shape: TraceShape,
    duration_s: float,
    mean_rate: float,
    bursts: list[float],
) -> list[float]:
    """Start times of conversations: a Poisson process of rate
    ``mean_rate x diurnal(t) x burst(t)``, drawn by thinning one of the peak rate."""
    a = shape.diurnal_amplitude
    period = shape.diurnal_period_s or duration_s
    peak = mean_rate * (1 + a) * shape.burst_multiplier
    out: list[float] = []
    t = 0.0
    k = 0  # first burst that may still cover t
    while True:
        t += _exponential(rng, 1.0 / peak)
        if t >= duration_s:
            return out
        while k < len(bursts) and bursts[k] + shape.burst_s <= t:
            k += 1
        in_burst = k < len(bursts) and bursts[k] <= t
        rate = mean_rate * (1 - a * math.cos(2 * math.pi * t / period))
        rate *= shape.burst_multiplier if in_burst else 1.0
        if rng.random() * peak < rate:
            out.append(t)


def _bursts(rng: random.Random, shape: TraceShape, duration_s: float) -> list[float]:
    """Burst start times, sorted, non-overlapping (a Poisson process)."""
    if shape.bursts_per_hour <= 0:
        return []
    out: list[float] = []
    t = 0.0
    while True:
        t += _exponential(rng, 3600.0 / shape.bursts_per_hour)
        if t >= duration_s:
            return out
        if not out or t >= out[-1] + shape.burst_s:
            out.append(t)


def burst_windows(shape: TraceShape, seed: int, duration_s: float) -> list[tuple[float, float]]:
    """The ``[start, end)`` seconds of the bursts :func:`generate_trace` places for this
    seed (the same draws, before the first request is moved to time 0)."""
    rng = random.Random(seed)
    return [(b, b + shape.burst_s) for b in _bursts(rng, shape, duration_s)]


def _pick(rng: random.Random, weights: Mapping[str, float]) -> str:
    u = rng.random()
    running = 0.0
    names = sorted(weights)
    for name in names:
        running += weights[name]
        if u < running:
            return name
    return names[-1]


def _exponential(rng: random.Random, mean: float) -> float:
    return -mean * math.log(1.0 - rng.random())


def _standard_normal(rng: random.Random) -> float:
    """Box-Muller from two ``random()`` draws (one normal per pair, for simplicity)."""
    u1 = 1.0 - rng.random()  # (0, 1]: log is finite
    u2 = rng.random()
    return math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)


def _clamp(value: int, low: int, high: int) -> int:
    return min(max(value, low), high)
