"""Factories and a virtual-time driver for engine tests."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from tandem.engine.model import (
    CostModel,
    Engine,
    EngineConfig,
    EngineRequest,
    FinishedRequest,
    IterationResult,
    get_gpu,
    get_model,
)

COST_8B_H100 = CostModel(get_model("llama-3.1-8b"), get_gpu("h100"))


def make_engine(**overrides: object) -> Engine:
    """A small engine (64 blocks of 16 tokens, 8 seqs, 256-token budget) unless overridden;
    max_model_len defaults to what the KV cache holds, at most 2048."""
    fields: dict[str, object] = {
        "num_gpu_blocks": 64,
        "max_num_seqs": 8,
        "max_num_batched_tokens": 256,
    }
    fields.update(overrides)
    blocks = int(fields["num_gpu_blocks"])  # type: ignore[call-overload]
    fields.setdefault("max_model_len", min(2048, blocks * 16))
    return Engine(EngineConfig(**fields), COST_8B_H100)  # type: ignore[arg-type]


def make_request(request_id: str, prompt: int = 32, out: int = 8, **kw: object) -> EngineRequest:
    return EngineRequest(request_id, prompt, out, **kw)  # type: ignore[arg-type]


@dataclass
class Run:
    finished: dict[str, FinishedRequest] = field(default_factory=dict)
    results: list[IterationResult] = field(default_factory=list)
    tokens: dict[str, int] = field(default_factory=dict)
    end_s: float = 0.0


def drive(
    engine: Engine,
    arrivals: Iterable[tuple[float, EngineRequest]],
    check: Callable[[Engine, IterationResult], None] | None = None,
    max_steps: int = 200_000,
    on_transfer: Callable[[Engine, IterationResult, float], None] | None = None,
) -> Run:
    """Step ``engine`` in virtual time until every arrival has finished."""
    pending = sorted(arrivals, key=lambda a: a[0])
    run = Run()
    now = 0.0
    i = 0
    for _ in range(max_steps):
        while i < len(pending) and pending[i][0] <= now:
            engine.add_request(pending[i][1], pending[i][0])
            i += 1
        if not engine.has_work and not engine.scheduler.transferring:
            if i >= len(pending):
                run.end_s = now
                return run
            now = pending[i][0]
            continue
        res = engine.step(now)
        run.results.append(res)
        if on_transfer is not None and res.kv_transfers_started:
            on_transfer(engine, res, now)
        if check is not None:
            check(engine, res)
        for rid in res.emitted:
            run.tokens[rid] = run.tokens.get(rid, 0) + 1
        for fin in res.finished:
            run.finished[fin.request_id] = fin
        if res.idle:
            nxt = [t for t in (engine.next_timer_s(),) if t is not None]
            if i < len(pending):
                nxt.append(pending[i][0])
            if not nxt:
                raise AssertionError("engine is stuck: idle with nothing pending")
            now = max(now, min(nxt))
        else:
            now = res.end_s
    raise AssertionError("did not finish within max_steps")
