"""The engine model: requests in, iterations out, time always passed in. Pure.

``Engine`` is what both drivers step: the simulated server (real time, one asyncio task)
and the fleet simulator (virtual time, an event heap). A driver calls
:meth:`Engine.add_request` as requests arrive, :meth:`Engine.step` whenever the previous
iteration has ended (``result.end_s``), and :meth:`Engine.next_timer_s` to know when an idle
engine next needs a step (a KV transfer finishing, a lease expiring). Nothing here reads a
clock.

Per-iteration work is O(scheduled sequences), or O(1) for decoding sequences with
``EngineConfig.steady_decode`` (the simulator's setting; :mod:`~tandem.engine.model.steady`):
then an iteration of decodes alone costs O(requests finishing), and
:meth:`Engine.run_steady` applies a run of such iterations in one call.
"""

from __future__ import annotations

import heapq

from tandem.engine.model.config import EngineConfig, default_scheduler_limits
from tandem.engine.model.cost import CostModel
from tandem.engine.model.presets import get_gpu, get_model
from tandem.engine.model.request import (
    EngineRequest,
    EngineStats,
    FinishedRequest,
    FinishReason,
    HeldKV,
    IterationResult,
)
from tandem.engine.model.scheduler import Batch, Scheduler
from tandem.engine.model.sequence import (
    DONE,
    HELD,
    KV_READY,
    RUNNING,
    TRANSFERRING,
    WAITING,
    Sequence,
)
from tandem.engine.model.stats import build_stats


