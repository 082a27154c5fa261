"""``tandem engine sim``: the flag contract, option building, and a real process."""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tandem.commands import engine as engine_cmd
from tandem.engine.server import build_server_config

#: registers only this command, so the test does not depend on the other subcommands
RUNNER = (
    "import argparse, sys\n"
    "from tandem.commands import engine\n"
    "p = argparse.ArgumentParser(prog='tandem')\n"
    "engine.register(p.add_subparsers())\n"
    "a = p.parse_args(sys.argv[1:])\n"
    "sys.exit(a.func(a))\n"
)


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="tandem")
    engine_cmd.register(parser.add_subparsers())
    return parser.parse_args(["engine", "sim", *argv])


def test_contract_flags_build_a_config() -> None:
    args = parse(
        "--role",
        "decode",
        "--port",
        "9100",
        "--model",
        "llama-3.1-70b",
        "--served-model-name",
        "a",
        "b",
        "--gpu",
        "h200",
        "-tp",
        "4",
        "--max-model-len",
        "8k",
        "--scheduling-policy",
        "priority",
        "--kv-transfer-config",
        json.dumps(
            {
                "kv_connector": "NixlConnector",
                "kv_role": "kv_consumer",
                "kv_load_failure_policy": "recompute",
                "kv_connector_extra_config": {"kv_lease_duration": 12},
            }
        ),
    )
    cfg = build_server_config(engine_cmd.build_options(args))
    assert cfg.role == "decode" and args.port == 9100
    assert cfg.served_model_names == ("a", "b")
    assert cfg.cost.gpu.name == "h200" and cfg.cost.tensor_parallel == 4
    assert cfg.cost.model.num_layers == 80
    assert cfg.engine.max_model_len == 8192 and cfg.engine.scheduling_policy == "priority"
    assert cfg.engine.kv_load_failure_policy == "recompute" and cfg.engine.kv_lease_s == 12.0
    assert (cfg.engine.max_num_seqs, cfg.engine.max_num_batched_tokens) == (1024, 8192)


def test_defaults_and_overrides() -> None:
    cfg = build_server_config(engine_cmd.build_options(parse()))
    assert cfg.role == "aggregated" and cfg.cost.gpu.name == "h100"
    assert cfg.served_model_names == ("meta-llama/Llama-3.1-8B-Instruct",)
    a100 = build_server_config(engine_cmd.build_options(parse("--gpu", "a100")))
    assert (a100.engine.max_num_seqs, a100.engine.max_num_batched_tokens) == (256, 2048)
    tuned = build_server_config(
        engine_cmd.build_options(
            parse("--compute-efficiency", "0.7", "--overhead-per-layer-us", "10")
        )
    )
    assert tuned.cost.calib.compute_efficiency == 0.7
    assert tuned.cost.calib.overhead_s_per_layer == pytest.approx(10e-6)


def test_custom_model_config_file(tmp_path: Path) -> None:
    spec: dict[str, Any] = {
        "name": "acme/tiny",
        "num_params": 1.0e9,
        "num_layers": 16,
        "hidden_size": 2048,
        "num_heads": 16,
        "num_kv_heads": 8,
        "head_dim": 128,
        "vocab_size": 32000,
        "max_model_len": 8192,
    }
    path = tmp_path / "model.json"
    path.write_text(json.dumps(spec))
    cfg = build_server_config(engine_cmd.build_options(parse("--model-config", str(path))))
    assert cfg.cost.model.name == "acme/tiny" and cfg.served_model_names == ("acme/tiny",)
    path.write_text(json.dumps({**spec, "layers": 3}))
    with pytest.raises(ValueError, match="unknown field"):
        engine_cmd.build_options(parse("--model-config", str(path)))


def test_a_model_that_does_not_fit_is_refused() -> None:
    with pytest.raises(ValueError, match="does not fit"):
        build_server_config(engine_cmd.build_options(parse("--model", "llama-3.1-70b")))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            status: int = resp.status
            return status
    except urllib.error.HTTPError as err:
        return err.code


def test_process_serves_then_crashes_when_told(tmp_path: Path) -> None:
    port = _free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            RUNNER,
            "engine",
            "sim",
            "--role",
            "aggregated",
            "--port",
            str(port),
            "--host",
            "127.0.0.1",
            "--startup-delay",
            "1.0",
            "--fault-crash-after",
            "1",
            "--served-model-name",
            "m",
            "--gpu",
            "h100",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        statuses = []
        for _ in range(200):
            try:
                statuses.append(_get(base + "/health"))
            except OSError:
                time.sleep(0.05)
                continue
            if statuses[-1] == 200:
                break
            time.sleep(0.05)
        assert statuses and statuses[-1] == 200 and 503 in statuses
        body = json.dumps({"model": "m", "prompt": "hi", "max_tokens": 2}).encode()
        req = urllib.request.Request(
            base + "/v1/completions", body, {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=5) as resp:
            assert json.load(resp)["usage"]["completion_tokens"] == 2
        with pytest.raises(OSError):  # the engine process dies on the second request
            urllib.request.urlopen(req, timeout=5)
        assert proc.wait(timeout=5) == 1
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
