"""``tandem validate`` and the CRD agree, both ways, on one corpus.

The schema part: every manifest the CRD's OpenAPI schema rejects, validate rejects with a
schema problem; every manifest the schema accepts gets no schema problem from validate.
What validate adds beyond the schema is named: cross-field rules (CEL on the CRD, which
the real API server judges in ``e2e/test_policy.py``, except
:data:`~tandem.api.rules.OPERATOR_ONLY_RULES`) and the limits of :mod:`tandem.api.limits`
that no OpenAPI schema can express.
"""

from __future__ import annotations

import time
from typing import Any

from hypothesis import HealthCheck, given, settings

from tandem.api.validate import validate_manifest
from tests.api.crd_judge import crd_errors
from tests.fuzz.corpus import adversarial, base_manifests, mutated_manifests

GENERATED = 600


def _agree(manifest: dict[str, Any]) -> None:
    crd = crd_errors(manifest)
    problems = validate_manifest(manifest)
    schema = [str(p) for p in problems if p.kind == "schema"]
    if crd:
        assert schema, f"the CRD rejects but validate has no schema problem: {crd}, {problems}"
    else:
        assert not schema, f"the CRD accepts but validate says {schema}"


def test_validate_and_the_crd_agree_on_the_hand_written_corpus() -> None:
    cases = [("base", m) for m in base_manifests()] + adversarial()
    started = time.perf_counter()
    for name, manifest in cases:
        try:
            _agree(manifest)
        except AssertionError as err:
            raise AssertionError(f"{name}: {err}") from None
    print(f"\nagreement, hand-written: {len(cases)} manifests in "
          f"{time.perf_counter() - started:.2f} s")  # fmt: skip


_seen = {"n": 0, "t0": 0.0}


@settings(
    max_examples=GENERATED,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(mutated_manifests())
def test_validate_and_the_crd_agree_on_generated_manifests(manifest: dict[str, Any]) -> None:
    if _seen["n"] == 0:
        _seen["t0"] = time.perf_counter()
    _seen["n"] += 1
    _agree(manifest)
    if _seen["n"] == GENERATED:
        elapsed = time.perf_counter() - _seen["t0"]
        print(f"\nagreement, generated: {GENERATED} manifests in {elapsed:.2f} s")
