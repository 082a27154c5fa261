"""The router's lock-free token-gap histogram against the client library's ``Histogram``."""

from __future__ import annotations

import random

from prometheus_client import CollectorRegistry, Histogram, generate_latest

from tandem.router.metrics import ITL_BUCKETS_S, TokenGapHistogram

NAME = "tandem_router_inter_token_latency_seconds"


def test_token_gaps_are_exposed_as_the_library_histogram_exposes_them() -> None:
    """Same observations, same text (less the library's ``_created`` series): values on a
    bound, between bounds, past the last one, and two label values."""
    library, ours = CollectorRegistry(), CollectorRegistry()
    reference = Histogram(NAME, "Gaps.", ["class"], buckets=ITL_BUCKETS_S, registry=library)
    gaps = TokenGapHistogram(NAME, "Gaps.", "class", ITL_BUCKETS_S)
    ours.register(gaps)
    rng = random.Random(7)
    values = [rng.expovariate(20.0) for _ in range(3000)] + [*ITL_BUCKETS_S, 0.0, 42.0]
    for klass in ("interactive", "batch"):
        for value in values:
            reference.labels(klass).observe(value)
            gaps.labels(klass).observe(value)
    expected = [
        line for line in generate_latest(library).decode().splitlines() if "_created" not in line
    ]
    assert generate_latest(ours).decode().splitlines() == expected


def test_a_histogram_without_observations_exposes_its_family_only() -> None:
    registry = CollectorRegistry()
    registry.register(TokenGapHistogram(NAME, "Gaps.", "class", ITL_BUCKETS_S))
    text = generate_latest(registry).decode()
    assert f"# TYPE {NAME} histogram" in text
    assert f"{NAME}_count" not in text
