"""``vllm bench serve``, vLLM's own benchmark client, against ``tandem router`` over simulated
prefill and decode engines: completions and the Responses API, a few prompts each.

The client is the CPU vLLM venv's (``bash .ci/install-vllm``; without it the test fails
with that command) and its tokenizer the tiny model's (``tandem.engine.tinymodel``). Before
its run the client checks the server's tokenizer through ``/tokenize`` (and re-aligns
prompts through ``/detokenize``): against a router without them it warned
``/tokenize unavailable``. The simulated engine's tokenizer counts four bytes a token, so
the client reports a tokenizer mismatch, which is the one warning allowed; it also proves
``/tokenize`` answered. The results are printed after the run.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from tandem.router.config import RouterConfig
from tests.router.conftest import MODEL, start_sim, start_static_router
from tests.vllm.engines import VllmInstall
from tests.vllm.timing import REPORTS

pytestmark = pytest.mark.timeout(900)

PROMPTS = 16
OUTPUT_TOKENS = 16
#: the client's own warning when the server's tokenizer counts differently (the sim's
#: four bytes a token against the tiny model's BPE): expected, and proof /tokenize answered
MISMATCH = re.compile(r"^WARNING: tokenizer mismatch \(server=\d+, expected=\d+\), re-aligning")
BACKENDS = {"openai": "/v1/completions", "openai-responses": "/v1/responses"}


def bench_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON"))}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1",
               DO_NOT_TRACK="1", VLLM_TARGET_DEVICE="cpu")  # fmt: skip
    return env


async def run_bench(
    install: VllmInstall, tokenizer: Path, base_url: str, backend: str, out: Path
) -> tuple[int, str]:
    argv = [
        str(install.vllm), "bench", "serve", "--backend", backend,
        "--endpoint", BACKENDS[backend], "--base-url", base_url, "--model", MODEL,
        "--tokenizer", str(tokenizer), "--dataset-name", "random",
        "--random-input-len", "64", "--random-output-len", str(OUTPUT_TOKENS),
        "--num-prompts", str(PROMPTS), "--max-concurrency", "4", "--temperature", "0",
        "--seed", "1", "--disable-tqdm", "--save-result", "--result-dir", str(out.parent),
        "--result-filename", out.name,
    ]  # fmt: skip
    process = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=bench_env()
    )
    try:
        async with asyncio.timeout(600):
            output, _ = await process.communicate()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode is not None
    return process.returncode, output.decode(errors="replace")


@pytest.mark.parametrize("backend", list(BACKENDS))
async def test_vllm_bench_serve_against_the_router(
    vllm_install: VllmInstall, tiny_model: Path, tmp_path: Path, backend: str
) -> None:
    prefill, decode = await start_sim("prefill"), await start_sim("decode")
    handle = await start_static_router(
        RouterConfig(scrape_interval_s=0.5), {"prefill": [prefill.url], "decode": [decode.url]}
    )
    result = tmp_path / f"{backend}.json"
    try:
        code, output = await run_bench(vllm_install, tiny_model, handle.url, backend, result)
        decoded = (await decode.stats())["engine"]
    finally:
        await handle.serving.stop()
        await prefill.stop()
        await decode.stop()
    assert code == 0, output[-4000:]
    warnings = [line for line in output.splitlines() if "WARNING" in line]
    assert all(MISMATCH.match(line) for line in warnings), warnings
    assert any(MISMATCH.match(line) for line in warnings), "the client did not ask /tokenize"
    summary = output[output.index("============ Serving Benchmark Result") :]
    REPORTS.append((f"vllm bench serve --backend {backend} through tandem router", summary))
    data: dict[str, Any] = json.loads(result.read_text())
    assert (data["completed"], data["failed"]) == (PROMPTS, 0)
    assert data["total_output_tokens"] == PROMPTS * OUTPUT_TOKENS
    assert data["mean_ttft_ms"] > 0 and data["mean_itl_ms"] > 0  # streamed
    # through both legs: the decode engine pulled every prompt's KV from the prefill engine
    assert decoded["prompt_tokens_external_total"] > 0
    assert decoded["prompt_tokens_local_compute_total"] <= PROMPTS + 2  # n-1 pulled per prompt
