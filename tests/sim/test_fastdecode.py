"""The fast engine reproduces the engine model iteration by iteration.

Random workloads (arrivals, prompt and output lengths, KV caches small enough to force
preemption, budgets small enough to force chunking, short leases) are stepped through
both the engine model (:class:`ModelEngine`) and :class:`FastDecodeEngine` by the same
driver; every iteration's start, duration, batch, first tokens, finishes, KV pulls,
inter-token gaps and the gauges after it must be equal, and so must the totals.
"""

from __future__ import annotations

import heapq
import random
from typing import Any

import pytest

from tandem.engine.model import CostModel, EngineConfig, EngineRequest, RemoteKV, get_gpu, get_model
from tandem.sim.engines import ModelEngine, SimEngine
from tandem.sim.fastcost import fast_iteration_s
from tandem.sim.fastdecode import FastDecodeEngine, supports

COST = CostModel(get_model("llama-3.1-8b"), get_gpu("h100"))


def drive(engine: SimEngine, reqs: list[tuple[float, EngineRequest]], seed: int) -> list[Any]:
    """Step ``engine`` through ``reqs``; KV held for remote decode is released later."""
    rng = random.Random(seed)
    log: list[Any] = []
    releases: list[tuple[float, str]] = []
    i, now = 0, 0.0
    for _ in range(200_000):
        while releases and releases[0][0] <= now:
            _, rid = heapq.heappop(releases)
            log.append(("release", rid, engine.release_kv(rid)))
        while i < len(reqs) and reqs[i][0] <= now:
            engine.add_request(reqs[i][1], now)
            i += 1
        st = engine.step(now)
        for f in st.finished:
            if f.kv_held:
                heapq.heappush(releases, (st.end_s + rng.choice([0.0, 0.002, 0.2]), f.request_id))
        if st.num_seqs:
            finished = sorted(
                (f.request_id, f.finish_reason, f.output_tokens, f.num_preemptions,
                 f.num_kv_blocks, f.kv_held, f.first_token_s, f.finished_s)
                for f in st.finished
            )  # fmt: skip
            log.append(
                (st.start_s, st.duration_s, st.num_seqs, sorted(st.first_tokens), finished,
                 sorted(t.request_id for t in st.kv_transfers_started), st.continuing,
                 st.gap_s, st.other_gaps_s, engine.num_running, engine.num_waiting,
                 engine.kv_blocks_used, engine.preemptions_total)
            )  # fmt: skip
            now = st.end_s
            continue
        if st.kv_transfers_started:
            log.append(("pull", now, sorted(t.request_id for t in st.kv_transfers_started)))
        times = [engine.next_timer_s(), reqs[i][0] if i < len(reqs) else None]
        times.append(releases[0][0] if releases else None)
        later = [t for t in times if t is not None]
        if not later:
            break
        now = max(min(later), now)
    else:
        raise AssertionError("the workload never drained")
    totals = (
        engine.prompt_tokens_total, engine.generation_tokens_total,
        engine.requests_finished_total, engine.kv_blocks_used, engine.busy_s_total,
    )  # fmt: skip
    return [*log, totals]


def workload(seed: int) -> tuple[EngineConfig, list[tuple[float, EngineRequest]]]:
    rng = random.Random(seed)
    role = ("decode", "pool", "prefill")[seed % 3]
    blocks = rng.choice([40, 100, 400, 5000])
    config = EngineConfig(
        num_gpu_blocks=blocks,
        max_num_seqs=rng.choice([4, 16, 64, 256]),
        max_num_batched_tokens=rng.choice([64, 256, 2048]),
        max_model_len=min(4096, blocks * 16),
        enable_prefix_caching=False,
        kv_lease_s=rng.choice([0.02, 30.0]),
    )
    t = 0.0
    reqs: list[tuple[float, EngineRequest]] = []
    for k in range(rng.choice([20, 60, 150])):
        t += rng.expovariate(rng.choice([5.0, 50.0, 500.0]))
        p = rng.choice([rng.randint(1, 40), rng.randint(1, 300), rng.randint(100, 1500)])
        p = min(p, config.max_model_len - 1)
        out = rng.choice([1, rng.randint(1, 20), rng.randint(20, 300)])
        if role == "decode":
            reqs.append((t, EngineRequest(str(k), p, out, remote_kv=RemoteKV(p))))
        elif role == "prefill":
            reqs.append((t, EngineRequest(str(k), p, 1, hold_kv_for_remote=True)))
        else:
            reqs.append((t, EngineRequest(str(k), p, out)))
    return config, reqs


