"""The engine part: a continuous-batching engine model and a simulated vLLM-compatible server.

Layers (checked by import-linter): ``tandem.engine.model`` is pure (no I/O, no asyncio, no
clock reads; time is always passed in as ``now_s``); ``tandem.engine.server`` is the aiohttp
and prometheus_client shell that steps the model in real time, with its asyncio clock.
Importing this package imports nothing else.
"""
