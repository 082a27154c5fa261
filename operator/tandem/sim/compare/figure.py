"""The comparison as a PNG: load, replicas per pool, TTFT and ITL p90 against targets.

Returns the image as bytes; writing it is the caller's (no file I/O here). Needs
matplotlib, imported only when a figure is asked for, with the non-interactive Agg
backend.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping

from tandem.policy.config import LatencyTargets
from tandem.sim.compare.results import RunResult

_STYLES = {"prefill": "-", "decode": "--", "pool": "-."}


def render_png(results: Mapping[str, RunResult], targets: LatencyTargets, title: str = "") -> bytes:
    """Four panels sharing the time axis (minutes), one colour per policy."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, axes = plt.subplots(4, 1, figsize=(11, 12), sharex=True)
    load, replicas, ttft, itl = axes
    first = next(iter(results.values()), None)
    if first is not None:
        minutes = [t / 60.0 for t in first.timeline.t_s]
        load.plot(minutes, first.timeline.arrivals_per_s, color="black", lw=0.8)
        load.set_ylabel("requests/s")
        tokens = load.twinx()
        kilo = [v / 1000.0 for v in first.timeline.prompt_tokens_per_s]
        tokens.plot(minutes, kilo, color="tab:gray", lw=0.6, alpha=0.7)
        tokens.set_ylabel("prompt ktok/s", color="tab:gray")
    load.set_title(title or "load")
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for k, (name, r) in enumerate(results.items()):
        color = colors[k % len(colors)]
        tl = r.timeline
        minutes = [t / 60.0 for t in tl.t_s]
        for role, counts in tl.replicas.items():
            replicas.step(
                minutes, counts, where="post", color=color, ls=_STYLES.get(role, "-"),
                lw=1.0, label=f"{name} {role}",
            )  # fmt: skip
        ttft.plot(minutes, _clean(tl.ttft_p90_s), color=color, lw=0.8, label=name)
        itl.plot(minutes, [v * 1000 for v in _clean(tl.itl_p90_s)], color=color, lw=0.8)
    replicas.set_ylabel("replicas")
    replicas.legend(fontsize=7, ncol=4, loc="upper left")
    if targets.ttft_s:
        ttft.axhline(targets.ttft_s, color="red", ls=":", lw=1, label="target")
    ttft.set_yscale("log")
    ttft.set_ylabel(f"TTFT p{targets.ttft_percentile} (s)")
    ttft.legend(fontsize=7, ncol=5, loc="upper left")
    if targets.itl_s:
        itl.axhline(targets.itl_s * 1000, color="red", ls=":", lw=1)
    itl.set_ylabel(f"ITL p{targets.itl_percentile} (ms)")
    itl.set_xlabel("minutes")
    fig.tight_layout()
    out = io.BytesIO()
    fig.savefig(out, format="png", dpi=100)
    plt.close(fig)
    return out.getvalue()


def _clean(values: tuple[float, ...]) -> list[float]:
    return [math.nan if v is None else v for v in values]
