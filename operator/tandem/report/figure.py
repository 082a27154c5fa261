"""A run over time as a PNG: load, replicas per pool, TTFT and ITL against the targets.
Pure: returns the image as bytes; writing it is the caller's.

Four panels share the time axis: requests/s with prompt tokens/s on a second axis, the
pods of each pool (one colour per run, one line style per pool), then TTFT and ITL
with the targets as red dotted lines. ``tandem simulate --plot`` draws one run per
policy, ``tandem up --plot`` its one real run. matplotlib is imported only when a
figure is drawn, with the non-interactive Agg backend.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from tandem.policy.config import LatencyTargets

#: Line style of each pool's replicas.
POOL_STYLES = {"prefill": "-", "decode": "--", "pool": "-."}

TimeUnit = Literal["s", "min"]


@dataclass(frozen=True)
class LoadSeries:
    """The offered load, one point per interval ending at ``t_s``."""

    t_s: Sequence[float]
    requests_per_s: Sequence[float]
    prompt_tokens_per_s: Sequence[float]


@dataclass(frozen=True)
class RunSeries:
    """One run over time: what one autoscaler made of the load."""

    t_s: Sequence[float]
    replicas: Mapping[str, Sequence[float]]
    """Pods of each pool (starting or ready), held until the next point."""
    ttft_s: Sequence[float]
    """TTFT of the requests whose first token came in the interval (NaN: none), at a
    percentile (the axis names the TTFT target's)."""
    itl_s: Sequence[float]
    """Token gaps of the interval (NaN: none), at a percentile (the axis names the ITL
    target's)."""
    ready: Mapping[str, Sequence[float]] = field(default_factory=dict)
    """Ready pods of each pool, drawn thin beside ``replicas`` when given."""


def render_timeline_png(
    load: LoadSeries | None,
    runs: Mapping[str, RunSeries],
    targets: LatencyTargets,
    title: str = "",
    time_unit: TimeUnit = "min",
) -> bytes:
    """The four panels as PNG bytes; the latency axes are labelled with the targets'
    percentiles."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
    from matplotlib.ticker import MaxNLocator

    scale = 60.0 if time_unit == "min" else 1.0
    fig, axes = plt.subplots(4, 1, figsize=(11, 12), sharex=True)
    load_ax, replicas, ttft, itl = axes
    if load is not None:
        times = [t / scale for t in load.t_s]
        load_ax.plot(times, load.requests_per_s, color="black", lw=0.8)
        load_ax.set_ylabel("requests/s")
        tokens = load_ax.twinx()
        kilo = [v / 1000.0 for v in load.prompt_tokens_per_s]
        tokens.plot(times, kilo, color="tab:gray", lw=0.6, alpha=0.7)
        tokens.set_ylabel("prompt ktok/s", color="tab:gray")
    load_ax.set_title(title or "load")
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for k, (name, run) in enumerate(runs.items()):
        color = colors[k % len(colors)]
        times = [t / scale for t in run.t_s]
        for role, counts in run.replicas.items():
            replicas.step(
                times, counts, where="post", color=color, ls=POOL_STYLES.get(role, "-"),
                lw=1.0, label=f"{name} {role}",
            )  # fmt: skip
        for role, counts in run.ready.items():
            replicas.step(
                times, counts, where="post", color=color, ls=POOL_STYLES.get(role, "-"),
                lw=0.6, alpha=0.5, label=f"{name} {role} ready",
            )  # fmt: skip
        ttft.plot(times, _clean(run.ttft_s), color=color, lw=0.8, label=name)
        itl.plot(times, [v * 1000 for v in _clean(run.itl_s)], color=color, lw=0.8)
    replicas.set_ylabel("replicas")
    replicas.yaxis.set_major_locator(MaxNLocator(integer=True))
    replicas.legend(fontsize=7, ncol=4, loc="upper left")
    if targets.ttft_s:
        ttft.axhline(targets.ttft_s, color="red", ls=":", lw=1, label="target")
    ttft.set_yscale("log")
    ttft.set_ylabel(f"TTFT p{targets.ttft_percentile} (s)")
    ttft.legend(fontsize=7, ncol=5, loc="upper left")
    if targets.itl_s:
        itl.axhline(targets.itl_s * 1000, color="red", ls=":", lw=1)
    itl.set_ylabel(f"ITL p{targets.itl_percentile} (ms)")
    itl.set_xlabel("minutes" if time_unit == "min" else "seconds")
    fig.tight_layout()
    out = io.BytesIO()
    fig.savefig(out, format="png", dpi=100)
    plt.close(fig)
    return out.getvalue()


def _clean(values: Sequence[float | None]) -> list[float]:
    return [math.nan if v is None else v for v in values]
