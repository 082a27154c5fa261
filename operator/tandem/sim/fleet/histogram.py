"""The bucket bounds of the simulator's histograms: vLLM's and the router's (a test checks
they match theirs). Pure.

Engines and the router observe latencies into
:class:`~tandem.observe.histogram.BucketCounter` as they happen; a scrape turns one into
the :class:`~tandem.observe.histogram.Histogram` a parsed ``/metrics`` page would give,
so the operator's own compute path reads simulated and real pages alike.
"""

from __future__ import annotations

#: vLLM's ``vllm:time_to_first_token_seconds`` buckets.
VLLM_TTFT_BUCKETS_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                       2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)  # fmt: skip
#: vLLM's ``vllm:inter_token_latency_seconds`` buckets.
VLLM_ITL_BUCKETS_S = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
                      5.0, 7.5, 10.0, 20.0, 40.0, 80.0)  # fmt: skip
#: The router's ``tandem_router_time_to_first_token_seconds`` buckets.
ROUTER_TTFT_BUCKETS_S = (
    0.005, 0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.06, 0.08, 0.1, 0.125, 0.15, 0.2, 0.25,
    0.3, 0.4, 0.5, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0,
    15.0, 20.0, 30.0, 60.0, 120.0,
)  # fmt: skip
#: The router's ``tandem_router_inter_token_latency_seconds`` buckets.
ROUTER_ITL_BUCKETS_S = (
    0.0025, 0.005, 0.0075, 0.01, 0.0125, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.05,
    0.06, 0.075, 0.1, 0.125, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip


#: The router's ratio histograms (``tandem_router_ttft_queueing_ratio``, ``..._target_ratio``).
ROUTER_RATIO_BUCKETS = (
    0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 1.75, 2.0,
    2.5, 3.0, 4.0, 5.0, 7.5, 10.0, 20.0, 50.0,
)  # fmt: skip
