"""Per-request state of :class:`~tandem.sim.fastdecode.FastDecodeEngine`. Pure, internal.

The fields mirror the engine model's ``Sequence``: ``tokens`` is every token known
(prompt + output), ``c`` how many have KV computed, ``blocks`` the KV blocks held.
A *steady* sequence (decoding one token per iteration) keeps those fields stale and
is described by ``c0``/``out0`` at iteration ``g0`` instead.
"""

from __future__ import annotations

from tandem.engine.model import EngineRequest, RemoteKV

WAITING = 0
RUNNING = 1
TRANSFERRING = 2
HELD = 3
DONE = 4
KV_READY = 5


class FastSeq:
    """One request inside a :class:`FastDecodeEngine`."""

    __slots__ = (
        "arrival_s",
        "blocks",
        "c",
        "c0",
        "external",
        "first_scheduled_s",
        "first_token_s",
        "g0",
        "hold",
        "last_emit_s",
        "max_tokens",
        "order",
        "out",
        "out0",
        "preempted_at",
        "preemptions",
        "prompt",
        "remote",
        "rid",
        "status",
        "steady",
        "tokens",
        "version",
    )

    def __init__(self, req: EngineRequest, arrival_s: float, order: int, max_tokens: int) -> None:
        self.rid = req.request_id
        self.prompt = req.prompt_tokens
        self.max_tokens = max_tokens
        self.arrival_s = arrival_s
        self.order = order
        self.c = 0
        self.tokens = req.prompt_tokens
        self.out = 0
        self.blocks = 0
        self.status = WAITING
        self.steady = False
        self.c0 = 0
        self.g0 = 0
        self.out0 = 0
        self.version = 0
        """Bumped whenever the sequence enters or leaves the steady set (heap entries)."""
        self.first_scheduled_s: float | None = None
        self.first_token_s: float | None = None
        self.last_emit_s: float | None = None
        """When its last token was emitted (for the gap to the next one)."""
        self.preemptions = 0
        self.preempted_at = -1
        """Iteration it was last preempted in (it is not re-admitted in that iteration)."""
        self.external = 0
        self.remote: RemoteKV | None = req.remote_kv
        self.hold = req.hold_kv_for_remote
        """Prefill role: keep the blocks after finishing until pulled (or the lease ends)."""
