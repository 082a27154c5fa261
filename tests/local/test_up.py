"""``tandem up``: a local fleet that grows under load and stops cleanly."""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import openai
import pytest

from tandem.api import InferenceService
from tandem.api.validate import load_inference_service
from tandem.local.engines import EngineLaunch
from tandem.local.fleet import LocalFleet
from tandem.local.load import LoadStats
from tandem.local.processes import free_port
from tandem.local.run import UpOptions, run_up
from tandem.local.summary import RequestRecord
from tandem.local.view import LiveView
from tandem.observe.types import LatencyObservation, Observation, PoolObservation
from tandem.policy.types import Decision, PoolDecision
from tests.factories import make_manifest


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _service() -> InferenceService:
    manifest = make_manifest(
        "local",
        backend="sim",
        prefill_max=3,
        decode_max=3,
        autoscaling={
            "policy": "slo",
            "interval": "2s",
            "scaleDownStabilization": "10s",
            "coldStart": "1s",
        },
    )
    manifest["spec"]["model"]["maxModelLen"] = 8192
    manifest["spec"]["decode"]["maxNumSeqs"] = 8  # a small batch: concurrency needs replicas
    return load_inference_service(manifest)


async def test_pools_grow_under_load_and_everything_stops(tmp_path: Path) -> None:
    isvc = _service()
    port = free_port()
    out = tmp_path / "timeline.json"
    opts = UpOptions(port=port, duration_s=20.0, json_out=out, view=False)
    up = asyncio.create_task(run_up(isvc, opts, out=io.StringIO()))
    client = openai.AsyncOpenAI(
        base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0, timeout=30
    )
    for _ in range(100):  # wait for the router and a first ready engine per pool
        await asyncio.sleep(0.2)
        try:
            await client.completions.create(model="llama", prompt="hi", max_tokens=2)
            break
        except openai.APIError:
            continue

    async def user(i: int) -> str:
        stream = await client.chat.completions.create(
            model="llama",
            messages=[{"role": "user", "content": "tell me a story " * 50}],
            max_tokens=120,
            stream=True,
        )
        text = ""
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                text += chunk.choices[0].delta.content
        return text

    results = await asyncio.gather(*(user(i) for i in range(48)), return_exceptions=True)
    answered = [r for r in results if isinstance(r, str) and r]
    assert len(answered) >= 40, [r for r in results if not isinstance(r, str)][:3]
    timeline = await asyncio.wait_for(up, timeout=90)
    data = json.loads(out.read_text())
    assert set(data) == {"pools", "decisions"}
    assert max(s["desired"] for s in data["pools"]["decode"]) >= 2
    assert any(d["pool"] == "decode" and d["to"] > d["from"] for d in data["decisions"])
    assert all({"t", "pool", "from", "to", "reason"} == set(d) for d in data["decisions"])
    assert timeline.pids and not [pid for pid in timeline.pids if _alive(pid)]


