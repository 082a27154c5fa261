"""The request path: arrival, prefill, KV handoff, decode, drain. Pure event handlers.

Each handler takes ``(now_s, target)``, changes the fleet, and returns the events it
causes. One request, disaggregated: it arrives at the router (admission), goes to the
prefill pod the router's selection picks (``max_tokens=1``, KV held for a remote
decode), then to a decode pod, whose engine allocates blocks, pulls the KV (bytes /
link bandwidth), recomputes the last prompt token and streams the answer; the prefill
pod frees its copy when the pull completes. The client's first token is the decode
pod's first token, as in vLLM's NIXL flow, and the router judges the request there as
the real router does (:mod:`tandem.policy.feasibility`). When the prefill pool's wait
would overrun a prompt's TTFT target and a decode pod has inter-token slack, the
router's :func:`~tandem.router.selection.pick_absorber` sends it whole to that decode
pod instead, which prefills it itself (a burst absorbed). Aggregated: one leg on one
pod.

An engine is stepped whenever its previous iteration ends: the iteration's effects are
handled at its end time (tokens, finishes, hand-offs), and the next starts at once.
An idle engine is stepped again when a request arrives or, on a decode pod, when its
next KV transfer completes. Decode and aggregated pods whose iterations cause no event
are stepped in batches, on demand (:mod:`tandem.sim.fleet.catchup`).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Sequence

from tandem.api.vocab import PoolRole
from tandem.engine.model import EngineRequest, IterationResult, RemoteKV
from tandem.sim.fleet.catchup import CatchUp, can_be_lazy
from tandem.sim.fleet.events import NewEvent
from tandem.sim.fleet.pod import DRAINING, GONE, STARTING, Pod
from tandem.sim.fleet.pools import Fleet
from tandem.sim.fleet.requests import ABORTED, COMPLETED, INVALID, NAN, REJECTED, RequestTable
from tandem.sim.fleet.router import SimRouter
from tandem.sim.fleet.spec import FleetPlan

ARRIVAL = 1
ITERATION = 2
KV_RELEASE = 3
ROUTER_TIMEOUT = 4

_OK = ("stop", "length")


class Flow:
    """The state the request path shares: requests, fleet, router, token gaps."""

    def __init__(
        self, plan: FleetPlan, table: RequestTable, fleet: Fleet, router: SimRouter
    ) -> None:
        self.plan = plan
        self.table = table
        self.fleet = fleet
        self.router = router
        self.first_role: PoolRole = "pool" if plan.mode == "aggregated" else "prefill"
        first = plan.pools[self.first_role].engine_config
        self.max_prompt_tokens = first.max_model_len - 1
        self.wait_s = plan.router.timeouts.connect_s
        self.klass = plan.router.default_class
        self.priority = plan.class_priority.get(self.klass, 0)
        self.counters = router.classes[self.klass]
        self.targets = plan.targets_for(self.klass)
        self.absorbs = self.first_role == "prefill" and plan.router.absorb_bursts
        self.leg_start_s = [0.0] * len(table)
        """When each request was sent to the engine of its current leg."""
        self.waiting: dict[str, dict[int, float]] = {r: {} for r in ("prefill", "decode", "pool")}
        """Requests the router holds for want of a ready pod: index -> deadline."""
        self.gaps_s: list[float] = []
        """Inter-token gaps seen by clients, with ``gap_counts`` tokens each."""
        self.gap_counts: list[int] = []
        self.open = len(table)
        """Requests not yet ended."""
        self.last_end_s = 0.0
        self.catchup = CatchUp(self)
        self.frontend_by_role = {role: p.frontend_latency_s for role, p in plan.pools.items()}
        self.frontend_pd_s = sum(
            self.frontend_by_role.get(role, 0.0) for role in ("prefill", "decode")
        )

    # -- arrivals and dispatch -----------------------------------------------------

    def on_arrival(self, now: float, i: int) -> Sequence[NewEvent]:
        table = self.table
        events: list[NewEvent] = []
        if i + 1 < len(table):
            events.append((table.arrival_s[i + 1], ARRIVAL, i + 1))
        prompt = table.prompt_tokens[i]
        router = self.router
        if router.inflight >= router.max_inflight:
            # Lazy pods report finishes late: only a current count may turn one away.
            events.extend(self.catchup.all(now))
        if prompt > self.max_prompt_tokens:
            self._end(i, now, INVALID, "400")
        elif router.inflight >= router.max_inflight:
            self._end(i, now, REJECTED, "429")
        else:
            self.router.inflight += 1
            self.router.prompt_sizes.add(prompt)
            absorber = self._absorber(now, prompt, events) if self.absorbs else None
            if absorber is not None:
                events.extend(self._send(now, i, absorber, absorbed=True))
            else:
                events.extend(self.dispatch(now, i, self.first_role))
        return events

    def _absorber(self, now: float, prompt: int, events: list[NewEvent]) -> Pod | None:
        """A decode pod to prefill ``prompt`` itself, if the prefill pool would serve it
        past its target; decode pods are caught up first only then (their recent token
        gaps decide)."""
        if not self.router.prefill_overruns(prompt, now, self.targets):
            return None
        events.extend(self.catchup.all(now, ("decode",)))
        return self.router.choose_absorber(self.klass, prompt, now, self.targets)

    def dispatch(self, now: float, i: int, role: PoolRole) -> list[NewEvent]:
        """Send request ``i`` to a ``role`` pod, or hold it until one is ready."""
        events = self.catchup.all(now, (role,)) if role != "prefill" else []
        pod = self.router.choose(role, now)
        if pod is None:
            deadline = now + self.wait_s
            self.waiting[role][i] = deadline
            events.append((deadline, ROUTER_TIMEOUT, (role, i)))
            return events
        events.extend(self._send(now, i, pod))
        return events

    def _send(self, now: float, i: int, pod: Pod, *, absorbed: bool = False) -> Sequence[NewEvent]:
        table = self.table
        prompt = table.prompt_tokens[i]
        ep = pod.endpoint
        rid = str(i)
        if math.isnan(table.dispatch_s[i]):
            table.dispatch_s[i] = now
        if pod.role == "prefill":
            req = EngineRequest(rid, prompt, 1, self.priority, hold_kv_for_remote=True)
            ep.outstanding_prompt_tokens += prompt
            table.prefill_pod[i] = pod.number
        elif pod.role == "decode" and not absorbed:
            out = table.output_tokens[i]
            req = EngineRequest(rid, prompt, out, self.priority, remote_kv=RemoteKV(prompt))
            table.decode_pod[i] = pod.number
        else:  # aggregated, or absorbed: the pod prefills the prompt itself
            req = EngineRequest(rid, prompt, table.output_tokens[i], self.priority)
            ep.outstanding_prompt_tokens += prompt
            table.decode_pod[i] = pod.number
            if absorbed:
                table.absorbed[i] = True
                ep.absorbed_prompt_tokens += prompt
        events = self.catchup.wake(pod, now) if pod.lazy else []
        try:
            pod.engine.add_request(req, now)
        except ValueError:
            if pod.role != "decode" or absorbed:
                ep.outstanding_prompt_tokens -= prompt
            if absorbed:
                ep.absorbed_prompt_tokens -= prompt
            self.router.inflight -= 1
            self._end(i, now, INVALID, "400")
            events.extend(self._release_prefill(now, i) if pod.role == "decode" else ())
            return events
        ep.outstanding_requests += 1
        pod.requests.add(i)
        self.leg_start_s[i] = now
        events.extend(self.kick(pod, now))
        return events

    def kick(self, pod: Pod, now: float) -> Sequence[NewEvent]:
        """Step an idle pod now (a busy one takes new work at its next iteration)."""
        if pod.busy or pod.kicked or pod.state == GONE:
            return ()
        pod.kicked = True
        return [(now, ITERATION, pod)]

    # -- engine iterations -----------------------------------------------------------

    def on_iteration(self, now: float, pod: Pod) -> Sequence[NewEvent]:
        """An iteration ended (its effects land now) and the next one starts; or an
        idle pod is woken up. The simulator's hot path."""
        if pod.lazy:
            return ()  # lazy pods have no events of their own: this one is stale
        if pod.busy:
            if now != pod.busy_until_s:
                return ()  # a stale wake-up: the pod is mid-iteration
            done = pod.pending
            assert done is not None
            pod.busy = False
            pod.pending = None
            if pod.role == "prefill":
                events = self._prefill_done(now, pod, done) if done.finished else []
            else:
                events = self.tokens_done(now, pod, done)
            if pod.state == DRAINING and not pod.requests:
                self.fleet.remove(pod, now)
        else:
            events = []
        if pod.state == GONE:
            return events
        pod.kicked = False
        result = pod.engine.step(now)
        if result.kv_transfers_started:
            for transfer in result.kv_transfers_started:
                events.append((now + transfer.transfer_s, KV_RELEASE, int(transfer.request_id)))
        if result.num_seqs:
            end = result.start_s + result.duration_s
            pod.busy = True
            pod.busy_until_s = end
            pod.pending = result
            if can_be_lazy(pod):
                pod.lazy = True
            else:
                events.append((end, ITERATION, pod))
        elif pod.role == "decode":
            timer = pod.engine.next_timer_s()
            if timer is not None:
                events.append((max(timer, now), ITERATION, pod))
        return events

    def _prefill_done(self, now: float, pod: Pod, r: IterationResult) -> list[NewEvent]:
        """Prompts whose KV is ready: on to a decode pod (their TTFT is the decode's)."""
        events: list[NewEvent] = []
        ep = pod.endpoint
        for fin in r.finished:
            i = int(fin.request_id)
            ep.outstanding_requests -= 1
            ep.outstanding_prompt_tokens -= fin.prompt_tokens
            if fin.kv_held:
                assert fin.first_token_s is not None
                pod.ttft.observe(fin.first_token_s - fin.arrival_s)
                events.extend(self.dispatch(now, i, "decode"))
            else:
                pod.requests.discard(i)
                self.router.inflight -= 1
                self._end(i, now, ABORTED, "500")
        return events

    def _frontend_s(self, pod: Pod, i: int) -> float:
        """What the engines' front ends add to request ``i``'s answer from ``pod`` on its
        way to the client (:attr:`~tandem.sim.fleet.spec.PoolPlan.frontend_latency_s`):
        both legs' for a disaggregated request, one engine's otherwise."""
        if pod.role == "decode" and not self.table.absorbed[i]:
            return self.frontend_pd_s
        return self.frontend_by_role[pod.role]

    def record_gaps(self, pod: Pod, gaps: list[float], n: int) -> None:
        """Iterations of ``n`` continuing tokens each, with these gaps (batched steps)."""
        router_itl, pod_itl = self.counters.itl, pod.itl
        rb, rc, pb, pc = router_itl.bounds, router_itl.counts, pod_itl.bounds, pod_itl.counts
        total = 0.0
        record_gap = pod.endpoint.record_gap if pod.role == "decode" else None
        for gap in gaps:
            rc[bisect_left(rb, gap)] += n
            pc[bisect_left(pb, gap)] += n
            total += gap
            if record_gap is not None:
                record_gap(gap)
        router_itl.total += total * n
        pod_itl.total += total * n
        self.gaps_s.extend(gaps)
        self.gap_counts.extend([n] * len(gaps))

    def tokens_done(self, now: float, pod: Pod, r: IterationResult) -> list[NewEvent]:
        """Tokens reached clients: TTFT, inter-token gaps, finished answers."""
        counters = self.counters
        n = r.continuing
        decodes = pod.role == "decode"
        if n:
            gap = r.gap_s
            for hist in (counters.itl, pod.itl):
                hist.counts[bisect_left(hist.bounds, gap)] += n
                hist.total += gap * n
            self.gaps_s.append(gap)
            self.gap_counts.append(n)
            if decodes:
                pod.endpoint.record_gap(gap)
        for g in r.other_gaps_s:
            counters.itl.observe(g)
            pod.itl.observe(g)
            self.gaps_s.append(g)
            self.gap_counts.append(1)
            if decodes:
                pod.endpoint.record_gap(g)
        table = self.table
        if r.first_tokens:
            for rid in r.first_tokens:
                i = int(rid)
                seen = now + self._frontend_s(pod, i)  # the token's way out to the client
                table.first_token_s[i] = seen
                counters.ttft.observe(seen - table.arrival_s[i])
                pod.ttft.observe(now - self.leg_start_s[i])
                self.router.record_first_token(
                    self.klass,
                    self.targets,
                    table.prompt_tokens[i],
                    seen - table.arrival_s[i],
                    seen - table.dispatch_s[i],
                    seen,
                )
                if pod.role == "pool" or table.absorbed[i]:
                    pod.endpoint.outstanding_prompt_tokens -= table.prompt_tokens[i]
                if table.absorbed[i]:
                    pod.endpoint.absorbed_prompt_tokens -= table.prompt_tokens[i]
        if not r.finished:
            return []
        events: list[NewEvent] = []
        ep = pod.endpoint
        least = self.router.least
        for fin in r.finished:
            i = int(fin.request_id)
            ep.outstanding_requests -= 1
            pod.requests.discard(i)
            self.router.inflight -= 1
            if fin.finish_reason in _OK:
                tpot = fin.tpot_s
                table.tpot_s[i] = NAN if tpot is None else tpot
                if tpot is not None:
                    least.observe_tpot(tpot, now)
                self._end(i, now + self._frontend_s(pod, i), COMPLETED, "200")
            else:
                self._end(i, now, ABORTED, "500")
                events.extend(self._release_prefill(now, i))
        return events

    # -- KV hand-off, router waits, pods coming and going --------------------------------

    def on_kv_release(self, now: float, i: int) -> Sequence[NewEvent]:
        """The decode side finished pulling request ``i``'s KV: the prefill pod frees it."""
        number = self.table.prefill_pod[i]
        if number < 0:
            return ()
        pod = self.fleet.by_number[number]
        if i not in pod.requests:
            return ()
        pod.requests.discard(i)
        pod.engine.release_kv(str(i))
        if pod.state == DRAINING and not pod.requests:
            self.fleet.remove(pod, now)
            return ()
        return self.kick(pod, now) if pod.engine.num_waiting else ()

    def _release_prefill(self, now: float, i: int) -> Sequence[NewEvent]:
        return [(now, KV_RELEASE, i)] if self.table.prefill_pod[i] >= 0 else ()

    def on_router_timeout(self, now: float, target: tuple[str, int]) -> Sequence[NewEvent]:
        role, i = target
        deadline = self.waiting[role].get(i)
        if deadline is None or deadline != now:
            return ()
        del self.waiting[role][i]
        self.router.inflight -= 1
        self._end(i, now, REJECTED, "503")
        return self._release_prefill(now, i) if role == "decode" else ()

    def on_pod_ready(self, now: float, pod: Pod) -> Sequence[NewEvent]:
        if not self.fleet.mark_ready(pod, now):
            return ()
        self.router.add(pod)
        events: list[NewEvent] = []
        held = self.waiting[pod.role]
        while held:
            i = next(iter(held))
            del held[i]
            events.extend(self.dispatch(now, i, pod.role))
        return events

    def drain(self, pod: Pod, now: float) -> list[NewEvent]:
        """A scaled-down pod leaves the router; an empty one is gone at once."""
        events = self.catchup.wake(pod, now)
        self.router.remove(pod)
        if not pod.requests:
            self.fleet.remove(pod, now)
        return events

    def on_drain_deadline(self, now: float, pod: Pod) -> Sequence[NewEvent]:
        """The shutdown timeout passed: what the pod still holds is aborted."""
        if pod.state != DRAINING:
            return ()
        events = self._abort_pod(pod, now)
        self.fleet.remove(pod, now)
        return events

    def _abort_pod(self, pod: Pod, now: float) -> list[NewEvent]:
        """Abort everything ``pod`` holds; the router's legs on it fail."""
        events: list[NewEvent] = []
        table = self.table
        handed_off = self.waiting["decode"]
        ep = pod.endpoint
        for i in sorted(pod.requests):
            pod.engine.abort(str(i), now)
            if pod.role == "prefill" and (table.decode_pod[i] >= 0 or i in handed_off):
                continue  # its KV was handed off; the decode side carries on
            ep.outstanding_requests -= 1
            prefilling = pod.role == "pool" or table.absorbed[i]
            if pod.role == "prefill" or (prefilling and math.isnan(table.first_token_s[i])):
                ep.outstanding_prompt_tokens -= table.prompt_tokens[i]
                if table.absorbed[i]:
                    ep.absorbed_prompt_tokens -= table.prompt_tokens[i]
            self.router.inflight -= 1
            self._end(i, now, ABORTED, "500")
            if pod.role == "decode":
                events.extend(self._release_prefill(now, i))
        pod.requests.clear()
        pod.busy = False
        pod.pending = None
        return events

    def _end(self, i: int, now: float, outcome: int, code: str) -> None:
        self.table.end(i, outcome, now)
        self.router.answered(self.klass, code)
        self.open -= 1
        if now > self.last_end_s:  # lazy pods are caught up one after another
            self.last_end_s = now

    def abort_unfinished(self, now: float) -> None:
        """End every request still open (a run cut off at its time limit)."""
        self.catchup.all(now)
        for role in ("decode", "pool", "prefill"):
            for pod in list(self.fleet.pods.get(role, ())):
                if pod.state != STARTING:
                    self._abort_pod(pod, now)
        for held in self.waiting.values():
            for i in list(held):
                del held[i]
                self.router.inflight -= 1
                self._end(i, now, ABORTED, "504")
        for i in range(len(self.table)):
            if self.table.finishes[i] == 0:
                self._end(i, now, ABORTED, "504")
