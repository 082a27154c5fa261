"""The aiohttp application of the simulated vLLM engine: routes, app factory, lifecycle.

I/O. ``create_app(config)`` builds an app whose ``cleanup_ctx`` starts the stepping task
(and, for the decode role, the KV-lease heartbeats and the HTTP client for KV pulls) and
cancels them on shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
from aiohttp import web
from prometheus_client.exposition import choose_encoder

from tandem.engine.server.config import SimServerConfig
from tandem.engine.server.errors import ApiError, error_body, internal_error
from tandem.engine.server.generate import handle_chat, handle_completions, read_json
from tandem.engine.server.keys import STATE_KEY, TASKS_KEY
from tandem.engine.server.kv_transfer import (
    HEARTBEAT_PATH,
    PULL_PATH,
    heartbeat_loop,
    make_pull,
    make_release,
    serve_heartbeat,
    serve_pull,
)
from tandem.engine.server.responses_api import handle_responses, handle_stored_response
from tandem.engine.server.state import ServerState
from tandem.engine.server.tokenizing import answer_detokenize, answer_tokenize

VLLM_VERSION = "0.34.0"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


async def handle_health(request: web.Request) -> web.Response:
    """200 once started and alive; 503 while loading or after a crash."""
    state = request.app[STATE_KEY]
    if state.dead:
        return web.json_response(error_body(503, "EngineDeadError", "EngineDeadError"), status=503)
    if not state.ready:
        return web.json_response(
            error_body(503, "The engine is starting up", "ServiceUnavailableError"), status=503
        )
    return web.Response(status=200)


async def handle_models(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    cfg = state.config
    data = []
    for name in cfg.served_model_names:
        data.append(
            {
                "id": name,
                "object": "model",
                "created": state.created,
                "owned_by": "vllm",
                "root": cfg.cost.model.name,
                "parent": None,
                "max_model_len": cfg.engine.max_model_len,
                "permission": [
                    {
                        "id": f"modelperm-{cfg.engine_id}",
                        "object": "model_permission",
                        "created": state.created,
                        "allow_create_engine": False,
                        "allow_sampling": True,
                        "allow_logprobs": True,
                        "allow_search_indices": False,
                        "allow_view": True,
                        "allow_fine_tuning": False,
                        "organization": "*",
                        "group": None,
                        "is_blocking": False,
                    }
                ],
            }
        )
    return web.json_response({"object": "list", "data": data})


async def handle_metrics(request: web.Request) -> web.Response:
    """Prometheus text, or OpenMetrics when the scraper asks for it (as prometheus_client)."""
    state = request.app[STATE_KEY]
    state.refresh_metrics()
    encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
    body = encoder(state.metrics.registry)
    return web.Response(body=body, headers={"Content-Type": content_type})


async def handle_version(request: web.Request) -> web.Response:
    return web.json_response({"version": VLLM_VERSION})


async def handle_tokenize(request: web.Request) -> web.Response:
    """``POST /tokenize``: a prompt or a conversation as the sim's token ids."""
    cfg = request.app[STATE_KEY].config
    try:
        body = await read_json(request)
        answer = answer_tokenize(body, cfg.served_model_names, cfg.engine.max_model_len)
    except ApiError as err:
        return web.json_response(err.body(), status=err.status)
    return web.json_response(answer)


async def handle_detokenize(request: web.Request) -> web.Response:
    """``POST /detokenize``: token ids back to text."""
    cfg = request.app[STATE_KEY].config
    try:
        answer = answer_detokenize(await read_json(request), cfg.served_model_names)
    except ApiError as err:
        return web.json_response(err.body(), status=err.status)
    return web.json_response(answer)


