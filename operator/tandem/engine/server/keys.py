"""Typed application keys of the simulated server (aiohttp ``AppKey``s). No I/O."""

from __future__ import annotations

import asyncio

from aiohttp import web

from tandem.engine.server.state import ServerState

STATE_KEY = web.AppKey("tandem_engine_state", ServerState)
TASKS_KEY = web.AppKey("tandem_engine_tasks", list[asyncio.Task[None]])
