"""The simulator's autoscaler driver: a recorded observation stream replays exactly."""

from __future__ import annotations

import json

from tandem.policy.baselines import Kpa, TandemAutoscaler
from tandem.sim.autoscaler.driver import AutoscalerDriver, replay
from tandem.sim.autoscaler.record import observation_from_dict, observation_to_dict
from tandem.sim.compare.results import RunResult
from tandem.sim.compare.runs import Scenario
from tandem.sim.fleet.simulation import Simulation
from tandem.sim.fleet.spec import build_policy_config


def test_replaying_the_recorded_stream_gives_every_decision_again(
    bursty: Scenario, bursty_runs: dict[str, tuple[RunResult, Simulation]]
) -> None:
    _, sim = bursty_runs["tandem"]
    observations = [tick.observation for tick in sim.ticks]
    assert observations and all(o is not None for o in observations)
    config = build_policy_config(bursty.isvc, bursty.plan)
    decisions = replay(TandemAutoscaler(config), [o for o in observations if o is not None])
    assert decisions == [tick.decision for tick in sim.ticks]
    assert any(d.changes for d in decisions)


def test_a_stream_survives_json_and_still_replays(
    bursty: Scenario, bursty_runs: dict[str, tuple[RunResult, Simulation]]
) -> None:
    _, sim = bursty_runs["tandem"]
    observations = [t.observation for t in sim.ticks if t.observation is not None]
    lines = [json.dumps(observation_to_dict(o)) for o in observations]
    restored = [observation_from_dict(json.loads(line)) for line in lines]
    assert restored == observations
    config = build_policy_config(bursty.isvc, bursty.plan)
    assert replay(TandemAutoscaler(config), restored) == [t.decision for t in sim.ticks]


def test_state_round_trips_through_the_status_form(
    bursty: Scenario, bursty_runs: dict[str, tuple[RunResult, Simulation]]
) -> None:
    _, sim = bursty_runs["tandem"]
    observations = [t.observation for t in sim.ticks if t.observation is not None]
    config = build_policy_config(bursty.isvc, bursty.plan)
    kept = AutoscalerDriver(TandemAutoscaler(config), round_trip_state=False)
    stored = AutoscalerDriver(TandemAutoscaler(config), round_trip_state=True)
    assert [kept.tick(o) for o in observations] == [stored.tick(o) for o in observations]


def test_any_baseline_drives_the_same_way(
    bursty: Scenario, bursty_runs: dict[str, tuple[RunResult, Simulation]]
) -> None:
    _, sim = bursty_runs["kpa"]
    observations = [t.observation for t in sim.ticks if t.observation is not None]
    pools = build_policy_config(bursty.isvc, bursty.plan).pools
    driver = AutoscalerDriver(Kpa(pools))
    assert driver.interval_s == 2.0
    assert [driver.tick(o) for o in observations] == [t.decision for t in sim.ticks]
    assert driver.ticks == len(observations)
