"""The profile as a PNG: measured against modelled, TTFT by prompt and ITL by batch.

Returns the image as bytes; writing it is the caller's (no file I/O here). Needs
matplotlib, imported only when a figure is asked for, with the non-interactive Agg
backend (as ``tandem simulate --plot``).
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any


def _ms(value: Any) -> float:
    return float("nan") if value is None else float(value) * 1000.0


def render_png(points: Sequence[Mapping[str, Any]], title: str = "") -> bytes:
    """Two panels: prefill points (TTFT against prompt tokens) and decode points (ITL
    against the batch, one line per prompt length); dots and bars are measured (p50, up
    to p90), lines are the fitted model."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, (ttft, itl) = plt.subplots(1, 2, figsize=(12, 4.8))
    prefill = [p for p in points if p["kind"] == "prefill"]
    if prefill:
        x = [p["prompt_tokens"] for p in prefill]
        p50 = [_ms(p["ttft_p50_s"]) for p in prefill]
        up = [_ms(p["ttft_p90_s"]) - v for p, v in zip(prefill, p50, strict=True)]
        ttft.errorbar(x, p50, yerr=[[0.0] * len(up), up], fmt="o", color="tab:blue",
                      capsize=3, label="measured p50 (bar to p90)")  # fmt: skip
        ttft.plot(x, [_ms(p["modelled_ttft_s"]) for p in prefill], "-", color="tab:orange",
                  label="model")  # fmt: skip
        ttft.set_xscale("log", base=2)
    ttft.set_xlabel("prompt tokens (one request at a time)")
    ttft.set_ylabel("TTFT (ms)")
    ttft.set_title("prefill")
    ttft.legend(fontsize=8)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    decode = [p for p in points if p["kind"] == "decode"]
    for k, prompt in enumerate(sorted({p["prompt_tokens"] for p in decode})):
        group = [p for p in decode if p["prompt_tokens"] == prompt]
        color = colors[k % len(colors)]
        x = [p["concurrency"] for p in group]
        p50 = [_ms(p["itl_p50_s"]) for p in group]
        up = [_ms(p["itl_p90_s"]) - v for p, v in zip(group, p50, strict=True)]
        itl.errorbar(x, p50, yerr=[[0.0] * len(up), up], fmt="o", color=color, capsize=3,
                     label=f"measured, {prompt}-token prompts")  # fmt: skip
        itl.plot(x, [_ms(p["modelled_itl_s"]) for p in group], "-", color=color,
                 label=f"model, {prompt}-token prompts")  # fmt: skip
    if decode:
        itl.set_xscale("log", base=2)
    itl.set_xlabel("concurrent requests (batch)")
    itl.set_ylabel("ITL, mean per request (ms)")
    itl.set_title("decode")
    itl.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()
