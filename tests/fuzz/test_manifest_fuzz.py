"""Fuzz: generated and adversarial manifests through ``tandem validate``, ``tandem
render``, the CRD schema and the operator. 0 crashes, 0 hangs, validate and the CRD
agree; each suite prints its corpus size and time.

A crash is an exception out of the command or the operator (an exit code other than 0
or 1, a traceback, a ReconcileFailed Event); a hang is one input taking longer than
:data:`PER_INPUT_S`.
"""

from __future__ import annotations

import copy
import io
import json
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tandem.api.validate import load_inference_service, validate_manifest
from tandem.cli import main
from tandem.control.restrictions import check_restrictions
from tandem.manifests import Owner, build_children
from tests.api.crd_judge import crd_errors
from tests.factories import make_manifest
from tests.fuzz.corpus import HOSTILE, NON_JSON, adversarial, mutated_manifests, paths, put
from tests.operator.helpers import children, condition, create, isvc
from tests.support import Emulator, eventually
from tests.support.api_client import Api
from tests.support.operator_harness import settle

#: The slowest one input may be through validate and render together (a hang otherwise).
PER_INPUT_S = 2.0
CLI_EXAMPLES = 300
OPERATOR_CORPUS = 40
OWNER = Owner("serving.tandem.dev/v1alpha1", "InferenceService", "x", "uid")

_stats = {"n": 0, "t0": 0.0, "slowest": 0.0}


