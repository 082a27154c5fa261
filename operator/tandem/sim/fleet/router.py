"""The simulated router: admission, endpoint choice, and the latency users feel. Pure.

Endpoint choice is the real router's own code (:mod:`tandem.router.selection`:
the least expected wait, queued prompt tokens, for prefill; KV usage and outstanding
sequences for decode, power of two choices) over :class:`~tandem.router.selection.Endpoint` objects
kept up to date the way the router keeps them: exact outstanding counts per request,
and engine gauges refreshed at its scrape interval (1 s). Admission bounds in-flight
requests by ``maxInflight`` x router replicas, modelled as one logical router.

The router's histograms (TTFT and inter-token latency per priority class, requests by
class and status code, and its feasibility accounting: the least latencies learned by
:class:`~tandem.policy.feasibility.LeastLatency`, the requests counted infeasible and
the queueing ratio of the others) are what the operator prefers as latency signals; the
simulator samples them into the same :class:`~tandem.observe.parse.RouterSample`. When
the prefill pool's wait would overrun a prompt's target, the real router's
:func:`~tandem.router.selection.pick_absorber` may send it whole to a decode pod.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence

from tandem.api.vocab import PoolRole
from tandem.observe.histogram import BucketCounter
from tandem.observe.parse import ClassSample, RouterSample
from tandem.policy.config import LatencyTargets
from tandem.policy.feasibility import LeastLatency, judge_request
from tandem.router.pools import PromptSizes
from tandem.router.selection import (
    Endpoint,
    compute_absorb_free_at_s,
    compute_prefill_overrun_s,
    pick_absorber,
    pick_decode,
    pick_pool,
    pick_prefill,
)
from tandem.sim.fleet.histogram import (
    ROUTER_ITL_BUCKETS_S,
    ROUTER_RATIO_BUCKETS,
    ROUTER_TTFT_BUCKETS_S,
)
from tandem.sim.fleet.pod import Pod


class ClassCounters:
    """One priority class's router histograms and request counts."""

    __slots__ = (
        "absorbed",
        "absorbed_tokens",
        "codes",
        "infeasible",
        "itl",
        "queueing",
        "target_ratio",
        "ttft",
    )

    def __init__(self) -> None:
        self.ttft = BucketCounter(ROUTER_TTFT_BUCKETS_S)
        self.itl = BucketCounter(ROUTER_ITL_BUCKETS_S)
        self.queueing = BucketCounter(ROUTER_RATIO_BUCKETS)
        """Queueing ratio of requests that could meet their TTFT target."""
        self.target_ratio = BucketCounter(ROUTER_RATIO_BUCKETS)
        self.codes: Counter[str] = Counter()
        """HTTP status code -> requests answered."""
        self.infeasible: Counter[str] = Counter()
        """Reason -> requests no pool size could serve within target."""
        self.absorbed = 0
        self.absorbed_tokens = 0


