"""The engine's mutable per-request state. Pure; internal to ``tandem.engine.model``."""

from __future__ import annotations

from tandem.engine.model.request import EngineRequest, RemoteKV

WAITING = 0
RUNNING = 1
TRANSFERRING = 2
HELD = 3
DONE = 4
KV_READY = 5
"""Decode role: the KV arrived; the request waits (holding its blocks) to be scheduled."""


class Sequence:
    """One request inside the engine. Token counts only; no per-token objects.

    ``num_tokens`` is every token known (prompt + output); ``num_computed`` is how many of
    them have KV in the cache. A decoding sequence has ``num_tokens - num_computed == 1``
    (the last sampled token); a prefilling or preempted one has more. Each scheduled step
    computes some tokens; reaching ``num_tokens`` samples one new token.

    A *steady* sequence (:mod:`tandem.engine.model.steady`) decodes one token every
    iteration and is not visited per iteration: while ``steady`` is set, ``num_computed``,
    ``num_tokens``, ``num_output`` and ``private_blocks`` are stale, and its state at
    scheduling pass ``g`` is ``c0 + (g - g0)`` computed tokens, ``out0 + (g - g0)``
    outputs and ``ceil(computed / block_size)`` blocks (``shared`` stays current). The
    scheduler makes it explicit again (:meth:`Scheduler.unsteady`) before anything needs
    those fields.
    """

    __slots__ = (
        "arrival_s",
        "c0",
        "cached_tokens",
        "external_tokens",
        "first_scheduled_s",
        "first_token_s",
        "g0",
        "hold",
        "last_emit_s",
        "limit",
        "max_tokens",
        "num_computed",
        "num_hashed",
        "num_output",
        "num_preemptions",
        "num_tokens",
        "order",
        "out0",
        "preempted_at",
        "priority",
        "private_blocks",
        "prompt_tokens",
        "queued",
        "remote",
        "req",
        "request_id",
        "scheduled_at",
        "shared",
        "status",
        "steady",
        "stop_after",
        "version",
    )

    c0: int
    """Steady: computed tokens when it joined the set."""
    g0: int
    """Steady: the first scheduling pass it decoded in as a member."""
    out0: int
    """Steady: outputs when it joined the set."""

    def __init__(self, req: EngineRequest, arrival_s: float, order: int, max_tokens: int) -> None:
        self.req = req
        self.request_id = req.request_id
        self.prompt_tokens = req.prompt_tokens
        self.max_tokens = max_tokens
        self.stop_after = req.stop_after_tokens
        self.limit = max_tokens if self.stop_after is None else min(max_tokens, self.stop_after)
        """Outputs at which it finishes: ``max_tokens`` (``length``) or the stop (``stop``)."""
        self.priority = req.priority
        self.order = order
        self.arrival_s = arrival_s
        self.num_computed = 0
        self.num_tokens = req.prompt_tokens
        self.num_output = 0
        self.private_blocks = 0
        self.shared: tuple[int, ...] = ()
        self.num_hashed = 0
        self.status = WAITING
        self.queued = False
        self.first_scheduled_s: float | None = None
        self.first_token_s: float | None = None
        self.last_emit_s: float | None = None
        """When its latest token was emitted (for the gap to the next one)."""
        self.num_preemptions = 0
        self.cached_tokens = 0
        self.external_tokens = 0
        self.remote: RemoteKV | None = req.remote_kv
        self.hold = req.hold_kv_for_remote
        """Prefill role: keep the blocks after finishing until pulled (or the lease ends)."""
        self.scheduled_at = -1
        """Scheduling pass this sequence was last scheduled in."""
        self.preempted_at = -1
        """Scheduling pass this sequence was last preempted in (not re-admitted in it)."""
        self.steady = False
        self.version = 0
        """Bumped whenever it joins or leaves the steady set (stale heap entries); ``c0``,
        ``g0`` and ``out0`` are set when it joins."""

    @property
    def num_blocks(self) -> int:
        return self.private_blocks + len(self.shared)