@web.middleware
async def json_not_found(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Unknown paths and methods answered as vLLM's FastAPI does: ``{"detail": ...}``."""
    try:
        return await handler(request)
    except web.HTTPNotFound:
        return web.json_response({"detail": "Not Found"}, status=404)
    except web.HTTPMethodNotAllowed as err:
        headers = {"Allow": ", ".join(sorted(err.allowed_methods))}
        return web.json_response({"detail": "Method Not Allowed"}, status=405, headers=headers)


async def handle_load(request: web.Request) -> web.Response:
    return web.json_response({"server_load": len(request.app[STATE_KEY].runner.streams)})


async def handle_sim_stats(request: web.Request) -> web.Response:
    """Simulator-only: engine counters and how closely the loop keeps modelled time."""
    state = request.app[STATE_KEY]
    stats = dataclasses.asdict(state.engine.stats())
    loop = dataclasses.asdict(state.runner.loop_stats)
    ratio = loop["itl_wall_sum_s"] / loop["itl_model_sum_s"] if loop["itl_model_sum_s"] else None
    return web.json_response(
        {
            "role": state.config.role,
            "engine": stats,
            "loop": loop,
            "itl_wall_over_model": ratio,
            "in_flight": len(state.runner.streams),
        }
    )


async def _json_body(request: web.Request) -> object:
    try:
        return await request.json()
    except ValueError:
        return None


async def handle_kv_pull(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    status, body = await serve_pull(state.runner, state.config.engine_id, await _json_body(request))
    return web.json_response(body, status=status)


async def handle_kv_heartbeat(request: web.Request) -> web.Response:
    status, body = serve_heartbeat(request.app[STATE_KEY].runner, await _json_body(request))
    return web.json_response(body, status=status)


async def _lifecycle(app: web.Application) -> AsyncIterator[None]:
    state = app[STATE_KEY]
    cfg = state.config
    state.started_monotonic = time.monotonic()
    session = aiohttp.ClientSession()
    state.session = session
    loop = asyncio.get_running_loop()
    tasks = [loop.create_task(state.runner.run())]
    if cfg.role == "decode":
        state.runner.pull = make_pull(session, cfg.kv_pull_timeout_s)
        state.runner.release = make_release(session, cfg.kv_pull_timeout_s)
        lease_s = cfg.engine.kv_lease_s
        tasks.append(loop.create_task(heartbeat_loop(state.runner, session, state.clock, lease_s)))
    app[TASKS_KEY] = tasks
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await state.runner.close()
        await session.close()


def create_app(
    config: SimServerConfig, on_crash: Callable[[], None] | None = None
) -> web.Application:
    """The simulated engine as an aiohttp app. ``on_crash`` runs when a crash is injected."""
    app = web.Application(client_max_size=64 * 1024**2, middlewares=[json_not_found])
    app[STATE_KEY] = ServerState(config, on_crash)
    app.router.add_post("/v1/completions", handle_completions)
    app.router.add_post("/v1/chat/completions", handle_chat)
    app.router.add_post("/v1/responses", handle_responses)
    app.router.add_get("/v1/responses/{response_id}", handle_stored_response)
    app.router.add_post("/v1/responses/{response_id}/cancel", handle_stored_response)
    app.router.add_post("/tokenize", handle_tokenize)
    app.router.add_post("/detokenize", handle_detokenize)
    app.router.add_get("/v1/models", handle_models)
    app.router.add_get("/health", handle_health)
    app.router.add_get("/ping", handle_health)
    app.router.add_post("/ping", handle_health)
    app.router.add_get("/metrics", handle_metrics)
    app.router.add_get("/version", handle_version)
    app.router.add_get("/load", handle_load)
    app.router.add_get("/tandem/stats", handle_sim_stats)
    if config.role == "prefill":
        app.router.add_post(PULL_PATH, handle_kv_pull)
        app.router.add_post(HEARTBEAT_PATH, handle_kv_heartbeat)
    app.cleanup_ctx.append(_lifecycle)
    return app


async def drain(state: ServerState, timeout_s: float, poll_s: float = 0.05) -> None:
    """What vLLM does on SIGTERM with ``--shutdown-timeout``: refuse new requests (the
    listener stays open and ``/health`` answers 200), let the requests in flight finish
    for up to ``timeout_s``, then abort the rest (at once with 0, vLLM's default)."""
    state.draining = True
    deadline = time.monotonic() + timeout_s
    # the runner has no event for "nothing in flight"; a 50 ms poll is cheap next to a drain
    while state.runner.streams and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(poll_s)
    if state.runner.streams:
        state.runner.fail_all(internal_error("The engine shut down; the request was aborted"))
        await asyncio.sleep(poll_s)  # let the handlers write their error


async def serve(
    app: web.Application, host: str, port: int, *, shutdown_timeout_s: float, backlog: int
) -> None:
    """Serve ``app`` until SIGTERM or SIGINT, then :func:`drain` and stop."""
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port, backlog=backlog).start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await drain(app[STATE_KEY], shutdown_timeout_s)
    finally:
        await runner.cleanup()
