"""What the policy learns about one replica from live metrics, without a profiling run. Pure.

* **Prefill capacity** (prompt tokens/s one replica sustains): the highest of two lower
  bounds, slowly forgotten (:func:`learn_prefill_capacity`).
* **Decode step time** (how ITL grows with the batch): a weighted least-squares line
  through ``(sequences per replica, mean ITL)`` of past windows (:class:`StepFit`), from
  which the largest batch within the ITL target follows (:func:`compute_batch_at_itl`).

Both survive operator restarts in ``status.autoscaler`` (plain floats), and both forget
(half-lives :data:`CAPACITY_HALF_LIFE_S` and :data:`LEARN_HALF_LIFE_S`), so a new
model version or a changed workload is learned again within hours.
"""

from __future__ import annotations

from dataclasses import dataclass

from tandem.observe.types import PoolObservation

#: Half-life of what the policy learned: a new measurement outweighs one this old.
LEARN_HALF_LIFE_S = 3600.0
#: Half-life of the learned prefill capacity. Longer than the rest: it is the highest
#: of lower bounds, and busy windows (queueing) cannot refresh it.
CAPACITY_HALF_LIFE_S = 6 * 3600.0
#: Requests (prefill) a window needs before its latency teaches anything.
MIN_LEARN_REQUESTS = 20.0
#: Sequences per decode replica below which a window says little about the batch cost.
MIN_LEARN_BATCH = 4.0
#: Spread of the batches seen (standard deviation over mean) before the fitted slope is
#: trusted; below it, the proportional estimate is used.
MIN_BATCH_SPREAD = 0.1


def compute_decay(elapsed_s: float, half_life_s: float = LEARN_HALF_LIFE_S) -> float:
    """Weight left to a measurement after ``elapsed_s``.

    >>> compute_decay(3600.0)
    0.5
    """
    return float(0.5 ** (max(elapsed_s, 0.0) / half_life_s))


def learn_prefill_capacity(
    learned: float | None, pool: PoolObservation, prompt_tokens: float, window_s: float
) -> float | None:
    """Prompt tokens/s one prefill replica sustains, from what the pool did this window.

    Two measurements, each a lower bound of the capacity, so the estimate keeps the
    highest (its decay lets a lower truth take over after a change):

    * **service time**: prompt tokens per request over the pool's mean engine TTFT
      (queue + prefill of one request). A prompt served alone takes at least as long
      per token as one in a full batch, and queueing only lengthens it, so
      ``tokens / TTFT`` never exceeds the capacity; in quiet windows it comes close.
      Llama-3.1-8B on an H100, 1,000-token prompts in 35 ms: 28.6k tok/s (33k batched).
    * **saturation**: prompt tokens/s per ready replica while every replica had a queue
      (a saturated pool runs at its capacity).

    ``prompt_tokens`` is the mean prompt of the window's requests (0: unknown).
    """
    if learned is not None:
        learned *= compute_decay(window_s, CAPACITY_HALF_LIFE_S)
    samples: list[float] = []
    latency = pool.latency
    if (
        latency is not None
        and latency.requests >= MIN_LEARN_REQUESTS
        and latency.ttft_mean_s is not None
        and latency.ttft_mean_s > 0
        and prompt_tokens > 0
    ):
        samples.append(prompt_tokens / latency.ttft_mean_s)
    if pool.ready > 0 and pool.prompt_tokens_per_s > 0 and pool.waiting_requests >= pool.ready:
        samples.append(pool.prompt_tokens_per_s / pool.ready)
    for sample in samples:
        learned = sample if learned is None else max(learned, sample)
    return learned


