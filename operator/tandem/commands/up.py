"""``tandem up FILE``: run an InferenceService on this machine, no cluster needed."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "up",
        help="run an InferenceService locally: router, simulated engines, autoscaler",
        description="Runs the router and simulated engines as local processes, sized by "
        "the autoscaler, with the OpenAI endpoint on localhost. Ctrl-C stops everything.",
    )
    p.add_argument("file", type=Path, metavar="FILE", help="InferenceService YAML")
    p.add_argument("--port", type=int, default=8000, help="OpenAI endpoint port (8000)")
    p.add_argument("--host", default="127.0.0.1", help="listen address (127.0.0.1)")
    p.add_argument(
        "--load",
        type=Path,
        metavar="TRACE",
        help="replay this trace (Azure CSV or JSONL) against the endpoint",
    )
    p.add_argument("--rate-scale", type=float, default=1.0, help="multiply the trace's rate (1)")
    p.add_argument(
        "--duration",
        type=float,
        metavar="S",
        help="stop after S seconds (default: when the load ends, or Ctrl-C)",
    )
    p.add_argument("--json", type=Path, metavar="OUT", help="write the timeline at exit")
    p.add_argument(
        "--cold-start",
        type=float,
        metavar="S",
        help="modelled pod start time (default: spec.autoscaling.coldStart)",
    )
    p.add_argument(
        "--interval",
        type=float,
        metavar="S",
        help="autoscaler tick (default: spec.autoscaling.interval)",
    )
    p.add_argument("--no-view", action="store_true", help="no live terminal view")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import asyncio

    from tandem.api.documents import ManifestError, read_documents
    from tandem.api.validate import SpecError, load_inference_service
    from tandem.local.run import UpOptions, run_up
    from tandem.traces.parse import TraceError, parse_trace

    if args.rate_scale <= 0:
        print("--rate-scale must be > 0", file=sys.stderr)
        return 2
    try:
        (_, doc), *_ = read_documents(args.file)
        isvc = load_inference_service(doc)
        trace = parse_trace(args.load.read_text(), str(args.load)) if args.load else None
    except (ManifestError, OSError) as err:
        print(f"{args.file}: {err}", file=sys.stderr)
        return 1
    except SpecError as err:
        print(
            f"{args.file}: invalid InferenceService:\n  " + str(err).replace("\n", "\n  "),
            file=sys.stderr,
        )
        return 1
    except TraceError as err:
        print(f"{args.load}: {err}", file=sys.stderr)
        return 1
    opts = UpOptions(
        port=args.port,
        host=args.host,
        cold_start_s=args.cold_start,
        interval_s=args.interval,
        trace=trace,
        rate_scale=args.rate_scale,
        duration_s=args.duration,
        json_out=args.json,
        view=not args.no_view,
    )
    try:
        asyncio.run(run_up(isvc, opts))
    except KeyboardInterrupt:
        print("stopped", file=sys.stderr)
    except OSError as err:
        print(f"tandem up: {err}", file=sys.stderr)
        return 1
    return 0
