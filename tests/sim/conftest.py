"""Runs shared by several simulator tests (each policy once per session)."""

from __future__ import annotations

import pytest

from tandem.sim.compare.results import RunResult
from tandem.sim.compare.runs import POLICIES, Scenario, run_policy
from tandem.sim.fleet.simulation import Simulation
from tests.sim.factories import bursty_trace, make_scenario


@pytest.fixture(scope="session")
def bursty() -> Scenario:
    return make_scenario(bursty_trace(), warmup_s=60.0, record_observations=True)


@pytest.fixture(scope="session")
def bursty_runs(bursty: Scenario) -> dict[str, tuple[RunResult, Simulation]]:
    """Every policy on the bursty trace."""
    return {name: run_policy(name, bursty) for name in POLICIES}
