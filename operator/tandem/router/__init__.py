"""The OpenAI-compatible P/D router in front of the prefill and decode pools.

Pure modules (no aiohttp, kubernetes or prometheus imports): :mod:`~tandem.router.config`
(settings), :mod:`~tandem.router.classes` (priority classes and admission),
:mod:`~tandem.router.selection` (scores, power of two choices, prefix affinity),
:mod:`~tandem.router.pools`, :mod:`~tandem.router.protocol` (request validation and the
P/D rewrites), :mod:`~tandem.router.engine_metrics` (gauges from ``/metrics`` text) and
:mod:`~tandem.router.pods` (pods to endpoints).

I/O modules: :mod:`~tandem.router.app` (factory and serving), :mod:`~tandem.router.proxy`
(handlers), :mod:`~tandem.router.legs` and :mod:`~tandem.router.relay` (the two legs),
:mod:`~tandem.router.upstream` (engine requests and timeouts), :mod:`~tandem.router.scrape`,
:mod:`~tandem.router.discovery` and :mod:`~tandem.router.metrics`.
"""
