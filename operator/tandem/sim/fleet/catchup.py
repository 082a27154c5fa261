"""Batched engine steps: decode pods that step on their own until someone looks. Pure.

Most iterations of a decode (or aggregated) pod cause no event: no KV pull starts,
nothing is handed to another pod; their tokens and finishes only change counters and
records. Such a pod is *lazy*: its iterations are not put on the event heap one by one;
instead, whenever anything reads it (the router choosing among its pool, a request
sent to it, the router's and the autoscaler's scrapes, timeline points, a scale-down),
every iteration that ended by then is applied first, in order and at its own end
time, with runs of steady iterations computed in one call
(:meth:`~tandem.engine.model.Engine.run_steady`). Nothing is observed
before it would have happened, so a run is the same as stepping each iteration as an
event (``tests/sim`` compares the two). A pod is eager again while a queued request
will start a KV pull, while it drains, and when it goes idle.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from tandem.api.vocab import PoolRole
from tandem.sim.fleet.events import NewEvent
from tandem.sim.fleet.pod import READY, Pod

if TYPE_CHECKING:
    from tandem.sim.fleet.flow import Flow

ITERATION = 2  # tandem.sim.fleet.flow.ITERATION


def can_be_lazy(pod: Pod) -> bool:
    """Whether ``pod`` may skip the heap after its latest step."""
    engine = pod.engine
    return (
        pod.role != "prefill"
        and pod.state == READY
        and engine.config.steady_decode
        and engine.lazy_ok
    )


class CatchUp:
    """Brings lazy pods up to a time; owned by the :class:`~tandem.sim.fleet.flow.Flow`."""

    def __init__(self, flow: Flow) -> None:
        self.flow = flow
        self._gaps: list[float] = []

    def pod(self, pod: Pod, t: float) -> list[NewEvent]:
        """Apply every iteration of a lazy ``pod`` that ends by ``t``."""
        if not pod.lazy:
            return []
        engine = pod.engine
        flow = self.flow
        events: list[NewEvent] = []
        gaps = self._gaps
        while True:
            if pod.busy:
                if pod.busy_until_s > t:
                    break
                done = pod.pending
                assert done is not None
                pod.busy = False
                pod.pending = None
                events.extend(flow.tokens_done(pod.busy_until_s, pod, done))
                gaps.clear()
                steady = engine.scheduler.steady.count
                result = engine.run_steady(engine.last_end_s, t, gaps)
                if gaps:
                    flow.record_gaps(pod, gaps, steady)
                if result is None:
                    result = engine.step(engine.last_end_s)
            else:
                timer = engine.next_timer_s()
                if timer is None or timer > t:
                    pod.lazy = False  # idle: woken by a request or its timer, as usual
                    if timer is not None:
                        events.append((timer, ITERATION, pod))
                    break
                result = engine.step(timer)
            if result.kv_transfers_started:
                raise AssertionError(f"{pod.name}: a KV pull started while lazy")
            if result.num_seqs:
                pod.busy = True
                pod.busy_until_s = result.start_s + result.duration_s
                pod.pending = result
        return events

    def all(self, t: float, roles: Iterable[PoolRole] = ("decode", "pool")) -> list[NewEvent]:
        """Every lazy pod of ``roles`` up to ``t``."""
        events: list[NewEvent] = []
        pods = self.flow.fleet.pods
        for role in roles:
            for pod in pods.get(role, ()):
                # Mid-iteration pods have nothing to apply yet: skip them cheaply.
                if pod.lazy and (pod.busy_until_s <= t or not pod.busy):
                    events.extend(self.pod(pod, t))
        return events

    def wake(self, pod: Pod, t: float) -> list[NewEvent]:
        """Bring ``pod`` up to ``t`` and put its next iteration back on the heap."""
        events = self.pod(pod, t)
        if pod.lazy:
            pod.lazy = False
            if pod.busy:
                events.append((pod.busy_until_s, ITERATION, pod))
        return events
