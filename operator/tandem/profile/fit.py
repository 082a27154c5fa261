"""Fitting the engine model's cost to measured sweep points, and what it predicts. Pure.

The cost model (:mod:`tandem.engine.model.cost`) prices one iteration as::

    t = F + S x seqs + max(Cc x FLOPs, Cm x bytes)

with ``F`` the fixed cost of an iteration, ``S`` the cost per sequence in it, ``Cc``
seconds per FLOP and ``Cm`` seconds per byte (the inverse of the rates the engine
achieves). FLOPs and bytes follow from the model's architecture and the iteration's
shape (tokens computed, attention pairs, KV read, tokens sampled). A client also sees
``R``, the time a request spends outside the iterations before its first token (HTTP,
the API server, the hand-over to the engine loop): fitted too, reported, and left out of
the preset (the simulated engine has its own).

**Which iterations a point runs does not depend on how long they take**: every request of
a wave arrives at once, so the engine model, stepped in virtual time with a cost that only
records each iteration's shape, runs exactly the iterations the simulated engine would.
Each point's observed value (TTFT of a prefill point, ITL of a decode point, see
:attr:`~tandem.profile.points.PointResult.observed_s`) is then matched by the mean of the
same quantity over the wave's requests, a weighted sum of iteration times: linear in
``F``, ``S`` and ``R`` for given ``(Cc, Cm)``. The fit searches ``(Cc, Cm)`` on a
logarithmic grid (coarse, then fine around the best, then a pattern search) and solves
``F``, ``S`` and ``R`` (all >= 0) in closed form by weighted least squares with weights
``1/measured²`` (relative error), as :mod:`tandem.engine.model.calibrate` does, and
reweights points far off (Huber) so that one a stall hit does not bend the rest. Where the
points cannot tell a term apart (the memory term never binding, say), the smallest value
that fits as well wins: a term that was not seen stays negligible rather than made up.

A fitted device has efficiency 1.0: ``1/Cc`` and ``1/Cm`` are what the engine achieved.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

from tandem.engine.model import (
    Calibration,
    CostModel,
    Engine,
    EngineConfig,
    EngineRequest,
    GpuSpec,
    ModelSpec,
)
from tandem.engine.model.cost import IterationTime
from tandem.engine.model.cost_preset import CostPreset
from tandem.profile.plan import PointSpec
from tandem.profile.points import PointResult, percentile

Shape = tuple[int, float, int, int, int]
"""(compute tokens, attention pairs, sequences, KV read tokens, sampled): one iteration."""

UNIT = Calibration(1.0, 1.0, 0.0, 0.0)
#: (log10 low, log10 high) of seconds per FLOP and per byte the search spans: from far
#: faster than any accelerator (a term that never binds) to far slower than a CPU.
CC_RANGE = (-19.0, -7.0)
CM_RANGE = (-17.0, -6.0)
COARSE_STEP = 0.25
FINE_STEP = 0.02


@dataclass(frozen=True)
class EngineLimits:
    """The measured engine's scheduler and cache."""

    num_gpu_blocks: int
    block_size: int
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int

    @property
    def kv_token_capacity(self) -> int:
        return self.num_gpu_blocks * self.block_size


@dataclass(frozen=True)
class _Recorder(CostModel):
    """A cost model that records each iteration's shape and says it took one second."""

    shapes: list[Shape] = field(default_factory=list, compare=False)

    @cached_property
    def iteration_fn(self) -> IterationTime:
        shapes = self.shapes

        def iteration_s(tokens: int, pairs: float, seqs: int, kv_read: int, sampled: int
                        ) -> float:  # fmt: skip
            shapes.append((tokens, pairs, seqs, kv_read, sampled))
            return 1.0

        return iteration_s


@dataclass(frozen=True)
class Wave:
    """One wave's iterations, and each request's first and last of them."""

    shapes: tuple[Shape, ...]
    first: tuple[int, ...]
    """Per request: the iteration (0-based) that gave it its first token."""
    last: tuple[int, ...]
    tokens: tuple[int, ...]


def build_engine(cost: CostModel, limits: EngineLimits) -> Engine:
    """The engine model of the measured engine (FCFS, no prefix caching: every prompt of
    the sweep is new)."""
    return Engine(
        EngineConfig(
            num_gpu_blocks=limits.num_gpu_blocks,
            block_size=limits.block_size,
            max_num_seqs=limits.max_num_seqs,
            max_num_batched_tokens=limits.max_num_batched_tokens,
            max_model_len=limits.max_model_len,
            enable_prefix_caching=False,
        ),
        cost,
    )


