"""The OpenAI-compatible P/D router in front of the prefill and decode pools.

Pure modules (no aiohttp, kubernetes or prometheus imports): :mod:`~tandem.router.config`
(settings), :mod:`~tandem.router.classes` (priority classes and admission),
:mod:`~tandem.router.selection` (scores, power of two choices, prefix affinity),
:mod:`~tandem.router.pools`, :mod:`~tandem.router.request` (what the router reads from a
body, as vLLM reads it), :mod:`~tandem.router.protocol` (the P/D rewrites, error bodies,
how streams end), :mod:`~tandem.router.engine_metrics` (gauges from ``/metrics`` text) and
:mod:`~tandem.router.pods` (pods to endpoints).

I/O modules: :mod:`~tandem.router.app` (factory and serving), :mod:`~tandem.router.proxy`
(generation handlers), :mod:`~tandem.router.surface` (the utility endpoints and JSON
errors), :mod:`~tandem.router.legs` and :mod:`~tandem.router.relay` (the two legs),
:mod:`~tandem.router.upstream` (engine requests and timeouts), :mod:`~tandem.router.tracing`
(trace context and spans), :mod:`~tandem.router.scrape`, :mod:`~tandem.router.discovery`
and :mod:`~tandem.router.metrics`.
"""
