"""Which requests no pool size can serve in time, and how much of a wait more replicas
would remove. Pure.

The router judges every request when its first token reaches the client
(:func:`judge_request`), counts the ones that cannot meet their targets apart, and
exports, for the others, the share of their queueing budget they used; the simulator's
router runs this same code on the same events, so the autoscaler reads one signal in the
operator, ``tandem up`` and ``tandem simulate``. Nothing here reads a clock: callers
pass ``now_s``.

* **Least TTFT** any pool size could give a request: its prompt prefilled on an idle
  replica, the KV handed to a decode engine, one decode step. :class:`LeastLatency`
  learns it from the router's own measurements: the least *service time* (TTFT minus
  the router's wait before its first engine request) per prompt token seen, per band of
  prompt lengths (powers of two: prefill slows per token as attention grows with the
  prompt, and a fixed overhead weighs on short ones). A service time is never below the
  least, and a fleet with any quiet moment serves some request of each band on an idle
  path, so the least seen approaches it; it is forgotten slowly (half-life
  :data:`LEAST_HALF_LIFE_S`) so that a slower model version is learned again. A band
  with fewer than :data:`MIN_BAND_SAMPLES` requests borrows the fastest band's time per
  token, the most optimistic estimate: a request is called infeasible only on evidence.
  A declared ``profile.prefillTokensPerS`` is a floor from the first request
  (``prompt / rate``).
* **Least ITL**: a decode step with nothing else in the batch; learned as the least mean
  inter-token latency (TPOT) of any request seen.
* A request is **infeasible** when its least TTFT is not below its TTFT target
  (``ttft + perPromptToken x prompt tokens``, :meth:`LatencyTargets.ttft_for`) or the
  least ITL is above the ITL target: no number of replicas makes it meet the target.
* For a feasible request, the **queueing ratio** ``(ttft - least) / (target - least)``:
  the share of its queueing budget its wait used. It is at most 1 exactly when the
  request met its target, and its numerator is only delay that more replicas remove
  (with a replica free for every request, TTFT is the least), so the autoscaler sizes on
  it instead of on TTFT, whose service time no replica count can shorten.

Worked example, a learned 40 us per token for prompts of 16-32k tokens: a 20,000-token
prompt has least 0.8 s. Under ``{p90: 1s, perPromptToken: 50us}`` its target is 2 s;
answered at 1.4 s it used (1.4 - 0.8) / (2 - 0.8) = 0.5 of its budget. Under a plain
``{p90: 1s}`` it used (1.4 - 0.8) / (1 - 0.8) = 3 times its budget (more replicas would
help), while a 30,000-token prompt (least 1.2 s) is infeasible: no replica count helps.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tandem.policy.config import LatencyTargets

#: Half-life of the least latencies: a least this old counts for twice its time.
LEAST_HALF_LIFE_S = 6 * 3600.0
#: Requests a prompt band needs before its own least is trusted over the fastest band's.
MIN_BAND_SAMPLES = 20
#: Requests (with two or more tokens) before the least ITL is trusted at all.
MIN_TPOT_SAMPLES = 20
#: Prompt bands: band 0 holds prompts under 2^9 = 512 tokens, band k >= 1 holds
#: [2^(k+8), 2^(k+9)), and the last everything from 2^(BANDS+7) = 128k tokens up.
BANDS = 10
_FIRST_BAND_BITS = 9


def compute_band(prompt_tokens: float) -> int:
    """The prompt band of a prompt length.

    >>> [compute_band(n) for n in (0, 511, 512, 1023, 1024, 100_000, 10**6)]
    [0, 0, 1, 1, 2, 8, 9]
    """
    bits = int(max(prompt_tokens, 0)).bit_length()
    return min(max(bits - _FIRST_BAND_BITS, 0), BANDS - 1)


def compute_forgotten(least: float, elapsed_s: float) -> float:
    """A least time after ``elapsed_s`` of forgetting: it rises, doubling per half-life.

    >>> compute_forgotten(0.5, LEAST_HALF_LIFE_S)
    1.0
    """
    return float(least * 2.0 ** (max(elapsed_s, 0.0) / LEAST_HALF_LIFE_S))


@dataclass
class _Least:
    """A least value seen, when it was last lowered, and how many samples it saw."""

    value: float | None = None
    at_s: float = 0.0
    samples: int = 0

    def now(self, now_s: float) -> float | None:
        return None if self.value is None else compute_forgotten(self.value, now_s - self.at_s)

    def add(self, sample: float, now_s: float) -> None:
        current = self.now(now_s)
        if current is None or sample <= current:
            self.value, self.at_s = sample, now_s
        else:
            self.value, self.at_s = current, now_s
        self.samples += 1


@dataclass
class LeastLatency:
    """The least TTFT and ITL any pool size could give, learned per router.

    Mutated only by its owner's event loop (the router, or the simulated router), like
    :class:`~tandem.router.selection.Endpoint`.
    """

    declared_tokens_per_s: float | None = None
    """``profile.prefillTokensPerS`` of the prefill pool (or the aggregated pool)."""
    bands: list[_Least] = field(default_factory=lambda: [_Least() for _ in range(BANDS)])
    """Least service seconds per prompt token, per prompt band."""
    tpot: _Least = field(default_factory=_Least)
    """Least mean inter-token latency of a request."""

    def observe_service(self, prompt_tokens: int, service_s: float, now_s: float) -> None:
        """A request's first token came ``service_s`` after its first engine request."""
        if prompt_tokens > 0 and service_s > 0:
            self.bands[compute_band(prompt_tokens)].add(service_s / prompt_tokens, now_s)

    def observe_tpot(self, tpot_s: float, now_s: float) -> None:
        """A finished request's mean gap between tokens (two tokens or more)."""
        if tpot_s > 0:
            self.tpot.add(tpot_s, now_s)

    def seconds_per_token(self, prompt_tokens: float, now_s: float) -> float | None:
        """Least service seconds per prompt token for a prompt of this length."""
        own = self.bands[compute_band(prompt_tokens)]
        if own.samples >= MIN_BAND_SAMPLES:
            return own.now(now_s)
        known = [v for b in self.bands if (v := b.now(now_s)) is not None]
        return min(known) if known else None

    def least_ttft_s(self, prompt_tokens: float, now_s: float) -> float:
        """Least TTFT of a prompt (0 before anything was learned or declared)."""
        per_token = self.seconds_per_token(prompt_tokens, now_s)
        learned = per_token * prompt_tokens if per_token is not None else 0.0
        declared = prompt_tokens / self.declared_tokens_per_s if self.declared_tokens_per_s else 0.0
        return max(learned, declared)

    def least_itl_s(self, now_s: float) -> float:
        """Least ITL (0 until :data:`MIN_TPOT_SAMPLES` requests were seen)."""
        if self.tpot.samples < MIN_TPOT_SAMPLES:
            return 0.0
        return self.tpot.now(now_s) or 0.0

    def prefill_tokens_per_s(self, now_s: float) -> float | None:
        """Prompt tokens per second one replica prefills at best: the declared rate, else
        the fastest band's least time per token (``None`` before either is known)."""
        if self.declared_tokens_per_s:
            return self.declared_tokens_per_s
        known = [v for b in self.bands if (v := b.now(now_s)) is not None and v > 0]
        return 1.0 / min(known) if known else None


