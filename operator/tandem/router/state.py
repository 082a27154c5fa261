"""The live state of one router: config, pools, admission, metrics, HTTP client. asyncio only.

One :class:`Router` per app, held under :data:`tandem.router.proxy.ROUTER`. Everything
is touched only from the event loop, so no locks. Discovery calls
:meth:`Router.set_pool_urls` and :meth:`Router.set_config`; request handlers read
``router.config`` once per request, so a config swap never changes a request midway.
"""

from __future__ import annotations

import asyncio
import logging
import random

import aiohttp

from tandem.policy.feasibility import LeastLatency
from tandem.router.classes import Admission
from tandem.router.config import RouterConfig
from tandem.router.engine_http import EngineClient
from tandem.router.keys import ClassKeys
from tandem.router.metrics import RouterMetrics
from tandem.router.pools import ROLES_BY_MODE, Pool, PromptSizes
from tandem.router.selection import Endpoint

log = logging.getLogger("tandem.router")


class Router:
    """State shared by the handlers and background tasks of one router app."""

    def __init__(self, config: RouterConfig, *, seed: int | None = None) -> None:
        self.config = config
        self.pools: dict[str, Pool] = {role: Pool(role) for role in ("prefill", "decode", "pool")}
        self.admission = Admission()
        self.class_keys = ClassKeys()
        """API keys that grant priority classes (``--class-keys``); none by default."""
        self.prompt_sizes = PromptSizes()
        self.metrics = RouterMetrics(lambda: self.pools.values())
        self.rng = random.Random(seed)
        self.least = LeastLatency(declared_tokens_per_s=config.prefill_tokens_per_s)
        """The least TTFT and ITL any pool size could give, learned from the requests."""
        self._session: aiohttp.ClientSession | None = None
        self._engines: EngineClient | None = None
        self._changed = asyncio.Event()
        self._timeout = self._client_timeout(config)

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("the router's HTTP client is not open (app not started)")
        return self._session

    @property
    def engines(self) -> EngineClient:
        """The lean client of the engine legs, prefill and generating
        (:mod:`tandem.router.engine_http`)."""
        if self._engines is None:
            raise RuntimeError("the router's engine client is not open (app not started)")
        return self._engines

    @property
    def client_timeout(self) -> aiohttp.ClientTimeout:
        """Per-request client timeout: the connect bound; the rest is timed by the proxy."""
        return self._timeout

    async def open(self) -> None:
        """Open the pooled HTTP clients to the engines (keep-alive, no decompression):
        aiohttp's for scrapes, ``/v1/models`` and the utility endpoints, the lean one for
        the prefill and generating legs."""
        self._engines = EngineClient()
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=30.0)
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=self._timeout,
            auto_decompress=False,
            skip_auto_headers=("User-Agent",),
        )

    async def close(self) -> None:
        if self._engines is not None:
            await self._engines.close()
            self._engines = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    def set_config(self, config: RouterConfig) -> None:
        if config != self.config:
            log.info("router config updated: mode=%s classes=%s", config.mode, config.classes)
        self.config = config
        self.least.declared_tokens_per_s = config.prefill_tokens_per_s
        self._timeout = self._client_timeout(config)

    def set_pool_urls(self, role: str, urls: list[str]) -> None:
        """Replace the endpoints of ``role`` and wake requests waiting for an engine."""
        if self.pools[role].set_urls(urls):
            log.info("%s pool: %s", role, ", ".join(self.pools[role].endpoints) or "(empty)")
            self._changed.set()
            self._changed = asyncio.Event()

    def roles(self) -> tuple[str, ...]:
        return ROLES_BY_MODE[self.config.mode]

    def endpoint(self, role: str, url: str) -> Endpoint | None:
        return self.pools[role].endpoints.get(url)

    async def wait_for_endpoints(self, role: str, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for ``role`` to have an endpoint; whether it has one.

        Lets a request ride out a pool that is momentarily empty (first pod starting,
        scale from zero, a rollout) instead of failing at once.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not self.pools[role].endpoints:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except TimeoutError:
                return bool(self.pools[role].endpoints)
        return True

    @staticmethod
    def _client_timeout(config: RouterConfig) -> aiohttp.ClientTimeout:
        return aiohttp.ClientTimeout(total=None, sock_connect=config.timeouts.connect_s)