@dataclass(frozen=True)
class StepFit:
    """Exponentially weighted sums for the line ``mean ITL = fixed + per_seq × batch``.

    ``batch`` is sequences per replica, ITL in seconds. ``tail`` accumulates the ratio of
    the target's percentile to the mean (the ITL target is at a percentile; the line is
    fitted to means, which histograms give exactly).
    """

    weight: float = 0.0
    batch: float = 0.0
    batch_sq: float = 0.0
    itl: float = 0.0
    batch_itl: float = 0.0
    tail: float = 0.0

    def add(self, batch: float, itl_mean_s: float, tail: float, decay: float) -> StepFit:
        """These sums with older windows weighted by ``decay`` and one new window."""
        return StepFit(
            weight=self.weight * decay + 1.0,
            batch=self.batch * decay + batch,
            batch_sq=self.batch_sq * decay + batch * batch,
            itl=self.itl * decay + itl_mean_s,
            batch_itl=self.batch_itl * decay + batch * itl_mean_s,
            tail=self.tail * decay + tail,
        )

    def line(self) -> tuple[float, float] | None:
        """``(fixed_s, per_seq_s)``, or ``None`` until the batches seen spread enough."""
        if self.weight < 2.0:
            return None
        mean_b = self.batch / self.weight
        var_b = self.batch_sq / self.weight - mean_b * mean_b
        if mean_b <= 0 or var_b < (MIN_BATCH_SPREAD * mean_b) ** 2:
            return None
        mean_i = self.itl / self.weight
        slope = (self.batch_itl / self.weight - mean_b * mean_i) / var_b
        if slope <= 0:
            return None
        return max(mean_i - slope * mean_b, 0.0), slope

    @property
    def tail_ratio(self) -> float:
        """Mean ratio of the target percentile to the mean ITL (1 before any window)."""
        return self.tail / self.weight if self.weight > 0 else 1.0

    def to_list(self) -> list[float]:
        return [self.weight, self.batch, self.batch_sq, self.itl, self.batch_itl, self.tail]

    @classmethod
    def from_list(cls, values: object) -> StepFit:
        """Inverse of :meth:`to_list`; anything malformed gives an empty fit."""
        if not isinstance(values, list | tuple) or len(values) != 6:
            return cls()
        try:
            return cls(*(float(v) for v in values))
        except (TypeError, ValueError):
            return cls()


def compute_window_batch(pool: PoolObservation, itl_mean_s: float | None) -> float:
    """Sequences per ready replica, averaged over the window: by Little's law the
    sequences running are the tokens generated per second times the seconds each token
    took. The ``running`` gauge is one instant of the window, and a line fitted through
    instants against the window's mean ITL, or the largest of them, errs with the noise.

    >>> pool = PoolObservation("decode", 3, 3, 3, generation_tokens_per_s=9000.0)
    >>> compute_window_batch(pool, 0.04)
    120.0
    """
    if pool.ready <= 0:
        return 0.0
    if itl_mean_s is None or itl_mean_s <= 0 or pool.generation_tokens_per_s <= 0:
        return pool.running_requests / pool.ready
    return pool.generation_tokens_per_s * itl_mean_s / pool.ready


def learn_step_fit(
    fit: StepFit,
    batch: float,
    itl_mean_s: float | None,
    itl_at_percentile_s: float | None,
    window_s: float,
) -> StepFit:
    """``fit`` after a window of ``batch`` sequences per replica (window average), when it
    carried a useful sample of the step time."""
    if batch < MIN_LEARN_BATCH or itl_mean_s is None or itl_mean_s <= 0:
        return fit
    tail = itl_at_percentile_s / itl_mean_s if itl_at_percentile_s else 1.0
    return fit.add(batch, itl_mean_s, max(tail, 1.0), compute_decay(window_s))


def compute_batch_at_itl(
    fit: StepFit,
    proven: float | None,
    itl_target_s: float,
    batch_now: float,
    itl_ratio: float | None,
    window_s: float,
) -> tuple[float | None, float | None]:
    """(the largest batch per replica whose ITL at the target's percentile meets
    ``itl_target_s``, the new proven lower bound of it); ``None`` before anything was
    measured.

    Three pieces of evidence:

    * the fitted line, when the batches seen spread enough:
      ``(target / tail - fixed) / per_seq``. Worked example: fixed 5 ms, 0.2 ms per
      sequence, p90 ITL 1.1 × the mean, 50 ms p90 target: (45.5 - 5) / 0.2 = 202;
    * ``proven``: the largest batch per replica seen with its ITL within target (slowly
      forgotten), below which no estimate goes, however a line fitted through noisy
      windows extrapolates;
    * while the ITL is over target, this window's batch scaled by target / measured
      (``batch_now / itl_ratio``): with a fixed part in the step it errs high, so it is
      an upper bound that caps the estimate (and the proven batch) at once. Without a
      line it is also the estimate.
    """
    if proven is not None:
        proven *= compute_decay(window_s)
    over = itl_ratio is not None and itl_ratio > 1.0
    if itl_ratio is not None and not over and batch_now >= MIN_LEARN_BATCH:
        proven = batch_now if proven is None else max(proven, batch_now)
    scaled = batch_now / itl_ratio if itl_ratio and batch_now >= MIN_LEARN_BATCH else None
    line = fit.line()
    if line is None:
        estimate = scaled
    else:
        fixed, per_seq = line
        estimate = max((itl_target_s / fit.tail_ratio - fixed) / per_seq, 1.0)
    if proven is not None:
        estimate = proven if estimate is None else max(estimate, proven)
    if over and scaled is not None:
        estimate = scaled if estimate is None else min(estimate, scaled)
        proven = None if proven is None else min(proven, scaled)
    return estimate, proven
