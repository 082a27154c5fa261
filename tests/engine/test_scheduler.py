"""Scheduling behaviour of the engine model, driven in virtual time."""

from __future__ import annotations

import pytest

from tandem.engine.model import Engine, EngineRequest, IterationResult, RemoteKV

from .helpers import drive, make_engine, make_request


def test_single_request_timeline() -> None:
    engine = make_engine()
    run = drive(engine, [(0.0, make_request("a", prompt=100, out=5))])
    fin = run.finished["a"]
    assert fin.finish_reason == "length" and fin.output_tokens == 5 and run.tokens["a"] == 5
    assert fin.first_scheduled_s == 0.0
    assert fin.ttft_s is not None and 0 < fin.ttft_s < fin.e2e_s
    assert fin.tpot_s is not None and fin.tpot_s > 0
    assert engine.kv_usage == 0.0 and engine.num_running == 0
    stats = engine.stats()
    assert stats.prompt_tokens_total == 100 and stats.generation_tokens_total == 5


def test_stop_before_max_tokens_and_clamp_to_context() -> None:
    engine = make_engine(max_model_len=200)
    run = drive(
        engine,
        [
            (0.0, make_request("eos", out=50, stop_after_tokens=3)),
            (0.0, make_request("long", prompt=190, out=1000)),
        ],
    )
    assert run.finished["eos"].finish_reason == "stop" and run.finished["eos"].output_tokens == 3
    assert run.finished["long"].output_tokens == 10  # clamped to max_model_len - prompt


def test_chunked_prefill_respects_budget_and_joins_decodes() -> None:
    engine = make_engine(max_num_batched_tokens=64)
    seen: list[IterationResult] = []
    drive(
        engine,
        [(0.0, make_request("short", prompt=8, out=20)), (0.001, make_request("long", prompt=300))],
        check=lambda e, r: seen.append(r),
    )
    assert all(r.num_prefill_tokens + r.num_decode_tokens <= 64 for r in seen)
    mixed = [r for r in seen if r.num_decode_tokens and r.num_prefill_tokens]
    assert mixed, "decodes should run alongside prompt chunks"


def test_without_chunked_prefill_prompts_are_not_split() -> None:
    engine = make_engine(enable_chunked_prefill=False, max_num_batched_tokens=2048)
    seen: list[IterationResult] = []
    drive(engine, [(0.0, make_request("p", prompt=500, out=2))], check=lambda e, r: seen.append(r))
    assert seen[0].num_prefill_tokens == 500
    with pytest.raises(ValueError, match="chunked"):
        make_engine(enable_chunked_prefill=False, max_num_batched_tokens=256)


def test_max_num_seqs_caps_the_batch() -> None:
    engine = make_engine(max_num_seqs=3, num_gpu_blocks=1000)
    reqs = [(0.0, make_request(str(i), prompt=16, out=4)) for i in range(10)]
    run = drive(engine, reqs, check=lambda e, r: _assert(r.num_seqs <= 3 and e.num_running <= 3))
    assert len(run.finished) == 10


def _assert(cond: bool) -> None:
    assert cond


def test_priority_policy_admits_lower_values_first() -> None:
    engine = make_engine(scheduling_policy="priority", max_num_seqs=1, num_gpu_blocks=1000)
    arrivals = [(0.0, make_request("first", out=3, priority=5))]
    arrivals += [(0.001, make_request(f"p{p}", out=3, priority=p)) for p in (3, 1, 2)]
    arrivals += [(0.001, make_request("p1b", out=3, priority=1))]
    run = drive(engine, arrivals)
    order = sorted(run.finished, key=lambda rid: run.finished[rid].finished_s)
    assert order == ["first", "p1", "p1b", "p2", "p3"]


def test_fcfs_ignores_priority() -> None:
    engine = make_engine(max_num_seqs=1, num_gpu_blocks=1000)
    arrivals = [(0.001 * i, make_request(f"r{i}", out=2, priority=-i)) for i in range(4)]
    run = drive(engine, arrivals)
    assert sorted(run.finished, key=lambda r: run.finished[r].finished_s) == [
        "r0",
        "r1",
        "r2",
        "r3",
    ]


