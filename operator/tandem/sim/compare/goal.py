"""Whether Tandem's policy met its goal on one run of a trace, and by how much it missed.
Pure: run results in, a :class:`GoalCheck` out.

The goal (issue 15, judged by ``bench/autoscale.py`` on every trace it replays):

1. **Attainment.** At least 99 % of the *feasible* requests meet their targets. A
   request no fleet size could serve in time (a prompt too long to prefill within the
   TTFT target on one idle replica) is not held against a policy; where the run's
   result does not count them (no ``attainment_feasible``), attainment over all
   requests stands in, which can only be lower.
2. **The best fixed fleet.** Fewer GPU-hours than ``fixed-hindsight``, the cheapest
   static fleet reaching Tandem's own attainment (searched for it, so the two are
   compared at the same attainment). When no fixed fleet within the pools' bounds
   reaches it, Tandem wins this one.
3. **Every baseline.** Fewer GPU-hours than every baseline whose attainment is equal
   or higher; a baseline that serves fewer requests in time may spend less.
4. **No pool held at its maximum for nothing.** A pool that reached its maximum while
   the oracle never needed that many replicas of it (its peak per-window need is below
   the maximum) was grown on a target more replicas could not reach: queueing the
   demand did not call for, or service time no replica count removes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

#: Share of feasible requests that must meet their targets.
GOAL_ATTAINMENT = 0.99


class Outcome(Protocol):
    """What a check reads of a run (a :class:`~tandem.sim.compare.results.RunResult`)."""

    @property
    def attainment(self) -> float: ...

    @property
    def gpu_hours(self) -> float: ...

    @property
    def peak_replicas(self) -> Mapping[Any, int]: ...


def goal_attainment(result: Outcome) -> tuple[float, str]:
    """``(share, field)``: attainment over feasible requests when the result counts
    them (``attainment_feasible``), else over all requests."""
    feasible = getattr(result, "attainment_feasible", None)
    if isinstance(feasible, float):
        return feasible, "attainment_feasible"
    return result.attainment, "attainment"


@dataclass(frozen=True)
class PoolAtMax:
    role: str
    peak: int
    max_replicas: int
    oracle_peak: int


@dataclass(frozen=True)
class GoalCheck:
    attainment: float
    attainment_field: str
    """``attainment_feasible`` or ``attainment``: which share was held to the goal."""
    attainment_ok: bool
    fixed_ratio: float | None
    """Tandem's GPU-hours over ``fixed-hindsight``'s (``None``: no fixed fleet reached
    Tandem's attainment, or none was searched)."""
    fixed_ok: bool
    baselines_at_or_above: tuple[str, ...]
    """Baselines whose attainment is at least Tandem's."""
    baselines_beaten: tuple[str, ...]
    """Of those, the ones that spend more GPU-hours than Tandem."""
    pools_at_max: tuple[PoolAtMax, ...]
    """Pools that reached their maximum although the oracle never needed it."""
    goal: float = GOAL_ATTAINMENT

    @property
    def baselines_ok(self) -> bool:
        return len(self.baselines_beaten) == len(self.baselines_at_or_above)

    @property
    def max_ok(self) -> bool:
        return not self.pools_at_max

    @property
    def met(self) -> bool:
        return self.attainment_ok and self.fixed_ok and self.baselines_ok and self.max_ok

    def misses(self) -> list[str]:
        """What missed, by how much, one phrase each (empty when the goal is met)."""
        out: list[str] = []
        if not self.attainment_ok:
            gap = (self.goal - self.attainment) * 100
            out.append(
                f"{self.attainment_field} {self.attainment * 100:.2f}% is {gap:.2f} points "
                f"below {self.goal * 100:g}%"
            )
        if not self.fixed_ok and self.fixed_ratio is not None:
            out.append(
                f"{(self.fixed_ratio - 1) * 100:.0f}% more GPU-hours than fixed-hindsight "
                "at the same attainment"
            )
        lost = [b for b in self.baselines_at_or_above if b not in self.baselines_beaten]
        if lost:
            out.append(f"not cheaper than {', '.join(lost)} at equal or higher attainment")
        for p in self.pools_at_max:
            out.append(
                f"{p.role} at its maximum {p.max_replicas} where the oracle needs at most "
                f"{p.oracle_peak}"
            )
        return out

    def line(self) -> str:
        """One line for a terminal."""
        verdict = "MET" if self.met else "MISSED"
        fixed = (
            "no fixed fleet reaches it"
            if self.fixed_ratio is None
            else f"{self.fixed_ratio:.2f}x fixed-hindsight"
        )
        head = (
            f"goal {verdict}: {self.attainment_field} {self.attainment * 100:.2f}%, {fixed}, "
            f"cheaper than {len(self.baselines_beaten)} of {len(self.baselines_at_or_above)} "
            "baselines at equal or higher attainment"
        )
        if self.baselines_at_or_above:
            head += f" ({', '.join(self.baselines_at_or_above)})"
        misses = self.misses()
        return head + (f"; missed: {'; '.join(misses)}" if misses else "")


def check_goal(
    tandem: Outcome,
    baselines: Mapping[str, Outcome],
    fixed: Outcome | None,
    *,
    max_replicas: Mapping[str, int],
    oracle_peak: Mapping[str, int],
    goal: float = GOAL_ATTAINMENT,
) -> GoalCheck:
    """Tandem's run against the goal (module docstring). ``fixed`` is the
    ``fixed-hindsight`` fleet searched for Tandem's attainment, or ``None`` when no
    fixed fleet within the bounds reached it."""
    share, field = goal_attainment(tandem)
    ratio = tandem.gpu_hours / fixed.gpu_hours if fixed is not None and fixed.gpu_hours else None
    above = tuple(b for b, r in baselines.items() if goal_attainment(r)[0] >= share - 1e-12)
    beaten = tuple(b for b in above if tandem.gpu_hours < baselines[b].gpu_hours)
    at_max = tuple(
        PoolAtMax(role, peak, max_replicas[role], oracle_peak.get(role, 0))
        for role, peak in tandem.peak_replicas.items()
        if role in max_replicas
        and peak >= max_replicas[role]
        and oracle_peak.get(role, 0) < max_replicas[role]
    )
    return GoalCheck(
        attainment=share,
        attainment_field=field,
        attainment_ok=share >= goal - 1e-12,
        fixed_ratio=ratio,
        fixed_ok=ratio is None or ratio < 1.0,
        baselines_at_or_above=above,
        baselines_beaten=beaten,
        pools_at_max=at_max,
        goal=goal,
    )
