"""The ``sitecustomize`` local vLLM engines load: NIXL's agent gets the progress delay of
``TANDEM_NIXL_PROGRESS_DELAY_US``, in a Python started as ``tandem up`` starts vLLM
(a stand-in ``nixl_*._bindings`` module records the config it is given)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tandem.local.engines import NIXL_DELAY_ENV, build_vllm_env

BINDINGS = """
class nixlAgentConfig:
    pthrDelay = 0

def nixlAgent(name, config, *rest):
    return (name, config.pthrDelay, rest)
"""

PROGRAM = """
from nixl_fake._bindings import nixlAgent, nixlAgentConfig
print(nixlAgent("agent", nixlAgentConfig(), "more"))
"""


def _run(tmp_path: Path, env: dict[str, str]) -> str:
    package = tmp_path / "nixl_fake"
    package.mkdir(exist_ok=True)
    (package / "__init__.py").write_text("")
    (package / "_bindings.py").write_text(BINDINGS)
    theirs = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env = {**theirs, **env}
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], str(tmp_path)])
    out = subprocess.run(
        [sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_the_engines_agent_gets_the_delay(tmp_path: Path) -> None:
    env = build_vllm_env(5601, {})
    assert _run(tmp_path, env) == "('agent', 1000, ('more',))"


def test_the_users_delay_wins_and_without_one_nothing_changes(tmp_path: Path) -> None:
    env = build_vllm_env(5601, {NIXL_DELAY_ENV: "250"})
    assert _run(tmp_path, env) == "('agent', 250, ('more',))"
    del env[NIXL_DELAY_ENV]
    assert _run(tmp_path, env) == "('agent', 0, ('more',))"