def test_preemption_by_recompute_and_everyone_still_finishes() -> None:
    # 12 blocks = 192 tokens; four requests growing to 100 tokens each cannot all fit
    engine = make_engine(num_gpu_blocks=12, max_num_batched_tokens=512)
    reqs = [(0.0, make_request(str(i), prompt=40, out=60)) for i in range(4)]
    run = drive(engine, reqs)
    assert engine.stats().preemptions_total > 0
    assert any(f.num_preemptions for f in run.finished.values())
    assert all(f.output_tokens == 60 for f in run.finished.values())
    assert engine.kv_usage == 0.0


def test_priority_preempts_the_highest_value_first() -> None:
    # "low" is admitted first; "high" joins later, so it is the latest admitted (the FCFS
    # victim) yet under the priority policy "low" must be the one preempted
    engine = make_engine(
        num_gpu_blocks=10, scheduling_policy="priority", max_num_batched_tokens=512
    )
    reqs = [
        (0.0, make_request("low", prompt=60, out=60, priority=9)),
        (0.02, make_request("high", prompt=60, out=60, priority=0)),
    ]
    run = drive(engine, reqs)
    assert run.finished["low"].num_preemptions > 0
    assert run.finished["high"].num_preemptions == 0
    fcfs = drive(make_engine(num_gpu_blocks=10, max_num_batched_tokens=512), reqs)
    assert fcfs.finished["high"].num_preemptions > 0  # FCFS preempts the latest admitted


def test_prefix_cache_reuses_blocks_of_an_identical_prompt() -> None:
    engine = make_engine(num_gpu_blocks=100)
    hashes = tuple(range(1, 7))  # 6 full blocks of 16 tokens
    run = drive(
        engine,
        [
            (0.0, make_request("a", prompt=100, out=2, block_hashes=hashes)),
            (1.0, make_request("b", prompt=100, out=2, block_hashes=hashes)),
        ],
    )
    assert run.finished["a"].cached_tokens == 0
    assert run.finished["b"].cached_tokens == 96
    stats = engine.stats()
    assert stats.prefix_cache_queries_total == 200 and stats.prefix_cache_hits_total == 96
    assert stats.prompt_tokens_cache_hit_total == 96
    off = make_engine(num_gpu_blocks=100, enable_prefix_caching=False)
    run = drive(
        off, [(t, make_request(n, 100, 2, block_hashes=hashes)) for t, n in ((0, "a"), (1, "b"))]
    )
    assert run.finished["b"].cached_tokens == 0


def test_static_batching_runs_a_batch_to_completion() -> None:
    engine = make_engine(batching="static", num_gpu_blocks=1000)
    starts: dict[str, float] = {}

    def record(e: Engine, r: IterationResult) -> None:
        for rid in r.first_tokens:
            starts[rid] = r.start_s

    reqs = [
        (0.0, make_request("a", out=20)),
        (0.0, make_request("b", out=2)),
        (0.0001, make_request("late", out=2)),
    ]
    run = drive(engine, reqs, check=record)
    # "late" arrived during the first batch and had to wait for "a" (the longest) to end
    assert starts["late"] >= run.finished["a"].finished_s
    assert run.finished["b"].finished_s < run.finished["a"].finished_s


def test_continuous_beats_static_on_throughput() -> None:
    def makespan(batching: str) -> float:
        engine = make_engine(batching=batching, num_gpu_blocks=2000, max_num_seqs=16)
        reqs = [(0.0, make_request(str(i), prompt=64, out=4 + (i % 4) * 30)) for i in range(48)]
        return drive(engine, reqs).end_s

    assert makespan("continuous") < 0.8 * makespan("static")


