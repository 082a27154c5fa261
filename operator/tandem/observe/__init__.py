"""Observation: what the autoscaler sees of a service at one tick.

Pure (no I/O, no aiohttp/prometheus_client): ``types`` (the frozen observations the
policy consumes), ``source`` (what a source is asked, the interface both share),
``text`` (the exposition-format parser), ``histogram`` (deltas and percentiles),
``parse`` (engine/router pages → per-pod samples), ``compute`` (two samples → an
observation), ``promql`` (the queries of the Prometheus source) and ``promresult``
(its answers → an observation).

I/O: ``scrape`` (``Scraper``: every pod's ``/metrics`` over HTTP) and ``prometheus``
(``PrometheusSource``: a Prometheus server's HTTP API).

This package imports nothing itself, so importing a pure module loads no I/O library.
"""
