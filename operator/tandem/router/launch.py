"""Command-line arguments → a :class:`RouterConfig` and a discovery. Reads ``--config``.

Static mode needs engines for its mode: ``--prefill`` and ``--decode``, or ``--pool``.
Settings start from the defaults, or from ``--config`` (an InferenceService manifest,
validated like ``tandem validate``), and explicit flags win. Cluster mode takes its
settings from the live InferenceService; only the tuning flags apply there.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import Any

from tandem.router.config import RouterConfig, build_router_config, parse_class_flag
from tandem.router.discovery import Discovery, KubeDiscovery, StaticDiscovery


class SetupError(ValueError):
    """Arguments that do not make a router; the message says what to change."""


def build_settings(args: argparse.Namespace) -> RouterConfig:
    """The settings the arguments describe (cluster mode: the tuning flags only)."""
    config = RouterConfig()
    if args.config is not None:
        config = build_router_config(_load_manifest(args.config))
    tuning: dict[str, Any] = {}
    if args.prefix_affinity_tokens is not None:
        tuning["prefix_affinity_tokens"] = _at_least(0, args.prefix_affinity_tokens, "affinity")
    if args.scrape_interval is not None:
        if args.scrape_interval <= 0:
            raise SetupError("--scrape-interval must be > 0")
        tuning["scrape_interval_s"] = args.scrape_interval
    config = replace(config, **tuning)
    if _cluster(args):
        return config
    out = _apply_flags(config, args)
    keyed = [c.name for c in out.classes if c.require_key]
    if keyed and args.class_keys is None:
        raise SetupError(
            f"classes {', '.join(keyed)} require a key: give the keys with --class-keys DIR"
        )
    return out


def _apply_flags(config: RouterConfig, args: argparse.Namespace) -> RouterConfig:
    changes: dict[str, Any] = {"mode": "aggregated" if args.pool else "disaggregated"}
    if args.max_inflight is not None:
        changes["max_inflight"] = _at_least(1, args.max_inflight, "--max-inflight")
    if args.max_body_bytes is not None:
        changes["max_body_bytes"] = _at_least(1, args.max_body_bytes, "--max-body-bytes")
    if args.max_connections_per_client is not None:
        changes["max_connections_per_client"] = _at_least(
            1, args.max_connections_per_client, "--max-connections-per-client"
        )
    if args.priority_header is not None:
        changes["priority_header"] = args.priority_header
    if args.priority_scheduling:
        changes["send_priority"] = True
    if args.short_prompt_tokens is not None:
        changes["short_prompt_tokens"] = _at_least(0, args.short_prompt_tokens, "short prompt")
    if args.classes:
        try:
            classes = tuple(parse_class_flag(c) for c in args.classes)
        except ValueError as err:
            raise SetupError(f"--class: {err}") from None
        changes["classes"] = classes
        changes["default_class"] = classes[0].name
    if args.default_class is not None:
        changes["default_class"] = args.default_class
    if args.require_key:
        classes = changes.get("classes", config.classes)
        unknown = sorted(set(args.require_key) - {c.name for c in classes})
        if unknown:
            raise SetupError(
                f"--require-key names no class: {', '.join(unknown)}; classes: "
                f"{', '.join(c.name for c in classes)}"
            )
        changes["classes"] = tuple(
            replace(c, require_key=c.require_key or c.name in args.require_key) for c in classes
        )
    timeouts = {
        "connect_s": args.connect_timeout,
        "prefill_s": args.prefill_timeout,
        "first_token_s": args.first_token_timeout,
        "idle_stream_s": args.idle_timeout,
        "request_header_s": args.header_timeout,
        "request_body_s": args.body_timeout,
        "client_idle_s": args.client_idle_timeout,
    }
    for name, value in timeouts.items():
        if value is not None and value <= 0:
            raise SetupError(f"timeouts must be > 0 seconds, got {value} for {name}")
    given = {k: v for k, v in timeouts.items() if v is not None}
    if given:
        changes["timeouts"] = replace(config.timeouts, **given)
    out = replace(config, **changes)
    if out.class_named(out.default_class) is None:
        raise SetupError(
            f"default class {out.default_class!r} is not a class; "
            f"classes: {', '.join(out.class_names())}"
        )
    return out


def build_discovery(args: argparse.Namespace, config: RouterConfig) -> Discovery:
    """Static URLs, or the InferenceService's pods; a usage error when neither fits."""
    static = any(getattr(args, role) for role in ("prefill", "decode", "pool"))
    if _cluster(args):
        if static:
            raise SetupError("use either --namespace/--service or engine URLs, not both")
        if not (args.namespace and args.service):
            raise SetupError("cluster mode needs both --namespace and --service")
        return KubeDiscovery(args.namespace, args.service, base=config)
    if args.pool and (args.prefill or args.decode):
        raise SetupError("--pool (aggregated) excludes --prefill/--decode (disaggregated)")
    if args.pool:
        return StaticDiscovery({"pool": args.pool})
    if not (args.prefill and args.decode):
        raise SetupError(
            "give engines: --prefill URL[,URL...] and --decode URL[,URL...], or --pool "
            "URL[,URL...]; or --namespace NS --service NAME in a cluster"
        )
    return StaticDiscovery({"prefill": args.prefill, "decode": args.decode})


def _cluster(args: argparse.Namespace) -> bool:
    return bool(args.namespace or args.service)


def _load_manifest(path: Any) -> Any:
    from tandem.api.documents import ManifestError, read_documents
    from tandem.api.validate import SpecError, load_inference_service

    try:
        docs = read_documents(path)
        return load_inference_service(docs[0][1])
    except (ManifestError, SpecError) as err:
        raise SetupError(f"--config {path}: {err}") from None


def _at_least(low: int, value: int, what: str) -> int:
    if value < low:
        raise SetupError(f"{what} must be >= {low}, got {value}")
    return value
