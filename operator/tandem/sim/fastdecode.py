"""The engine model's continuous batching, without touching every running sequence. Pure.

A decode pool spends almost all its iterations on sequences that each compute one
token, sample one token and, every ``block_size`` tokens, take one more KV block. The
engine model (:mod:`tandem.engine.model`) does that per sequence per iteration, which
for a scaled one-hour trace means tens of millions of Python-level updates.
:class:`FastDecodeEngine` runs the same algorithm (the scheduler's decode-first
continuous batching with chunked prefill, FCFS, preemption by recompute of the
latest-admitted sequence, timed KV pulls, the same cost model) but keeps such
*steady* sequences implicit: a steady sequence's context grows by one per iteration,
so its state at iteration ``g`` is ``c0 + (g - g0)``, and the pool's aggregates are
O(1) per iteration:

* sequences scheduled: the number of steady sequences ``B``;
* KV read: ``sum(c0) + B*g - sum(g0)``;
* blocks to allocate: the steady sequences whose context is a multiple of the block
  size, counted per residue of ``(g0 - c0) mod block_size``;
* finishes: a heap keyed by the iteration of each sequence's last token.

Everything else (sequences arriving, finishing their KV pull, prefilling in chunks,
coming back after preemption) is handled one by one exactly as the scheduler does,
and any iteration the shortcut cannot decide alone (not enough free blocks, so the
preemption order matters; a token budget smaller than the batch) materialises every
sequence and runs the scheduler's per-sequence algorithm. Supported: FCFS,
``prioritize="decode"``, continuous batching, chunked prefill, no prefix caching, no
``stop_after_tokens``, timed transfers; prefill (KV held for a remote decode, with its
lease), decode and aggregated roles. ``tests/sim`` steps both on random workloads and
checks that every iteration agrees.
"""

from __future__ import annotations

import heapq

from tandem.engine.model import (
    CostModel,
    EngineConfig,
    EngineRequest,
    FinishedRequest,
    FinishReason,
    KVTransferStart,
)
from tandem.sim.engines import Step
from tandem.sim.fastcost import fast_iteration_s
from tandem.sim.fastsched import Batch, FastScheduler
from tandem.sim.fastseq import DONE, HELD, KV_READY, RUNNING, TRANSFERRING, WAITING, FastSeq


def supports(config: EngineConfig) -> bool:
    """Whether :class:`FastDecodeEngine` reproduces the engine model for ``config``."""
    return (
        config.scheduling_policy == "fcfs"
        and config.batching == "continuous"
        and config.prioritize == "decode"
        and config.enable_chunked_prefill
        and not config.enable_prefix_caching
        and config.kv_transfer_mode == "timed"
    )


