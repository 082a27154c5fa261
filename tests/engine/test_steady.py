"""Steady decoding gives the same iterations as visiting every sequence.

Random workloads over every engine feature (FCFS and priority, decode- and
prefill-first, prefix caching with shared prefixes, stop tokens, static batching,
prefill without chunking, timed and externally completed KV pulls with failures, KV
caches small enough to force preemption, budgets small enough to force chunking, short
leases, aborts) are stepped through two engines that differ only in
``EngineConfig.steady_decode``; every iteration's start, duration, batch, first tokens,
finishes, KV pulls, inter-token gaps and the gauges after it must be equal, and so must
the totals and the statistics snapshots taken along the way.
"""

from __future__ import annotations

import dataclasses
import heapq
import random
from typing import Any

import pytest

from tandem.engine.model import (
    CostModel,
    Engine,
    EngineConfig,
    EngineRequest,
    IterationResult,
    RemoteKV,
    get_gpu,
    get_model,
)

COST = CostModel(get_model("llama-3.1-8b"), get_gpu("h100"))


def _hashes(rng: random.Random, prompt: int, families: list[list[int]], bs: int) -> tuple[int, ...]:
    """Block hashes of a prompt sharing a random-length prefix with earlier prompts."""
    if not families or rng.random() < 0.3:
        families.append([rng.getrandbits(40) for _ in range(64)])
    family = rng.choice(families)
    n = prompt // bs
    shared = min(n, rng.randint(0, len(family)))
    return tuple(family[:shared] + [rng.getrandbits(40) for _ in range(n - shared)])


def workload(seed: int, wide: bool) -> tuple[EngineConfig, list[tuple[float, EngineRequest]]]:
    """A decode, aggregated or prefill engine and its arrivals; ``wide`` draws every
    scheduler and cache feature too, not only the simulator's configuration."""
    rng = random.Random(seed)
    role = ("decode", "pool", "prefill")[seed % 3]
    blocks = rng.choice([40, 100, 400, 5000])
    fields: dict[str, Any] = {
        "num_gpu_blocks": blocks,
        "max_num_seqs": rng.choice([4, 16, 64, 256]),
        "max_num_batched_tokens": rng.choice([64, 256, 2048]),
        "max_model_len": min(4096, blocks * 16),
        "enable_prefix_caching": False,
        "kv_lease_s": rng.choice([0.02, 30.0]),
    }
    caching = stop = False
    if wide:
        fields["scheduling_policy"] = rng.choice(["fcfs", "priority"])
        fields["prioritize"] = rng.choice(["decode", "prefill"])
        caching = role != "decode" and rng.random() < 0.5
        fields["enable_prefix_caching"] = caching
        stop = rng.random() < 0.5
        if rng.random() < 0.2:
            fields["batching"] = "static"
        if rng.random() < 0.2:
            fields["enable_chunked_prefill"] = False
            fields["max_num_batched_tokens"] = max(
                fields["max_num_batched_tokens"], fields["max_model_len"]
            )
        elif rng.random() < 0.3:
            fields["long_prefill_token_threshold"] = rng.choice([16, 100, 512])
        if role == "decode" and rng.random() < 0.5:
            fields["kv_transfer_mode"] = "external"
            fields["kv_load_failure_policy"] = rng.choice(["fail", "recompute"])
    config = EngineConfig(**fields)
    t = 0.0
    families: list[list[int]] = []
    reqs: list[tuple[float, EngineRequest]] = []
    for k in range(rng.choice([20, 60, 150])):
        t += rng.expovariate(rng.choice([5.0, 50.0, 500.0]))
        p = rng.choice([rng.randint(1, 40), rng.randint(1, 300), rng.randint(100, 1500)])
        p = min(p, config.max_model_len - 1)
        out = rng.choice([1, rng.randint(1, 20), rng.randint(20, 300)])
        kw: dict[str, Any] = {}
        if wide:
            kw["priority"] = rng.choice([0, 0, 1, 5, -2])
            if stop and rng.random() < 0.5:
                kw["stop_after_tokens"] = rng.randint(1, out + 5)
            if caching:
                kw["block_hashes"] = _hashes(rng, p, families, config.block_size)
        if role == "decode":
            reqs.append((t, EngineRequest(str(k), p, out, remote_kv=RemoteKV(p), **kw)))
        elif role == "prefill":
            reqs.append((t, EngineRequest(str(k), p, 1, hold_kv_for_remote=True, **kw)))
        else:
            reqs.append((t, EngineRequest(str(k), p, out, **kw)))
    return config, reqs


