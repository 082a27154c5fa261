"""The least TTFT and ITL each request could get from a fleet of any size, measured on
the engine model. Pure.

``tandem simulate`` reports how many requests no pool size could serve within their
class's targets (``infeasible_requests``) and the attainment over the others
(``attainment_feasible``). This is the ground truth of it, as the simulator knows it:
the prompt run alone through fresh engines of the fleet's own pools, stepped exactly as
the fleet steps them (chunked prefill on an idle prefill engine, the KV pulled over the
link, the decode engine's first iteration; one idle engine when aggregated), and the
decode step of that sequence alone at its mean context for the ITL. The router learns
its own estimate from what it measures (:mod:`tandem.policy.feasibility`), which is
what the autoscaler reads; this module is for the figures only.
"""

from __future__ import annotations

from tandem.engine.model import Engine, EngineRequest, RemoteKV
from tandem.sim.fleet.spec import FleetPlan

#: Iterations after which a lone request is given up on (a broken config, not a prompt).
MAX_ITERATIONS = 100_000


class LeastLatencies:
    """Least TTFT and ITL of prompts on one fleet plan, each length computed once."""

    def __init__(self, plan: FleetPlan) -> None:
        self.plan = plan
        self._ttft: dict[int, float] = {}

    def ttft_s(self, prompt_tokens: int) -> float:
        """Seconds from arrival to the first token of a prompt served alone."""
        found = self._ttft.get(prompt_tokens)
        if found is None:
            found = self._ttft[prompt_tokens] = self._measure(prompt_tokens)
        return found

    def itl_s(self, prompt_tokens: int, output_tokens: int) -> float:
        """A decode step of the sequence alone, at its mean context over its answer."""
        pool = self.plan.pools.get("decode") or self.plan.pools["pool"]
        return pool.cost.decode_step_s(1, prompt_tokens + output_tokens // 2)

    def _measure(self, prompt: int) -> float:
        pools = self.plan.pools
        if "pool" in pools:
            return _until_first_token(pools["pool"].new_engine(), EngineRequest("x", prompt, 2), 0)
        prefill = pools["prefill"].new_engine()
        prefill.add_request(EngineRequest("x", prompt, 1, hold_kv_for_remote=True), 0.0)
        now = 0.0
        for _ in range(MAX_ITERATIONS):
            result = prefill.step(now)
            now = result.start_s + result.duration_s
            if result.finished:
                break
        request = EngineRequest("x", prompt, 2, remote_kv=RemoteKV(prompt))
        return _until_first_token(pools["decode"].new_engine(), request, now)


def _until_first_token(engine: Engine, request: EngineRequest, start_s: float) -> float:
    """When ``request``, alone on ``engine`` from ``start_s``, has its first token (the
    end of the iteration that produced it, as the fleet counts it)."""
    engine.add_request(request, start_s)
    now = start_s
    for _ in range(MAX_ITERATIONS):
        result = engine.step(now)
        if result.num_seqs:
            now = result.start_s + result.duration_s
            if result.first_tokens:
                return now
        else:
            timer = engine.next_timer_s()
            if timer is None:
                break
            now = max(timer, now)
    raise ValueError(f"a lone {request.prompt_tokens}-token prompt got no first token")
