"""Hypothesis properties of the engine model under random workloads and configurations."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tandem.engine.model import Engine, EngineRequest, IterationResult, RemoteKV

from .helpers import drive, make_engine

configs = st.fixed_dictionaries(
    {
        "num_gpu_blocks": st.integers(20, 80),
        "max_num_seqs": st.integers(1, 8),
        "max_num_batched_tokens": st.sampled_from([32, 64, 256]),
        "scheduling_policy": st.sampled_from(["fcfs", "priority"]),
        "prioritize": st.sampled_from(["decode", "prefill"]),
        "enable_prefix_caching": st.booleans(),
        "steady_decode": st.booleans(),
    }
)

requests = st.lists(
    st.tuples(
        st.floats(0.0, 0.5),  # arrival
        st.integers(1, 250),  # prompt tokens
        st.integers(1, 40),  # max tokens
        st.integers(0, 3),  # priority
        st.integers(0, 3),  # prefix family (0: none)
        st.booleans(),  # hold KV for a remote decode
        st.booleans(),  # remote KV (decode role)
    ),
    min_size=1,
    max_size=25,
)


Spec = tuple[float, int, int, int, int, bool, bool]


def _build(spec: list[Spec]) -> list[tuple[float, EngineRequest]]:
    out = []
    for i, (t, prompt, max_tokens, prio, family, hold, remote) in enumerate(spec):
        hashes = tuple(family * 1000 + b for b in range(prompt // 16)) if family else ()
        req = EngineRequest(
            str(i),
            prompt,
            max_tokens,
            priority=prio,
            block_hashes=hashes,
            hold_kv_for_remote=hold,
            remote_kv=RemoteKV(prompt) if remote and not hold else None,
        )
        out.append((t, req))
    return out


def _invariants(engine: Engine, res: IterationResult) -> None:
    cfg = engine.config
    assert res.num_seqs <= cfg.max_num_seqs
    assert res.num_prefill_tokens + res.num_decode_tokens <= cfg.max_num_batched_tokens
    assert engine.num_running <= cfg.max_num_seqs
    kv = engine.scheduler.kv
    assert 0 <= kv.num_used_blocks <= kv.num_blocks
    sched = engine.scheduler
    owners = [*sched.live_running(), *sched.transferring.values()]
    owners += [s for s, _ in engine._held.values()]
    owners += [*sched.waiting, *sched.kv_ready]
    private = sum(sched.current(s)[1] - len(s.shared) for s in owners)
    shared = {h for s in owners for h in s.shared}
    assert private + len(shared) == kv.num_used_blocks  # no used block without an owner
    assert res.duration_s >= 0 and (res.idle or res.duration_s > 0)
    assert len(set(res.emitted)) == len(res.emitted)
    assert res.num_steady == 0 or cfg.steady_decode


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cfg=configs, spec=requests)
def test_budget_limits_hold_and_nothing_leaks(cfg: dict[str, object], spec: list[Spec]) -> None:
    engine = make_engine(**cfg)
    arrivals = _build(spec)
    run = drive(engine, arrivals, check=_invariants)
    assert set(run.finished) == {req.request_id for _, req in arrivals}
    for _, req in arrivals:
        fin = run.finished[req.request_id]
        assert fin.finish_reason == "length"
        assert fin.output_tokens == min(
            req.max_tokens, engine.config.max_model_len - req.prompt_tokens
        )
        if not engine.config.steady_decode:  # steady tokens are counted, not listed
            assert run.tokens[req.request_id] == fin.output_tokens  # preempted ones complete
    for _, req in arrivals:
        engine.release_kv(req.request_id)
    assert engine.kv_usage == 0.0  # all blocks free when idle (cached ones are evictable)
    assert engine.scheduler.kv.num_free_blocks == engine.config.num_gpu_blocks


@settings(max_examples=60, deadline=None)
@given(cfg=configs, spec=requests, abort_at=st.lists(st.integers(0, 30), max_size=10))
def test_random_aborts_free_everything(
    cfg: dict[str, object], spec: list[Spec], abort_at: list[int]
) -> None:
    engine = make_engine(kv_transfer_mode="external", **cfg)
    arrivals = _build(spec)
    for t, req in arrivals:
        engine.add_request(req, t)
    now = 0.0
    for step in range(400):
        for k in abort_at:
            if k == step and k < len(arrivals):
                engine.abort(arrivals[k][1].request_id, now)
        res = engine.step(now)
        for start in res.kv_transfers_started:
            engine.complete_kv_transfer(start.request_id, step % 2 == 0, now)
        _invariants(engine, res)
        now = res.end_s + 0.001
    for _, req in arrivals:
        engine.abort(req.request_id, now)
    assert engine.kv_usage == 0.0 and not engine.has_work and engine.num_waiting == 0


@settings(max_examples=50, deadline=None)
@given(prios=st.lists(st.integers(0, 5), min_size=2, max_size=12))
def test_priority_order_holds_with_one_slot(prios: list[int]) -> None:
    engine = make_engine(scheduling_policy="priority", max_num_seqs=1, num_gpu_blocks=500)
    arrivals = [(0.0, EngineRequest(f"r{i}", 16, 2, priority=p)) for i, p in enumerate(prios)]
    run = drive(engine, arrivals)
    order = sorted(run.finished.values(), key=lambda f: f.finished_s)
    keys = [(prios[int(f.request_id[1:])], int(f.request_id[1:])) for f in order]
    assert keys == sorted(keys)
