"""What the simulator needs of an engine, and the adapter over the engine model. Pure.

:class:`SimEngine` is the slice of :class:`tandem.engine.model.Engine` the fleet uses,
with one difference: :meth:`SimEngine.step` returns a :class:`Step`, which reports the
inter-token gaps of the tokens it emitted instead of every request id that got one.
:class:`ModelEngine` is the engine model itself behind that interface (the gaps come
from set arithmetic on the ids); :class:`~tandem.sim.fastdecode.FastDecodeEngine`
computes the same iterations without touching every running sequence, and a test
checks the two agree iteration by iteration.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

from tandem.engine.model import (
    Engine,
    EngineConfig,
    EngineRequest,
    FinishedRequest,
    KVTransferStart,
)


class Step(NamedTuple):
    """One iteration of an engine, as the fleet consumes it (times in seconds).

    A named tuple rather than a frozen dataclass: one is built per iteration, millions
    per run, and tuples are several times cheaper to construct.
    """

    start_s: float
    duration_s: float
    num_seqs: int
    first_tokens: tuple[str, ...]
    """Requests whose first token this iteration emitted."""
    finished: tuple[FinishedRequest, ...]
    kv_transfers_started: tuple[KVTransferStart, ...]
    continuing: int
    """Tokens to requests that also got one in the previous iteration: each waited
    exactly ``end_s - previous end`` (the previous iteration's end)."""
    gap_s: float
    """That common gap, seconds."""
    other_gaps_s: tuple[float, ...]
    """Gaps of tokens to requests back after sitting out (preempted, starved)."""

    @property
    def end_s(self) -> float:
        return self.start_s + self.duration_s


class SimEngine(Protocol):
    """An engine as the fleet drives it."""

    config: EngineConfig
    busy_s_total: float
    prompt_tokens_total: int
    generation_tokens_total: int

    @property
    def num_running(self) -> int: ...

    @property
    def num_waiting(self) -> int: ...

    @property
    def kv_usage(self) -> float: ...

    @property
    def kv_blocks_used(self) -> int: ...

    @property
    def preemptions_total(self) -> int: ...

    @property
    def requests_finished_total(self) -> int: ...

    def add_request(self, req: EngineRequest, now_s: float) -> None: ...

    def step(self, now_s: float) -> Step: ...

    def abort(self, request_id: str, now_s: float) -> FinishedRequest | None: ...

    def release_kv(self, request_id: str) -> bool: ...

    def next_timer_s(self) -> float | None: ...


class ModelEngine(Engine):
    """The engine model, stepping as :class:`SimEngine` requires."""

    def __init__(self, config: EngineConfig, cost: object) -> None:
        super().__init__(config, cost)  # type: ignore[arg-type]
        self._prev_emitted: frozenset[str] = frozenset()
        self._prev_finished: frozenset[str] = frozenset()
        self._prev_end_s = 0.0
        self._last_emit_s: dict[str, float] = {}

    @property
    def kv_blocks_used(self) -> int:
        return self.scheduler.kv.num_used_blocks

    @property
    def preemptions_total(self) -> int:
        return self.scheduler.preemptions

    @property
    def requests_finished_total(self) -> int:
        return sum(self.finished_by_reason.values())

    def step(self, now_s: float) -> Step:  # type: ignore[override]
        result = super().step(now_s)
        if result.idle:
            return Step(now_s, 0.0, 0, (), (), result.kv_transfers_started, 0, 0.0, ())
        end = result.end_s
        emitted = frozenset(result.emitted)
        prev = self._prev_emitted
        continuing = 0
        if prev:
            continuing = len(emitted & prev)
            for rid in prev - emitted - self._prev_finished:
                self._last_emit_s[rid] = self._prev_end_s
        returning = emitted - prev
        if result.first_tokens:
            returning -= frozenset(result.first_tokens)
        others: tuple[float, ...] = ()
        if returning:
            pop = self._last_emit_s.pop
            others = tuple(sorted(end - pop(rid, self._prev_end_s) for rid in returning))
        gap = end - self._prev_end_s
        self._prev_emitted = emitted
        self._prev_finished = frozenset(f.request_id for f in result.finished)
        self._prev_end_s = end
        return Step(
            result.start_s, result.duration_s, result.num_seqs, result.first_tokens,
            result.finished, result.kv_transfers_started, continuing, gap, others,
        )  # fmt: skip

    def abort(self, request_id: str, now_s: float) -> FinishedRequest | None:
        self._last_emit_s.pop(request_id, None)
        return super().abort(request_id, now_s)
