"""The Dockerfiles, checked statically (no Docker engine needed): pins, users, commands.

What a build would prove is checked where it can be without one: the vLLM base is the
release the builders pin, every stage's command is a real ``tandem`` command, the user
is the UID the chart and the builders run as, and the build context holds what the
Dockerfiles copy.
"""

from __future__ import annotations

import fnmatch
import json
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tandem.manifests.engine import SIM_UID
from tandem.manifests.images import TANDEM_IMAGE, VLLM_IMAGE
from tandem.manifests.router import RUN_AS_UID
from tests.chart.conftest import REPO, Rendered

OPERATOR = REPO / "operator" / "Dockerfile"
ENGINE = REPO / "engine_image" / "Dockerfile"


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def last(self, op: str) -> str | None:
        found = [arg for o, arg in self.instructions if o == op]
        return found[-1] if found else None

    def all(self, op: str) -> list[str]:
        return [arg for o, arg in self.instructions if o == op]


def parse_dockerfile(text: str) -> list[Stage]:
    """Stages and their instructions (continuations joined, comments dropped)."""
    logical: list[str] = []
    buffer = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            buffer += line[:-1] + " "
            continue
        logical.append(buffer + line)
        buffer = ""
    stages: list[Stage] = []
    for line in logical:
        op, _, arg = line.partition(" ")
        op = op.upper()
        if op == "FROM":
            match = re.fullmatch(r"(\S+)(?:\s+AS\s+(\S+))?", arg.strip(), flags=re.IGNORECASE)
            assert match, line
            stages.append(Stage(match.group(1), match.group(2)))
        else:
            assert stages, f"{op} before FROM"
            stages[-1].instructions.append((op, arg.strip()))
    return stages


def stage(stages: list[Stage], name: str) -> Stage:
    return next(s for s in stages if s.name == name)


def exec_form(arg: str | None) -> list[str]:
    assert arg is not None
    parsed = json.loads(arg)
    assert isinstance(parsed, list), f"use the exec form: {arg}"
    return [str(a) for a in parsed]


def test_vllm_target_is_the_release_the_builders_pin() -> None:
    vllm = stage(parse_dockerfile(ENGINE.read_text()), "vllm")
    assert vllm.base == VLLM_IMAGE == "vllm/vllm-openai:v0.34.0"


def test_vllm_target_keeps_vllm_serve_as_its_command() -> None:
    """The builders run `vllm serve <args>`: the image must still be vLLM's."""
    vllm = stage(parse_dockerfile(ENGINE.read_text()), "vllm")
    assert exec_form(vllm.last("ENTRYPOINT")) == ["vllm", "serve"]
    run = " ".join(vllm.all("RUN"))
    assert "--constraint" in run, "installing Tandem must not move vLLM's pinned packages"
    assert "tandem --version" in run


@pytest.mark.parametrize(
    ("dockerfile", "name"), [(OPERATOR, None), (ENGINE, "sim")], ids=["operator", "sim"]
)
def test_tandem_images_run_as_the_uid_the_manifests_use(dockerfile: Path, name: str | None) -> None:
    stages = parse_dockerfile(dockerfile.read_text())
    final = stages[-1] if name is None else stage(stages, name)
    assert final.last("USER") == f"{SIM_UID}:{SIM_UID}"
    assert SIM_UID == RUN_AS_UID == 10001
    run = " ".join(final.all("RUN"))
    assert f"useradd --uid {SIM_UID}" in run


def test_chart_runs_the_operator_as_the_image_user(renders: dict[str, Rendered]) -> None:
    pod = renders["default"].deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsUser"] == SIM_UID


def test_sim_target_runs_a_real_tandem_command() -> None:
    from tandem.cli import build_parser

    sim = stage(parse_dockerfile(ENGINE.read_text()), "sim")
    command = exec_form(sim.last("ENTRYPOINT")) + exec_form(sim.last("CMD"))
    assert command[:3] == ["tandem", "engine", "sim"]
    args = build_parser().parse_args(command[1:])
    assert (args.command, args.engine_command) == ("engine", "sim")
    assert args.host == "0.0.0.0" and args.port == 8000


def test_operator_image_runs_every_tandem_command_the_manifests_use(
    renders: dict[str, Rendered],
) -> None:
    """Operator, router and sim engine all run `tandem ...` from the same image."""
    final = parse_dockerfile(OPERATOR.read_text())[-1]
    assert exec_form(final.last("ENTRYPOINT")) == ["tandem"]
    assert renders["default"].container["command"][0] == "tandem"
    assert TANDEM_IMAGE.startswith("ghcr.io/tandem-serving/tandem:")


@pytest.mark.parametrize("dockerfile", [OPERATOR, ENGINE], ids=["operator", "engine"])
def test_python_base_is_pinned_and_supported(dockerfile: Path) -> None:
    text = dockerfile.read_text()
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    minimum = tuple(int(x) for x in re.findall(r"\d+", project["requires-python"])[:2])
    for st in parse_dockerfile(text):
        assert "$" not in st.base, f"base image must be literal for scanners: {st.base}"
        assert ":" in st.base and not st.base.endswith(":latest"), st.base
        match = re.fullmatch(r"python:(\d+)\.(\d+)-slim-\w+", st.base)
        if match:
            assert (int(match.group(1)), int(match.group(2))) >= minimum


@pytest.mark.parametrize("dockerfile", [OPERATOR, ENGINE], ids=["operator", "engine"])
def test_build_context_holds_what_is_copied(dockerfile: Path) -> None:
    """The context is the repository root, filtered by .dockerignore."""
    text = dockerfile.read_text()
    ignore = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]

    def included(path: str) -> bool:
        keep = True
        for pattern in ignore:
            negate = pattern.startswith("!")
            pat = pattern.lstrip("!").rstrip("/")
            if fnmatch.fnmatch(path, pat) or path.startswith(pat + "/"):
                keep = negate
        return keep

    copies = [arg for st in parse_dockerfile(text) for op, arg in st.instructions if op == "COPY"]
    sources = [s for arg in copies if "--from" not in arg for s in arg.split()[:-1]]
    assert sources
    for source in sources:
        source = source.rstrip("/")
        assert (REPO / source).exists(), source
        assert included(source), f"{source} is excluded by .dockerignore"
    assert included("operator/tandem/cli.py")
    assert not included(".venv") and not included("tests/chart/conftest.py")


def test_images_install_the_package_from_the_repository() -> None:
    for dockerfile in (OPERATOR, ENGINE):
        run = " ".join(a for st in parse_dockerfile(dockerfile.read_text()) for a in st.all("RUN"))
        assert "pip wheel --wheel-dir /wheels ." in run
