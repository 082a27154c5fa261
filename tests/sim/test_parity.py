"""Parity: the operator's tick and the simulator's driver decide the same at every tick.

The simulator records the observation stream its Tandem run saw; the operator's path
(:func:`compute_tick`: state read from ``.status``, written back as JSON, as the API
server stores it) replays that stream and must make identical decisions.
"""

from __future__ import annotations

import json
from typing import Any

from tandem.control.tick import compute_tick
from tandem.sim.compare.results import RunResult
from tandem.sim.compare.runs import Scenario
from tandem.sim.fleet.simulation import Simulation
from tandem.sim.fleet.spec import build_policy_config


def test_operator_tick_and_simulator_driver_agree_tick_by_tick(
    bursty: Scenario, bursty_runs: dict[str, tuple[RunResult, Simulation]]
) -> None:
    _, sim = bursty_runs["tandem"]
    config = build_policy_config(bursty.isvc, bursty.plan)
    status: dict[str, Any] = {}
    ticks = [t for t in sim.ticks if t.observation is not None]
    assert len(ticks) > 10 and any(t.decision.changes for t in ticks)
    # the stream carries the router's feasibility accounting and absorbed prompts, so both
    # drivers read the same queueing signal
    observations = [t.observation for t in ticks if t.observation is not None]
    assert any(lat.feasible_requests for o in observations for lat in o.latency_by_class.values())
    assert any(o.absorbed_prompt_tokens_per_s > 0 for o in observations)
    for t in ticks:
        assert t.observation is not None
        tick = compute_tick(status, t.observation, config, "2026-01-01T00:00:00Z")
        assert tick.decision == t.decision, f"diverged at t={t.observation.now_s}"
        status = json.loads(json.dumps({**status, **tick.status}))  # what the API stores
    assert status["autoscaler"]["requests"]["window_s"] > 0
