"""Iteration-level scheduling: which sequences run next and how many tokens each. Pure.

Continuous batching (Orca, vLLM V1): every iteration spends a token budget on one decode
token per running sequence plus prompt chunks, at most ``max_num_seqs`` sequences; requests
join and leave between iterations. Decode-first (vLLM V1) schedules the running sequences
in admission order, then admits waiting ones (KV pulls finished first, then the waiting
queue, which starts KV pulls for remote prompts); prefill-first schedules running
prefills, admits, and gives decodes what is left. With ``long_prefill_token_threshold``,
no request computes more prompt tokens than that in an iteration unless it is the only one
running or waiting (vLLM V1's cap, counted once per pass). When a running sequence needs a block
and none is free, the scheduler preempts by recompute (FCFS: the latest admitted;
priority: the highest ``priority`` value, latest arrival on ties) until it fits. Static
batching forms a batch, reserves each member's worst-case blocks, and runs it to
completion; its cost is padded to the batch's longest prompt and full size, as a padded
tensor would be.

With ``steady_decode``, sequences that decode one token per iteration are held in the
:class:`~tandem.engine.model.steady.SteadySet` and scheduled together in O(1) whenever
that gives exactly what the per-sequence pass would: every running sequence fits the
budget and the free blocks (so order cannot matter), or the one that does not fit the
budget is the last admitted. Otherwise they are made explicit (:meth:`materialize`) and
the per-sequence pass runs. ``tests/engine/test_steady.py`` steps engines with and without
the shortcut on random workloads and checks every iteration agrees.
"""

from __future__ import annotations

import heapq
from collections import deque

from tandem.engine.model.config import EngineConfig
from tandem.engine.model.cost import CostModel
from tandem.engine.model.kvcache import KVCache
from tandem.engine.model.queues import WaitingQueue
from tandem.engine.model.request import KVTransferStart
from tandem.engine.model.sequence import KV_READY, RUNNING, TRANSFERRING, WAITING, Sequence
from tandem.engine.model.steady import SteadySet

#: cost-model arguments: (compute tokens, attention pairs, seqs, KV read tokens, sampled)
CostArgs = tuple[int, float, int, int, int]

#: Scheduling passes per step: preempting the only runnable sequences can empty a batch
#: that a second pass, with those blocks free, would fill; an idle step means "blocked".
PASSES = 3


class Batch:
    """What one iteration runs (internal)."""

    __slots__ = ("cost_args", "items", "num_tokens", "preempted", "steady", "transfers")

    def __init__(self) -> None:
        self.items: list[tuple[Sequence, int]] = []
        """(explicit sequence, tokens it computes), in the order the pass scheduled them."""
        self.num_tokens = 0
        """Every token computed, steady sequences' included."""
        self.steady = 0
        """Steady sequences in this iteration (one token each)."""
        self.preempted: list[str] = []
        self.transfers: list[KVTransferStart] = []
        self.cost_args: CostArgs | None = None
        """Set by static batching to charge padded work; None means charge what runs."""

    def add(self, seq: Sequence, n: int, iteration: int) -> None:
        self.items.append((seq, n))
        self.num_tokens += n
        seq.scheduled_at = iteration

    def remove(self, seq: Sequence) -> None:
        i = next(k for k, (s, _) in enumerate(self.items) if s is seq)
        self.num_tokens -= self.items.pop(i)[1]
        seq.scheduled_at = -1