@pytest.mark.parametrize("seed", range(48))
def test_fast_engine_matches_the_engine_model(seed: int) -> None:
    config, reqs = workload(seed)
    assert supports(config)
    model = drive(ModelEngine(config, COST), reqs, seed)
    fast = drive(FastDecodeEngine(config, COST), reqs, seed)
    assert fast == model


def test_the_equivalence_covers_preemption_and_chunking() -> None:
    preempted = chunked = 0
    for seed in range(48):
        config, reqs = workload(seed)
        engine = ModelEngine(config, COST)
        drive(engine, reqs, seed)
        preempted += engine.preemptions_total > 0
        chunked += any(r.prompt_tokens > config.max_num_batched_tokens for _, r in reqs)
    assert preempted >= 5 and chunked >= 5


def test_folded_cost_is_bit_identical() -> None:
    for model, gpu, tp in [("llama-3.1-8b", "h100", 1), ("llama-3.1-70b", "a100", 4)]:
        cost = CostModel(get_model(model), get_gpu(gpu), tp)
        fast = fast_iteration_s(cost)
        assert fast is not cost.iteration_s
        rng = random.Random(0)
        for _ in range(500):
            tokens = rng.randint(1, 16384)
            args = (tokens, rng.uniform(0, 1e8), rng.randint(1, 1024), rng.randint(0, 10**7))
            sampled = rng.randint(0, 1024)
            assert fast(*args, sampled) == cost.iteration_s(*args, sampled)


def test_unsupported_configurations_are_refused() -> None:
    config = EngineConfig(num_gpu_blocks=100, max_model_len=1600, scheduling_policy="priority")
    assert not supports(config)
    with pytest.raises(ValueError, match="fcfs"):
        FastDecodeEngine(config, COST)


def drive_batched(
    engine: FastDecodeEngine, reqs: list[tuple[float, EngineRequest]], runs: list[int]
) -> list[Any]:
    """Decode work stepped the way lazy pods are: runs of steady iterations up to the
    next arrival go through ``run_steady`` (the simulator's batched steps); the length
    of each run is appended to ``runs``."""
    log: list[Any] = []
    i, now = 0, 0.0
    for _ in range(200_000):
        while i < len(reqs) and reqs[i][0] <= now:
            engine.add_request(reqs[i][1], now)
            i += 1
        next_arrival = reqs[i][0] if i < len(reqs) else float("inf")
        gaps: list[float] = []
        steady = engine.sched.steady.count
        st = engine.run_steady(now, next_arrival, gaps) if engine.lazy_ok else None
        log.extend((gap, steady, [], [], ()) for gap in gaps)
        if gaps:
            runs.append(len(gaps))
        st = st or engine.step(engine.last_end_s if gaps else now)
        if st.num_seqs:
            log.append(_record(st))
            now = st.end_s
            continue
        later = [t for t in (engine.next_timer_s(), next_arrival) if t is not None]
        if min(later, default=float("inf")) == float("inf"):
            break
        now = max(min(later), now)
    return [*log, (engine.generation_tokens_total, engine.iterations_total, engine.busy_s_total)]


def drive_steps(engine: FastDecodeEngine, reqs: list[tuple[float, EngineRequest]]) -> list[Any]:
    """The same work, one :meth:`step` per iteration."""
    log: list[Any] = []
    i, now = 0, 0.0
    for _ in range(200_000):
        while i < len(reqs) and reqs[i][0] <= now:
            engine.add_request(reqs[i][1], now)
            i += 1
        st = engine.step(now)
        if st.num_seqs:
            log.append(_record(st))
            now = st.end_s
            continue
        later = [t for t in (engine.next_timer_s(), reqs[i][0] if i < len(reqs) else None) if t]
        if not later:
            break
        now = max(min(later), now)
    return [*log, (engine.generation_tokens_total, engine.iterations_total, engine.busy_s_total)]


def _record(st: Any) -> tuple[Any, ...]:
    finished = sorted((f.request_id, f.output_tokens, f.finished_s) for f in st.finished)
    return (st.gap_s, st.num_seqs, sorted(st.first_tokens), finished, st.other_gaps_s)


@pytest.mark.parametrize("seed", range(0, 48, 3))  # the decode workloads
def test_batched_steady_steps_are_the_same_iterations(seed: int) -> None:
    config, reqs = workload(seed)
    assert all(r.remote_kv is not None for _, r in reqs)
    runs: list[int] = []
    batched = drive_batched(FastDecodeEngine(config, COST), reqs, runs)
    stepped = drive_steps(FastDecodeEngine(config, COST), reqs)
    assert batched == stepped
    assert sum(runs) > 0, "some iterations were batched"