class Engine:
    """One continuous-batching engine (one vLLM instance on ``tp`` GPUs)."""

    def __init__(self, config: EngineConfig, cost: CostModel) -> None:
        self.config = config
        self.cost = cost
        self.scheduler = Scheduler(config, cost)
        self._iteration_s = cost.iteration_fn
        self._caching = config.enable_prefix_caching and config.batching == "continuous"
        self._seqs: dict[str, Sequence] = {}
        self._held: dict[str, tuple[Sequence, float]] = {}
        self._held_heap: list[tuple[float, int, str]] = []
        self._order = 0
        self.last_end_s = 0.0
        """When the latest non-idle iteration ended."""
        self.prompt_tokens_total = 0
        self.prompt_tokens_cache_hit_total = 0
        self.prompt_tokens_external_total = 0
        self.generation_tokens_total = 0
        self.iterations_total = 0
        self.busy_s_total = 0.0
        self.kv_expired_total = 0
        self.kv_load_failures_total = 0
        self.finished_by_reason: dict[str, int] = {}

    @classmethod
    def from_presets(
        cls,
        model: str = "llama-3.1-8b",
        gpu: str = "h100",
        tensor_parallel: int = 1,
        gpu_memory_utilization: float = 0.9,
        **overrides: object,
    ) -> Engine:
        """An engine with vLLM's defaults for a preset model and GPU; ``overrides`` are
        :class:`EngineConfig` fields (``max_num_seqs=64``, ``batching="static"``...)."""
        cost = CostModel(get_model(model), get_gpu(gpu), tensor_parallel)
        max_seqs, max_tokens = default_scheduler_limits(cost.gpu)
        fields: dict[str, object] = {
            "num_gpu_blocks": cost.num_gpu_blocks(16, gpu_memory_utilization),
            "max_num_seqs": max_seqs,
            "max_num_batched_tokens": max_tokens,
            "max_model_len": cost.model.max_model_len,
        }
        fields.update(overrides)
        return cls(EngineConfig(**fields), cost)  # type: ignore[arg-type]

    # -- read-only state -------------------------------------------------------------

    @property
    def num_running(self) -> int:
        return self.scheduler.live

    @property
    def num_waiting(self) -> int:
        """Queued requests, including those waiting for a KV transfer (as vLLM counts)."""
        sched = self.scheduler
        return len(sched.waiting) + len(sched.transferring) + len(sched.kv_ready)

    @property
    def num_waiting_for_capacity(self) -> int:
        """Queued requests the scheduler has no room for yet: all waiting ones but those
        whose KV transfer is in flight (vLLM defers those; a decode request not yet given
        blocks to pull into, or whose KV has arrived, waits for capacity)."""
        sched = self.scheduler
        return len(sched.waiting) + len(sched.kv_ready)

    @property
    def kv_usage(self) -> float:
        """Used KV blocks / all blocks, 0-1."""
        return self.scheduler.kv.usage

    @property
    def kv_blocks_used(self) -> int:
        return self.scheduler.kv.num_used_blocks

    @property
    def preemptions_total(self) -> int:
        return self.scheduler.preemptions

    @property
    def requests_finished_total(self) -> int:
        return sum(self.finished_by_reason.values())

    @property
    def has_work(self) -> bool:
        """True when a step could run something (it may still be blocked on KV space)."""
        sched = self.scheduler
        return bool(sched.live or sched.kv_ready) or len(sched.waiting) > 0

    @property
    def waiting_prompt_tokens(self) -> int:
        """Prompt tokens of queued requests (admission control); O(queue length)."""
        return sum(seq.prompt_tokens for seq in self.scheduler.waiting)

    @property
    def lazy_ok(self) -> bool:
        """Whether the next iterations can be applied whenever someone looks rather than
        as they end: no queued request will start a KV pull (an event for its prefill
        pod) and no lease can expire (prefill role)."""
        return not self._held and all(seq.remote is None for seq in self.scheduler.waiting)

    def next_timer_s(self) -> float | None:
        """Earliest pending KV-transfer completion (timed mode) or lease expiry, or None."""
        times = [h[0][0] for h in (self.scheduler.transfer_heap, self._held_heap) if h]
        return min(times) if times else None

    def held_kv(self, request_id: str) -> HeldKV | None:
        """Prefill role: the blocks a finished request keeps for a remote decode."""
        entry = self._held.get(request_id)
        if entry is None:
            return None
        seq, expiry_s = entry
        return HeldKV(request_id, seq.prompt_tokens, seq.num_blocks, expiry_s)

    # -- driving ---------------------------------------------------------------------

    def add_request(self, req: EngineRequest, now_s: float) -> None:
        """Queue ``req`` arriving at ``now_s``. ``ValueError`` if it can never run."""
        cfg = self.config
        if req.request_id in self._seqs:
            raise ValueError(f"request id {req.request_id!r} is already in the engine")
        if req.prompt_tokens < 1 or req.max_tokens < 1:
            raise ValueError("prompt_tokens and max_tokens must be >= 1")
        if req.prompt_tokens >= cfg.max_model_len:
            raise ValueError(
                f"prompt of {req.prompt_tokens} tokens leaves no room for output within "
                f"max_model_len={cfg.max_model_len}"
            )
        max_tokens = min(req.max_tokens, cfg.max_model_len - req.prompt_tokens)
        seq = Sequence(req, now_s, self._order, max_tokens)
        self._order += 1
        self._seqs[req.request_id] = seq
        self.scheduler.waiting.push(seq)

    def step(self, now_s: float) -> IterationResult:
        """Run one iteration starting at ``now_s``; its tokens count as emitted at end_s."""
        sched = self.scheduler
        expired: tuple[str, ...] = ()
        if self._held_heap and self._held_heap[0][0] <= now_s:
            expired = self._expire_leases(now_s)
        if sched.transfer_heap and sched.transfer_heap[0][0] <= now_s:
            for seq in sched.complete_due_transfers(now_s):
                sched.mark_kv_ready(seq)
        g = sched.steady_only()
        if g is not None:
            return self._steady_only(now_s, g, sched.steady.count, expired)
        batch = sched.schedule(now_s, self.last_end_s)
        if not batch.items and not batch.steady:
            return IterationResult(
                now_s, 0.0, 0, 0, 0, (), 0, (), (), tuple(batch.preempted),
                tuple(batch.transfers), expired, 0, 0.0, (),
            )  # fmt: skip
        args = batch.cost_args
        if args is None:
            steady = batch.steady
            items = batch.items
            kv_read = sched.steady.kv_read(sched.iteration) if steady else 0
            pairs = float(kv_read + steady)
            sampled = steady
            for seq, n in items:
                c = seq.num_computed
                pairs += n * c + n * (n + 1) * 0.5
                kv_read += c
                if c + n == seq.num_tokens:
                    sampled += 1
            seqs = steady + len(items)
            duration_s = self._iteration_s(batch.num_tokens, pairs, seqs, kv_read, sampled)
        else:
            duration_s = self._iteration_s(*args)
        return self._apply(now_s, now_s + duration_s, duration_s, batch, expired)

    def run_steady(self, now_s: float, until_s: float, gaps: list[float]) -> IterationResult | None:
        """Back-to-back iterations of steady sequences alone, the first starting at
        ``now_s``: each that ends by ``until_s`` and finishes nobody is applied here, its
        inter-token gap appended to ``gaps`` (for every steady sequence, a number that
        does not change meanwhile); the first that does not (it ends later, or finishes
        requests) is started and returned as :meth:`step` would return it. None when the
        next iteration is not steady-only: then call :meth:`step` at ``last_end_s``.

        The same iterations as calling :meth:`step` at each end, without building a
        result for each (the simulator's batched engine steps).
        """
        sched = self.scheduler
        steady_set = sched.steady
        steady = steady_set.count
        if not steady or sched.explicit or sched.kv_ready or sched.waiting.live:
            return None
        if steady >= self.config.max_num_batched_tokens:
            return None
        # Constant over the run (nobody joins or leaves until it stops): hoisted.
        residue, bs, heap = steady_set.residue, steady_set.block_size, steady_set.heap
        base = steady_set.sum_c0 - steady_set.sum_g0
        iteration_s = self._iteration_s
        kv = sched.kv
        free = kv.num_free_blocks
        taken = 0
        transfers, held = sched.transfer_heap, self._held_heap
        start = now_s
        g = sched.iteration
        while heap and heap[0][0] <= g:
            heapq.heappop(heap)  # stale: its sequence left the set (SteadySet.due_at)
        n = 0
        last_end = self.last_end_s
        result: IterationResult | None = None
        while True:
            if (transfers and transfers[0][0] <= start) or (held and held[0][0] <= start):
                break
            g1 = g + 1
            needed = residue[g1 % bs]
            if needed > free:
                break
            free -= needed
            taken += needed  # allocated below, in one call: the same blocks evicted
            sched.iteration = g = g1
            kv_read = base + steady * g
            duration = iteration_s(steady, float(kv_read + steady), steady, kv_read, steady)
            end = start + duration
            if end > until_s or (heap and heap[0][0] == g):
                kv.allocate(taken)  # before the finishes free theirs, as step by step
                taken = 0
                result = self._steady_only(start, g, steady, (), duration, last_end)
                break
            n += 1
            gaps.append(end - last_end)
            last_end = end
            self.busy_s_total += duration
            start = end
        if taken:
            kv.allocate(taken)
        self.generation_tokens_total += steady * n
        self.iterations_total += n
        if result is None:
            self.last_end_s = last_end
        return result

    def abort(self, request_id: str, now_s: float) -> FinishedRequest | None:
        """Remove a request wherever it is and free its blocks (client disconnect).

        Returns its record (reason ``abort``), or None if unknown or already finished; a
        finished request still holding KV for a remote decode has its blocks freed.
        """
        seq = self._seqs.get(request_id)
        if seq is None:
            self.release_kv(request_id)
            return None
        sched = self.scheduler
        if seq.steady:
            sched.unsteady(seq, sched.iteration + 1, self.last_end_s)
        if seq.status == WAITING:
            sched.waiting.discard(seq)
        elif seq.status == RUNNING:
            sched.explicit.remove(seq)
        elif seq.status == TRANSFERRING:
            del sched.transferring[request_id]
        elif seq.status == KV_READY:
            sched.kv_ready.remove(seq)
        return self._finish(seq, "abort", now_s)

    def release_kv(self, request_id: str) -> bool:
        """Prefill role: the decode side pulled the KV; free the held blocks."""
        entry = self._held.pop(request_id, None)
        if entry is None:
            return False
        entry[0].status = DONE
        self.scheduler.free_blocks(entry[0])
        return True

    def extend_kv_lease(self, request_id: str, now_s: float) -> bool:
        """Prefill role: a heartbeat from the decode side; the lease restarts at ``now_s``."""
        entry = self._held.get(request_id)
        if entry is None:
            return False
        expiry_s = now_s + self.config.kv_lease_s
        self._held[request_id] = (entry[0], expiry_s)
        heapq.heappush(self._held_heap, (expiry_s, entry[0].order, request_id))
        return True

    def complete_kv_transfer(
        self, request_id: str, ok: bool, now_s: float
    ) -> FinishedRequest | None:
        """Decode role: the KV pull finished. On success the request decodes next (its last
        prompt token is recomputed, as vLLM does); on failure it ends with ``error`` or, with
        ``kv_load_failure_policy="recompute"``, re-runs its prefill locally. Returns the
        record of a request that ended."""
        sched = self.scheduler
        seq = sched.transferring.get(request_id)
        if seq is None:
            return None
        if ok:
            sched.mark_kv_ready(seq)
            return None
        del sched.transferring[request_id]
        seq.remote = None
        self.kv_load_failures_total += 1
        if self.config.kv_load_failure_policy == "fail":
            return self._finish(seq, "error", now_s)
        sched.free_blocks(seq)
        seq.num_computed = 0
        seq.status = WAITING
        sched.waiting.push_front(seq)
        return None

    # -- internals -------------------------------------------------------------------

    def _steady_only(
        self,
        start: float,
        g: int,
        steady: int,
        expired: tuple[str, ...],
        duration: float | None = None,
        prev_end: float | None = None,
    ) -> IterationResult:
        """An iteration of steady sequences only (the common case), in O(finishes);
        ``prev_end``: when the previous iteration ended, if not ``last_end_s``."""
        if duration is None:
            kv_read = self.scheduler.steady.kv_read(g)
            duration = self._iteration_s(steady, float(kv_read + steady), steady, kv_read, steady)
        end = start + duration
        finished: tuple[FinishedRequest, ...] = ()
        if self.scheduler.steady.due_at(g):
            finished = tuple(self._finish_steady(g, end))
        self.generation_tokens_total += steady
        self.iterations_total += 1
        self.busy_s_total += duration
        if prev_end is None:
            prev_end = self.last_end_s
        self.last_end_s = end
        return IterationResult(
            start, duration, steady, 0, steady, (), steady, (), finished, (), (), expired,
            steady, end - prev_end, (),
        )  # fmt: skip

    def _finish_steady(self, g: int, end: float) -> list[FinishedRequest]:
        """Steady sequences whose last token is pass ``g``'s."""
        sched = self.scheduler
        bs = sched.bs
        finished: list[FinishedRequest] = []
        for seq in sched.steady.pop_due(g):
            c = seq.c0 + (g - seq.g0) + 1
            seq.num_computed, seq.num_tokens, seq.num_output = c, c + 1, seq.limit
            seq.private_blocks = -(-c // bs) - len(seq.shared)
            seq.last_emit_s = end
            reason: FinishReason = "length" if seq.limit >= seq.max_tokens else "stop"
            finished.append(self._finish(seq, reason, end))
        return finished

    def _apply(
        self,
        start: float,
        end: float,
        duration: float,
        batch: Batch,
        expired: tuple[str, ...],
    ) -> IterationResult:
        """The effects of an iteration that ends at ``end``: tokens, finishes, gaps."""
        sched = self.scheduler
        g = sched.iteration
        steady = batch.steady
        steady_set = sched.steady
        finished = self._finish_steady(g, end) if steady_set.heap and steady_set.due_at(g) else []
        emitted: list[str] = []
        first: list[str] = []
        others: list[float] = []
        continuing = steady
        decode_tokens = steady
        prev_end = self.last_end_s
        caching = self._caching
        steady_ok = sched.steady_ok
        leave = sched.explicit.remove
        items = batch.items
        for seq, n in items:
            left = seq.num_tokens - seq.num_computed
            seq.num_computed += n
            if caching and seq.num_hashed < len(seq.req.block_hashes):
                self._register_blocks(seq)
            if n != left:
                continue  # a prompt chunk: no token yet
            out = seq.num_output = seq.num_output + 1
            seq.num_tokens += 1
            emitted.append(seq.request_id)
            if seq.first_token_s is None:
                seq.first_token_s = end
                first.append(seq.request_id)
                self.prompt_tokens_total += seq.prompt_tokens
                if seq.cached_tokens or seq.external_tokens:
                    self.prompt_tokens_cache_hit_total += seq.cached_tokens
                    self.prompt_tokens_external_total += seq.external_tokens
            else:
                if n == 1:  # a decode step (not a recomputation ending in a token)
                    decode_tokens += 1
                last = seq.last_emit_s
                if last == prev_end:
                    continuing += 1
                elif last is not None:
                    others.append(end - last)
            seq.last_emit_s = end
            if out >= seq.limit:
                reason: FinishReason = "length" if out >= seq.max_tokens else "stop"
                finished.append(self._finish(seq, reason, end))
                leave(seq)
            elif steady_ok and (not caching or seq.num_hashed >= len(seq.req.block_hashes)):
                steady_set.add(seq, g + 1)
                leave(seq)
        if finished:
            sched.compact()
        self.generation_tokens_total += len(emitted) + steady
        self.iterations_total += 1
        self.busy_s_total += duration
        self.last_end_s = end
        if len(others) > 1:
            others.sort()
        return IterationResult(
            start, duration, steady + len(items), batch.num_tokens - decode_tokens,
            decode_tokens, tuple(emitted), steady, tuple(first), tuple(finished),
            tuple(batch.preempted) if batch.preempted else (),
            tuple(batch.transfers) if batch.transfers else (), expired, continuing,
            end - prev_end, tuple(others) if others else (),
        )  # fmt: skip

    def _register_blocks(self, seq: Sequence) -> None:
        hashes = seq.req.block_hashes
        upto = min(seq.num_computed // self.config.block_size, len(hashes))
        kv = self.scheduler.kv
        registered: list[int] = []
        for i in range(seq.num_hashed, upto):
            if seq.private_blocks > 0 and kv.register(hashes[i]):
                seq.private_blocks -= 1
                registered.append(hashes[i])
        if registered:
            seq.shared = (*seq.shared, *registered)
        seq.num_hashed = max(seq.num_hashed, upto)

    def _finish(self, seq: Sequence, reason: FinishReason, now_s: float) -> FinishedRequest:
        sched = self.scheduler
        if seq.status == RUNNING:
            sched.live -= 1
        blocks = seq.private_blocks + len(seq.shared)
        hold = seq.hold and reason in ("stop", "length")
        del self._seqs[seq.request_id]
        if hold:
            old = self._held.pop(seq.request_id, None)
            if old is not None:
                sched.free_blocks(old[0])
            seq.status = HELD
            expiry_s = now_s + self.config.kv_lease_s
            self._held[seq.request_id] = (seq, expiry_s)
            heapq.heappush(self._held_heap, (expiry_s, seq.order, seq.request_id))
        else:
            seq.status = DONE
            if seq.shared:
                sched.free_blocks(seq)
            else:
                sched.kv.free(seq.private_blocks)
                seq.private_blocks = 0
        self.finished_by_reason[reason] = self.finished_by_reason.get(reason, 0) + 1
        return FinishedRequest(
            seq.request_id,
            reason,
            seq.prompt_tokens,
            seq.num_output,
            seq.cached_tokens,
            seq.max_tokens,
            seq.arrival_s,
            seq.first_scheduled_s,
            seq.first_token_s,
            now_s,
            seq.num_preemptions,
            hold,
            blocks,
        )

    def _expire_leases(self, now_s: float) -> tuple[str, ...]:
        heap = self._held_heap
        expired: list[str] = []
        while heap and heap[0][0] <= now_s:
            expiry_s, order, request_id = heapq.heappop(heap)
            entry = self._held.get(request_id)
            if entry is None or entry[1] != expiry_s or entry[0].order != order:
                continue
            self.release_kv(request_id)
            self.kv_expired_total += 1
            expired.append(request_id)
        return tuple(expired)

    def stats(self) -> EngineStats:
        """A snapshot for metrics; O(requests in the engine), so call it per scrape."""
        return build_stats(self, list(self._seqs.values()), [s for s, _ in self._held.values()])
