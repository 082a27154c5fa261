"""From a raw need to a replica count: bounds, windows, steps, panic. Pure.

* Scale up at once, to the lowest recommendation inside the scale-up window (zero by
  default: the newest), by at most ``maxStep.up`` replicas a tick; in panic mode (demand
  over twice the current capacity) the step may double the pool instead.
* Scale down only to the highest recommendation over the whole scale-down window, and
  only once the window is covered by recommendations (after a restart, by those kept
  in status), by at most ``maxStep.down`` a tick; never during panic.
* Always within ``[min, max]``.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Literal, NamedTuple

from tandem.policy.config import PolicyConfig, PoolConfig
from tandem.policy.learn import compute_decay
from tandem.policy.state import PoolState
from tandem.policy.types import Cause


class Stable(NamedTuple):
    """What :func:`stabilize` decided."""

    replicas: int
    state: PoolState
    note: str
    """Why the replicas differ from the need, in words, or ``""``."""
    cause: Cause | Literal[""] = ""
    """The same as a :data:`~tandem.policy.types.CAUSES` code (``min``, ``max``,
    ``window``, ``panic``), or ``""`` when the need (perhaps step-limited) stands."""


def stabilize(
    current: int,
    wanted: int,
    panic: bool,
    now_s: float,
    state: PoolState,
    cfg: PoolConfig,
    config: PolicyConfig,
) -> Stable:
    """The replicas of a pool of ``current`` replicas that wants ``wanted``."""
    wanted = min(max(wanted, cfg.min_replicas), cfg.max_replicas)
    keep_s = max(config.scale_up_window_s, config.scale_down_window_s) + config.interval_s
    state = state.with_recommendation(now_s, wanted, keep_s)
    if panic:
        state = replace(state, panic_until_s=now_s + config.panic_window_s)
    outside = min(max(current, cfg.min_replicas), cfg.max_replicas)
    if outside != current:
        bound: Cause = "min" if outside > current else "max"
        return Stable(outside, state, f"bounds [{cfg.min_replicas}, {cfg.max_replicas}]", bound)
    if wanted > current:
        window = [n for t, n in state.recommendations if t >= now_s - config.scale_up_window_s]
        target = min(window)
        step = max(config.step_up, current) if panic else config.step_up
        n = min(target, current + step)
        note = "panic" if panic and n > current + config.step_up else ""
        if n < target:
            note = (note + "; " if note else "") + f"step limit {step}"
        return Stable(max(n, current), state, note)
    if wanted < current:
        if state.panic_until_s is not None and now_s < state.panic_until_s:
            return Stable(current, state, "panic mode holds scale-down", "panic")
        start = now_s - config.scale_down_window_s
        covered = state.recommendations[0][0] <= start + 1e-6
        if not covered and config.scale_down_window_s > 0:
            note = f"scale-down window {config.scale_down_window_s:g}s not yet covered"
            return Stable(current, state, note, "window")
        target = max(n for t, n in state.recommendations if t >= start - 1e-6)
        if target >= current:
            return Stable(
                current, state, f"held by the {config.scale_down_window_s:g}s window", "window"
            )
        n = max(target, current - config.step_down)
        return Stable(n, state, f"step limit {config.step_down}" if n > target else "")
    return Stable(current, state, "")


def remember_peak(
    wanted: int, now_s: float, state: PoolState, cfg: PoolConfig, config: PolicyConfig
) -> tuple[int, PoolState, str]:
    """(replicas, new state, note): ``wanted``, raised to the burst-memory floor.

    The pool keeps a decaying memory of its largest recent need (half-life
    ``config.peak_half_life_s``) and never plans below ``config.peak_share`` of it. On
    traffic that comes in bursts after quiet minutes, a pool scaled to its minimum in
    the quiet would miss a whole cold start of the next burst; the floor keeps part of
    the last burst's pool instead, and lets go as the memory fades.
    """
    wanted = min(max(wanted, cfg.min_replicas), cfg.max_replicas)
    share = config.peak_share
    if config.peak_half_life_s <= 0 or share <= 0:
        return wanted, replace(state, peak_need=None, peak_time_s=None), ""
    peak = state.peak_need
    if peak is not None and state.peak_time_s is not None:
        peak *= compute_decay(now_s - state.peak_time_s, config.peak_half_life_s)
    peak = float(wanted) if peak is None else max(peak, float(wanted))
    state = replace(state, peak_need=peak, peak_time_s=now_s)
    floor = math.ceil(share * peak - 1e-6)
    if floor > wanted:
        return floor, state, f"burst memory: {share:g} × recent peak {peak:.1f}"
    return wanted, state, ""
