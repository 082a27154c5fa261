"""The fast engine's scheduler: queues, the running set, KV blocks, scheduling passes. Pure.

The scheduler half of :class:`~tandem.sim.fastdecode.FastDecodeEngine`, following
``tandem.engine.model.scheduler`` step for step: decode-first continuous batching (the
running sequences take the token budget first, in admission order, preempting the
latest admitted by recompute when blocks run out), then admission (KV pulls finished
first, then the waiting queue, which starts KV pulls for remote prompts), chunked
prefill. Steady sequences (:mod:`tandem.sim.steady`) are scheduled in O(1) whenever
that is exact (:meth:`FastScheduler.fast_running`); otherwise every sequence is made
explicit and the per-sequence pass runs.
"""

from __future__ import annotations

import heapq
from collections import deque

from tandem.engine.model import CostModel, EngineConfig, KVTransferStart
from tandem.sim.fastseq import DONE, KV_READY, RUNNING, TRANSFERRING, WAITING, FastSeq
from tandem.sim.steady import SteadySet

#: Scheduling passes per step: the engine model retries twice when preemption emptied
#: a batch that the freed blocks could fill.
PASSES = 3

Batch = list[tuple[FastSeq, int]]
"""(sequence, tokens computed this iteration), in the engine model's batch order."""


