"""Request traces: reading them (Azure CSV, Mooncake JSONL) and turning them into the
arrivals of one run. Pure: text in, requests out; the callers read the files.

Shared by the fleet simulator (:mod:`tandem.sim`), ``tandem up`` (:mod:`tandem.local`)
and the benchmarks.
"""

from tandem.traces.parse import (
    TraceError,
    TraceRequest,
    parse_trace,
    slice_trace,
    trace_span_s,
)
from tandem.traces.rate import scale_rate, with_warmup

__all__ = [
    "TraceError",
    "TraceRequest",
    "parse_trace",
    "scale_rate",
    "slice_trace",
    "trace_span_s",
    "with_warmup",
]
