"""Request traces: reading them (Azure CSV, Mooncake JSONL), generating the synthetic
family (:mod:`tandem.traces.family`), writing and summarizing them, and turning them into
the arrivals of one run. Pure: text in, requests out (and back); the callers read and
write the files.

Shared by the fleet simulator (:mod:`tandem.sim`), ``tandem up`` (:mod:`tandem.local`),
``tandem trace`` and the benchmarks.
"""

from tandem.traces.describe import TraceSummary, summarize_trace
from tandem.traces.family import FAMILY, family_member
from tandem.traces.generate import TraceShape, generate_trace
from tandem.traces.parse import (
    TraceError,
    TraceRequest,
    parse_trace,
    slice_trace,
    trace_span_s,
)
from tandem.traces.rate import scale_rate, with_warmup
from tandem.traces.write import format_jsonl

__all__ = [
    "FAMILY",
    "TraceError",
    "TraceRequest",
    "TraceShape",
    "TraceSummary",
    "family_member",
    "format_jsonl",
    "generate_trace",
    "parse_trace",
    "scale_rate",
    "slice_trace",
    "summarize_trace",
    "trace_span_s",
    "with_warmup",
]
