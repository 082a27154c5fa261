"""Iteration-level scheduling: which sequences run next and how many tokens each. Pure.

Continuous batching (Orca, vLLM V1): every iteration spends a token budget on one decode
token per running sequence plus prompt chunks, at most ``max_num_seqs`` sequences; requests
join and leave between iterations. When a running sequence needs a block and none is free,
the scheduler preempts by recompute (FCFS: the latest admitted; priority: the highest
``priority`` value, latest arrival on ties) until it fits. Static batching forms a batch,
reserves each member's worst-case blocks, and runs it to completion; its cost is padded to
the batch's longest prompt and full size, as a padded tensor would be.
"""

from __future__ import annotations

import heapq
from collections import deque

from tandem.engine.model.config import EngineConfig
from tandem.engine.model.cost import CostModel
from tandem.engine.model.kvcache import KVCache
from tandem.engine.model.queues import WaitingQueue
from tandem.engine.model.request import KVTransferStart
from tandem.engine.model.sequence import RUNNING, TRANSFERRING, WAITING, Sequence

#: cost-model arguments: (compute tokens, attention pairs, seqs, KV read tokens, sampled)
CostArgs = tuple[int, float, int, int, int]


class Batch:
    """What one iteration runs (internal)."""

    __slots__ = ("cost_args", "num_tokens", "preempted", "seqs", "tokens", "transfers")

    def __init__(self) -> None:
        self.seqs: list[Sequence] = []
        self.tokens: list[int] = []
        self.num_tokens = 0
        self.preempted: list[str] = []
        self.transfers: list[KVTransferStart] = []
        self.cost_args: CostArgs | None = None
        """Set by static batching to charge padded work; None means charge what runs."""

    def add(self, seq: Sequence, n: int, iteration: int) -> None:
        self.seqs.append(seq)
        self.tokens.append(n)
        self.num_tokens += n
        seq.scheduled_at = iteration

    def remove(self, seq: Sequence) -> None:
        i = self.seqs.index(seq)
        del self.seqs[i]
        self.num_tokens -= self.tokens.pop(i)
        seq.scheduled_at = -1


