"""The simulator's autoscaler driver: observations in, decisions out. Pure.

The same loop the operator's timer runs, minus scraping and patching: keep the
autoscaler's state between ticks and call its ``decide``. Tandem's own state is
round-tripped through its status form (``PolicyState.to_dict``/``from_dict``) after
every tick, as the operator stores it in the resource's status, so a recorded
observation stream gives the same decisions here and in the operator (the parity
test feeds one stream to both).

Usage, with any :class:`~tandem.policy.baselines.Autoscaler`::

    driver = AutoscalerDriver(TandemAutoscaler(config))
    decisions = [driver.tick(obs) for obs in observations]   # or replay(...)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tandem.observe.types import Observation
from tandem.policy.baselines import Autoscaler
from tandem.policy.state import PolicyState
from tandem.policy.types import Decision


class AutoscalerDriver:
    """One autoscaler, ticked by whoever holds the observations."""

    def __init__(self, autoscaler: Autoscaler, *, round_trip_state: bool = True) -> None:
        self.autoscaler = autoscaler
        self.round_trip_state = round_trip_state
        """Pass Tandem's state through its status form between ticks (as the operator)."""
        self.state: Any = autoscaler.initial_state()
        self.ticks = 0

    @property
    def interval_s(self) -> float:
        return self.autoscaler.interval_s

    def tick(self, obs: Observation) -> Decision:
        """Decide on one observation; the state carries over to the next tick."""
        state, decision = self.autoscaler.decide(self.state, obs)
        if self.round_trip_state and isinstance(state, PolicyState):
            state = PolicyState.from_dict(state.to_dict())
        self.state = state
        self.ticks += 1
        return decision


def replay(autoscaler: Autoscaler, observations: Iterable[Observation]) -> list[Decision]:
    """Every decision of ``autoscaler`` on a recorded observation stream, in order."""
    driver = AutoscalerDriver(autoscaler)
    return [driver.tick(obs) for obs in observations]
