"""The requests of one run and what happened to each. Pure.

Columns rather than objects: a run of a scaled one-hour trace holds a few hundred
thousand requests, and the hot loop touches them by index (the engine request id is
the index as a string). Times are seconds on the simulation clock; ``NaN`` marks a
time that never came.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from tandem.traces.parse import TraceRequest

NAN = math.nan

#: Outcomes. ``PENDING`` never survives a finished run (the conservation tests check).
PENDING = 0
COMPLETED = 1
REJECTED = 2
"""Refused by the router: admission full, or no ready engine within its wait."""
ABORTED = 3
"""Cut off by a pod's shutdown timeout, or failed inside an engine."""
INVALID = 4
"""The prompt does not fit the model's context; the client's error (HTTP 400)."""

OUTCOME_NAMES = {
    PENDING: "pending",
    COMPLETED: "completed",
    REJECTED: "rejected",
    ABORTED: "aborted",
    INVALID: "invalid",
}


class RequestTable:
    """Per-request columns, indexed by request number (arrival order)."""

    __slots__ = (
        "absorbed",
        "arrival_s",
        "decode_pod",
        "dispatch_s",
        "finish_s",
        "finishes",
        "first_token_s",
        "klass",
        "outcome",
        "output_tokens",
        "prefill_pod",
        "prompt_tokens",
        "tpot_s",
    )

    def __init__(self, requests: Sequence[TraceRequest], klass: str = "default") -> None:
        n = len(requests)
        self.arrival_s = [r.arrival_s for r in requests]
        self.prompt_tokens = [r.prompt_tokens for r in requests]
        self.output_tokens = [r.output_tokens for r in requests]
        self.klass = [klass] * n
        self.dispatch_s = [NAN] * n
        """When the router sent the request's first leg to an engine."""
        self.first_token_s = [NAN] * n
        """When the client got its first token (the router relayed it)."""
        self.finish_s = [NAN] * n
        self.tpot_s = [NAN] * n
        """Mean time per output token after the first (NaN for one-token answers)."""
        self.outcome = [PENDING] * n
        self.finishes = [0] * n
        """How many times the request ended (must be exactly 1)."""
        self.prefill_pod: list[int] = [-1] * n
        """Pod number that ran the prefill (-1: none)."""
        self.decode_pod: list[int] = [-1] * n
        self.absorbed = [False] * n
        """A decode pod prefilled the request itself (a burst absorbed)."""

    def __len__(self) -> int:
        return len(self.arrival_s)

    def end(self, i: int, outcome: int, now_s: float) -> None:
        """Record the end of request ``i``."""
        self.outcome[i] = outcome
        self.finish_s[i] = now_s
        self.finishes[i] += 1

    def ttft_s(self, i: int) -> float:
        return self.first_token_s[i] - self.arrival_s[i]