def run_wave(engine: Engine, point: PointSpec) -> list[tuple[float, float]]:
    """Step ``engine`` in virtual time through one wave of ``point`` (all requests at
    t = 0); each request's (first token, last token) times, seconds."""
    max_tokens = min(point.output_tokens, engine.config.max_model_len - point.prompt_tokens)
    for i in range(point.concurrency):
        engine.add_request(EngineRequest(f"r{i}", point.prompt_tokens, max_tokens), 0.0)
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    now = 0.0
    while engine.has_work:
        result = engine.step(now)
        if result.idle:  # nothing can run: blocked on KV space forever
            raise ValueError(f"{point.label}: the engine model cannot run this wave")
        now = result.end_s
        for rid in result.first_tokens:
            first[rid] = now
        for rid in result.emitted:
            last[rid] = now
    return [(first[f"r{i}"], last[f"r{i}"]) for i in range(point.concurrency)]


def record_wave(model: ModelSpec, limits: EngineLimits, point: PointSpec) -> Wave:
    """The iterations one wave of ``point`` runs on the engine model."""
    recorder = _Recorder(model, _unit_gpu(1.0, 1.0), 1, UNIT)
    times = run_wave(build_engine(recorder, limits), point)
    # With every iteration one second long, token times are iteration counts.
    max_tokens = min(point.output_tokens, limits.max_model_len - point.prompt_tokens)
    return Wave(
        shapes=tuple(recorder.shapes),
        first=tuple(round(f) - 1 for f, _ in times),
        last=tuple(round(t) - 1 for _, t in times),
        tokens=(max_tokens,) * point.concurrency,
    )


def _unit_gpu(peak_flops: float, hbm_bytes_per_s: float) -> GpuSpec:
    return GpuSpec("unit", peak_flops, hbm_bytes_per_s, 1, "h100")


@dataclass(frozen=True)
class _Observation:
    """One measured median as a weighted sum of iterations, the iterations sorted by
    bytes per FLOP with prefix sums, so that the roofline term of any ``(Cc, Cm)`` is two
    lookups."""

    measured_s: float
    fixed: float
    """Sum of the weights: the coefficient of ``F``."""
    per_seq: float
    """Sum of weight x sequences: the coefficient of ``S``."""
    request: float
    """The coefficient of ``R``: 1 for a TTFT, 0 for an ITL."""
    weight: float
    """How much the point counts (1, less for an outlier; see :func:`fit_cost`)."""
    ratios: tuple[float, ...]
    """Bytes per FLOP of each iteration, ascending."""
    flops_prefix: tuple[float, ...]
    """Weighted FLOPs of the first k iterations, k = 0..n (the compute-bound ones when
    Cc/Cm is above their ratio)."""
    bytes_suffix: tuple[float, ...]
    """Weighted bytes of the iterations from k on, k = 0..n (the memory-bound ones)."""

    def roofline_s(self, cc: float, cm: float) -> float:
        # Iteration i is compute-bound when cc x flops >= cm x bytes, i.e. bytes/flops <= cc/cm.
        cut = len(self.ratios) if cm == 0 else bisect.bisect_right(self.ratios, cc / cm)
        return cc * self.flops_prefix[cut] + cm * self.bytes_suffix[cut]


def _observation(model: ModelSpec, wave: Wave, result: PointResult) -> _Observation:
    flops_of = CostModel(model, _unit_gpu(1.0, 1e300), 1, UNIT).iteration_fn
    bytes_of = CostModel(model, _unit_gpu(1e300, 1.0), 1, UNIT).iteration_fn
    weights = _weights(wave, result.spec.kind)
    rows = []
    for i, shape in enumerate(wave.shapes):
        if weights[i]:
            flops, nbytes = flops_of(*shape), bytes_of(*shape)
            rows.append((nbytes / flops if flops > 0 else math.inf, weights[i], shape[2], flops,
                         nbytes))  # fmt: skip
    rows.sort()
    flops_prefix = [0.0]
    for _, w, _, flops, _ in rows:
        flops_prefix.append(flops_prefix[-1] + w * flops)
    bytes_suffix = [0.0]
    for _, w, _, _, nbytes in reversed(rows):
        bytes_suffix.append(bytes_suffix[-1] + w * nbytes)
    return _Observation(
        measured_s=result.observed_s,
        fixed=sum(w for _, w, _, _, _ in rows),
        per_seq=sum(w * seqs for _, w, seqs, _, _ in rows),
        request=1.0 if result.spec.kind == "prefill" else 0.0,
        weight=1.0,
        ratios=tuple(r for r, _, _, _, _ in rows),
        flops_prefix=tuple(flops_prefix),
        bytes_suffix=tuple(reversed(bytes_suffix)),
    )


