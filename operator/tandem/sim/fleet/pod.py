"""One simulated engine pod: its engine model, lifecycle and the counters it exports. Pure.

A pod is created when its Deployment scales up, becomes ready one cold start later,
serves while ready, and when scaled down leaves the router at once and drains (its
engine finishes what it holds) until it is empty or its shutdown timeout passes. Its
GPUs are paid from creation to removal.

The counters mirror the vLLM metrics the operator scrapes: the engine keeps token
and request totals itself; the pod adds the TTFT and inter-token-latency histograms,
observed when each iteration ends.
"""

from __future__ import annotations

from tandem.api.vocab import PoolRole
from tandem.engine.model import Engine, IterationResult
from tandem.observe.histogram import BucketCounter
from tandem.router.selection import Endpoint
from tandem.sim.fleet.histogram import VLLM_ITL_BUCKETS_S, VLLM_TTFT_BUCKETS_S

STARTING = 0
READY = 1
DRAINING = 2
GONE = 3

STATE_NAMES = {STARTING: "starting", READY: "ready", DRAINING: "draining", GONE: "gone"}


class Pod:
    """An engine pod of one pool."""

    __slots__ = (
        "busy",
        "busy_until_s",
        "created_s",
        "drain_deadline_s",
        "endpoint",
        "engine",
        "gpus",
        "itl",
        "kicked",
        "lazy",
        "name",
        "number",
        "pending",
        "ready_s",
        "removed_s",
        "requests",
        "role",
        "state",
        "ttft",
    )

    def __init__(
        self, number: int, role: PoolRole, engine: Engine, gpus: int, created_s: float
    ) -> None:
        self.number = number
        self.role = role
        self.name = f"{role}-{number}"
        self.engine = engine
        self.gpus = gpus
        self.state = STARTING
        self.created_s = created_s
        self.ready_s: float | None = None
        self.removed_s: float | None = None
        self.drain_deadline_s: float | None = None
        self.endpoint = Endpoint(url=f"http://{self.name}:8000", role=role)
        """The router's view of this pod (selection scores, outstanding work)."""
        self.busy = False
        """An iteration is in flight; it ends at ``busy_until_s``."""
        self.busy_until_s = 0.0
        self.pending: IterationResult | None = None
        """The iteration in flight; its tokens count at its end."""
        self.kicked = False
        """A step at the current instant is already scheduled."""
        self.lazy = False
        """Its iterations are applied on demand, not as events (:mod:`tandem.sim.fleet.catchup`)."""
        self.requests: set[int] = set()
        """Requests sent here and not yet done with it (prefill: until the KV is pulled)."""
        self.ttft = BucketCounter(VLLM_TTFT_BUCKETS_S)
        self.itl = BucketCounter(VLLM_ITL_BUCKETS_S)

    @property
    def serving(self) -> bool:
        return self.state == READY

    @property
    def load(self) -> int:
        """Running plus waiting requests: what ``pod-deletion-cost`` is set from."""
        return self.engine.num_running + self.engine.num_waiting

    def gpu_seconds(self, now_s: float) -> float:
        """GPU-seconds paid so far: from creation to removal (or ``now_s``)."""
        end = now_s if self.removed_s is None else min(self.removed_s, now_s)
        return max(end - self.created_s, 0.0) * self.gpus