def test_the_readme_run_ends_with_a_summary_and_writes_the_plot(
    tmp_path: Path, repo_root: Path
) -> None:
    """The README's first command, shorter: the JSON timeline keeps its contract, the
    summary closes the output, ``--plot`` writes a PNG."""
    timeline, png = tmp_path / "timeline.json", tmp_path / "up.png"
    run = subprocess.run(
        [sys.executable, "-m", "tandem.cli", "up", str(repo_root / "examples/sim.yaml"),
         "--load", str(repo_root / "examples/traces/azure-conv-head.csv"), "--rate-scale", "3",
         "--duration", "15", "--json", str(timeline), "--plot", str(png),
         "--port", str(free_port())],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    summary = run.stdout[run.stdout.index("tandem up: sim, ") :]
    match = re.search(r"requests    (\d+) sent, (\d+) served, (\d+) failed", summary)
    assert match, run.stdout
    sent, served, failed = map(int, match.groups())
    assert sent > 50 and served + failed == sent and served > 0, summary
    for words in ("TTFT        p50 ", "target p90 <= 1 s:", "ITL         p50 ",
                  "target p90 <= 50 ms:", "attainment  ", "prefill        1", "decode  ",
                  "scale decisions: ", "plot: "):  # fmt: skip
        assert words in summary, (words, summary)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
    data = json.loads(timeline.read_text())
    assert set(data) == {"pools", "decisions"} and set(data["pools"]) == {"prefill", "decode"}
    assert all(set(s) == {"t", "desired", "ready"} for s in data["pools"]["decode"])


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_live_view_draws_progress_and_the_pools_on_a_terminal() -> None:
    isvc = _service()
    assert isinstance(isvc, InferenceService)
    fleet = LocalFleet(isvc, EngineLaunch("sim", sys.executable), lambda: 0.0, lambda r, u: None)
    stats = LoadStats(planned=40)
    stats.records += [RequestRecord(0.0, 10, 5, finish_reason="length") for _ in range(3)]
    obs = Observation(
        now_s=12.0,
        window_s=2.0,
        pools={"decode": PoolObservation("decode", 1, 1, 1, waiting_requests=7,
                                         running_requests=8, kv_usage=0.42)},
        latency_by_class={"default": LatencyObservation(ttft_s={90: 0.25}, itl_s={90: 0.03})},
    )  # fmt: skip
    decision = Decision(12.0, {"decode": PoolDecision("decode", 1, 2, "decode 1→2: 7 waiting")})
    out = _Terminal()
    with LiveView(isvc, out, enabled=True) as view:
        view.starting(fleet)
        view.loading(stats, 30.0)
        view.update(12.0, fleet, obs, decision, stats)
        view.say("t=12.0s decode 1→2: 7 waiting")
    text = out.getvalue()
    for words in ("load", "3/40", "served 3, failed 0", "desired", "waiting", "42%",
                  "decode 1→2: 7 waiting", "TTFT p90 250ms (target 1000ms)",
                  "ITL p90 30ms (target 50ms)"):  # fmt: skip
        assert words in text, (words, text)
    quiet = io.StringIO()  # not a terminal: only the lines that stay
    with LiveView(isvc, quiet, enabled=True) as view:
        view.update(12.0, fleet, obs, decision, stats)
        view.say("a line")
    assert quiet.getvalue() == "a line\n"


def test_cli_rejects_a_bad_manifest(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: serving.tandem.dev/v1alpha1\nkind: InferenceService\n"
        "metadata: {name: x}\nspec: {mode: split}\n"
    )
    run = subprocess.run(
        [sys.executable, "-m", "tandem.cli", "up", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 1 and "spec.mode" in run.stderr


@pytest.mark.parametrize(
    ("flag", "code", "words"),
    [
        (["--rate-scale", "0"], 2, "--rate-scale must be > 0"),
        (["--duration", "-5"], 2, "--duration must be > 0"),
        (["--engine", "gpu"], 2, "invalid choice: 'gpu'"),
        (["--model-uri", "file://relative/path"], 1, "spec.model.uri"),
        (["--engine", "vllm", "--vllm", "/nonexistent/vllm"], 1, "bash .ci/install-vllm"),
    ],
)
def test_cli_rejects_bad_flags(flag: list[str], code: int, words: str, repo_root: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "tandem.cli", "up", str(repo_root / "examples/sim.yaml"), *flag],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == code and words in run.stderr, run.stderr


@pytest.mark.parametrize(
    ("uri", "words"),
    [
        ("pvc://weights/tiny", "is a volume claim in a cluster"),
        ("file:///nonexistent/tiny-llama", "is not a model folder (no config.json there)"),
    ],
)
def test_cli_refuses_a_model_real_engines_cannot_load(
    uri: str, words: str, repo_root: Path
) -> None:
    """Checked before anything starts: no engine, no router."""
    run = subprocess.run(
        [sys.executable, "-m", "tandem.cli", "up", str(repo_root / "examples/local-vllm.yaml"),
         "--engine", "vllm", "--model-uri", uri],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode == 1 and "spec.model.uri" in run.stderr and words in run.stderr


def test_an_engine_that_dies_while_starting_stops_the_run_with_its_log(
    tmp_path: Path, repo_root: Path
) -> None:
    """A stand-in ``vllm`` that fails as a real one does on a bad flag: the run stops with
    the pod, its exit status and the end of its log, and starts nothing else."""
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    fake = venv / "vllm"
    fake.write_text('#!/bin/sh\necho "vllm: error: unrecognized arguments: $3" >&2\nexit 3\n')
    fake.chmod(0o755)
    (venv / "python").symlink_to(sys.executable)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    logs = tmp_path / "logs"
    run = subprocess.run(
        [sys.executable, "-m", "tandem.cli", "up", str(repo_root / "examples/local-vllm.yaml"),
         "--engine", "vllm", "--vllm", str(fake), "--model-uri", model.as_uri(),
         "--log-dir", str(logs), "--port", str(free_port())],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 1, run.stdout + run.stderr
    assert "exited with 3 before it was ready" in run.stderr
    assert f"unrecognized arguments: {model}" in run.stderr  # the log's tail, and the argv
    assert "requests " not in run.stdout  # no summary of a fleet that never came up
    started = (logs / "tiny-prefill-0.log").read_text().splitlines()[0]
    assert started.startswith(f"$ {fake} serve --model {model} --served-model-name tiny-llama")
    assert "--host 127.0.0.1 --port" in started and "--enforce-eager" in started


def test_the_tiny_model_writer_names_the_install_it_needs(tmp_path: Path) -> None:
    """``tandem engine tiny-model`` runs with vLLM's venv (torch, transformers); without
    one it says how to get it. (Writing the model: tests/local/test_up_vllm.py.)"""
    run = subprocess.run(
        [sys.executable, "-m", "tandem.cli", "engine", "tiny-model", str(tmp_path / "m"),
         "--vllm", str(tmp_path / "nowhere" / "vllm")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode == 1 and "bash .ci/install-vllm" in run.stderr, run.stderr
    assert not (tmp_path / "m").exists()
