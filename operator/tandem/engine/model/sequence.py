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
    """

    __slots__ = (
        "arrival_s",
        "cached_tokens",
        "external_tokens",
        "first_scheduled_s",
        "first_token_s",
        "max_tokens",
        "num_computed",
        "num_hashed",
        "num_output",
        "num_preemptions",
        "num_tokens",
        "order",
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
        "stop_after",
    )

    def __init__(self, req: EngineRequest, arrival_s: float, order: int, max_tokens: int) -> None:
        self.req = req
        self.request_id = req.request_id
        self.prompt_tokens = req.prompt_tokens
        self.max_tokens = max_tokens
        self.stop_after = req.stop_after_tokens
        self.priority = req.priority
        self.order = order
        self.arrival_s = arrival_s
        self.num_computed = 0
        self.num_tokens = req.prompt_tokens
        self.num_output = 0
        self.private_blocks = 0
        self.shared: list[int] = []
        self.num_hashed = 0
        self.status = WAITING
        self.queued = False
        self.first_scheduled_s: float | None = None
        self.first_token_s: float | None = None
        self.num_preemptions = 0
        self.cached_tokens = 0
        self.external_tokens = 0
        self.remote: RemoteKV | None = req.remote_kv
        self.scheduled_at = -1
        """Iteration number this sequence was last scheduled in."""
        self.preempted_at = -1
        """Iteration number this sequence was last preempted in (not re-admitted in it)."""

    @property
    def num_blocks(self) -> int:
        return self.private_blocks + len(self.shared)
