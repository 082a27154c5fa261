"""Manifests for the fuzz suites: hand-written adversarial ones and a hypothesis strategy
that mutates valid ones. Pure (reads the examples once).

Every mutation puts one hostile value at a path a valid manifest has (or beside it): the
types JSON and YAML confuse (``"8"``, ``15`` for ``15s``, ``1.0``, ``true``), bounds and
their neighbours, patterns' edge characters (a final newline, Unicode digits, ``..``),
deep and wide free-form values, non-JSON values (dates, bytes, sets, infinities).
"""

from __future__ import annotations

import copy
import datetime
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st

from tests.factories import make_manifest, with_path

REPO = Path(__file__).resolve().parents[2]


def _deep(levels: int, leaf: Any = 1) -> Any:
    value: Any = leaf
    for i in range(levels):
        value = {"a": value} if i % 2 else [value]
    return value


def base_manifests() -> list[dict[str, Any]]:
    """Valid manifests: the examples and factory variants."""
    out = [
        doc
        for path in sorted((REPO / "examples").glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc
    ]
    out += [
        make_manifest(),
        make_manifest(mode="aggregated"),
        make_manifest(backend="sim"),
        make_manifest(policy="static"),
        make_manifest(
            qos={"priorityClasses": [{"name": "gold", "priority": 1}], "defaultClass": "gold"},
            engine={"backend": "vllm", "schedulingPolicy": "priority"},
        ),
    ]
    return out


#: Values that each break something somewhere (or nothing), tried at every path.
HOSTILE: list[Any] = [
    None,
    True,
    False,
    0,
    -1,
    1,
    8,
    1.0,
    0.5,
    -0.0,
    2**31,
    2**63,
    10**30,
    "",
    "8",
    "0",
    "1.5",
    "15",
    "15s",
    "0s",
    "-5s",
    "1h",
    "9999999999999h",
    "\u0665s",
    "chat\n",
    " 5s",
    "x" * 300,
    "memory",
    "cpu",
    "nvidia.com/gpu",
    "kubernetes.io/gpu",
    "1chat",
    "pvc://c/../../etc",
    "pvc://c/./x",
    "hf://o/n@../x",
    "s3://bucket/a/../b",
    "http://169.254.169.254/latest",
    "a\u2003b",
    "0.0",
    ".5",
    "1e3",
    "500m",
    "64Gi",
    [],
    [1, "2"],
    {},
    {"unknown": 1},
    {"p90": "1s", "p50": "1s"},
    {"min": 3, "max": 1},
    _deep(20),
    {f"k{i}": i for i in range(65)},
]
#: Values that are not JSON: only YAML or Python can hold them.
NON_JSON: list[Any] = [
    float("inf"),
    float("nan"),
    datetime.date(2024, 1, 2),
    b"\x00\x01",
    {1: "int key"},
]


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path into ``value`` (dict keys and list indices)."""
    yield prefix
    if isinstance(value, dict):
        for key, child in value.items():
            yield from paths(child, (*prefix, key))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            yield from paths(child, (*prefix, i))


def put(manifest: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    """A copy of ``manifest`` with ``value`` at ``path`` (the root is never replaced)."""
    out = copy.deepcopy(manifest)
    node: Any = out
    for part in path[:-1]:
        node = node[part]
    if path:
        node[path[-1]] = value
    return out


def adversarial() -> list[tuple[str, dict[str, Any]]]:
    """Hand-written hostile manifests, each named; the issue's cases among them."""
    base = make_manifest()
    cases: list[tuple[str, dict[str, Any]]] = [
        ("valid", base),
        ("gpu resource memory", with_path(base, "spec.decode.gpu.resourceName", "memory")),
        ("gpu resource cpu", with_path(base, "spec.prefill.gpu.resourceName", "cpu")),
        ("name with digit first", with_path(base, "metadata.name", "9lives")),
        (
            "idle stream overflow",
            with_path(base, "spec.router.timeouts", {"idleStream": "9" * 20 + "h"}),
        ),
        ("memory zero", with_path(base, "spec.decode.memory", "0")),
        ("memory zero int", with_path(base, "spec.decode.memory", 0)),
        ("pvc traversal", with_path(base, "spec.model.uri", "pvc://claim/../../etc")),
        ("interval number", with_path(base, "spec.autoscaling.interval", 15)),
        ("integer string", with_path(base, "spec.decode.maxNumSeqs", "8")),
        ("integer float", with_path(base, "spec.decode.maxNumSeqs", 8.0)),
        ("integer fraction", with_path(base, "spec.decode.maxNumSeqs", 8.5)),
        ("quantity whole float", with_path(base, "spec.decode.cpu", 4.0)),
        ("bool string", with_path(base, "spec.engine.prefixCaching", "true")),
        ("quantity float", with_path(base, "spec.decode.cpu", 0.5)),
        ("quantity bool", with_path(base, "spec.decode.cpu", True)),
        ("name newline", with_path(base, "metadata.name", "chat\n")),
        ("header newline", with_path(base, "spec.router.priorityHeader", "x-a\n")),
        ("duration spaces", with_path(base, "spec.autoscaling.interval", " 15s")),
        ("dashed key", with_path(base, "spec.decode.max-num-seqs", 8)),
        ("null mode", with_path(base, "spec.mode", None)),
        ("null cpu", with_path(base, "spec.decode.cpu", None)),
        (
            "deep extra config",
            with_path(base, "spec.engine.kvTransfer.extraConfig", {"x": _deep(30)}),
        ),
        (
            "wide affinity",
            with_path(base, "spec.decode.affinity", {f"k{i}": {} for i in range(65)}),
        ),
        (
            "huge args",
            with_path(base, "spec.engine.extraArgs", ["--enforce-eager=" + "y" * 1000] * 40),
        ),
        ("long arg", with_path(base, "spec.engine.extraArgs", ["--enforce-eager=" + "y" * 1100])),
        ("owned flag", with_path(base, "spec.engine.extraArgs", ["--max-num-seqs=8"])),
        ("unknown flag", with_path(base, "spec.engine.extraArgs", ["--no-such-flag"])),
        ("int64 replicas", with_path(base, "spec.decode.replicas", {"min": 1, "max": 2**63})),
        (
            "class duplicate",
            with_path(base, "spec.qos.priorityClasses", [{"name": "a"}, {"name": "a"}]),
        ),
        ("default class missing", with_path(base, "spec.qos.defaultClass", "gold")),
        ("two percentiles", with_path(base, "spec.qos.ttft", {"p90": "1s", "p99": "2s"})),
        ("no percentile", with_path(base, "spec.qos.ttft", {})),
        ("short prompt overflow", with_path(base, "spec.router.shortPromptTokens", 10**20)),
        (
            "toleration seconds negative",
            with_path(base, "spec.decode.tolerations", [{"tolerationSeconds": -1}]),
        ),
        ("image with space", with_path(base, "spec.engine.image", "evil image")),
        ("image unicode space", with_path(base, "spec.engine.image", "evil\u2003image")),
        (
            "metrics url",
            with_path(
                base,
                "spec.autoscaling.metrics",
                {"source": "prometheus", "url": "http://169.254.169.254/"},
            ),
        ),
        ("name too long", with_path(base, "metadata.name", "a" * 43)),
        ("sim with vllm zero gpu", with_path(base, "spec.decode.gpu", {"count": 0})),
    ]
    return cases


def mutated_manifests() -> st.SearchStrategy[dict[str, Any]]:
    """A valid manifest with one to three hostile values put in (or keys added)."""
    bases = base_manifests()

    @st.composite
    def build(draw: st.DrawFn) -> dict[str, Any]:
        manifest = copy.deepcopy(draw(st.sampled_from(bases)))
        for _ in range(draw(st.integers(1, 3))):
            # metadata other than the name is the API server's own (it requires an object)
            where = [p for p in paths(manifest) if p[:1] == ("spec",) or p == ("metadata", "name")]
            path = draw(st.sampled_from(where))
            if draw(st.booleans()) and isinstance(_at(manifest, path), dict):
                key = draw(st.sampled_from(["x", "max-num-seqs", "Min", "replicas", "p90", ""]))
                path = (*path, key)
            manifest = put(manifest, path, copy.deepcopy(draw(st.sampled_from(HOSTILE))))
        return manifest

    return build()


def _at(value: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        value = value[part]
    return value
