"""The pure half of ``tandem.observe`` loads no I/O library, checked in a fresh process."""

from __future__ import annotations

import json
import subprocess
import sys

PURE = [
    "tandem.observe.types",
    "tandem.observe.source",
    "tandem.observe.text",
    "tandem.observe.histogram",
    "tandem.observe.parse",
    "tandem.observe.compute",
    "tandem.observe.promql",
    "tandem.observe.promresult",
]
FORBIDDEN = ("aiohttp", "prometheus_client", "kopf", "kubernetes", "kubernetes_asyncio")


def loaded_after_importing(modules: list[str]) -> set[str]:
    code = (
        "import importlib, json, sys\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout))


def test_pure_modules_import_no_io_library() -> None:
    loaded = loaded_after_importing(PURE)
    offending = sorted(m for m in loaded if m.split(".")[0] in FORBIDDEN)
    assert offending == [], f"pure observe modules pulled in {offending}"


def test_the_io_modules_do_load_aiohttp() -> None:
    # guards the check above: it must be able to see an I/O import
    assert "aiohttp" in loaded_after_importing(["tandem.observe.scrape"])