class FastDecodeEngine:
    """An engine with the engine model's behaviour; same interface as :class:`ModelEngine`."""

    def __init__(self, config: EngineConfig, cost: CostModel) -> None:
        if not supports(config):
            raise ValueError("FastDecodeEngine needs fcfs, continuous, decode-first batching")
        self.config = config
        self.cost = cost
        self.sched = FastScheduler(config, cost)
        self.seqs: dict[str, FastSeq] = {}
        self.order = 0
        self.last_end_s = 0.0
        """When the last non-empty iteration ended."""
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.iterations_total = 0
        self.busy_s_total = 0.0
        self.finished_by_reason: dict[str, int] = {}
        self.held: dict[str, tuple[FastSeq, float]] = {}
        self.held_heap: list[tuple[float, int, str]] = []
        self.kv_expired_total = 0
        self._iteration_s = fast_iteration_s(cost)

    # -- gauges -------------------------------------------------------------------

    @property
    def num_running(self) -> int:
        return self.sched.live

    @property
    def num_waiting(self) -> int:
        s = self.sched
        return len(s.waiting) + len(s.transferring) + len(s.kv_ready)

    @property
    def kv_blocks_used(self) -> int:
        return self.config.num_gpu_blocks - self.sched.free

    @property
    def kv_usage(self) -> float:
        return self.kv_blocks_used / self.config.num_gpu_blocks

    @property
    def preemptions_total(self) -> int:
        return self.sched.preemptions

    @property
    def requests_finished_total(self) -> int:
        return sum(self.finished_by_reason.values())

    def next_timer_s(self) -> float | None:
        times = [h[0][0] for h in (self.sched.transfer_heap, self.held_heap) if h]
        return min(times) if times else None

    # -- requests -----------------------------------------------------------------

    def add_request(self, req: EngineRequest, now_s: float) -> None:
        cfg = self.config
        if req.request_id in self.seqs:
            raise ValueError(f"request id {req.request_id!r} is already in the engine")
        if req.prompt_tokens < 1 or req.max_tokens < 1:
            raise ValueError("prompt_tokens and max_tokens must be >= 1")
        if req.prompt_tokens >= cfg.max_model_len:
            raise ValueError(f"prompt of {req.prompt_tokens} tokens leaves no room for output")
        if req.stop_after_tokens is not None or req.block_hashes:
            raise ValueError("FastDecodeEngine supports neither stop_after_tokens nor hashes")
        max_tokens = min(req.max_tokens, cfg.max_model_len - req.prompt_tokens)
        seq = FastSeq(req, now_s, self.order, max_tokens)
        self.order += 1
        self.seqs[req.request_id] = seq
        self.sched.waiting.append(seq)

    def release_kv(self, request_id: str) -> bool:
        """Prefill role: the decode side pulled the KV; free the held blocks."""
        entry = self.held.pop(request_id, None)
        if entry is None:
            return False
        seq = entry[0]
        seq.status = DONE
        self.sched.free += seq.blocks
        seq.blocks = 0
        return True

    def abort(self, request_id: str, now_s: float) -> FinishedRequest | None:
        seq = self.seqs.get(request_id)
        if seq is None:
            self.release_kv(request_id)
            return None
        s = self.sched
        if seq.steady:
            s.unsteady(seq, s.g + 1, self.last_end_s)
        if seq.status == WAITING:
            s.waiting.remove(seq)
        elif seq.status == RUNNING:
            s.drop_running(seq)
        elif seq.status == TRANSFERRING:
            del s.transferring[request_id]
        elif seq.status == KV_READY:
            s.kv_ready.remove(seq)
        return self._finish(seq, "abort", now_s)

    # -- one iteration ------------------------------------------------------------

    def step(self, now_s: float) -> Step:
        s = self.sched
        if self.held_heap and self.held_heap[0][0] <= now_s:
            self._expire_leases(now_s)
        s.complete_transfers(now_s)
        g = s.steady_only()
        if g is not None:
            return self._steady_only(now_s, g, s.steady.count)
        transfers: list[KVTransferStart] = []
        steady, batch = s.schedule(now_s, self.last_end_s, transfers)
        if not steady and not batch:
            return Step(now_s, 0.0, 0, (), (), tuple(transfers), 0, 0.0, ())
        g = s.g
        kv_read = s.steady.kv_read(g) if steady else 0
        pairs = float(kv_read + steady)
        sampled = steady
        tokens = steady
        for seq, n in batch:
            c = seq.c
            pairs += n * c + n * (n + 1) * 0.5
            kv_read += c
            tokens += n
            if c + n == seq.tokens:
                sampled += 1
        duration = self._iteration_s(tokens, pairs, steady + len(batch), kv_read, sampled)
        return self._apply(now_s, now_s + duration, duration, steady, batch, transfers)

    @property
    def lazy_ok(self) -> bool:
        """Whether stepping can wait until someone looks: no queued request will start a
        KV pull (an event for its prefill pod) and no lease can expire (prefill role)."""
        return not self.held and all(seq.remote is None for seq in self.sched.waiting)

    def run_steady(self, now_s: float, until_s: float, gaps: list[float]) -> Step | None:
        """Back-to-back iterations of steady sequences alone, the first starting at
        ``now_s``: each that ends by ``until_s`` and finishes nobody is applied here, its
        inter-token gap appended to ``gaps`` (for every steady sequence, a number that
        does not change meanwhile); the first that does not (it ends later, or finishes
        requests) is started and returned as :meth:`step` would return it. None when the
        next iteration is not steady-only: then call :meth:`step` at ``last_end_s``.

        The same iterations as calling :meth:`step` at each end, without building a
        result for each (the simulator's batched engine steps).
        """
        s = self.sched
        steady_set = s.steady
        steady = steady_set.count
        if not steady or s.explicit or s.kv_ready or s.waiting:
            return None
        if steady >= self.config.max_num_batched_tokens:
            return None
        # Constant over the run (nobody joins or leaves until it stops): hoisted.
        residue, bs, heap = steady_set.residue, steady_set.block_size, steady_set.heap
        base = steady_set.sum_c0 - steady_set.sum_g0
        iteration_s = self._iteration_s
        transfers, held = s.transfer_heap, self.held_heap
        start = now_s
        g = s.g
        n = 0
        last_end = self.last_end_s
        result: Step | None = None
        while True:
            if (transfers and transfers[0][0] <= start) or (held and held[0][0] <= start):
                break
            g1 = g + 1
            needed = residue[g1 % bs]
            if needed > s.free:
                break
            s.g = g = g1
            s.free -= needed
            kv_read = base + steady * g
            duration = iteration_s(steady, float(kv_read + steady), steady, kv_read, steady)
            end = start + duration
            if end > until_s or (heap and heap[0][0] == g):
                result = self._steady_only(start, g, steady, duration, last_end)
                break
            n += 1
            gaps.append(end - last_end)
            last_end = end
            self.busy_s_total += duration
            start = end
        self.generation_tokens_total += steady * n
        self.iterations_total += n
        if result is None:
            self.last_end_s = last_end
        return result

    def _steady_only(
        self,
        start: float,
        g: int,
        steady: int,
        duration: float | None = None,
        prev_end: float | None = None,
    ) -> Step:
        """An iteration of steady sequences only (the common case), in O(finishes);
        ``prev_end``: when the previous iteration ended, if not ``last_end_s``."""
        if duration is None:
            kv_read = self.sched.steady.kv_read(g)
            duration = self._iteration_s(steady, float(kv_read + steady), steady, kv_read, steady)
        end = start + duration
        finished: tuple[FinishedRequest, ...] = ()
        if self.sched.steady.due_at(g):
            finished = tuple(self._finish_steady(g, end))
        self.generation_tokens_total += steady
        self.iterations_total += 1
        self.busy_s_total += duration
        if prev_end is None:
            prev_end = self.last_end_s
        self.last_end_s = end
        return Step(start, duration, steady, (), finished, (), steady, end - prev_end, ())

    def _finish_steady(self, g: int, end: float) -> list[FinishedRequest]:
        """Steady sequences whose last token is this iteration's."""
        s = self.sched
        bs = s.bs
        finished: list[FinishedRequest] = []
        for seq in s.steady.pop_due(g):
            c_final = seq.c0 + (g - seq.g0) + 1
            seq.c, seq.tokens, seq.out = c_final, c_final + 1, seq.max_tokens
            seq.blocks = -(-c_final // bs)
            seq.status = DONE
            s.live -= 1
            finished.append(self._finish(seq, "length", end))
        return finished

    def _apply(
        self,
        start: float,
        end: float,
        duration: float,
        steady: int,
        batch: Batch,
        transfers: list[KVTransferStart],
    ) -> Step:
        s = self.sched
        g = s.g
        first: list[str] = []
        others: list[float] = []
        emitted = steady
        finished = self._finish_steady(g, end) if s.steady.due_at(g) else []
        continuing = steady
        prev_end = self.last_end_s
        for seq, n in batch:
            seq.c += n
            if seq.c != seq.tokens:
                continue
            seq.out += 1
            seq.tokens += 1
            emitted += 1
            if seq.first_token_s is None:
                seq.first_token_s = end
                first.append(seq.rid)
                self.prompt_tokens_total += seq.prompt
            elif seq.last_emit_s == prev_end:
                continuing += 1
            elif seq.last_emit_s is not None:
                others.append(end - seq.last_emit_s)
            seq.last_emit_s = end
            if seq.out >= seq.max_tokens:
                s.drop_running(seq)
                finished.append(self._finish(seq, "length", end))
            else:
                s.make_steady(seq, g + 1)
        self.generation_tokens_total += emitted
        self.iterations_total += 1
        self.busy_s_total += duration
        self.last_end_s = end
        if len(others) > 1:
            others.sort()
        return Step(
            start, duration, steady + len(batch), tuple(first), tuple(finished),
            tuple(transfers), continuing, end - prev_end, tuple(others),
        )  # fmt: skip

    def _finish(self, seq: FastSeq, reason: FinishReason, now_s: float) -> FinishedRequest:
        blocks = seq.blocks
        hold = seq.hold and reason in ("stop", "length")
        del self.seqs[seq.rid]
        if hold:
            old = self.held.pop(seq.rid, None)
            if old is not None:
                self.sched.free += old[0].blocks
                old[0].blocks = 0
            seq.status = HELD
            expiry_s = now_s + self.config.kv_lease_s
            self.held[seq.rid] = (seq, expiry_s)
            heapq.heappush(self.held_heap, (expiry_s, seq.order, seq.rid))
        else:
            self.sched.free += blocks
            seq.blocks = 0
            seq.status = DONE
        self.finished_by_reason[reason] = self.finished_by_reason.get(reason, 0) + 1
        return FinishedRequest(
            seq.rid, reason, seq.prompt, seq.out, 0, seq.max_tokens, seq.arrival_s,
            seq.first_scheduled_s, seq.first_token_s, now_s, seq.preemptions, hold, blocks,
        )  # fmt: skip

    def _expire_leases(self, now_s: float) -> None:
        heap = self.held_heap
        while heap and heap[0][0] <= now_s:
            expiry_s, order, rid = heapq.heappop(heap)
            entry = self.held.get(rid)
            if entry is None or entry[1] != expiry_s or entry[0].order != order:
                continue
            self.release_kv(rid)
            self.kv_expired_total += 1