class Scheduler:
    """Running sequences, waiting queue, transfers in flight and the KV cache of one engine."""

    def __init__(self, config: EngineConfig, cost: CostModel) -> None:
        self.config = config
        self.cost = cost
        self.bs = config.block_size
        self.kv = KVCache(config.num_gpu_blocks, config.block_size)
        self.waiting = WaitingQueue(config.scheduling_policy == "priority")
        self.running: list[Sequence] = []
        """Admission order; entries that finished are dropped lazily (``status != RUNNING``)."""
        self.live = 0
        """Running sequences, steady or not."""
        self.explicit: list[Sequence] = []
        """Running sequences that are not steady, in admission order."""
        self.steady = SteadySet(config.block_size)
        self.steady_ok = config.steady_decode and config.batching == "continuous"
        self._timed = config.kv_transfer_mode == "timed"
        self.transferring: dict[str, Sequence] = {}
        self.kv_ready: deque[Sequence] = deque()
        """Decode role: KV received; admitted before the waiting queue since they hold blocks."""
        self.transfer_heap: list[tuple[float, int, str]] = []
        """Timed mode: (done_s, order, request_id), lazily invalidated."""
        self.iteration = 0
        """Scheduling passes so far."""
        self.cap = 0
        """This pass's long-prefill cap (0: none)."""
        self.preemptions = 0
        self.prefix_queries = 0
        self.prefix_hits = 0
        self._static_size = 0
        self._static_padded = 0
        self._static_steps = 0

    # -- views -------------------------------------------------------------------------

    def live_running(self) -> list[Sequence]:
        """The running sequences, in admission order."""
        return [s for s in self.running if s.status == RUNNING]

    def current(self, seq: Sequence) -> tuple[int, int]:
        """(computed tokens, blocks held) of ``seq`` as of now, steady or not."""
        if not seq.steady:
            return seq.num_computed, seq.num_blocks
        c = seq.c0 + (self.iteration + 1 - seq.g0)
        return c, -(-c // self.bs)

    def last_running(self) -> Sequence | None:
        running = self.running
        while running and running[-1].status != RUNNING:
            running.pop()
        return running[-1] if running else None

    # -- one step's scheduling -----------------------------------------------------------

    def steady_only(self) -> int | None:
        """Start a pass of steady sequences alone, if that is all there is and it fits:
        the pass number; else None (nothing changed)."""
        steady = self.steady.count
        if not steady or self.explicit or self.kv_ready or self.waiting.live:
            return None
        g = self.iteration + 1
        needed = self.steady.residue[g % self.bs]
        if needed > self.kv.num_free_blocks or steady >= self.config.max_num_batched_tokens:
            return None
        self.iteration = g
        if needed:
            self.kv.allocate(needed)
        return g

    def schedule(self, now_s: float, last_end_s: float) -> Batch:
        """Pick this iteration's work. Mutates queues, blocks and sequence status.

        ``last_end_s``: when the previous iteration ended (the time of every steady
        sequence's latest token, should they be made explicit)."""
        cfg = self.config
        batch = Batch()
        for attempt in range(PASSES):
            if attempt:
                if batch.items or batch.steady or not batch.preempted:
                    break
                retry = Batch()
                retry.preempted[:0] = batch.preempted
                retry.transfers[:0] = batch.transfers
                batch = retry
            self.iteration += 1
            threshold = cfg.long_prefill_token_threshold
            if threshold and cfg.enable_chunked_prefill:
                eligible = self.live + self.waiting.live + len(self.kv_ready)
                self.cap = threshold if eligible + len(self.transferring) > 1 else 0
            if cfg.batching == "static":
                self._schedule_static(now_s, batch)
            elif cfg.prioritize == "prefill":
                self._schedule_running(batch, False, last_end_s)
                self._admit(now_s, batch)
                if not self._fast_decodes(batch):
                    self.materialize(last_end_s)
                    self._schedule_running(batch, True, last_end_s)
            else:
                if not self._fast_running(batch):
                    self.materialize(last_end_s)
                    self._schedule_running(batch, None, last_end_s)
                self._admit(now_s, batch)
        return batch

    def _take_steady(self, batch: Batch, steady: int, needed: int) -> None:
        if needed:
            self.kv.allocate(needed)
        batch.steady = steady
        batch.num_tokens += steady

    def _fast_running(self, batch: Batch) -> bool:
        """Decode-first: schedule the running sequences without per-sequence work where
        that is exact: every one fits the budget and the free blocks, or the one that does
        not fit the budget is the last admitted (and prompts may be chunked)."""
        cfg = self.config
        limit = cfg.max_num_batched_tokens
        steady = self.steady.count
        needed = self.steady.residue[self.iteration % self.bs] if steady else 0
        kv = self.kv
        free = kv.num_free_blocks
        if needed > free or steady >= limit:
            return False
        explicit = self.explicit
        if not explicit:
            if needed:
                kv.allocate(needed)
            batch.steady = steady
            batch.num_tokens += steady
            return True
        demand = 0
        cap = self.cap
        for seq in explicit:
            n = seq.num_tokens - seq.num_computed
            if cap and n > cap:
                return False  # the per-sequence pass caps it
            demand += n
        if steady + demand <= limit:
            plan = [(s, s.num_tokens - s.num_computed) for s in explicit]
            tokens = steady + demand
        elif cfg.enable_chunked_prefill and len(explicit) == 1:
            seq = explicit[0]
            if self.last_running() is not seq:
                return False
            plan = [(seq, limit - steady)]  # the budget's rest: less than it needs
            tokens = limit
        else:
            return False
        bs = self.bs
        blocks = needed
        for seq, n in plan:
            blocks += max(
                -(-(seq.num_computed + n) // bs) - seq.private_blocks - len(seq.shared), 0
            )
        if blocks > free:
            return False
        if needed:
            kv.allocate(needed)
        it = self.iteration
        for seq, n in plan:
            need = -(-(seq.num_computed + n) // bs) - seq.private_blocks - len(seq.shared)
            if need > 0:
                kv.allocate(need)
                seq.private_blocks += need
            seq.scheduled_at = it
        batch.items.extend(plan)
        batch.steady = steady
        batch.num_tokens += tokens
        return True

    def _fast_decodes(self, batch: Batch) -> bool:
        """Prefill-first: after prefills and admission, schedule the decodes in O(steady)
        where every one fits what is left of the budget and the free blocks."""
        steady = self.steady.count
        if not steady:
            return False
        it = self.iteration
        bs = self.bs
        decodes = [
            s
            for s in self.explicit
            if s.scheduled_at != it and s.num_output > 0 and s.num_tokens - s.num_computed == 1
        ]
        needed = self.steady.blocks_needed(it)
        blocks = needed
        for seq in decodes:
            blocks += max(-(-(seq.num_computed + 1) // bs) - seq.num_blocks, 0)
        left = self.config.max_num_batched_tokens - batch.num_tokens
        if steady + len(decodes) > left or blocks > self.kv.num_free_blocks:
            return False
        self._take_steady(batch, steady, needed)
        for seq in decodes:
            need = -(-(seq.num_computed + 1) // bs) - seq.num_blocks
            if need > 0:
                self.kv.allocate(need)
                seq.private_blocks += need
            batch.add(seq, 1, it)
        return True

    def _schedule_running(self, batch: Batch, want_decode: bool | None, last_end_s: float) -> None:
        """The per-sequence pass over explicit running sequences in admission order;
        ``want_decode`` None: all of them, True: only decodes, False: only prefills
        (chunks and recomputation)."""
        cfg = self.config
        limit = cfg.max_num_batched_tokens
        bs = cfg.block_size
        chunked = cfg.enable_chunked_prefill
        cap = self.cap
        it = self.iteration
        add = batch.items.append
        used = batch.num_tokens
        for seq in tuple(self.explicit):
            if used >= limit:
                break
            if seq.status != RUNNING or seq.scheduled_at == it:
                continue
            computed = seq.num_computed
            n = seq.num_tokens - computed
            if want_decode is not None and (n == 1 and seq.num_output > 0) != want_decode:
                continue
            if cap and n > cap:
                n = cap
            if n > limit - used:
                if not chunked:
                    continue
                n = limit - used
            if computed + n > (seq.private_blocks + len(seq.shared)) * bs:
                batch.num_tokens = used
                fits = self._reserve(seq, n, batch, last_end_s)
                used = batch.num_tokens  # preemption may have unscheduled others
                if not fits:
                    continue
            add((seq, n))
            used += n
            seq.scheduled_at = it
        batch.num_tokens = used

    def _reserve(self, seq: Sequence, n: int, batch: Batch, last_end_s: float) -> bool:
        """Blocks for ``n`` more tokens of ``seq``, preempting others; False if ``seq`` was."""
        bs = self.config.block_size
        need = -(-(seq.num_computed + n) // bs) - seq.private_blocks - len(seq.shared)
        if need <= 0:
            return True
        while not self.kv.allocate(need):
            if self.steady.count:
                self.materialize(last_end_s)  # the victim may be any running sequence
            victim = self._pick_victim()
            self._preempt(victim, batch)
            if victim is seq:
                return False
        seq.private_blocks += need
        return True

    def _pick_victim(self) -> Sequence:
        if self.waiting.priority:
            return max(self.live_running(), key=lambda s: (s.priority, s.order))
        victim = self.last_running()
        assert victim is not None
        return victim

    def _preempt(self, victim: Sequence, batch: Batch) -> None:
        if victim.scheduled_at == self.iteration:
            batch.remove(victim)
        self.free_blocks(victim)
        victim.num_computed = 0
        victim.status = WAITING
        victim.num_preemptions += 1
        victim.preempted_at = self.iteration
        self.running.remove(victim)
        self.explicit.remove(victim)
        self.live -= 1
        self.waiting.push_front(victim)
        self.preemptions += 1
        batch.preempted.append(victim.request_id)

    def _run(self, seq: Sequence, now_s: float) -> None:
        """``seq`` joins the running sequences."""
        if seq.first_scheduled_s is None:
            seq.first_scheduled_s = now_s
        seq.status = RUNNING
        self.running.append(seq)
        self.explicit.append(seq)
        self.live += 1

    def _admit(self, now_s: float, batch: Batch) -> None:
        """Admit what fits: KV pulls finished first (they hold blocks), then the waiting
        queue in its order, which starts KV pulls for remote prompts. The scheduler's
        hottest path after the steady set: written out rather than factored."""
        cfg = self.config
        bs = cfg.block_size
        limit, max_seqs = cfg.max_num_batched_tokens, cfg.max_num_seqs
        kv, waiting, ready = self.kv, self.waiting, self.kv_ready
        running, explicit = self.running, self.explicit
        cap = self.cap
        it = self.iteration
        add = batch.items.append
        tokens = batch.num_tokens
        while ready and self.live < max_seqs:
            got = ready[0]
            n = got.num_tokens - got.num_computed
            if cap and n > cap:
                n = cap
            if limit - tokens < n:
                break
            need = -(-(got.num_computed + n) // bs) - got.private_blocks - len(got.shared)
            if need > 0 and not kv.allocate(need):
                break
            ready.popleft()
            if need > 0:
                got.private_blocks += need
            if got.first_scheduled_s is None:
                got.first_scheduled_s = now_s
            got.status = RUNNING
            running.append(got)
            explicit.append(got)
            self.live += 1
            add((got, n))
            tokens += n
            got.scheduled_at = it
        else:
            caching = cfg.enable_prefix_caching
            fifo = waiting.fifo
            pop = waiting.pop
            while waiting.live and self.live < max_seqs:
                budget = limit - tokens
                if budget <= 0:
                    break
                seq = fifo[0] if fifo is not None else waiting.peek()
                if seq is None or seq.preempted_at == it:
                    break  # a request preempted in this pass waits for the next one
                remote = seq.remote
                if remote is not None:  # decode role: allocate the prompt, pull its KV
                    need = -(-seq.prompt_tokens // bs) - seq.private_blocks - len(seq.shared)
                    if need > 0 and not kv.allocate(need):
                        break
                    pop()
                    if need > 0:
                        seq.private_blocks += need
                    seq.status = TRANSFERRING
                    transfer_s = remote.transfer_s
                    if transfer_s is None:
                        link = cfg.kv_link_bytes_per_s
                        transfer_s = self.cost.kv_transfer_s(remote.num_tokens, link)
                    rid = seq.request_id
                    self.transferring[rid] = seq
                    if self._timed:
                        heapq.heappush(self.transfer_heap, (now_s + transfer_s, seq.order, rid))
                    batch.transfers.append(KVTransferStart(rid, remote.num_tokens, transfer_s))
                    continue
                hit = 0
                fresh = caching and seq.num_computed == 0
                if fresh:
                    hashes = seq.req.block_hashes
                    if hashes:
                        hit = kv.match_prefix(hashes, (seq.num_tokens - 1) // bs)
                computed = seq.num_computed + hit * bs
                n = seq.num_tokens - computed
                if cap and n > cap:
                    n = cap
                if n > budget:
                    if not cfg.enable_chunked_prefill:
                        break
                    n = budget
                need = -(-(computed + n) // bs) - seq.private_blocks - len(seq.shared) - hit
                if hit:
                    kv.acquire(hashes[:hit])
                if need > 0 and not kv.allocate(need):
                    if hit:
                        kv.release(hashes[:hit])
                    break
                pop()
                if fresh:
                    self.prefix_queries += seq.prompt_tokens
                    self.prefix_hits += hit * bs
                if hit:
                    seq.shared = hashes[:hit]
                    seq.num_hashed = hit
                    seq.num_computed = computed
                if need > 0:
                    seq.private_blocks += need
                if seq.first_scheduled_s is None:
                    seq.cached_tokens = hit * bs
                    seq.first_scheduled_s = now_s
                seq.status = RUNNING
                running.append(seq)
                explicit.append(seq)
                self.live += 1
                add((seq, n))
                tokens += n
                seq.scheduled_at = it
        batch.num_tokens = tokens

    def _schedule_static(self, now_s: float, batch: Batch) -> None:
        cfg = self.config
        running = self.explicit
        it = self.iteration
        if running:
            for seq in running:
                batch.add(seq, seq.num_tokens - seq.num_computed, it)
            self._static_steps += 1
            size, ctx = self._static_size, self._static_padded + self._static_steps
            batch.cost_args = (size, size * (ctx + 1.0), size, size * ctx, size)
            return
        while self.live < cfg.max_num_seqs:
            head = self.waiting.peek()
            if head is None:
                break
            seq = head
            total = min(seq.num_tokens + seq.max_tokens - seq.num_output, cfg.max_model_len)
            reserve = -(-total // cfg.block_size)
            if not self.kv.allocate(reserve):
                break
            self.waiting.pop()
            seq.remote = None  # static batching is aggregated-only: prompts are prefilled here
            seq.private_blocks = reserve
            self._run(seq, now_s)
            batch.add(seq, seq.num_tokens - seq.num_computed, it)
        if running:
            size = len(running)
            padded = max(s.num_tokens for s in running)
            self._static_size, self._static_padded, self._static_steps = size, padded, 0
            batch.cost_args = (size * padded, size * padded * (padded + 1) / 2.0, size, 0, size)

    # -- steady and explicit ---------------------------------------------------------------

    def materialize(self, last_end_s: float) -> None:
        """Every steady sequence explicit, as of the start of the current pass (their
        latest token came at ``last_end_s``, the previous iteration's end)."""
        if not self.steady.count:
            return
        at_g = self.iteration
        bs = self.bs
        running: list[Sequence] = []
        for seq in self.running:
            if seq.status != RUNNING:
                continue
            if seq.steady:
                d = at_g - seq.g0
                c = seq.c0 + d
                seq.num_computed = c
                seq.num_tokens = c + 1
                seq.num_output = seq.out0 + d
                seq.private_blocks = -(-c // bs) - len(seq.shared)
                seq.last_emit_s = last_end_s
                seq.steady = False
                seq.version += 1
            running.append(seq)
        self.running = running
        self.explicit = list(running)
        self.steady.clear()

    def unsteady(self, seq: Sequence, at_g: int, last_end_s: float) -> None:
        """Make ``seq`` explicit again, with its state as of the start of pass ``at_g``."""
        d = at_g - seq.g0
        c = seq.c0 + d
        seq.num_computed = c
        seq.num_tokens = c + 1
        seq.num_output = seq.out0 + d
        seq.private_blocks = -(-c // self.bs) - len(seq.shared)
        seq.last_emit_s = last_end_s
        self.steady.remove(seq)
        explicit = self.explicit
        pos = len(explicit)
        while pos and explicit[pos - 1].order > seq.order:
            pos -= 1
        explicit.insert(pos, seq)

    def compact(self) -> None:
        """Drop finished entries from the running list once they are most of it."""
        running = self.running
        if len(running) > 64 and self.live < len(running) // 2:
            self.running = [s for s in running if s.status == RUNNING]

    def free_blocks(self, seq: Sequence) -> None:
        self.kv.free(seq.private_blocks)
        if seq.shared:
            self.kv.release(seq.shared)
            seq.shared = ()
        seq.private_blocks = 0
        seq.num_hashed = 0

    def complete_due_transfers(self, now_s: float) -> list[Sequence]:
        """Timed mode: the transfers due by ``now_s``, removed from the heap."""
        heap = self.transfer_heap
        due: list[Sequence] = []
        while heap and heap[0][0] <= now_s:
            _, order, request_id = heapq.heappop(heap)
            seq = self.transferring.get(request_id)
            if seq is not None and seq.order == order:
                due.append(seq)
        return due

    def mark_kv_ready(self, seq: Sequence) -> None:
        """Decode role: ``seq``'s KV arrived; it decodes next (its last prompt token is
        recomputed, as vLLM does)."""
        del self.transferring[seq.request_id]
        seq.remote = None
        seq.num_computed = seq.prompt_tokens - 1
        seq.external_tokens = seq.prompt_tokens - 1
        seq.status = KV_READY
        self.kv_ready.append(seq)
