"""``tandem up --engine vllm``: the example on real vLLM (CPU build) and the tiny model,
as a user runs it, with a short replayed load that the decode pool must grow for.

At most three real engines (one prefill, decode 1 → 2), all on loopback, in bounded time.
Without the real-vLLM venv the test fails with the command that installs it.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tandem.engine.tinymodel import default_dir
from tandem.local.processes import free_port
from tests.vllm.engines import INSTALL_COMMAND, find_install
from tests.vllm.timing import STARTUPS

#: Decode engines hold 4 sequences each (``maxNumSeqs`` of the example); streams of
#: 150-250 tokens arriving every 2 s on average keep more than 4 running on a CPU, so
#: requests wait and the autoscaler asks for a second decode engine.
RATE_PER_S = 0.5
#: Long enough for the decode pool to fill and the autoscaler to act; the new engine's
#: own start (a minute or more) is not waited for: every real-vLLM second counts in CI.
LOAD_S = 60


def _trace(path: Path, seed: int = 12) -> Path:
    """A Mooncake-style JSONL trace: short prompts (the prefill engine keeps up), long
    answers (decode does not)."""
    draw, t, rows = random.Random(seed), 0.0, []
    while t < LOAD_S:
        t += draw.expovariate(RATE_PER_S)
        rows.append({"timestamp": int(t * 1000), "input_length": draw.randint(32, 128),
                     "output_length": draw.randint(150, 250)})  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _engines_using(model: Path) -> list[int]:
    """Processes whose command line names ``model`` (the engines this test started)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if str(model).encode() in cmdline and int(proc.name) != os.getpid():
            found.append(int(proc.name))
    return found


@pytest.mark.vllm
@pytest.mark.timeout(1200)
def test_up_on_real_vllm_grows_the_decode_pool_under_replayed_load(
    tmp_path: Path, repo_root: Path
) -> None:
    install, why = find_install()
    if install is None:
        pytest.fail(f"real vLLM is not installed: {why}. Run `{INSTALL_COMMAND}` (about 4 "
                    "minutes cold, cached under ~/.cache/tandem)", pytrace=False)  # fmt: skip
    tandem = [sys.executable, "-m", "tandem.cli"]
    # The user's way to the model: `tandem engine tiny-model DIR` (the shared folder the
    # other real-vLLM tests use: "up to date" when they wrote it), then a copy of our
    # own, so that every engine this test starts is recognisable by its model path.
    written = subprocess.run(
        [*tandem, "engine", "tiny-model", str(default_dir()), "--vllm", str(install.vllm)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert written.returncode == 0, written.stderr
    assert f"model.uri: {default_dir().absolute().as_uri()}" in written.stdout
    model = tmp_path / "tiny-llama"
    subprocess.run(["cp", "-r", str(default_dir()), str(model)], check=True)
    logs, timeline, png = tmp_path / "logs", tmp_path / "timeline.json", tmp_path / "up.png"
    started = time.monotonic()
    run = subprocess.run(
        [*tandem, "up", str(repo_root / "examples/local-vllm.yaml"), "--engine", "vllm",
         "--vllm", str(install.vllm), "--model-uri", model.as_uri(),
         "--load", str(_trace(tmp_path / "trace.jsonl")), "--duration", str(LOAD_S),
         "--port", str(free_port()), "--log-dir", str(logs), "--json", str(timeline),
         "--plot", str(png), "--no-view"],
        capture_output=True, text=True, timeout=1100,
    )  # fmt: skip
    took = time.monotonic() - started
    tails = "\n".join(
        f"--- {log.name}:\n" + "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        for log in sorted(logs.glob("*.log"))
    )
    assert run.returncode == 0, f"{run.stdout}\n{run.stderr}\n{tails}"
    assert _engines_using(model) == [], "engine processes outlived tandem up"
    data = json.loads(timeline.read_text())
    grew = [d for d in data["decisions"] if d["pool"] == "decode" and d["to"] > d["from"]]
    assert grew, f"the decode pool never grew:\n{run.stdout}\n{tails}"
    assert {p.name for p in logs.glob("*.log")} >= {"tiny-prefill-0.log", "tiny-decode-1.log",
                                                    "tiny-decode-2.log"}  # fmt: skip
    assert max(s["desired"] for s in data["pools"]["decode"]) == 2
    assert max(s["desired"] for s in data["pools"]["prefill"]) == 1  # three engines at most
    summary = run.stdout[run.stdout.index("tandem up: tiny, ") :]
    served = re.search(r"(\d+) sent, (\d+) served", summary)
    assert served and int(served[2]) > 0, summary  # P/D over NIXL, through the router
    assert "decode         2" in summary and png.read_bytes()[:4] == b"\x89PNG"
    up_s = next(
        p["t"] for p, d in zip(data["pools"]["prefill"], data["pools"]["decode"], strict=True)
        if p["ready"] and d["ready"]
    )  # fmt: skip
    STARTUPS.append(("tandem up: prefill + decode", up_s))
    ready = [s["t"] for s in data["pools"]["decode"] if s["ready"] == 2]
    print(
        f"\ntandem up --engine vllm: {took:.0f} s; engines ready at t={up_s:.0f} s; decode "
        f"grew at t={grew[0]['t']:.0f} s "
        f"({grew[0]['reason']}); second decode engine ready "
        + (f"at t={ready[0]:.0f} s" if ready else "not within the run")
        + f"\n{summary}"
    )