class SimRouter:
    """One logical router in front of the pools."""

    def __init__(
        self,
        max_inflight: int,
        seed: int,
        classes: Sequence[str],
        prefill_tokens_per_s: float | None = None,
    ) -> None:
        self.max_inflight = max_inflight
        self.inflight = 0
        self.rng = random.Random(seed)
        self.prompt_sizes = PromptSizes()
        self.least = LeastLatency(declared_tokens_per_s=prefill_tokens_per_s)
        """The least TTFT and ITL, learned as the router learns them."""
        self.pools: dict[PoolRole, list[Pod]] = {"prefill": [], "decode": [], "pool": []}
        """Serving pods by role, in the order they became ready."""
        self.classes = {name: ClassCounters() for name in classes}
        self._by_url: dict[str, Pod] = {}

    def add(self, pod: Pod) -> None:
        """A pod became ready: it starts receiving requests."""
        self.pools[pod.role].append(pod)
        self._by_url[pod.endpoint.url] = pod

    def remove(self, pod: Pod) -> None:
        """A pod is leaving (scale-down): no new requests go to it."""
        members = self.pools[pod.role]
        if pod in members:
            members.remove(pod)
        self._by_url.pop(pod.endpoint.url, None)

    def has_endpoints(self, role: PoolRole) -> bool:
        return bool(self.pools[role])

    def choose(self, role: PoolRole, now_s: float) -> Pod | None:
        """The pod the real router's selection picks for ``role``'s next leg."""
        members = self.pools[role]
        if not members:
            return None
        if len(members) == 1:
            return members[0]
        endpoints: list[Endpoint] = [p.endpoint for p in members]
        if role == "prefill":
            chosen = pick_prefill(
                endpoints,
                now_s=now_s,
                rng=self.rng,
                mean_prompt_tokens=self.prompt_sizes.mean_tokens,
            )
        elif role == "decode":
            chosen = pick_decode(endpoints, now_s=now_s, rng=self.rng)
        else:
            chosen = pick_pool(
                endpoints,
                now_s=now_s,
                rng=self.rng,
                mean_prompt_tokens=self.prompt_sizes.mean_tokens,
            )
        return None if chosen is None else self._by_url[chosen.url]

    def prefill_overruns(self, prompt_tokens: int, now_s: float, targets: LatencyTargets) -> bool:
        """Whether the prefill pool would serve this prompt past its TTFT target, for a
        prompt short enough to absorb (:func:`compute_prefill_overrun_s`)."""
        return (
            compute_prefill_overrun_s(
                [p.endpoint for p in self.pools["prefill"]],
                prompt_tokens=prompt_tokens,
                now_s=now_s,
                mean_prompt_tokens=self.prompt_sizes.mean_tokens,
                tokens_per_s=self.least.prefill_tokens_per_s(now_s),
                ttft_target_s=targets.ttft_for(prompt_tokens),
                itl_target_s=targets.itl_s,
            )
            is not None
        )

    def choose_absorber(
        self, klass: str, prompt_tokens: int, now_s: float, targets: LatencyTargets
    ) -> Pod | None:
        """The decode pod the real router's :func:`pick_absorber` gives this prompt, with
        its absorption counted (``None``: prefill it on the prefill pool). The caller has
        brought decode pods up to ``now_s`` (their recent token gaps)."""
        rate = self.least.prefill_tokens_per_s(now_s)
        chosen = pick_absorber(
            [p.endpoint for p in self.pools["prefill"]],
            [p.endpoint for p in self.pools["decode"]],
            prompt_tokens=prompt_tokens,
            now_s=now_s,
            mean_prompt_tokens=self.prompt_sizes.mean_tokens,
            tokens_per_s=rate,
            ttft_target_s=targets.ttft_for(prompt_tokens),
            itl_target_s=targets.itl_s,
        )
        if chosen is None or rate is None:
            return None
        chosen.absorb_free_at_s = compute_absorb_free_at_s(
            chosen, now_s, prompt_tokens, rate, targets.itl_percentile
        )
        counters = self.classes[klass]
        counters.absorbed += 1
        counters.absorbed_tokens += prompt_tokens
        return self._by_url[chosen.url]

    def record_first_token(
        self,
        klass: str,
        targets: LatencyTargets,
        prompt_tokens: int,
        ttft_s: float,
        service_s: float,
        now_s: float,
    ) -> None:
        """The real router's accounting at a first token (:mod:`tandem.router.relay`):
        judge the request, count it, and learn from its service time."""
        counters, least = self.classes[klass], self.least
        verdict = judge_request(least, prompt_tokens, ttft_s, targets, now_s)
        if verdict.ttft_infeasible:
            counters.infeasible["ttft"] += 1
        if verdict.itl_infeasible:
            counters.infeasible["itl"] += 1
        if verdict.queueing_ratio is not None:
            counters.queueing.observe(verdict.queueing_ratio)
        if verdict.target_ratio is not None:
            counters.target_ratio.observe(verdict.target_ratio)
        least.observe_service(prompt_tokens, service_s, now_s)

    def refresh(self) -> None:
        """The router's periodic scrape of every serving engine's gauges."""
        for members in self.pools.values():
            for pod in members:
                engine = pod.engine
                pod.endpoint.record_scrape(engine.num_waiting, engine.num_running, engine.kv_usage)

    def answered(self, klass: str, code: str) -> None:
        self.classes[klass].codes[code] += 1

    def sample(self, at_s: float) -> RouterSample:
        """What a scrape of the router's ``/metrics`` would read now."""
        return RouterSample(
            at_s=at_s,
            classes={
                name: ClassSample(
                    ttft=c.ttft.histogram(),
                    itl=c.itl.histogram(),
                    requests_by_code=dict(c.codes),
                    queueing=c.queueing.histogram(),
                    infeasible_by_reason=dict(c.infeasible),
                    absorbed_requests=float(c.absorbed),
                    absorbed_prompt_tokens=float(c.absorbed_tokens),
                )
                for name, c in self.classes.items()
            },
        )
