"""The comparison as a PNG: one run per policy in :mod:`tandem.report.figure`'s panels.
Pure: returns the image as bytes.
"""

from __future__ import annotations

from collections.abc import Mapping

from tandem.policy.config import LatencyTargets
from tandem.report.figure import LoadSeries, RunSeries, render_timeline_png
from tandem.sim.compare.results import RunResult


def render_png(results: Mapping[str, RunResult], targets: LatencyTargets, title: str = "") -> bytes:
    """Four panels sharing the time axis (minutes), one colour per policy; the load is
    the first run's (every policy replays the same trace)."""
    first = next(iter(results.values()), None)
    load = None
    if first is not None:
        tl = first.timeline
        load = LoadSeries(tl.t_s, tl.arrivals_per_s, tl.prompt_tokens_per_s)
    runs = {
        name: RunSeries(r.timeline.t_s, r.timeline.replicas, r.timeline.ttft_p90_s,
                        r.timeline.itl_p90_s)
        for name, r in results.items()
    }  # fmt: skip
    return render_timeline_png(load, runs, targets, title)
