"""``tandem simulate FILE --trace TRACE``: replay a trace through the fleet in virtual time.

The shell around :mod:`tandem.sim`: reads the manifest and the trace, runs each policy,
prints the summary table, and writes ``--json`` and ``--plot`` files. A progress bar
goes to stderr when it is a terminal (``--quiet`` turns it off).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

DEFAULT_POLICIES = (
    "tandem",
    "static",
    "hpa",
    "keda",
    "kpa",
    "llm-d",
    "dynamo",
    "aggregated",
    "fixed-hindsight",
)


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "simulate",
        help="replay a request trace through the fleet under each autoscaler (virtual time)",
        description="Replay a trace (Azure CSV or Mooncake JSONL) through a simulated fleet "
        "of the InferenceService in FILE, under Tandem's policy and the baselines, and "
        "report SLO attainment and GPU-hours against the oracle.",
    )
    p.add_argument("file", type=Path, metavar="FILE", help="InferenceService manifest (YAML)")
    p.add_argument("--trace", type=Path, required=True, metavar="TRACE", help="trace file")
    p.add_argument(
        "--rate-scale", type=float, default=1.0, metavar="X", help="multiply the request rate"
    )
    p.add_argument(
        "--policy",
        nargs="+",
        action="extend",
        metavar="P",
        help=f"policies to run (default: all): {', '.join(DEFAULT_POLICIES)}; "
        "fixed-hindsight is the cheapest fixed fleet reaching tandem's attainment",
    )
    p.add_argument(
        "--hindsight-attainment",
        type=float,
        metavar="A",
        help="attainment (0-1) fixed-hindsight must reach (default: tandem's when it runs, "
        "else 0.99)",
    )
    p.add_argument(
        "--hindsight-replays",
        type=int,
        default=40,
        metavar="N",
        help="most static-fleet replays the fixed-hindsight search makes (40)",
    )
    p.add_argument("--seed", type=int, default=0, metavar="N", help="random seed (default 0)")
    p.add_argument("--json", type=Path, metavar="OUT", help="write the figures as JSON")
    p.add_argument("--plot", type=Path, metavar="OUT.png", help="write a PNG of the runs")
    p.add_argument("--start", type=float, default=0.0, metavar="S", help="skip the first S s")
    p.add_argument("--duration", type=float, metavar="S", help="replay only S s of the trace")
    p.add_argument(
        "--cold-start", type=float, metavar="S", help="pod cold start (default: the spec's)"
    )
    p.add_argument("--warmup", type=float, default=600.0, metavar="S", help="warm-up (600 s)")
    p.add_argument("--model", metavar="PRESET", help="engine-model preset (default: the spec's)")
    p.add_argument("--gpu", metavar="PRESET", help="GPU preset (default: the pool's gpu.type)")
    p.add_argument(
        "--preset",
        type=Path,
        metavar="FILE",
        help="a measured engine for every pool: a cost-model preset or a `tandem profile` "
        "document (instead of --model and --gpu)",
    )
    p.add_argument(
        "--kv-link-gbps", type=float, default=400.0, metavar="G", help="KV link (400 Gb/s)"
    )
    p.add_argument(
        "--oracle-window", type=float, default=10.0, metavar="S", help="oracle window (10 s)"
    )
    p.add_argument(
        "--exact-engine",
        action="store_true",
        help="visit every sequence every iteration, no steady decoding (slower, same results)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tandem.api.documents import ManifestError, read_documents
    from tandem.api.validate import SpecError, load_inference_service
    from tandem.sim.compare.hindsight import find_fixed_hindsight
    from tandem.sim.compare.report import build_report, describe_hindsight, format_table
    from tandem.sim.compare.runs import (
        FIXED_HINDSIGHT,
        build_scenario,
        run_policy,
        validate_policies,
    )
    from tandem.sim.fleet.spec import PlanError
    from tandem.traces.parse import TraceError, parse_trace, slice_trace, trace_span_s
    from tandem.traces.rate import scale_rate

    try:
        policies = validate_policies(args.policy or DEFAULT_POLICIES)
        _check_hindsight_flags(args, FIXED_HINDSIGHT in policies)
        docs = read_documents(args.file)
        isvc = load_inference_service(docs[0][1])
        text = args.trace.read_text()
        trace = slice_trace(parse_trace(text, str(args.trace)), args.start, args.duration)
        if not trace:
            raise TraceError(f"{args.trace}: no requests in the selected part of the trace")
        requests = scale_rate(trace, args.rate_scale, args.seed)
        preset = _read_preset(args.preset) if args.preset else None
        scenario = build_scenario(
            isvc,
            requests,
            seed=args.seed,
            model=args.model,
            gpu=args.gpu,
            cold_start_s=args.cold_start,
            kv_link_bytes_per_s=args.kv_link_gbps * 1e9 / 8,
            warmup_s=args.warmup,
            oracle_window_s=args.oracle_window,
            exact_engine=args.exact_engine,
            preset=preset,
        )
    except (ManifestError, SpecError) as err:
        print(f"{args.file}: {err}", file=sys.stderr)
        return 1
    except (OSError, TraceError, PlanError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    span = trace_span_s(requests)
    show = not args.quiet and sys.stderr.isatty()
    results = {}
    cpu: dict[str, float] = {}
    for name in policies:
        if name == FIXED_HINDSIGHT:
            continue
        bar = _Progress(name, span) if show else None
        started = time.process_time()
        results[name], _ = run_policy(name, scenario, bar)
        cpu[name] = time.process_time() - started
        if bar is not None:
            bar.close()
    search = None
    if FIXED_HINDSIGHT in policies:
        goal = args.hindsight_attainment
        if goal is None:
            goal = results["tandem"].attainment if "tandem" in results else 0.99
        started = time.process_time()
        search = find_fixed_hindsight(
            scenario,
            goal,
            max_replays=args.hindsight_replays,
            progress=_show_replay if show else None,
        )
        cpu[FIXED_HINDSIGHT] = time.process_time() - started
        results = {
            name: search.result if name == FIXED_HINDSIGHT else results[name] for name in policies
        }
    oracle = scenario.oracle
    print(
        f"{len(requests)} requests over {span / 60:.1f} min (rate x{args.rate_scale:g}), "
        f"{isvc.metadata.name}: TTFT p{scenario.plan.targets.ttft_percentile} <= "
        f"{scenario.plan.targets.ttft_s:g}s, ITL p{scenario.plan.targets.itl_percentile} <= "
        f"{(scenario.plan.targets.itl_s or 0) * 1000:g}ms, cold start "
        f"{scenario.plan.cold_start_s:g}s"
    )
    print(format_table(oracle, results))
    if search is not None:
        print(describe_hindsight(search, results.get("tandem")))
    meta = {
        "trace": {
            "file": str(args.trace),
            "requests": len(requests),
            "rate_scale": args.rate_scale,
            "span_s": span,
            "start_s": args.start,
            "duration_s": args.duration,
        },
        "seed": args.seed,
        "service": isvc.metadata.name,
    }
    if args.json:
        import json

        report = build_report(
            oracle,
            results,
            targets=scenario.plan.targets,
            meta=meta,
            cpu_s=cpu,
            hindsight=search,
        )
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    if args.plot:
        try:
            from tandem.sim.compare.figure import render_png
        except ImportError:  # pragma: no cover - matplotlib is optional
            print("--plot needs matplotlib (pip install matplotlib)", file=sys.stderr)
            return 1
        title = f"{args.trace.name} x{args.rate_scale:g}"
        args.plot.write_bytes(render_png(results, scenario.plan.targets, title))
    return 0


def _check_hindsight_flags(args: argparse.Namespace, searched: bool) -> None:
    if not searched and args.hindsight_attainment is not None:
        raise ValueError("--hindsight-attainment needs fixed-hindsight among --policy")
    goal = args.hindsight_attainment
    if goal is not None and not 0.0 < goal <= 1.0:
        raise ValueError(
            f"--hindsight-attainment is a share of requests in (0, 1], e.g. 0.99; got {goal}"
        )
    if args.hindsight_replays < 1:
        raise ValueError(f"--hindsight-replays must be at least 1, got {args.hindsight_replays}")


def _show_replay(sizes: Any, result: Any) -> None:
    shown = " + ".join(f"{n} {role}" for role, n in sizes.items())
    sys.stderr.write(f"fixed-hindsight: {shown}: {result.attainment * 100:.2f}%\n")
    sys.stderr.flush()


def _read_preset(path: Path) -> Any:
    """The :class:`~tandem.engine.model.cost_preset.CostPreset` in ``path`` (JSON or YAML);
    ``ValueError`` names the file and the field."""
    import json

    import yaml

    from tandem.engine.model.cost_preset import cost_preset_from_mapping

    text = path.read_text()
    try:
        data = yaml.safe_load(text) if path.suffix in (".yaml", ".yml") else json.loads(text)
    except yaml.YAMLError as err:
        raise ValueError(f"{path}: {err}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a preset mapping or a `tandem profile` document")
    return cost_preset_from_mapping(data, str(path))


class _Progress:
    """A one-line progress bar on stderr for one policy's run."""

    def __init__(self, name: str, total_s: float) -> None:
        self.name = name
        self.total_s = max(total_s, 1.0)
        self._last = -1

    def __call__(self, now_s: float) -> None:
        share = min(now_s / self.total_s, 1.0)
        step = int(share * 40)
        if step == self._last:
            return
        self._last = step
        bar = "#" * step + "." * (40 - step)
        sys.stderr.write(f"\r{self.name:<10} [{bar}] {now_s / 60:5.1f} min")
        sys.stderr.flush()

    def close(self) -> None:
        sys.stderr.write("\r" + " " * 70 + "\r")
        sys.stderr.flush()