class FastScheduler:
    """Everything of one engine that scheduling reads and changes."""

    def __init__(self, config: EngineConfig, cost: CostModel) -> None:
        self.config = config
        self.cost = cost
        self.bs = config.block_size
        self.free = config.num_gpu_blocks
        """Free KV blocks (nothing is cached: prefix caching is off)."""
        self.g = 0
        """Scheduling passes so far (the scheduler's ``iteration``)."""
        self.waiting: deque[FastSeq] = deque()
        self.kv_ready: deque[FastSeq] = deque()
        self.transferring: dict[str, FastSeq] = {}
        self.transfer_heap: list[tuple[float, int, str]] = []
        self.running: list[FastSeq] = []
        """Admission order; finished entries are dropped lazily (``status != RUNNING``)."""
        self.live = 0
        """Running sequences (steady or not)."""
        self.explicit: list[FastSeq] = []
        """Running sequences that are not steady, in admission order."""
        self.steady = SteadySet(self.bs)
        self.preemptions = 0

    def complete_transfers(self, now_s: float) -> None:
        """KV pulls due by ``now_s`` are done: those requests wait to be scheduled."""
        heap = self.transfer_heap
        while heap and heap[0][0] <= now_s:
            _, order, rid = heapq.heappop(heap)
            seq = self.transferring.get(rid)
            if seq is not None and seq.order == order:
                del self.transferring[rid]
                seq.remote = None
                seq.c = seq.prompt - 1
                seq.external = seq.prompt - 1
                seq.status = KV_READY
                self.kv_ready.append(seq)

    def steady_only(self) -> int | None:
        """Start a pass of steady sequences alone, if that is all there is and it fits:
        its number; else None (nothing changed)."""
        steady = self.steady.count
        if not steady or self.explicit or self.kv_ready or self.waiting:
            return None
        g = self.g + 1
        needed = self.steady.blocks_needed(g)
        if needed > self.free or steady >= self.config.max_num_batched_tokens:
            return None
        self.g = g
        self.free -= needed
        return g

    def schedule(
        self, now_s: float, last_end_s: float, transfers: list[KVTransferStart]
    ) -> tuple[int, Batch]:
        """One iteration's work: (steady sequences in it, explicit batch)."""
        limit = self.config.max_num_batched_tokens
        preempted_before = self.preemptions
        batch: Batch = []
        steady = 0
        for _ in range(PASSES):
            self.g += 1
            batch = []
            steady = self.steady.count
            needed = self.steady.blocks_needed(self.g)
            if not self.fast_running(limit, needed, batch):
                self.materialize(last_end_s)
                steady = 0
                self.schedule_running(limit, batch)
            tokens = steady + sum(n for _, n in batch)
            self.admit(now_s, limit, tokens, batch, transfers)
            if steady or batch or self.preemptions == preempted_before:
                break
        return steady, batch

    def fast_running(self, limit: int, needed: int, batch: Batch) -> bool:
        """Schedule the running sequences without per-sequence work, if that is exact:
        when every one fits the budget and the free blocks (so order cannot matter), or
        when the one sequence that does not fit the budget is the last admitted."""
        steady = self.steady.count
        if needed > self.free or steady >= limit:
            return False
        explicit = self.explicit
        if not explicit:
            self.free -= needed
            return True
        bs = self.bs
        demand = sum(seq.tokens - seq.c for seq in explicit)
        if steady + demand <= limit:
            plan = [(s, s.tokens - s.c) for s in explicit]
        elif len(explicit) == 1 and self.last_running() is explicit[0]:
            seq = explicit[0]
            plan = [(seq, min(seq.tokens - seq.c, limit - steady))]
        else:
            return False
        blocks = needed
        for seq, n in plan:
            blocks += max(-(-(seq.c + n) // bs) - seq.blocks, 0)
        if blocks > self.free:
            return False
        self.free -= needed
        for seq, n in plan:
            need = -(-(seq.c + n) // bs) - seq.blocks
            if need > 0:
                self.free -= need
                seq.blocks += need
            batch.append((seq, n))
        return True

    def schedule_running(self, limit: int, batch: Batch) -> None:
        """The scheduler's per-sequence pass (every sequence materialised)."""
        bs = self.bs
        used = 0
        scheduled: dict[int, int] = {}
        for seq in [s for s in self.running if s.status == RUNNING]:
            budget = limit - used
            if budget <= 0:
                return
            if seq.status != RUNNING or seq.order in scheduled:
                continue
            n = min(seq.tokens - seq.c, budget)
            need = -(-(seq.c + n) // bs) - seq.blocks
            ok = True
            while need > 0 and need > self.free:
                victim = self.last_running()
                assert victim is not None
                if victim.order in scheduled:
                    used -= scheduled.pop(victim.order)
                    batch[:] = [(s, k) for s, k in batch if s is not victim]
                self.preempt(victim)
                if victim is seq:
                    ok = False
                    break
            if not ok:
                continue
            if need > 0:
                self.free -= need
                seq.blocks += need
            batch.append((seq, n))
            scheduled[seq.order] = n
            used += n

    def admit(
        self,
        now_s: float,
        limit: int,
        tokens: int,
        batch: Batch,
        transfers: list[KVTransferStart],
    ) -> None:
        cfg = self.config
        bs = self.bs
        ready = self.kv_ready
        while ready and self.live < cfg.max_num_seqs:
            seq = ready[0]
            n = seq.tokens - seq.c
            if limit - tokens < n:
                return
            need = -(-(seq.c + n) // bs) - seq.blocks
            if need > 0 and need > self.free:
                return
            ready.popleft()
            tokens += self._run(seq, n, need, now_s, batch)
        waiting = self.waiting
        while self.live < cfg.max_num_seqs:
            budget = limit - tokens
            if budget <= 0 or not waiting:
                return
            seq = waiting[0]
            if seq.preempted_at == self.g:
                return
            if seq.remote is not None:
                need = -(-seq.prompt // bs) - seq.blocks
                if need > 0 and need > self.free:
                    return
                waiting.popleft()
                if need > 0:
                    self.free -= need
                    seq.blocks += need
                seq.status = TRANSFERRING
                remote = seq.remote
                transfer_s = remote.transfer_s
                if transfer_s is None:
                    link = cfg.kv_link_bytes_per_s
                    transfer_s = self.cost.kv_transfer_s(remote.num_tokens, link)
                self.transferring[seq.rid] = seq
                heapq.heappush(self.transfer_heap, (now_s + transfer_s, seq.order, seq.rid))
                transfers.append(KVTransferStart(seq.rid, remote.num_tokens, transfer_s))
                continue
            n = min(seq.tokens - seq.c, budget)
            need = -(-(seq.c + n) // bs) - seq.blocks
            if need > 0 and need > self.free:
                return
            waiting.popleft()
            tokens += self._run(seq, n, need, now_s, batch)

    def _run(self, seq: FastSeq, n: int, need: int, now_s: float, batch: Batch) -> int:
        """Admit ``seq`` into this iteration with ``n`` tokens and ``need`` new blocks."""
        if need > 0:
            self.free -= need
            seq.blocks += need
        if seq.first_scheduled_s is None:
            seq.first_scheduled_s = now_s
        seq.status = RUNNING
        self.running.append(seq)
        self.explicit.append(seq)
        self.live += 1
        batch.append((seq, n))
        return n

    def make_steady(self, seq: FastSeq, g0: int) -> None:
        """``seq`` decodes one token per iteration from iteration ``g0`` on."""
        self.steady.add(seq, g0)
        self.explicit.remove(seq)

    def unsteady(self, seq: FastSeq, at_g: int, last_end_s: float) -> None:
        """Make ``seq`` explicit again, with its state as of the start of pass ``at_g``."""
        d = at_g - seq.g0
        seq.c = seq.c0 + d
        seq.tokens = seq.c + 1
        seq.out = seq.out0 + d
        seq.blocks = -(-seq.c // self.bs)
        seq.last_emit_s = last_end_s
        self.steady.remove(seq)
        pos = len(self.explicit)
        while pos and self.explicit[pos - 1].order > seq.order:
            pos -= 1
        self.explicit.insert(pos, seq)

    def materialize(self, last_end_s: float) -> None:
        """Every steady sequence explicit, as of the start of the current pass (their last
        token came at ``last_end_s``, the previous iteration's end)."""
        if not self.steady.count:
            return
        at_g = self.g
        bs = self.bs
        last = last_end_s
        explicit: list[FastSeq] = []
        for seq in self.running:
            if seq.status != RUNNING:
                continue
            if seq.steady:
                d = at_g - seq.g0
                seq.c = seq.c0 + d
                seq.tokens = seq.c + 1
                seq.out = seq.out0 + d
                seq.blocks = -(-seq.c // bs)
                seq.last_emit_s = last
                seq.steady = False
                seq.version += 1
            explicit.append(seq)
        self.explicit = explicit
        self.steady.clear()

    def last_running(self) -> FastSeq | None:
        running = self.running
        while running and running[-1].status != RUNNING:
            running.pop()
        return running[-1] if running else None

    def drop_running(self, seq: FastSeq) -> None:
        """``seq`` leaves the running set (its list entry goes lazily)."""
        seq.status = DONE
        self.live -= 1
        if seq in self.explicit:
            self.explicit.remove(seq)
        if len(self.running) > 64 and self.live < len(self.running) // 2:
            self.running = [s for s in self.running if s.status == RUNNING]

    def preempt(self, victim: FastSeq) -> None:
        """Preemption by recompute: blocks freed, back to the head of the queue."""
        assert self.running[-1] is victim
        self.running.pop()
        self.live -= 1
        if victim in self.explicit:
            self.explicit.remove(victim)
        self.free += victim.blocks
        victim.blocks = 0
        victim.c = 0
        victim.status = WAITING
        victim.preemptions += 1
        victim.preempted_at = self.g
        self.preemptions += 1
        self.waiting.appendleft(victim)