def _weights(wave: Wave, kind: str) -> list[float]:
    """Weights of the iterations in the wave's mean TTFT (prefill) or mean ITL (decode)."""
    weights = [0.0] * len(wave.shapes)
    n = len(wave.first)
    for first, last, tokens in zip(wave.first, wave.last, wave.tokens, strict=True):
        if kind == "prefill":
            for i in range(first + 1):
                weights[i] += 1.0 / n
        elif tokens > 1:
            for i in range(first + 1, last + 1):
                weights[i] += 1.0 / n / (tokens - 1)
    return weights


@dataclass(frozen=True)
class CostFit:
    """The fitted constants and how well they match."""

    fixed_s: float
    """``F``: seconds every iteration costs."""
    per_seq_s: float
    """``S``: seconds per sequence in an iteration."""
    s_per_flop: float
    s_per_byte: float
    request_s: float
    """``R``: seconds a request spends outside the engine's iterations before its first
    token (HTTP, the API server, the hand-over to the engine loop), seen in every TTFT."""
    errors_pct: tuple[float, ...]
    """Relative error of the fit on each point, percent (signed: model over measured)."""

    @property
    def mean_abs_error_pct(self) -> float:
        return sum(abs(e) for e in self.errors_pct) / max(len(self.errors_pct), 1)

    @property
    def max_abs_error_pct(self) -> float:
        return max((abs(e) for e in self.errors_pct), default=0.0)


Linear = tuple[float, float, float]
"""(F, S, R)."""


def _solve(obs: Sequence[_Observation], cc: float, cm: float) -> tuple[float, Linear]:
    """The best ``(F, S, R) >= 0`` for ``(Cc, Cm)`` and its relative squared error.

    Weighted least squares on the three coefficients, with each subset of them held at 0
    tried where the free solution is negative (three unknowns: eight subsets at most)."""
    rows = [((o.fixed, o.per_seq, o.request), o.measured_s - o.roofline_s(cc, cm),
             o.measured_s / math.sqrt(o.weight)) for o in obs]  # fmt: skip
    best: tuple[float, Linear] = (math.inf, (0.0, 0.0, 0.0))
    for free in ((0, 1, 2), (0, 1), (0, 2), (1, 2), (0,), (1,), (2,), ()):
        theta = _least_squares(rows, free)
        if theta is None or min(theta) < 0:
            continue
        sse = sum(((sum(t * x for t, x in zip(theta, a, strict=True)) - r) / y) ** 2
                  for a, r, y in rows)  # fmt: skip
        if sse < best[0]:
            best = (sse, theta)
        if len(free) == 3:
            break  # the unconstrained optimum is feasible: nothing beats it
    return best


def _least_squares(
    rows: Sequence[tuple[Linear, float, float]], free: tuple[int, ...]
) -> Linear | None:
    """Weighted (1/y²) least squares over the coefficients in ``free``, the others 0;
    ``None`` when they cannot be told apart (a singular system)."""
    n = len(free)
    matrix = [[0.0] * n for _ in range(n)]
    vector = [0.0] * n
    for a, r, y in rows:
        w = 1.0 / (y * y)
        for i, fi in enumerate(free):
            vector[i] += w * a[fi] * r
            for j, fj in enumerate(free):
                matrix[i][j] += w * a[fi] * a[fj]
    solved = _gauss(matrix, vector)
    if solved is None:
        return None
    theta = [0.0, 0.0, 0.0]
    for i, fi in enumerate(free):
        theta[fi] = solved[i]
    return theta[0], theta[1], theta[2]


def _gauss(matrix: list[list[float]], vector: list[float]) -> list[float] | None:
    """Solve ``matrix x = vector`` (at most 3 x 3) by elimination with partial pivoting.

    >>> _gauss([[2.0, 1.0], [1.0, 3.0]], [3.0, 5.0])
    [0.8, 1.4]
    """
    n = len(vector)
    a = [[*row, b] for row, b in zip(matrix, vector, strict=True)]
    scale = max((abs(x) for row in matrix for x in row), default=0.0)
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(a[r][col]))
        if abs(a[pivot][col]) <= 1e-12 * scale:
            return None
        a[col], a[pivot] = a[pivot], a[col]
        for r in range(n):
            if r != col:
                f = a[r][col] / a[col][col]
                a[r] = [x - f * y for x, y in zip(a[r], a[col], strict=True)]
    return [round(a[i][n] / a[i][i], 12) for i in range(n)]