def drive(
    engine: Engine,
    reqs: list[tuple[float, EngineRequest]],
    seed: int,
    steady: list[int] | None = None,
) -> list[Any]:
    """Step ``engine`` through ``reqs``: KV held for a remote decode is released later,
    external KV pulls complete (or fail) later, some requests are aborted on the way.
    ``steady``, if given, collects each iteration's steady tokens."""
    rng = random.Random(seed)
    log: list[Any] = []
    later: list[tuple[float, int, str, str]] = []
    external = engine.config.kv_transfer_mode == "external"
    aborts = {str(k) for k in range(0, len(reqs), 7)} if seed % 2 else set()
    i, now, n = 0, 0.0, 0
    for step in range(300_000):
        while later and later[0][0] <= now:
            _, _, kind, rid = heapq.heappop(later)
            if kind == "release":
                log.append(("release", rid, engine.release_kv(rid)))
            elif kind == "abort":
                f = engine.abort(rid, now)
                log.append(
                    ("abort", rid, f and (f.finish_reason, f.output_tokens, f.num_kv_blocks))
                )
            else:
                f = engine.complete_kv_transfer(rid, kind == "ok", now)
                log.append(("pulled", rid, kind, f and f.finish_reason))
        while i < len(reqs) and reqs[i][0] <= now:
            engine.add_request(reqs[i][1], now)
            if reqs[i][1].request_id in aborts:
                n += 1
                at = now + rng.choice([0.001, 0.05, 0.5])
                heapq.heappush(later, (at, n, "abort", reqs[i][1].request_id))
            i += 1
        st = engine.step(now)
        if steady is not None:
            steady.append(st.num_steady)
        for f in st.finished:
            if f.kv_held:
                n += 1
                at = st.end_s + rng.choice([0.0, 0.002, 0.2])
                heapq.heappush(later, (at, n, "release", f.request_id))
        if external:
            for x in st.kv_transfers_started:
                n += 1
                kind = "ok" if rng.random() < 0.9 else "fail"
                heapq.heappush(later, (now + x.transfer_s, n, kind, x.request_id))
        if step % 37 == 0:
            log.append(("stats", dataclasses.astuple(engine.stats())))
        if st.num_seqs:
            log.append(_record(engine, st))
            now = st.end_s
            continue
        if st.kv_transfers_started:
            log.append(("pull", now, sorted(t.request_id for t in st.kv_transfers_started)))
        times = [engine.next_timer_s(), reqs[i][0] if i < len(reqs) else None]
        times.append(later[0][0] if later else None)
        pending = [t for t in times if t is not None]
        if not pending:
            break
        now = max(min(pending), now)
    else:
        raise AssertionError("the workload never drained")
    totals = (
        engine.prompt_tokens_total, engine.generation_tokens_total,
        engine.requests_finished_total, engine.kv_blocks_used, engine.busy_s_total,
    )  # fmt: skip
    return [*log, totals]


def _record(engine: Engine, st: IterationResult) -> tuple[Any, ...]:
    finished = sorted(
        (f.request_id, f.finish_reason, f.output_tokens, f.num_preemptions, f.num_kv_blocks,
         f.kv_held, f.first_token_s, f.finished_s, f.cached_tokens)
        for f in st.finished
    )  # fmt: skip
    return (
        st.start_s, st.duration_s, st.num_seqs, st.num_prefill_tokens, st.num_decode_tokens,
        sorted(st.first_tokens), finished, sorted(st.preempted),
        sorted(t.request_id for t in st.kv_transfers_started), st.kv_expired, st.continuing,
        st.gap_s, st.other_gaps_s, engine.num_running, engine.num_waiting,
        engine.kv_blocks_used, engine.preemptions_total,
    )  # fmt: skip


def _pair(config: EngineConfig) -> tuple[Engine, Engine]:
    explicit = Engine(dataclasses.replace(config, steady_decode=False), COST)
    return explicit, Engine(dataclasses.replace(config, steady_decode=True), COST)


@pytest.mark.parametrize("seed", range(48))
def test_steady_decoding_matches_on_the_simulators_configuration(seed: int) -> None:
    config, reqs = workload(seed, wide=False)
    explicit, steady = _pair(config)
    assert drive(steady, reqs, seed) == drive(explicit, reqs, seed)


@pytest.mark.parametrize("seed", range(120))
def test_steady_decoding_matches_with_every_feature(seed: int) -> None:
    config, reqs = workload(seed, wide=True)
    explicit, steady = _pair(config)
    assert drive(steady, reqs, seed) == drive(explicit, reqs, seed)


