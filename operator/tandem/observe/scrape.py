"""Scraping the engine and router pods' ``/metrics`` over HTTP. I/O.

Every pod of every pool and every router pod is fetched concurrently, each under its
own timeout; a pod that times out, refuses the connection, answers an HTTP error or
serves an unreadable page is reported (pod → error) and never fails the tick.
:class:`Scraper` is the stateful shell: it keeps each pod's previous sample between
ticks so the pure :func:`~tandem.observe.compute.compute_observation` can turn two
samples into rates. It implements :class:`~tandem.observe.source.ObservationSource`.

The classic text format is requested (``Accept: text/plain``); the parsers accept
OpenMetrics too, should an endpoint serve it anyway.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping

import aiohttp

from tandem.api.vocab import PoolRole
from tandem.observe.compute import PodScrape, PoolScrape, compute_observation
from tandem.observe.histogram import DEFAULT_PERCENTILES
from tandem.observe.parse import (
    EngineSample,
    RouterSample,
    parse_engine_sample,
    parse_router_sample,
)
from tandem.observe.session import SessionOwner
from tandem.observe.source import PoolTargets
from tandem.observe.text import ExpositionError
from tandem.observe.types import Observation

ACCEPT = "text/plain;version=0.0.4;q=1.0, */*;q=0.1"
#: A vLLM page is ~100 kB; anything this large is not a metrics page.
MAX_PAGE_BYTES = 16 * 1024 * 1024


class ScrapeError(Exception):
    """One pod could not be read; the message is for status."""


async def scrape_metrics_text(session: aiohttp.ClientSession, url: str, timeout_s: float) -> str:
    """The body of ``url``; raises :class:`ScrapeError` with a reason a person can act on."""
    try:
        async with (
            asyncio.timeout(timeout_s),
            session.get(url, headers={"Accept": ACCEPT}, allow_redirects=False) as resp,
        ):
            if resp.status != 200:
                snippet = (await resp.content.read(200)).decode("utf-8", "replace").strip()
                raise ScrapeError(f"HTTP {resp.status} from {url}: {snippet[:200]}")
            body = bytearray()
            async for chunk in resp.content.iter_chunked(64 * 1024):
                body += chunk
                if len(body) > MAX_PAGE_BYTES:
                    raise ScrapeError(f"{url} sent more than {MAX_PAGE_BYTES} bytes")
    except TimeoutError:
        raise ScrapeError(f"no answer from {url} within {timeout_s:g} s") from None
    except aiohttp.ClientError as err:
        raise ScrapeError(f"{type(err).__name__} for {url}: {err}") from None
    return body.decode("utf-8", "replace")


async def scrape_texts(
    session: aiohttp.ClientSession,
    urls: Mapping[str, str],
    timeout_s: float,
    max_concurrency: int = 32,
) -> dict[str, str | ScrapeError]:
    """Every URL's body (or its error) by key, fetched concurrently."""
    gate = asyncio.Semaphore(max_concurrency)

    async def one(url: str) -> str | ScrapeError:
        async with gate:
            try:
                return await scrape_metrics_text(session, url, timeout_s)
            except ScrapeError as err:
                return err

    keys = list(urls)
    results = await asyncio.gather(*(one(urls[key]) for key in keys))
    return dict(zip(keys, results, strict=True))


class Scraper(SessionOwner):
    """Scrapes a service's pods each tick and remembers the previous samples.

    One per InferenceService. ``clock`` gives ``now_s`` and each sample's time (wall
    clock by default, as the policy's state lives in the resource's status).
    """

    def __init__(
        self,
        session: aiohttp.ClientSession | None = None,
        *,
        timeout_s: float = 2.0,
        model_name: str | None = None,
        percentiles: Iterable[int] = DEFAULT_PERCENTILES,
        clock: Callable[[], float] = time.time,
        max_concurrency: int = 32,
    ) -> None:
        super().__init__(session)
        self.timeout_s = timeout_s
        self.model_name = model_name
        self.percentiles = tuple(percentiles)
        self._clock = clock
        self._max_concurrency = max_concurrency
        self._engines: dict[tuple[str, str], EngineSample] = {}
        self._routers: dict[str, RouterSample] = {}
        self._last_now_s: float | None = None

    async def observe(
        self, pools: Mapping[PoolRole, PoolTargets], routers: Mapping[str, str] | None = None
    ) -> Observation:
        """Scrape every pod once and return the observation of this tick."""
        now_s = self._clock()
        urls = {f"{role}/{pod}": url for role, t in pools.items() for pod, url in t.pods.items()}
        urls |= {f"router/{pod}": url for pod, url in (routers or {}).items()}
        texts = await scrape_texts(self._http(), urls, self.timeout_s, self._max_concurrency)
        at_s = self._clock()
        pool_scrapes: dict[PoolRole, PoolScrape] = {}
        engines: dict[tuple[str, str], EngineSample] = {}
        for role, targets in pools.items():
            pods: dict[str, PodScrape[EngineSample]] = {}
            for pod in targets.pods:
                key = (role, pod)
                scrape = self._engine_scrape(texts[f"{role}/{pod}"], at_s, self._engines.get(key))
                pods[pod] = scrape
                if (kept := scrape.current or scrape.previous) is not None:
                    engines[key] = kept
            pool_scrapes[role] = PoolScrape(targets.replicas, targets.ready, pods)
        router_scrapes: dict[str, PodScrape[RouterSample]] = {}
        kept_routers: dict[str, RouterSample] = {}
        for pod in routers or {}:
            previous = self._routers.get(pod)
            router_scrapes[pod] = _router_scrape(texts[f"router/{pod}"], at_s, previous)
            if (sample := router_scrapes[pod].current or previous) is not None:
                kept_routers[pod] = sample
        self._engines, self._routers = engines, kept_routers
        window_s = now_s - self._last_now_s if self._last_now_s is not None else 0.0
        self._last_now_s = now_s
        return compute_observation(
            now_s, max(window_s, 0.0), pool_scrapes, router_scrapes, percentiles=self.percentiles
        )

    def forget(self) -> None:
        """Drop every remembered sample (the next tick has gauges but no rates)."""
        self._engines.clear()
        self._routers.clear()
        self._last_now_s = None

    def _engine_scrape(
        self, text: str | ScrapeError, at_s: float, previous: EngineSample | None
    ) -> PodScrape[EngineSample]:
        if isinstance(text, ScrapeError):
            return PodScrape(previous=previous, error=str(text))
        try:
            current = parse_engine_sample(text, at_s, self.model_name)
        except ExpositionError as err:
            return PodScrape(previous=previous, error=f"unreadable metrics page: {err}")
        return PodScrape(current=current, previous=previous)


def _router_scrape(
    text: str | ScrapeError, at_s: float, previous: RouterSample | None
) -> PodScrape[RouterSample]:
    if isinstance(text, ScrapeError):
        return PodScrape(previous=previous, error=str(text))
    try:
        return PodScrape(current=parse_router_sample(text, at_s), previous=previous)
    except ExpositionError as err:
        return PodScrape(previous=previous, error=f"unreadable metrics page: {err}")
