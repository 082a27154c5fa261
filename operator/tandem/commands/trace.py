"""``tandem trace generate|describe``: write a synthetic trace of the family, or summarize
a trace file.

The shell around :mod:`tandem.traces`: parses the flags, calls the pure generator or
summary, writes the JSON lines and prints what the trace holds.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path
from typing import Any

from tandem.traces.family import FAMILY


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "trace",
        help="generate a synthetic trace of the family, or summarize a trace",
        description="Synthetic request traces that stress what public traces do not "
        "(long prompts, bursts, swings, mix shifts, multi-turn prefix reuse), in the JSON "
        "lines format tandem simulate reads.",
    )
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    kinds = "\n".join(
        textwrap.fill(
            shape.description, 88, initial_indent=f"  {name:<18} ", subsequent_indent=" " * 21
        )
        for name, shape in FAMILY.items()
    )
    gen: argparse.ArgumentParser = verbs.add_parser(
        "generate",
        help="write a trace of one family member as JSON lines",
        description="Draw a trace of the family member KIND for a seed; the same kind, seed, "
        "duration and rate always give the same file.",
        epilog=f"kinds:\n{kinds}\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    gen.add_argument(
        "--kind", required=True, metavar="KIND", help=f"family member: {', '.join(FAMILY)}"
    )
    gen.add_argument("--seed", type=int, default=0, metavar="N", help="random seed (default 0)")
    gen.add_argument(
        "--duration",
        default="1h",
        metavar="D",
        help="length of the trace: seconds or a duration such as 15m, 1h (default 1h)",
    )
    gen.add_argument(
        "--rate",
        type=float,
        metavar="R",
        help="mean requests per second (default: the kind's own)",
    )
    gen.add_argument(
        "-o", "--output", type=Path, required=True, metavar="OUT.jsonl", help="file to write"
    )
    gen.set_defaults(func=run_generate)
    describe: argparse.ArgumentParser = verbs.add_parser(
        "describe",
        help="summarize a trace: rate, burstiness, lengths, long-context share, reuse",
    )
    describe.add_argument("file", type=Path, metavar="TRACE", help="Azure CSV or JSON lines")
    describe.set_defaults(func=run_describe)


def run_generate(args: argparse.Namespace) -> int:
    from tandem.traces.describe import summarize_trace
    from tandem.traces.family import family_member
    from tandem.traces.generate import generate_trace
    from tandem.traces.write import format_jsonl

    try:
        shape = family_member(args.kind)
        duration_s = _duration(args.duration)
        requests = generate_trace(shape, args.seed, duration_s, args.rate)
        if not requests:
            raise ValueError(
                f"--duration {args.duration} at this rate draws no request; "
                "use a longer duration or a higher --rate"
            )
        args.output.write_text(format_jsonl(requests))
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except OSError as err:
        print(f"error: {args.output}: {err.strerror or err}", file=sys.stderr)
        return 1
    print(f"{args.output}: {args.kind} seed {args.seed}: {summarize_trace(requests).line()}")
    return 0


def run_describe(args: argparse.Namespace) -> int:
    from tandem.traces.describe import summarize_trace
    from tandem.traces.parse import TraceError, parse_trace

    try:
        requests = parse_trace(args.file.read_text(), str(args.file))
    except TraceError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except (OSError, UnicodeDecodeError) as err:
        print(f"error: {args.file}: {err}", file=sys.stderr)
        return 1
    print(f"{args.file}: {summarize_trace(requests).line()}")
    return 0


def _duration(text: str) -> float:
    """Seconds from ``--duration``: a bare number is seconds, else a duration string."""
    import math

    from tandem.api.durations import parse_duration

    try:
        value = float(text)
    except ValueError:
        try:
            value = parse_duration(text)
        except ValueError as err:
            raise ValueError(f"--duration {text!r}: {err}") from None
    if not (math.isfinite(value) and value > 0):
        raise ValueError(
            f"--duration must be a length of time > 0 (e.g. 900, 15m, 1h), got {text!r}"
        )
    return value