def _cli(path: Path, *argv: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main([*argv, str(path)])
    return code, err.getvalue()


def _through_the_cli(tmp: Path, text: str | bytes) -> None:
    path = tmp / "fuzz.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    started = time.perf_counter()
    vcode, verr = _cli(path, "validate")
    rcode, rerr = _cli(path, "render")
    took = time.perf_counter() - started
    _stats["slowest"] = max(_stats["slowest"], took)
    assert took < PER_INPUT_S, f"{took:.2f} s for one input"
    assert vcode in (0, 1) and rcode in (0, 1), (vcode, rcode)
    assert "Traceback" not in verr + rerr
    assert vcode == rcode, f"validate exit {vcode} but render exit {rcode}: {verr}{rerr}"


def _as_yaml(manifest: Any) -> str:
    try:
        return yaml.safe_dump(manifest, sort_keys=False)
    except yaml.YAMLError:
        return yaml.dump(manifest)  # odd Python values (bytes, sets) get YAML tags


@st.composite
def _hostile_documents(draw: st.DrawFn) -> str | bytes:
    """A mutated manifest as YAML, sometimes with a non-JSON value, a deep or aliased
    part, or its text damaged."""
    manifest = draw(mutated_manifests())
    twist = draw(st.sampled_from(["none", "non-json", "deep", "alias", "bytes", "cut"]))
    if twist == "non-json":
        where = [p for p in paths(manifest) if p[:1] == ("spec",)]
        manifest = put(manifest, draw(st.sampled_from(where)), draw(st.sampled_from(NON_JSON)))
    text = _as_yaml(manifest)
    if twist == "deep":
        depth = draw(st.integers(50, 700))
        text += "---\n" + "a: " + "[" * depth + "]" * depth + "\n"
    elif twist == "alias":
        text = "x: &a [" + ",".join(["1"] * 50) + "]\n" + "y: &b [" + ",".join(["*a"] * 50) + "]\n"
        text += "z: [" + ",".join(["*b"] * 100) + "]\n---\n" + _as_yaml(manifest)
    elif twist == "bytes":  # not UTF-8: a byte that cannot start or continue a character
        data = text.encode()
        cut = draw(st.integers(0, len(data)))
        return (
            data[:cut]
            + draw(st.sampled_from([b"\xff", b"\xc3(", b"\xe9", b"\x00\xfe"]))
            + data[cut:]
        )
    elif twist == "cut":
        text = text[: draw(st.integers(0, len(text)))]
    return text


@settings(
    max_examples=CLI_EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(text=_hostile_documents())
def test_validate_and_render_never_crash_or_hang(tmp_path_factory: Any, text: str | bytes) -> None:
    if _stats["n"] == 0:
        _stats["t0"] = time.perf_counter()
    _stats["n"] += 1
    _through_the_cli(tmp_path_factory.mktemp("cli"), text)
    if _stats["n"] == CLI_EXAMPLES:
        print(
            f"\nfuzz, validate + render: {CLI_EXAMPLES} generated files in "
            f"{time.perf_counter() - _stats['t0']:.1f} s, slowest {_stats['slowest']:.2f} s"
        )


def test_the_hand_written_corpus_through_validate_render_and_the_crd(tmp_path: Path) -> None:
    cases = adversarial()
    cases += [(f"hostile {v!r:.20}", put(make_manifest(), ("spec", "mode"), v)) for v in HOSTILE]
    started = time.perf_counter()
    for name, manifest in cases:
        try:
            _through_the_cli(tmp_path, _as_yaml(manifest))
            crd = crd_errors(manifest)
            schema = [p for p in validate_manifest(manifest) if p.kind == "schema"]
            assert bool(crd) == bool(schema), (crd, schema)
        except AssertionError as err:
            raise AssertionError(f"{name}: {err}") from None
    print(f"\nfuzz, hand-written through validate, render and the CRD: {len(cases)} "
          f"manifests in {time.perf_counter() - started:.1f} s")  # fmt: skip


def _operator_corpus() -> list[dict[str, Any]]:
    """JSON-able hostile manifests (what an API server without the CRD's schema would
    hold), each under a name of its own."""
    found: list[dict[str, Any]] = []

    @settings(max_examples=OPERATOR_CORPUS, deadline=None, derandomize=True, database=None)
    @given(mutated_manifests())
    def collect(manifest: dict[str, Any]) -> None:
        found.append(manifest)

    collect()
    out = []
    for i, manifest in enumerate([m for _, m in adversarial()] + found):
        try:
            body = json.loads(json.dumps(manifest, allow_nan=False))
        except (TypeError, ValueError):
            continue
        body = copy.deepcopy(body)
        body["metadata"] = {"name": f"f{i}", "namespace": "default"}
        out.append(body)
    return out


async def test_the_operator_survives_the_corpus_and_reports_every_service(
    k: Emulator, api: Api, operators: Any
) -> None:
    """The emulator checks no schema, so every manifest reaches the operator, as it
    would from before a CRD update or with validation off."""
    corpus = _operator_corpus()
    op = await operators(autoscaler=True)
    started = time.perf_counter()
    for manifest in corpus:
        await create(api, manifest)
    names = [m["metadata"]["name"] for m in corpus]

    def reported() -> bool:
        return all(condition(isvc(k, n), "Ready") is not None for n in names)

    await eventually(reported, timeout_s=120, what="a Ready condition on every service")
    await settle(op, k, timeout_s=60)
    assert op.leading() and op.thread.is_alive(), "the operator stopped"
    assert not [e for e in k.list("v1/events") if e["reason"] == "ReconcileFailed"]
    rules = op.operator.config.restrictions  # the default: no Prometheus URL allowed

    def refused(manifest: dict[str, Any]) -> str | None:
        if validate_manifest(manifest):
            return "InvalidSpec"
        return (
            "PolicyViolation"
            if check_restrictions(load_inference_service(manifest), rules)
            else None
        )

    valid = [m for m in corpus if refused(m) is None]
    for manifest in corpus:
        name, reason = manifest["metadata"]["name"], refused(manifest)
        if reason is None:
            isvc_ = load_inference_service(manifest)
            want = {(c["kind"], c["metadata"]["name"]) for c in build_children(isvc_, OWNER)}
            assert set(children(k, service=name)) == want, name
        else:
            assert condition(isvc(k, name), "Ready")["reason"] == reason, name  # type: ignore[index]
            assert children(k, service=name) == {}, name
    print(f"\nfuzz, operator: {len(corpus)} services ({len(valid)} valid) in "
          f"{time.perf_counter() - started:.1f} s")  # fmt: skip