def _better(sse: float, best_sse: float) -> bool:
    """Better by more than rounding: where two terms cannot be told apart the errors tie
    up to the last bits, and the first (smallest) value tried must keep its place."""
    return sse < best_sse if math.isinf(best_sse) else sse < best_sse - max(best_sse * 1e-9, 1e-18)


def _grid(low: float, high: float, step: float) -> list[float]:
    count = round((high - low) / step)
    return [10 ** (low + i * step) for i in range(count + 1)]


#: Relative error beyond which a point counts less (Huber's weights): a point a stall hit
#: (a busy machine's, an engine's first sight of a shape) must not bend the whole fit.
HUBER_PCT = 10.0
ROBUST_ROUNDS = 4


def fit_cost(model: ModelSpec, limits: EngineLimits, results: Sequence[PointResult]) -> CostFit:
    """Fit ``F``, ``S``, ``Cc``, ``Cm`` and ``R`` to the points (needs 3 or more).

    Iteratively reweighted: after each fit, a point more than :data:`HUBER_PCT` off
    counts ``HUBER_PCT / its error`` as much in the next (at most :data:`ROBUST_ROUNDS`
    fits; the grid is searched whole once, then around the last best)."""
    usable = [r for r in results if math.isfinite(r.observed_s) and r.observed_s > 0]
    if len(usable) < 3:
        raise ValueError(f"{len(usable)} usable point(s): the fit needs 3 or more")
    obs = [_observation(model, record_wave(model, limits, r.spec), r) for r in usable]
    best: tuple[float, float, float, Linear] = (math.inf, 0.0, 0.0, (0.0, 0.0, 0.0))
    for cc in _grid(*CC_RANGE, COARSE_STEP):
        for cm in _grid(*CM_RANGE, COARSE_STEP):
            sse, theta = _solve(obs, cc, cm)
            if _better(sse, best[0]):
                best = (sse, cc, cm, theta)
    for _ in range(ROBUST_ROUNDS):
        best = _polish(obs, _refine(obs, best))
        errors = _errors_pct(obs, best)
        weights = [min(1.0, HUBER_PCT / abs(e)) if e else 1.0 for e in errors]
        if all(abs(w - o.weight) < 0.01 for w, o in zip(weights, obs, strict=True)):
            break
        obs = [dataclasses.replace(o, weight=w) for o, w in zip(obs, weights, strict=True)]
        sse, theta = _solve(obs, best[1], best[2])
        best = (sse, best[1], best[2], theta)
    _, cc, cm, (fixed, per_seq, request) = best
    return CostFit(fixed, per_seq, cc, cm, request, tuple(_errors_pct(obs, best)))


def _refine(
    obs: Sequence[_Observation], best: tuple[float, float, float, Linear]
) -> tuple[float, float, float, Linear]:
    """The fine grid, 1.5 coarse steps around ``best``."""
    _, cc0, cm0, _ = best
    around = COARSE_STEP * 1.5
    for cc in _grid(math.log10(cc0) - around, math.log10(cc0) + around, FINE_STEP):
        for cm in _grid(math.log10(cm0) - around, math.log10(cm0) + around, FINE_STEP):
            sse, theta = _solve(obs, cc, cm)
            if _better(sse, best[0]):
                best = (sse, cc, cm, theta)
    return best


def _errors_pct(
    obs: Sequence[_Observation], best: tuple[float, float, float, Linear]
) -> list[float]:
    _, cc, cm, (fixed, per_seq, request) = best
    errors = []
    for o in obs:
        modelled = fixed * o.fixed + per_seq * o.per_seq + request * o.request
        modelled += o.roofline_s(cc, cm)
        errors.append((modelled - o.measured_s) / o.measured_s * 100.0)
    return errors