def test_prefill_priority_stalls_running_decodes() -> None:
    def worst_gap(prioritize: str) -> float:
        engine = make_engine(
            prioritize=prioritize, num_gpu_blocks=2000, max_num_seqs=32, max_num_batched_tokens=512
        )
        reqs = [(0.0, make_request("victim", prompt=16, out=60))]
        reqs += [(0.05 + 0.001 * i, make_request(f"p{i}", prompt=900, out=1)) for i in range(6)]
        last: list[float] = []
        gaps: list[float] = []

        def check(e: Engine, r: IterationResult) -> None:
            if "victim" in r.emitted:
                if last:
                    gaps.append(r.end_s - last[-1])
                last.append(r.end_s)

        drive(engine, reqs, check=check)
        return max(gaps)

    assert worst_gap("prefill") > 1.5 * worst_gap("decode")


def test_abort_frees_blocks_wherever_the_request_is() -> None:
    engine = make_engine(max_num_seqs=1)
    engine.add_request(make_request("run", prompt=100, out=50), 0.0)
    engine.add_request(make_request("wait", prompt=100, out=50), 0.0)
    engine.step(0.0)
    assert engine.kv_usage > 0 and engine.num_waiting == 1
    fin = engine.abort("run", 0.1)
    assert fin is not None and fin.finish_reason == "abort"
    assert engine.abort("wait", 0.1) is not None
    assert engine.abort("unknown", 0.1) is None
    assert engine.kv_usage == 0.0 and not engine.has_work
    assert engine.stats().finished_by_reason == {"abort": 2}


def test_add_request_rejects_what_can_never_run() -> None:
    engine = make_engine(max_model_len=100, num_gpu_blocks=10)
    with pytest.raises(ValueError, match="max_model_len"):
        engine.add_request(make_request("x", prompt=100), 0.0)
    with pytest.raises(ValueError, match="KV cache"):
        make_engine(num_gpu_blocks=4, max_model_len=100)  # 64 tokens of KV < one full sequence
    engine.add_request(make_request("z", prompt=10), 0.0)
    with pytest.raises(ValueError, match="already"):
        engine.add_request(make_request("z", prompt=10), 0.0)


def test_long_prefill_threshold_lets_short_prompts_past_a_long_one() -> None:
    """vLLM's ``--long-prefill-token-threshold``: beside others, a prompt computes at most
    the threshold per step; alone, the whole budget."""

    def run(threshold: int) -> tuple[float, list[int]]:
        engine = make_engine(
            num_gpu_blocks=1000,
            max_num_batched_tokens=512,
            max_model_len=8192,
            long_prefill_token_threshold=threshold,
        )
        reqs = [(0.0, make_request("long", prompt=6000, out=1, hold_kv_for_remote=True))]
        reqs.append((0.002, make_request("short", prompt=100, out=1, hold_kv_for_remote=True)))
        chunks: list[int] = []
        done = drive(engine, reqs, check=lambda e, r: chunks.append(r.num_prefill_tokens))
        ttft = done.finished["short"].ttft_s
        assert ttft is not None
        return ttft, chunks

    capped_ttft, capped = run(128)
    plain_ttft, plain = run(0)
    assert capped[0] == 512 and plain[0] == 512  # alone: the whole budget
    assert 128 + 100 in capped  # beside the short prompt: 128 of the long one
    assert 128 + 100 not in plain
    assert capped_ttft < plain_ttft / 3
    with pytest.raises(ValueError, match="long_prefill_token_threshold"):
        make_engine(max_model_len=1024, long_prefill_token_threshold=2048)


def test_prefill_role_holds_blocks_until_pulled() -> None:
    engine = make_engine()
    run = drive(engine, [(0.0, make_request("p", prompt=100, out=1, hold_kv_for_remote=True))])
    fin = run.finished["p"]
    assert fin.kv_held and fin.num_kv_blocks == 7
    held = engine.held_kv("p")
    assert held is not None and held.num_blocks == 7 and held.expiry_s == fin.finished_s + 30.0
    assert engine.kv_usage > 0
    assert engine.release_kv("p") and engine.kv_usage == 0.0
    assert not engine.release_kv("p")


