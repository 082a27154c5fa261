"""The pieces around the engines: the tiny model writer and the CPU build's flag list.

Both run with the vLLM venv's Python (it has torch, transformers and vLLM itself).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from tandem.api.validate import vllm_serve_flags
from tests.vllm.engines import VLLM_VERSION, VllmInstall, write_tiny_model

HERE = Path(__file__).resolve().parent
FLAGS_NAME = f"{VLLM_VERSION}-cpu"

pytestmark = pytest.mark.timeout(300)


def digest(folder: Path) -> dict[str, str]:
    return {
        name: hashlib.sha256((folder / name).read_bytes()).hexdigest()
        for name in ("model.safetensors", "tokenizer.json", "config.json")
    }


def test_the_tiny_model_is_written_once_and_the_same_everywhere(
    vllm_install: VllmInstall, tiny_model: Path, tmp_path: Path
) -> None:
    again = write_tiny_model(vllm_install, tmp_path / "tiny")
    assert digest(again) == digest(tiny_model), "same seed, same libraries, same bytes"
    stamp = (again / "tandem-tinymodel.json").stat().st_mtime_ns
    assert write_tiny_model(vllm_install, again) == again
    assert (again / "tandem-tinymodel.json").stat().st_mtime_ns == stamp, "rewritten"
    config = json.loads((again / "config.json").read_text())
    assert config["hidden_size"] // config["num_attention_heads"] == 64
    assert config["max_position_embeddings"] >= 2048


def test_the_cpu_flag_list_is_what_the_installed_parser_accepts(
    vllm_install: VllmInstall,
) -> None:
    run = subprocess.run(
        [str(vllm_install.python), str(HERE / "dump_serve_flags.py")],
        env={**os.environ, "VLLM_TARGET_DEVICE": "cpu"},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    installed = set(json.loads(run.stdout))
    committed = vllm_serve_flags(FLAGS_NAME)
    assert installed == committed, (
        f"operator/tandem/api/data/serve_flags-{FLAGS_NAME}.json is stale: "
        f"new {sorted(installed - committed)}, gone {sorted(committed - installed)}"
    )