def _polish(
    obs: Sequence[_Observation], best: tuple[float, float, float, Linear]
) -> tuple[float, float, float, Linear]:
    """Past the grid: a pattern search on ``(log Cc, log Cm)``, halving its step from a
    grid step down to 1e-4 decades, so that the grid's spacing does not show in F and S
    (with weights 16 GB and Cm off by 2 %, F would be off by 0.3 ms)."""
    step = FINE_STEP
    while step > 1e-4:
        moved = False
        for dcc, dcm in ((step, 0.0), (-step, 0.0), (0.0, step), (0.0, -step)):
            cc, cm = best[1] * 10**dcc, best[2] * 10**dcm
            sse, theta = _solve(obs, cc, cm)
            if _better(sse, best[0]):
                best, moved = (sse, cc, cm, theta), True
        if not moved:
            step /= 2
    # A term the points do not pin (its iterations never bind) ties over a range of
    # values; take it down to where it stays negligible, not the edge where it would bind.
    for axis, low in ((2, CM_RANGE[0]), (1, CC_RANGE[0])):
        while math.log10(best[1] if axis == 1 else best[2]) - 1 >= low:
            cc, cm = (best[1] / 10, best[2]) if axis == 1 else (best[1], best[2] / 10)
            sse, theta = _solve(obs, cc, cm)
            if _better(best[0], sse):
                break
            best = (sse, cc, cm, theta)
    return best


def build_preset(
    model: ModelSpec, limits: EngineLimits, fit: CostFit, device: str = "measured"
) -> CostPreset:
    """The preset of a fitted engine: its rates as the device, efficiency 1.0, the
    overheads per layer (the cost model's unit)."""
    kv_bytes = limits.kv_token_capacity * model.kv_bytes_per_token
    gpu = GpuSpec(
        name=device,
        peak_flops=1.0 / fit.s_per_flop,
        hbm_bytes_per_s=1.0 / fit.s_per_byte,
        memory_bytes=int(model.weight_bytes + kv_bytes),
        calibration_family="h100",
    )
    layers = model.num_layers
    return CostPreset(
        model=model,
        gpu=gpu,
        calibration=Calibration(1.0, 1.0, fit.fixed_s / layers, fit.per_seq_s / layers),
        num_gpu_blocks=limits.num_gpu_blocks,
        block_size=limits.block_size,
        max_num_seqs=limits.max_num_seqs,
        max_num_batched_tokens=limits.max_num_batched_tokens,
        max_model_len=limits.max_model_len,
        fit={
            "points": len(fit.errors_pct),
            "mean_abs_error_pct": round(fit.mean_abs_error_pct, 2),
            "max_abs_error_pct": round(fit.max_abs_error_pct, 2),
            "fixed_s_per_iteration": fit.fixed_s,
            "s_per_sequence": fit.per_seq_s,
            "request_overhead_s": fit.request_s,
        },
    )


def estimate_frontend_latency(results: Sequence[PointResult]) -> float | None:
    """What the engine's front end adds to a request's first token beyond the engine's
    own TTFT: the median, over the prefill points run one request at a time, of the
    clients' median TTFT minus the engine's (HTTP, the API server, the hand-over to the
    engine loop and back). ``None`` where no such point has the engine's own times.

    >>> from tandem.profile.plan import PointSpec
    >>> from tandem.profile.points import RequestTiming
    >>> def point(prompt, client_s, engine_s, concurrency=1):
    ...     spec = PointSpec("prefill", prompt, 1, concurrency, 3)
    ...     timing = RequestTiming(prompt, 1, client_s, client_s)
    ...     return PointResult(spec, (timing,) * 3, engine_ttfts_s=(engine_s,))
    >>> round(estimate_frontend_latency([point(16, 0.012, 0.004), point(256, 0.020, 0.013),
    ...                                  point(16, 0.500, 0.010, concurrency=8)]), 4)
    0.0075
    >>> estimate_frontend_latency([point(16, 0.012, 0.004, concurrency=8)]) is None
    True
    """
    gaps = [
        r.ttft_s() - engine
        for r in results
        if r.spec.kind == "prefill" and r.spec.concurrency == 1
        and (engine := r.engine_ttft_s) is not None and engine > 0 and r.requests
    ]  # fmt: skip
    if not gaps:
        return None
    return max(percentile(gaps, 50), 0.0)


def predict_point(preset: CostPreset, point: PointSpec) -> tuple[float, float | None]:
    """The engine model's mean TTFT and mean ITL (``None`` for one token) of one wave of
    ``point``, seconds."""
    limits = EngineLimits(preset.num_gpu_blocks, preset.block_size, preset.max_num_seqs,
                          preset.max_num_batched_tokens, preset.max_model_len)  # fmt: skip
    times = run_wave(build_engine(preset.cost_model(), limits), point)
    tokens = min(point.output_tokens, preset.max_model_len - point.prompt_tokens)
    ttft = sum(f for f, _ in times) / len(times)
    if tokens < 2:
        return ttft, None
    return ttft, sum((last - f) / (tokens - 1) for f, last in times) / len(times)