def test_prefill_lease_expires_and_heartbeats_extend_it() -> None:
    engine = make_engine(kv_lease_s=2.0)
    drive(engine, [(0.0, make_request("p", out=1, hold_kv_for_remote=True))])
    timer = engine.next_timer_s()
    assert timer is not None and 2.0 < timer < 2.1
    assert engine.extend_kv_lease("p", 1.5)  # a heartbeat at t=1.5 moves expiry to 3.5
    assert engine.step(3.0).kv_expired == ()
    assert engine.held_kv("p") is not None
    res = engine.step(3.6)
    assert res.kv_expired == ("p",) and engine.kv_usage == 0.0
    assert engine.stats().kv_expired_total == 1


def test_decode_role_waits_for_the_transfer_then_decodes() -> None:
    engine = make_engine(kv_link_bytes_per_s=1e9)  # 100 tokens x 128 KiB / 1 GB/s = 13 ms
    req = make_request("d", prompt=100, out=4, remote_kv=RemoteKV(100))
    engine.add_request(req, 0.0)
    res = engine.step(0.0)
    assert res.idle and len(res.kv_transfers_started) == 1
    assert res.kv_transfers_started[0].transfer_s == pytest.approx(100 * 131072 / 1e9)
    assert engine.num_waiting == 1 and engine.num_running == 0 and engine.kv_usage > 0
    assert engine.stats().num_waiting_for_kv == 1
    run = drive(engine, [])
    fin = run.finished["d"]
    assert fin.output_tokens == 4
    assert fin.first_token_s is not None and fin.first_token_s > 0.013
    stats = engine.stats()
    assert stats.prompt_tokens_external_total == 99  # the last prompt token is recomputed
    assert stats.prompt_tokens_local_compute_total == 1


def test_decode_role_waits_for_capacity_only_outside_its_transfers() -> None:
    # 64 blocks of 16 tokens: the first request's 600-token pull takes 38 blocks, so the
    # second cannot get its 38 until the first is gone (vLLM: "capacity", not "deferred")
    engine = make_engine(kv_link_bytes_per_s=1e8)
    engine.add_request(make_request("a", prompt=600, out=4, remote_kv=RemoteKV(600)), 0.0)
    engine.add_request(make_request("b", prompt=600, out=4, remote_kv=RemoteKV(600)), 0.0)
    res = engine.step(0.0)
    assert [t.request_id for t in res.kv_transfers_started] == ["a"]
    stats = engine.stats()
    assert (stats.num_waiting, stats.num_kv_transferring) == (2, 1)
    assert stats.num_waiting_for_capacity == 1  # b: no blocks to pull into
    assert stats.num_waiting_for_kv == 2  # both still need their KV
    engine.add_request(make_request("c", prompt=16, out=4), 0.0)
    assert engine.stats().num_waiting_for_capacity == 2


def test_external_transfer_failure_policies() -> None:
    for policy, reason in (("fail", "error"), ("recompute", "length")):
        engine = make_engine(kv_transfer_mode="external", kv_load_failure_policy=policy)
        engine.add_request(make_request("d", prompt=100, out=3, remote_kv=RemoteKV(100)), 0.0)
        assert engine.step(0.0).idle
        assert engine.next_timer_s() is None  # external mode: the driver reports completion
        fin = engine.complete_kv_transfer("d", ok=False, now_s=0.5)
        if policy == "fail":
            assert fin is not None and fin.finish_reason == reason
        else:
            assert fin is None
            run = drive(engine, [])
            assert run.finished["d"].finish_reason == reason
            assert engine.stats().prompt_tokens_local_compute_total == 100
        assert engine.kv_usage == 0.0 and engine.stats().kv_load_failures_total == 1


def test_results_are_frozen() -> None:
    engine = make_engine()
    res = engine.step(0.0)
    with pytest.raises(AttributeError):
        res.duration_s = 1.0  # type: ignore[misc]
    req = EngineRequest("x", 1, 1)
    with pytest.raises(AttributeError):
        req.prompt_tokens = 2  # type: ignore[misc]
