"""Periodic scraping of every engine's ``/metrics``: load, health, progress. Does HTTP I/O.

One task per router, one concurrent GET per engine per interval, on the router's pooled
client. Parsing is :func:`tandem.router.engine_metrics.parse_engine_gauges`; a scrape
that fails or times out marks the engine unhealthy until one succeeds, which is how a
dead engine in static mode leaves rotation before requests find out. The first good
scrape after failed ones is the engine's health check passing: it also clears the
ejection its failed requests earned, so a restarted engine takes traffic at once
instead of waiting out a back-off it earned while it was down. Each good scrape also
records whether the engine's token counters moved (the progress non-streaming answers
are timed by).
"""

from __future__ import annotations

import asyncio
import logging

import aiohttp

from tandem.router.engine_metrics import parse_engine_gauges
from tandem.router.selection import Endpoint
from tandem.router.state import Router

log = logging.getLogger("tandem.router.scrape")

#: Longest a scrape may take; an engine slower than this to answer is treated as down.
SCRAPE_TIMEOUT_S = 2.0


async def scrape_endpoint(router: Router, endpoint: Endpoint) -> None:
    """Scrape one engine and record its gauges (or the failure) on ``endpoint``."""
    try:
        async with (
            asyncio.timeout(SCRAPE_TIMEOUT_S),
            router.session.get(endpoint.url + "/metrics") as resp,
        ):
            if resp.status != 200:
                raise aiohttp.ClientResponseError(
                    resp.request_info, resp.history, status=resp.status
                )
            text = await resp.text(errors="replace")
    except (TimeoutError, aiohttp.ClientError, OSError) as err:
        if endpoint.scrape_ok:
            log.warning("scraping %s failed: %s: %s", endpoint.url, type(err).__name__, err)
        endpoint.scrape_ok = False
        return
    sample = parse_engine_gauges(text)
    if not endpoint.scrape_ok:
        log.info("scraping %s works again", endpoint.url)
        endpoint.record_success()
    endpoint.record_scrape(sample.waiting, sample.running, sample.kv_usage)
    endpoint.record_progress(sample.tokens_total, asyncio.get_running_loop().time())


async def scrape_forever(router: Router) -> None:
    """Scrape every endpoint of the active pools each ``scrape_interval_s``; never returns."""
    loop = asyncio.get_running_loop()
    while True:
        started = loop.time()
        endpoints = [e for role in router.roles() for e in router.pools[role].members()]
        if endpoints:
            await asyncio.gather(*(scrape_endpoint(router, e) for e in endpoints))
        elapsed = loop.time() - started
        await asyncio.sleep(max(0.05, router.config.scrape_interval_s - elapsed))
