"""``bench/fidelity.py``'s pure parts: where vLLM's forward pass runs (``--bind``) and the
held-out loads it replays. The bench itself runs real vLLM for minutes; these run in
milliseconds."""

from __future__ import annotations

from types import ModuleType

import pytest

from tests.support.bench import load_bench_script


@pytest.fixture(scope="module")
def fidelity() -> ModuleType:
    return load_bench_script("fidelity")


@pytest.mark.parametrize(
    ("cpus", "bind", "expected"),
    [
        ([0, 1], True, 1),  # two CPUs: the last to the engine, the other for the rest
        ([2, 5, 7], True, 7),  # the process's own affinity, not the machine's numbering
        ([0, 1, 2, 3], True, 3),
        ([0, 1], False, None),  # the default: nothing bound
        ([0], True, None),  # asked for, impossible: main() says so and stops
    ],
)
def test_the_engine_gets_the_last_cpu_when_there_is_another(
    fidelity: ModuleType, cpus: list[int], bind: bool, expected: int | None
) -> None:
    assert fidelity.pick_engine_cpu(cpus, bind) == expected


def test_the_placement_is_printed_with_the_tables(fidelity: ModuleType) -> None:
    assert "CPU 3" in fidelity.placement(3)
    assert "same CPUs" in fidelity.placement(None)


def test_a_schedule_is_the_same_for_a_seed_and_bounded(fidelity: ModuleType) -> None:
    one = fidelity.build_schedule(5.0, 30.0, 7, 400)
    assert one == fidelity.build_schedule(5.0, 30.0, 7, 400)
    assert one != fidelity.build_schedule(5.0, 30.0, 8, 400)
    assert all(0 < a.at_s < 30.0 and 16 <= a.prompt_tokens <= 1500 for a in one)
    assert [a.at_s for a in one] == sorted(a.at_s for a in one)
    assert len(fidelity.build_schedule(100.0, 30.0, 7, 50)) == 50
