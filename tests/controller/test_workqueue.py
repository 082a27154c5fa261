"""The work queue: coalescing, one worker per key, backoff, delayed retries."""

from __future__ import annotations

import asyncio
import itertools

from tandem.controller.workqueue import WorkQueue
from tests.support import eventually


async def test_keys_added_while_waiting_are_processed_once() -> None:
    seen: list[str] = []

    async def process(key: str) -> None:
        seen.append(key)

    queue: WorkQueue[str] = WorkQueue(process, workers=2)
    for key in ("a", "b", "a", "a", "b"):
        queue.add(key)
    await queue.start()
    await eventually(lambda: len(seen) == 2)
    await asyncio.sleep(0.05)
    assert sorted(seen) == ["a", "b"]
    await queue.stop()


async def test_a_key_triggered_while_processing_runs_again_after_never_in_parallel() -> None:
    running, runs, peak = 0, 0, 0
    release = asyncio.Event()

    async def process(key: str) -> None:
        nonlocal running, runs, peak
        running += 1
        peak = max(peak, running)
        runs += 1
        if runs == 1:
            await release.wait()
        running -= 1

    queue: WorkQueue[str] = WorkQueue(process, workers=4)
    await queue.start()
    queue.add("a")
    await eventually(lambda: runs == 1)
    queue.add("a")
    queue.add("a")
    release.set()
    await eventually(lambda: runs == 2)
    await asyncio.sleep(0.05)
    assert (runs, peak) == (2, 1)
    await queue.stop()


async def test_failures_back_off_exponentially_and_success_resets() -> None:
    attempts: list[float] = []
    loop = asyncio.get_running_loop()

    async def process(key: str) -> None:
        attempts.append(loop.time())
        if len(attempts) < 4:
            raise RuntimeError("boom")

    queue: WorkQueue[str] = WorkQueue(process, base_delay_s=0.05, max_delay_s=1.0, seed=1)
    await queue.start()
    queue.add("a")
    await eventually(lambda: len(attempts) == 4, timeout_s=5)
    gaps = [b - a for a, b in itertools.pairwise(attempts)]
    assert gaps[0] < gaps[1] < gaps[2]
    assert gaps[0] >= 0.04 and gaps[2] >= 0.17
    assert queue.failures == {}
    await queue.stop()


def test_backoff_is_capped() -> None:
    queue: WorkQueue[str] = WorkQueue(
        lambda key: asyncio.sleep(0), base_delay_s=1, max_delay_s=10, seed=0
    )
    assert 0.9 <= queue.backoff_s(1) <= 1.1
    assert 9 <= queue.backoff_s(30) <= 11


async def test_a_requested_delay_runs_the_key_later_and_discard_cancels_it() -> None:
    seen: list[str] = []

    async def process(key: str) -> float | None:
        seen.append(key)
        return 0.1 if key == "again" else None

    queue: WorkQueue[str] = WorkQueue(process)
    await queue.start()
    queue.add("again")
    await eventually(lambda: seen.count("again") >= 2, timeout_s=2)
    queue.discard("again")
    count = seen.count("again")
    await asyncio.sleep(0.3)
    assert seen.count("again") <= count + 1
    await queue.stop()


async def test_an_earlier_delayed_add_wins() -> None:
    seen: list[float] = []
    loop = asyncio.get_running_loop()

    async def process(key: str) -> None:
        seen.append(loop.time())

    queue: WorkQueue[str] = WorkQueue(process)
    await queue.start()
    start = loop.time()
    queue.add("a", delay_s=5)
    queue.add("a", delay_s=0.05)
    await eventually(lambda: seen, timeout_s=2)
    assert seen[0] - start < 1
    await queue.stop()
