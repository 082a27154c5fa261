"""``tandem up FILE``: run an InferenceService on this machine, no cluster needed."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "up",
        help="run an InferenceService locally: router, engines (simulated or real vLLM), "
        "autoscaler",
        description="Runs the router and the engines as local processes, sized by the "
        "autoscaler, with the OpenAI endpoint on localhost; ends with a summary (requests "
        "served and failed, TTFT and ITL against the targets, attainment, GPU-seconds, "
        "the scale decisions). Ctrl-C stops everything.",
    )
    p.add_argument("file", type=Path, metavar="FILE", help="InferenceService YAML")
    p.add_argument(
        "--engine",
        choices=["sim", "vllm"],
        default="sim",
        help="sim: tandem engine sim processes (default); vllm: real `vllm serve` "
        "processes (vLLM's CPU build works: bash .ci/install-vllm)",
    )
    p.add_argument(
        "--vllm",
        default="vllm",
        metavar="PATH",
        help="the vllm executable for --engine vllm (default: vllm on PATH)",
    )
    p.add_argument(
        "--model-uri",
        metavar="URI",
        help="serve this instead of spec.model.uri, e.g. file:///abs/path of a local model "
        "folder (tandem engine tiny-model DIR writes one)",
    )
    p.add_argument("--port", type=int, default=8000, help="OpenAI endpoint port (8000)")
    p.add_argument("--host", default="127.0.0.1", help="listen address (127.0.0.1)")
    p.add_argument(
        "--load",
        type=Path,
        metavar="TRACE",
        help="replay this trace (Azure CSV or JSONL) against the endpoint",
    )
    p.add_argument(
        "--rate-scale", type=float, default=1.0, metavar="X", help="multiply the trace's rate (1)"
    )
    p.add_argument(
        "--duration",
        type=float,
        metavar="S",
        help="send load for S seconds once the engines are ready, or without --load serve "
        "for S seconds (default: until the trace ends, or Ctrl-C)",
    )
    p.add_argument("--json", type=Path, metavar="OUT", help="write the timeline at exit")
    p.add_argument(
        "--plot",
        type=Path,
        metavar="OUT.png",
        help="write a PNG of load, replicas per pool and latency against the targets",
    )
    p.add_argument(
        "--cold-start",
        type=float,
        metavar="S",
        help="modelled pod start time of simulated engines (default: spec.autoscaling.coldStart)",
    )
    p.add_argument(
        "--interval",
        type=float,
        metavar="S",
        help="autoscaler tick (default: spec.autoscaling.interval)",
    )
    p.add_argument(
        "--log-dir",
        type=Path,
        metavar="DIR",
        help="keep every engine's output in DIR/<pod>.log (default: a new temporary folder "
        "with --engine vllm, none with sim)",
    )
    p.add_argument("--no-view", action="store_true", help="no live terminal view")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import asyncio

    from tandem.api.documents import ManifestError, read_documents
    from tandem.api.validate import SpecError, load_inference_service
    from tandem.local.engines import LocalModelError
    from tandem.local.run import UpError, UpOptions, run_up
    from tandem.traces.parse import TraceError, parse_trace

    for flag, value in (("--rate-scale", args.rate_scale), ("--duration", args.duration)):
        if value is not None and value <= 0:
            print(f"{flag} must be > 0 (got {value:g})", file=sys.stderr)
            return 2
    try:
        (_, doc), *_ = read_documents(args.file)
        if args.model_uri is not None and isinstance(doc.get("spec"), dict):
            model = doc["spec"].setdefault("model", {})
            if isinstance(model, dict):
                model["uri"] = args.model_uri
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
        engine=args.engine,
        vllm=args.vllm,
        cold_start_s=args.cold_start,
        interval_s=args.interval,
        trace=trace,
        trace_name=args.load.name if args.load else "",
        rate_scale=args.rate_scale,
        duration_s=args.duration,
        json_out=args.json,
        plot_out=args.plot,
        log_dir=args.log_dir,
        view=not args.no_view,
    )
    try:
        asyncio.run(run_up(isvc, opts))
    except KeyboardInterrupt:
        print("stopped", file=sys.stderr)
    except (UpError, LocalModelError) as err:
        print(f"tandem up: {err}", file=sys.stderr)
        return 1
    except OSError as err:
        print(f"tandem up: {err}", file=sys.stderr)
        return 1
    return 0