@dataclass(frozen=True)
class Verdict:
    """What the router records of one request at its first token."""

    least_ttft_s: float
    target_s: float | None
    """The request's TTFT target (``None``: the class declares none)."""
    ttft_infeasible: bool
    itl_infeasible: bool
    queueing_ratio: float | None
    """``(ttft - least) / (target - least)`` of a request that can meet its TTFT target;
    ``None`` otherwise."""
    target_ratio: float | None
    """``ttft / target`` (``None`` without a target): at most 1 when it met it."""

    @property
    def feasible(self) -> bool:
        return not (self.ttft_infeasible or self.itl_infeasible)


def judge_request(
    least: LeastLatency,
    prompt_tokens: float,
    ttft_s: float,
    targets: LatencyTargets,
    now_s: float,
) -> Verdict:
    """The verdict on a request whose first token came ``ttft_s`` after it arrived.

    >>> least = LeastLatency(declared_tokens_per_s=25_000.0)
    >>> t = LatencyTargets(1.0, 90, 0.05, 90)
    >>> judge_request(least, 50_000, 2.5, t, 0.0).ttft_infeasible
    True
    >>> round(judge_request(least, 5_000, 0.6, t, 0.0).queueing_ratio, 3)
    0.5
    """
    least_s = least.least_ttft_s(prompt_tokens, now_s)
    target = targets.ttft_for(prompt_tokens)
    least_itl = least.least_itl_s(now_s)
    itl_infeasible = targets.itl_s is not None and least_itl > targets.itl_s
    if target is None or target <= 0:
        return Verdict(least_s, None, False, itl_infeasible, None, None)
    ttft_infeasible = least_s >= target
    ratio = None if ttft_infeasible else max(ttft_s - least_s, 0.0) / (target - least_s)
    return Verdict(least_s, target, ttft_infeasible, itl_infeasible, ratio, ttft_s / target)
