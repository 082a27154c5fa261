"""Every example's engines as Tandem renders them, made runnable here: which engines to
start, with which arguments. Reads the example files; starts nothing.

For each ``examples/*.yaml`` and each of its pools, the builders' arguments
(:func:`~tandem.manifests.vllm_args.build_vllm_args`, or
:func:`~tandem.manifests.vllm_args.build_sim_args` for ``engine.backend: sim``) with the
model swapped for the tiny one and the CPU adaptation
(:func:`~tandem.manifests.vllm_cpu.adapt_vllm_args_for_cpu`); where each engine listens is
left out (set at start). Examples whose engines would run the very same arguments are
one run: a real engine costs about a minute to start on two cores.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tandem.api import InferenceService
from tandem.api.documents import read_documents
from tandem.api.validate import load_inference_service
from tandem.api.vocab import PoolRole
from tandem.engine.tinymodel import DEFAULT_SPEC
from tandem.manifests.vllm_args import build_sim_args, build_vllm_args
from tandem.manifests.vllm_cpu import adapt_vllm_args_for_cpu, drop_flags

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
MODEL = "{tiny-model}"
"""Stands for the tiny model's folder until the test knows it (a fixture writes it)."""
TINY_MAX_MODEL_LEN = DEFAULT_SPEC.max_position_embeddings
LISTEN_FLAGS = {"--host": 1, "--port": 1}

EngineKind = Literal["vllm", "sim"]


@dataclass(frozen=True)
class RoleArgs:
    """One engine of an example: its pool, what runs it, and its arguments."""

    role: PoolRole
    kind: EngineKind
    args: tuple[str, ...]
    """After ``vllm serve`` or ``tandem engine sim``, without ``--host``/``--port``."""

    def with_model(self, model_dir: Path) -> list[str]:
        return [str(model_dir) if arg == MODEL else arg for arg in self.args]

    @property
    def served_name(self) -> str:
        return self.args[self.args.index("--served-model-name") + 1]


@dataclass(frozen=True)
class ExampleRun:
    """The engines one or more examples render identically."""

    examples: tuple[str, ...]
    engines: tuple[RoleArgs, ...]

    @property
    def id(self) -> str:
        return "+".join(self.examples)

    @property
    def disaggregated(self) -> bool:
        return {e.role for e in self.engines} == {"prefill", "decode"}


def build_role_args(isvc: InferenceService, role: PoolRole) -> RoleArgs:
    """The runnable arguments of ``role`` (pure)."""
    if isvc.spec.engine.backend == "sim":
        return RoleArgs(role, "sim", tuple(drop_flags(build_sim_args(isvc, role), LISTEN_FLAGS)))
    rendered = drop_flags(build_vllm_args(isvc, role), LISTEN_FLAGS)
    adapted = adapt_vllm_args_for_cpu(rendered, model=MODEL, max_model_len=TINY_MAX_MODEL_LEN)
    return RoleArgs(role, "vllm", tuple(adapted))


def load_examples(folder: Path = EXAMPLES) -> dict[str, InferenceService]:
    """Every InferenceService of ``folder/*.yaml`` by file stem (``#N`` for later documents)."""
    out: dict[str, InferenceService] = {}
    for path in sorted(folder.glob("*.yaml")):
        for index, (_, doc) in enumerate(read_documents(path)):
            out[path.stem if index == 0 else f"{path.stem}#{index}"] = load_inference_service(doc)
    return out


def plan_example_runs(folder: Path = EXAMPLES) -> list[ExampleRun]:
    """One run per distinct set of engines, in the examples' order."""
    runs: dict[tuple[RoleArgs, ...], list[str]] = {}
    for name, isvc in load_examples(folder).items():
        engines = tuple(build_role_args(isvc, role) for role in isvc.spec.pools())
        runs.setdefault(engines, []).append(name)
    return [ExampleRun(tuple(names), engines) for engines, names in runs.items()]
