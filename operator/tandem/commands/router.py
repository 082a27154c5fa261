"""tandem router: the OpenAI-compatible P/D router, static or cluster discovery.

Static mode takes the engines from --prefill/--decode (disaggregated) or --pool
(aggregated) and its settings from flags, optionally on top of an InferenceService
manifest (--config). Cluster mode (--namespace and --service) reads the settings from
the InferenceService and watches the ready pods of its pools.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "router",
        help="run the OpenAI-compatible router in front of the prefill and decode pools",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port to listen on (8000)")
    where = p.add_argument_group("engines, static mode")
    where.add_argument("--prefill", type=_urls, metavar="URL[,URL...]", help="prefill engines")
    where.add_argument("--decode", type=_urls, metavar="URL[,URL...]", help="decode engines")
    where.add_argument("--pool", type=_urls, metavar="URL[,URL...]", help="aggregated engines")
    cluster = p.add_argument_group("engines and settings, cluster mode")
    cluster.add_argument("--namespace", help="namespace of the InferenceService")
    cluster.add_argument("--service", help="InferenceService name")
    s = p.add_argument_group("settings (static mode; flags override --config)")
    s.add_argument("--config", type=Path, metavar="FILE", help="InferenceService manifest")
    s.add_argument("--max-inflight", type=int, metavar="N", help="in-flight bound (1024)")
    s.add_argument("--max-body-bytes", type=int, metavar="N", help="largest body (8 MiB)")
    s.add_argument("--connect-timeout", type=float, metavar="S", help="seconds (5)")
    s.add_argument("--prefill-timeout", type=float, metavar="S", help="seconds (60)")
    s.add_argument("--first-token-timeout", type=float, metavar="S", help="seconds (120)")
    s.add_argument("--idle-timeout", type=float, metavar="S", help="stream silence, s (60)")
    s.add_argument(
        "--header-timeout", type=float, metavar="S", help="connect to whole request head, s (10)"
    )
    s.add_argument(
        "--body-timeout", type=float, metavar="S", help="request head to whole body, s (30)"
    )
    s.add_argument(
        "--client-idle-timeout", type=float, metavar="S", help="idle keep-alive connection, s (75)"
    )
    s.add_argument(
        "--max-connections-per-client",
        type=int,
        metavar="N",
        help="open connections per client address (1024)",
    )
    s.add_argument("--priority-header", metavar="NAME", help="(x-tandem-priority-class)")
    s.add_argument(
        "--class",
        dest="classes",
        action="append",
        metavar="NAME[:PRIORITY[:MAX_INFLIGHT]]",
        help="a priority class (repeatable; the first is the default)",
    )
    s.add_argument("--default-class", metavar="NAME", help="class of requests without header")
    s.add_argument(
        "--require-key",
        action="append",
        metavar="CLASS",
        help="the class needs an API key that grants it (repeatable; keys from --class-keys)",
    )
    s.add_argument(
        "--priority-scheduling",
        action="store_true",
        default=None,
        help="send vLLM's priority field (engines run --scheduling-policy priority)",
    )
    s.add_argument("--short-prompt-tokens", type=int, metavar="N", help="skip prefill below")
    tuning = p.add_argument_group("tuning (both modes)")
    tuning.add_argument(
        "--prefix-affinity-tokens", type=int, metavar="N", help="0 turns affinity off (64)"
    )
    tuning.add_argument("--scrape-interval", type=float, metavar="S", help="seconds (1)")
    tuning.add_argument(
        "--class-keys",
        type=Path,
        metavar="DIR",
        help="API keys that grant priority classes: one file per class, one key per line "
        "(in a cluster, the Secret <service>-class-keys mounted here by the operator)",
    )
    tuning.add_argument(
        "--loop",
        choices=["auto", "asyncio", "uvloop"],
        default="auto",
        help="event loop: uvloop when installed (auto), or the standard one",
    )
    tuning.add_argument("--log-level", default="INFO", help="(INFO)")
    tuning.add_argument(
        "--otlp-traces-endpoint",
        type=_url,
        metavar="URL",
        help="export spans over OTLP/HTTP to this traces URL (e.g. http://collector:4318/"
        "v1/traces); OTEL_EXPORTER_OTLP_ENDPOINT and the other OTEL_* variables work too",
    )
    p.set_defaults(func=run)


def _urls(text: str) -> list[str]:
    urls = [u.strip().rstrip("/") for u in text.split(",") if u.strip()]
    for url in urls:
        if not url.startswith(("http://", "https://")):
            raise argparse.ArgumentTypeError(f"expected http://HOST:PORT, got {url!r}")
    return urls


def _url(text: str) -> str:
    if not text.startswith(("http://", "https://")):
        raise argparse.ArgumentTypeError(f"expected an http(s) URL, got {text!r}")
    return text


def run(args: argparse.Namespace) -> int:
    import asyncio
    import logging

    from tandem.router.launch import SetupError, build_discovery, build_settings

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    try:
        config = build_settings(args)
        discovery = build_discovery(args, config)
    except SetupError as err:
        print(f"tandem router: {err}", file=sys.stderr)
        return 2
    import os

    from tandem.router.app import build_app, serve_until_signalled
    from tandem.router.tracing import build_tracing

    app = build_app(
        config,
        discovery,
        class_keys=args.class_keys,
        tracing=build_tracing(os.environ, args.otlp_traces_endpoint),
    )
    try:
        loop_factory = _loop_factory(args.loop)
    except ImportError:
        print("tandem router: --loop uvloop needs the uvloop package", file=sys.stderr)
        return 2
    from tandem.router.keys import KeyFileError

    try:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            runner.run(serve_until_signalled(app, args.host, args.port))
    except (RuntimeError, KeyFileError) as err:  # the InferenceService, the class keys
        print(f"tandem router: {err}", file=sys.stderr)
        return 1
    return 0


def _loop_factory(choice: str) -> Any:
    """uvloop's loop (about twice the relay throughput) when asked for or available."""
    if choice == "asyncio":
        return None
    import importlib

    try:
        uvloop = importlib.import_module("uvloop")  # optional: not a dependency
    except ImportError:
        if choice == "uvloop":
            raise
        return None
    return uvloop.new_event_loop
