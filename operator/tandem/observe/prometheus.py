"""The Prometheus source: the same observation, read from a Prometheus server. I/O.

Runs the PromQL of :mod:`tandem.observe.promql` against ``/api/v1/query``
concurrently, each under a timeout, and assembles the answers with the pure
:func:`~tandem.observe.promresult.compute_prometheus_observation`. Rates and
percentiles are Prometheus's own (``rate``, ``histogram_quantile``) over
``window_s``, so this source needs no memory between ticks. A failed or empty query
never raises: it is reported in the observation, with its PromQL, for status.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterable, Mapping

import aiohttp

from tandem.api.vocab import PoolRole
from tandem.observe.histogram import DEFAULT_PERCENTILES
from tandem.observe.promql import ROUTER_ROLE, PromTarget, QueryKey, build_queries
from tandem.observe.promresult import (
    PoolSize,
    PrometheusQueryError,
    Vector,
    compute_prometheus_observation,
    parse_query_response,
)
from tandem.observe.session import SessionOwner
from tandem.observe.source import PoolTargets
from tandem.observe.types import Observation

#: Largest answer read from one query (a vector of a few hundred series is ~100 KiB).
MAX_ANSWER_BYTES = 8 * 1024 * 1024


async def fetch_query(
    session: aiohttp.ClientSession,
    base_url: str,
    promql: str,
    timeout_s: float,
    at_s: float | None = None,
) -> Vector:
    """One instant query (a GET: a query changes nothing); raises
    :class:`PrometheusQueryError` on any failure. The answer is read up to
    :data:`MAX_ANSWER_BYTES` and never quoted in the error."""
    form = {"query": promql, "timeout": f"{timeout_s:g}"}
    if at_s is not None:
        form["time"] = f"{at_s:.3f}"
    url = base_url.rstrip("/") + "/api/v1/query"
    try:
        async with (
            asyncio.timeout(timeout_s),
            session.get(url, params=form, allow_redirects=False) as resp,
        ):
            raw = await resp.content.read(MAX_ANSWER_BYTES + 1)
            if len(raw) > MAX_ANSWER_BYTES:
                raise PrometheusQueryError(
                    f"HTTP {resp.status} from {url}: answer larger than {MAX_ANSWER_BYTES} bytes"
                )
            try:
                payload = json.loads(raw)
            except ValueError:
                kind = resp.headers.get("Content-Type", "no content type")[:60]
                raise PrometheusQueryError(
                    f"HTTP {resp.status} from {url}: not JSON ({kind}, {len(raw)} bytes)"
                ) from None
    except TimeoutError:
        raise PrometheusQueryError(f"no answer from {url} within {timeout_s:g} s") from None
    except aiohttp.ClientError as err:
        raise PrometheusQueryError(f"{type(err).__name__} for {url}: {err}") from None
    return parse_query_response(payload)


async def fetch_queries(
    session: aiohttp.ClientSession,
    base_url: str,
    queries: Mapping[QueryKey, str],
    timeout_s: float,
    max_concurrency: int = 8,
    at_s: float | None = None,
) -> dict[QueryKey, Vector | Exception]:
    """Every query's series, or the error it got, run concurrently."""
    gate = asyncio.Semaphore(max_concurrency)

    async def one(promql: str) -> Vector | Exception:
        async with gate:
            try:
                return await fetch_query(session, base_url, promql, timeout_s, at_s)
            except PrometheusQueryError as err:
                return err

    keys = list(queries)
    answers = await asyncio.gather(*(one(queries[key]) for key in keys))
    return dict(zip(keys, answers, strict=True))


class PrometheusSource(SessionOwner):
    """Observations of one InferenceService from a Prometheus server.

    ``window_s`` is the range of every ``rate``/``increase`` (at least two scrape
    intervals of the Prometheus job, or rates come back empty). With ``pin_pods`` the
    queries are restricted to the pods passed in, and a passed pod without series is
    reported as failed.

    Every query of a tick is evaluated at one instant (``evaluation_clock``, Unix time),
    so all rates cover the same window: asked one after the other without it, two
    queries may see different last samples.
    """

    def __init__(
        self,
        url: str,
        target: PromTarget,
        session: aiohttp.ClientSession | None = None,
        *,
        window_s: float = 60.0,
        timeout_s: float = 5.0,
        percentiles: Iterable[int] = DEFAULT_PERCENTILES,
        pin_pods: bool = True,
        clock: Callable[[], float] = time.time,
        evaluation_clock: Callable[[], float] = time.time,
        max_concurrency: int = 8,
    ) -> None:
        self.url = url
        self.target = target
        self.window_s = window_s
        self.timeout_s = timeout_s
        self.percentiles = tuple(percentiles)
        self.pin_pods = pin_pods
        super().__init__(session)
        self._clock = clock
        self._evaluation_clock = evaluation_clock
        self._max_concurrency = max_concurrency

    def build_queries(
        self, pools: Mapping[PoolRole, PoolTargets], routers: Mapping[str, str] | None = None
    ) -> dict[QueryKey, str]:
        """The PromQL this tick runs (pure; shown in docs and status)."""
        pods: dict[str, list[str]] | None = None
        if self.pin_pods:
            pods = {role: list(t.pods) for role, t in pools.items()}
            if routers is not None:
                pods[ROUTER_ROLE] = list(routers)
        return build_queries(
            self.target, list(pools), self.window_s, self.percentiles, pods, router=True
        )

    async def observe(
        self, pools: Mapping[PoolRole, PoolTargets], routers: Mapping[str, str] | None = None
    ) -> Observation:
        """Query Prometheus for this tick; ``routers`` only pins the router pods."""
        now_s = self._clock()
        queries = self.build_queries(pools, routers)
        results = await fetch_queries(
            self._http(),
            self.url,
            queries,
            self.timeout_s,
            self._max_concurrency,
            at_s=self._evaluation_clock(),
        )
        sizes = {
            role: PoolSize(t.replicas, t.ready, tuple(t.pods) if self.pin_pods else ())
            for role, t in pools.items()
        }
        return compute_prometheus_observation(
            now_s, self.window_s, sizes, queries, results, self.target.labels, self.percentiles
        )