def test_the_equivalence_covers_what_makes_it_hard() -> None:
    """The workloads preempt, chunk, hit the prefix cache, stop early, fail KV loads and
    do run steady iterations, under both priorities and both policies."""
    seen: dict[str, int] = dict.fromkeys(
        ("preempted", "chunked", "cache hits", "stopped", "kv failures", "steady",
         "priority", "prefill-first"), 0,
    )  # fmt: skip
    for seed in range(120):
        config, reqs = workload(seed, wide=True)
        engine = Engine(dataclasses.replace(config, steady_decode=True), COST)
        steady: list[int] = []
        drive(engine, reqs, seed, steady)
        stats = engine.stats()
        seen["preempted"] += stats.preemptions_total > 0
        seen["chunked"] += any(r.prompt_tokens > config.max_num_batched_tokens for _, r in reqs)
        seen["cache hits"] += stats.prefix_cache_hits_total > 0
        seen["stopped"] += stats.finished_by_reason.get("stop", 0) > 0
        seen["kv failures"] += stats.kv_load_failures_total > 0
        seen["steady"] += sum(steady) > 0
        seen["priority"] += config.scheduling_policy == "priority" and sum(steady) > 0
        seen["prefill-first"] += config.prioritize == "prefill" and sum(steady) > 0
    assert min(seen.values()) >= 5, seen


def drive_batched(
    engine: Engine, reqs: list[tuple[float, EngineRequest]], runs: list[int]
) -> list[Any]:
    """Decode work stepped the way the simulator's lazy pods are: runs of steady
    iterations up to the next arrival go through ``run_steady``; the length of each run
    is appended to ``runs``."""
    log: list[Any] = []
    i, now = 0, 0.0
    for _ in range(200_000):
        while i < len(reqs) and reqs[i][0] <= now:
            engine.add_request(reqs[i][1], now)
            i += 1
        next_arrival = reqs[i][0] if i < len(reqs) else float("inf")
        gaps: list[float] = []
        steady = engine.scheduler.steady.count
        st = engine.run_steady(now, next_arrival, gaps) if engine.lazy_ok else None
        log.extend((gap, steady, [], [], ()) for gap in gaps)
        if gaps:
            runs.append(len(gaps))
        st = st or engine.step(engine.last_end_s if gaps else now)
        if st.num_seqs:
            log.append(_gaps(st))
            now = st.end_s
            continue
        pending = [t for t in (engine.next_timer_s(), next_arrival) if t is not None]
        if min(pending, default=float("inf")) == float("inf"):
            break
        now = max(min(pending), now)
    return [*log, (engine.generation_tokens_total, engine.iterations_total, engine.busy_s_total)]


def drive_steps(engine: Engine, reqs: list[tuple[float, EngineRequest]]) -> list[Any]:
    """The same work, one :meth:`Engine.step` per iteration."""
    log: list[Any] = []
    i, now = 0, 0.0
    for _ in range(200_000):
        while i < len(reqs) and reqs[i][0] <= now:
            engine.add_request(reqs[i][1], now)
            i += 1
        st = engine.step(now)
        if st.num_seqs:
            log.append(_gaps(st))
            now = st.end_s
            continue
        pending = [t for t in (engine.next_timer_s(), reqs[i][0] if i < len(reqs) else None) if t]
        if not pending:
            break
        now = max(min(pending), now)
    return [*log, (engine.generation_tokens_total, engine.iterations_total, engine.busy_s_total)]


def _gaps(st: IterationResult) -> tuple[Any, ...]:
    finished = sorted((f.request_id, f.output_tokens, f.finished_s) for f in st.finished)
    return (st.gap_s, st.num_seqs, sorted(st.first_tokens), finished, st.other_gaps_s)


@pytest.mark.parametrize("seed", range(0, 48, 3))  # the decode workloads
def test_batched_steady_steps_are_the_same_iterations(seed: int) -> None:
    config, reqs = workload(seed, wide=False)
    assert all(r.remote_kv is not None for _, r in reqs)
    config = dataclasses.replace(config, steady_decode=True)
    runs: list[int] = []
    batched = drive_batched(Engine(config, COST), reqs, runs)
    stepped = drive_steps(Engine(config, COST), reqs)
    assert batched == stepped
    assert sum(runs) > 0, "some iterations were batched"


def test_results_list_steady_tokens_apart() -> None:
    """With steady decoding, ``emitted`` names only the explicit sequences; the steady
    ones are counted in ``num_steady``, and together they are every token."""
    config = EngineConfig(num_gpu_blocks=400, max_num_seqs=8, max_model_len=2048)
    explicit, steady = _pair(config)
    for engine in (explicit, steady):
        for k in range(4):
            engine.add_request(EngineRequest(str(k), 20, 30), 0.0)
    now = 0.0
    per_step: list[tuple[int, int]] = []
    while explicit.has_work:
        a, b = explicit.step(now), steady.step(now)
        assert a.end_s == b.end_s
        per_step.append((len(a.emitted), len(b.emitted) + b.num_steady))
        assert a.num_steady == 0
        now = a.end_s
    assert all(x == y for x, y in per_step)
    assert steady.generation_tokens_total == explicit.generation_tokens_total == 4 * 30
