"""What the policy learns about one replica from live metrics, without a profiling run. Pure.

* **Prefill capacity** (prompt tokens/s one replica sustains): the highest of two lower
  bounds, slowly forgotten (:func:`learn_prefill_capacity`).
* **Decode step time** (how ITL grows with the batch and the KV it reads): a weighted
  least-squares plane through ``(sequences per replica, their KV tokens, mean ITL)`` of
  past windows (:class:`StepFit`), from which the largest batch within the ITL target at
  the current context follows (:func:`compute_batch_at_itl`).

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
#: Share of the KV tokens' variance the batch does not explain before the KV cost is
#: fitted apart from the batch's (1 - squared correlation of the two).
MIN_KV_INDEPENDENCE = 0.05


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
    """Exponentially weighted sums for the plane
    ``mean ITL = fixed + per_seq × batch + per_token × KV tokens``.

    ``batch`` is sequences per replica, ``kv`` the KV tokens they hold (batch × mean
    context), ITL in seconds. A decode step reads the weights once (fixed), does some work
    per sequence, and reads every sequence's KV: at a 30k-token context the KV term is
    several times the per-sequence one, so a line in the batch alone, fitted through
    windows whose contexts differ, takes longer contexts for a steeper batch cost.
    ``tail`` accumulates the ratio of the target's percentile to the mean (the ITL target
    is at a percentile; the plane is fitted to means, which histograms give exactly).
    """

    weight: float = 0.0
    batch: float = 0.0
    batch_sq: float = 0.0
    itl: float = 0.0
    batch_itl: float = 0.0
    tail: float = 0.0
    kv: float = 0.0
    kv_sq: float = 0.0
    batch_kv: float = 0.0
    kv_itl: float = 0.0

    def add(
        self, batch: float, itl_mean_s: float, tail: float, decay: float, kv: float = 0.0
    ) -> StepFit:
        """These sums with older windows weighted by ``decay`` and one new window."""
        return StepFit(
            weight=self.weight * decay + 1.0,
            batch=self.batch * decay + batch,
            batch_sq=self.batch_sq * decay + batch * batch,
            itl=self.itl * decay + itl_mean_s,
            batch_itl=self.batch_itl * decay + batch * itl_mean_s,
            tail=self.tail * decay + tail,
            kv=self.kv * decay + kv,
            kv_sq=self.kv_sq * decay + kv * kv,
            batch_kv=self.batch_kv * decay + batch * kv,
            kv_itl=self.kv_itl * decay + kv * itl_mean_s,
        )

    def plane(self) -> tuple[float, float, float] | None:
        """``(fixed_s, per_seq_s, per_token_s)``, or ``None`` until the batches seen
        spread enough. ``per_token_s`` is 0 when the windows' KV moved with their batch
        (one context throughout: the batch's line then carries the KV cost) or the fit
        gave it no positive weight; ``per_seq_s`` is 0 when only the KV explains the ITL.
        """
        w = self.weight
        if w < 2.0:
            return None
        mean_b, mean_k, mean_i = self.batch / w, self.kv / w, self.itl / w
        var_b = self.batch_sq / w - mean_b * mean_b
        if mean_b <= 0 or var_b < (MIN_BATCH_SPREAD * mean_b) ** 2:
            return None
        cov_bi = self.batch_itl / w - mean_b * mean_i
        var_k = self.kv_sq / w - mean_k * mean_k
        cov_bk = self.batch_kv / w - mean_b * mean_k
        cov_ki = self.kv_itl / w - mean_k * mean_i
        det = var_b * var_k - cov_bk * cov_bk
        per_seq = per_token = 0.0
        if mean_k > 0 and var_k > 0 and det > MIN_KV_INDEPENDENCE * var_b * var_k:
            per_seq = (cov_bi * var_k - cov_ki * cov_bk) / det
            per_token = (cov_ki * var_b - cov_bi * cov_bk) / det
            if per_token <= 0:
                per_seq, per_token = cov_bi / var_b, 0.0
            elif per_seq < 0:
                per_seq, per_token = 0.0, cov_ki / var_k
        else:
            per_seq = cov_bi / var_b
        if per_seq <= 0 and per_token <= 0:
            return None
        fixed = mean_i - per_seq * mean_b - per_token * mean_k
        return max(fixed, 0.0), max(per_seq, 0.0), per_token

    def line(self, context: float = 0.0) -> tuple[float, float] | None:
        """``(fixed_s, per_seq_s)`` at ``context`` tokens per sequence: the plane's cost of
        one more sequence holding that many KV tokens."""
        plane = self.plane()
        if plane is None:
            return None
        fixed, per_seq, per_token = plane
        if per_token and context <= 0:
            context = self.kv / self.batch if self.batch > 0 else 0.0
        return fixed, per_seq + per_token * context

    @property
    def tail_ratio(self) -> float:
        """Mean ratio of the target percentile to the mean ITL (1 before any window)."""
        return self.tail / self.weight if self.weight > 0 else 1.0

    def to_list(self) -> list[float]:
        return [
            self.weight,
            self.batch,
            self.batch_sq,
            self.itl,
            self.batch_itl,
            self.tail,
            self.kv,
            self.kv_sq,
            self.batch_kv,
            self.kv_itl,
        ]

    @classmethod
    def from_list(cls, values: object) -> StepFit:
        """Inverse of :meth:`to_list` (the six sums of a batch-only fit, as older
        versions stored, keep their line); anything malformed gives an empty fit."""
        if not isinstance(values, list | tuple) or len(values) not in (6, 10):
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
    context: float = 0.0,
) -> StepFit:
    """``fit`` after a window of ``batch`` sequences per replica (window average) holding
    ``context`` KV tokens each (0: unknown), when it carried a useful sample of the step
    time."""
    if batch < MIN_LEARN_BATCH or itl_mean_s is None or itl_mean_s <= 0:
        return fit
    tail = itl_at_percentile_s / itl_mean_s if itl_at_percentile_s else 1.0
    kv = batch * max(context, 0.0)
    return fit.add(batch, itl_mean_s, max(tail, 1.0), compute_decay(window_s), kv)


def compute_batch_at_itl(
    fit: StepFit,
    proven: float | None,
    itl_target_s: float,
    batch_now: float,
    itl_ratio: float | None,
    window_s: float,
    context: float = 0.0,
) -> tuple[float | None, float | None]:
    """(the largest batch per replica whose ITL at the target's percentile meets
    ``itl_target_s``, the new proven lower bound of it); ``None`` before anything was
    measured.

    Three pieces of evidence:

    * the fitted plane at ``context`` KV tokens per sequence, when the batches seen
      spread enough: ``(target / tail - fixed) / (per_seq + per_token × context)``.
      Worked example: fixed 5 ms, 0.15 ms per sequence and 50 ns per KV token at a
      1,000-token context (0.2 ms a sequence), p90 ITL 1.1 × the mean, 50 ms p90
      target: (45.5 - 5) / 0.2 = 202; at a 10,000-token context, (45.5 - 5) / 0.65 = 62;
    * ``proven``: the largest batch per replica seen with its ITL within target (slowly
      forgotten), below which no estimate goes, however a plane fitted through noisy
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
    line = fit.line(context)
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