class Scheduler:
    """Running list, waiting queue, transfers in flight and the KV cache of one engine."""

    def __init__(self, config: EngineConfig, cost: CostModel) -> None:
        self.config = config
        self.cost = cost
        self.kv = KVCache(config.num_gpu_blocks, config.block_size)
        self.waiting = WaitingQueue(config.scheduling_policy == "priority")
        self.running: list[Sequence] = []
        self.transferring: dict[str, Sequence] = {}
        self.kv_ready: deque[Sequence] = deque()
        """Decode role: KV received; admitted before the waiting queue since they hold blocks."""
        self.transfer_heap: list[tuple[float, int, str]] = []
        """Timed mode: (done_s, order, request_id), lazily invalidated."""
        self.iteration = 0
        self.preemptions = 0
        self.prefix_queries = 0
        self.prefix_hits = 0
        self._static_size = 0
        self._static_padded = 0
        self._static_steps = 0

    def schedule(self, now_s: float) -> Batch:
        """Pick this iteration's work. Mutates queues, blocks and sequence status."""
        self.iteration += 1
        batch = Batch()
        if self.config.batching == "static":
            self._schedule_static(now_s, batch)
        elif self.config.prioritize == "prefill":
            self._schedule_running(batch, want_decode=False)
            self._admit(now_s, batch)
            self._schedule_running(batch, want_decode=True)
        else:
            self._schedule_running(batch, want_decode=None)
            self._admit(now_s, batch)
        return batch

    def free_blocks(self, seq: Sequence) -> None:
        self.kv.free(seq.private_blocks)
        if seq.shared:
            self.kv.release(seq.shared)
        seq.private_blocks = 0
        seq.shared = []
        seq.num_hashed = 0

    def _schedule_running(self, batch: Batch, want_decode: bool | None) -> None:
        """Running sequences in admission order; ``want_decode`` None: all of them, True:
        only decodes, False: only prefills (chunks and recomputation)."""
        cfg = self.config
        limit = cfg.max_num_batched_tokens
        bs = cfg.block_size
        chunked = cfg.enable_chunked_prefill
        it = self.iteration
        add_seq, add_tokens = batch.seqs.append, batch.tokens.append
        used = batch.num_tokens
        for seq in tuple(self.running):
            if used >= limit:
                break
            if seq.status != RUNNING or seq.scheduled_at == it:
                continue
            computed = seq.num_computed
            n = seq.num_tokens - computed
            if want_decode is not None and (n == 1 and seq.num_output > 0) != want_decode:
                continue
            if n > limit - used:
                if not chunked:
                    continue
                n = limit - used
            if computed + n > (seq.private_blocks + len(seq.shared)) * bs:
                batch.num_tokens = used
                fits = self._reserve(seq, n, batch)
                used = batch.num_tokens  # preemption may have unscheduled others
                if not fits:
                    continue
            add_seq(seq)
            add_tokens(n)
            used += n
            seq.scheduled_at = it
        batch.num_tokens = used

    def _reserve(self, seq: Sequence, n: int, batch: Batch) -> bool:
        """Blocks for ``n`` more tokens of ``seq``, preempting others; False if ``seq`` was."""
        bs = self.config.block_size
        need = -(-(seq.num_computed + n) // bs) - seq.private_blocks - len(seq.shared)
        if need <= 0:
            return True
        while not self.kv.allocate(need):
            victim = self._pick_victim()
            self._preempt(victim, batch)
            if victim is seq:
                return False
        seq.private_blocks += need
        return True

    def _pick_victim(self) -> Sequence:
        if self.waiting.priority:
            return max(self.running, key=lambda s: (s.priority, s.order))
        return self.running[-1]

    def _preempt(self, victim: Sequence, batch: Batch) -> None:
        if victim.scheduled_at == self.iteration:
            batch.remove(victim)
        self.free_blocks(victim)
        victim.num_computed = 0
        victim.status = WAITING
        victim.num_preemptions += 1
        victim.preempted_at = self.iteration
        self.running.remove(victim)
        self.waiting.push_front(victim)
        self.preemptions += 1
        batch.preempted.append(victim.request_id)

    def _admit(self, now_s: float, batch: Batch) -> None:
        cfg = self.config
        bs = cfg.block_size
        kv, waiting, running = self.kv, self.waiting, self.running
        caching = cfg.enable_prefix_caching
        ready = self.kv_ready
        while ready and len(running) < cfg.max_num_seqs:
            budget = cfg.max_num_batched_tokens - batch.num_tokens
            got = ready[0]
            n = got.num_tokens - got.num_computed
            if budget < n:
                return
            need = -(-(got.num_computed + n) // bs) - got.num_blocks
            if need > 0 and not kv.allocate(need):
                return
            ready.popleft()
            got.private_blocks += max(0, need)
            if got.first_scheduled_s is None:
                got.first_scheduled_s = now_s
            got.status = RUNNING
            running.append(got)
            batch.add(got, n, self.iteration)
        while len(running) < cfg.max_num_seqs:
            budget = cfg.max_num_batched_tokens - batch.num_tokens
            if budget <= 0:
                return
            seq = waiting.peek()
            if seq is None or seq.preempted_at == self.iteration:
                return  # a request preempted in this iteration waits for the next one
            if seq.remote is not None:
                if not self._start_transfer(seq, now_s, batch):
                    return
                continue
            hashes = seq.req.block_hashes
            fresh = caching and seq.num_computed == 0
            hit = kv.match_prefix(hashes, (seq.num_tokens - 1) // bs) if fresh and hashes else 0
            computed = seq.num_computed + hit * bs
            n = seq.num_tokens - computed
            if n > budget:
                if not cfg.enable_chunked_prefill:
                    return
                n = budget
            need = -(-(computed + n) // bs) - seq.private_blocks - len(seq.shared) - hit
            if hit:
                kv.acquire(hashes[:hit])
            if need > 0 and not kv.allocate(need):
                if hit:
                    kv.release(hashes[:hit])
                return
            waiting.pop()
            if fresh:
                self.prefix_queries += seq.prompt_tokens
                self.prefix_hits += hit * bs
            if hit:
                seq.shared = list(hashes[:hit])
                seq.num_hashed = hit
                seq.num_computed = computed
            if seq.first_scheduled_s is None:
                seq.first_scheduled_s = now_s
                seq.cached_tokens = hit * bs
            if need > 0:
                seq.private_blocks += need
            seq.status = RUNNING
            running.append(seq)
            batch.add(seq, n, self.iteration)

    def _start_transfer(self, seq: Sequence, now_s: float, batch: Batch) -> bool:
        """Decode role: allocate the prompt's blocks and start pulling its KV."""
        assert seq.remote is not None
        need = -(-seq.prompt_tokens // self.config.block_size) - seq.num_blocks
        if need > 0 and not self.kv.allocate(need):
            return False
        self.waiting.pop()
        seq.private_blocks += max(0, need)
        seq.status = TRANSFERRING
        remote = seq.remote
        transfer_s = remote.transfer_s
        if transfer_s is None:
            transfer_s = self.cost.kv_transfer_s(remote.num_tokens, self.config.kv_link_bytes_per_s)
        self.transferring[seq.request_id] = seq
        if self.config.kv_transfer_mode == "timed":
            heapq.heappush(self.transfer_heap, (now_s + transfer_s, seq.order, seq.request_id))
        batch.transfers.append(KVTransferStart(seq.request_id, remote.num_tokens, transfer_s))
        return True

    def _schedule_static(self, now_s: float, batch: Batch) -> None:
        cfg = self.config
        running = self.running
        it = self.iteration
        if running:
            for seq in running:
                batch.add(seq, seq.num_tokens - seq.num_computed, it)
            self._static_steps += 1
            size, ctx = self._static_size, self._static_padded + self._static_steps
            batch.cost_args = (size, size * (ctx + 1.0), size, size * ctx, size)
            return
        while len(running) < cfg.max_num_seqs:
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
            seq.status = RUNNING
            if seq.first_scheduled_s is None:
                seq.first_scheduled_s = now_s
            running.append(seq)
            batch.add(seq, seq.num_tokens - seq.num_computed, it)
        if running:
            size = len(running)
            padded = max(s.num_tokens for s in running)
            self._static_size, self._static_padded, self._static_steps = size, padded, 0
            batch.cost_args = (size * padded, size * padded * (padded + 1) / 2.0, size, 0, size)
