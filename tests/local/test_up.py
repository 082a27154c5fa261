"""``tandem up``: a local fleet that grows under load and stops cleanly."""

from __future__ import annotations

import asyncio
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import openai
import pytest

from tandem.api.validate import load_inference_service
from tandem.local.processes import free_port
from tandem.local.run import UpOptions, run_up
from tests.factories import make_manifest


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _service() -> object:
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


@pytest.mark.parametrize("flag", [["--rate-scale", "0"]])
def test_cli_rejects_bad_flags(flag: list[str], repo_root: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "tandem.cli", "up", str(repo_root / "examples/sim.yaml"), *flag],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2 and "rate-scale" in run.stderr
