"""``tandem router``: flags to settings, usage errors, and the real process serving."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import aiohttp
import pytest
import yaml

from tandem.cli import build_parser
from tandem.router.config import ClassConfig
from tandem.router.discovery import KubeDiscovery, StaticDiscovery
from tandem.router.launch import SetupError, build_discovery, build_settings
from tests.factories import make_manifest
from tests.router.conftest import MODEL, SimEngine, free_port, poll_until


def parse(*argv: str) -> tuple[object, object]:
    args = build_parser().parse_args(["router", *argv])
    config = build_settings(args)
    return config, build_discovery(args, config)


def test_static_disaggregated_flags() -> None:
    config, discovery = parse(
        "--prefill", "http://a:8000,http://b:8000/", "--decode", "http://c:8000",
        "--max-inflight", "9", "--idle-timeout", "7", "--class", "fast:0", "--class", "slow:5:2",
        "--priority-scheduling", "--short-prompt-tokens", "16", "--header-timeout", "2",
        "--body-timeout", "4", "--client-idle-timeout", "6", "--max-connections-per-client", "8",
    )  # fmt: skip
    assert isinstance(discovery, StaticDiscovery)
    assert discovery.urls_by_role == {
        "prefill": ["http://a:8000", "http://b:8000"],
        "decode": ["http://c:8000"],
    }
    assert config.mode == "disaggregated" and config.max_inflight == 9  # type: ignore[attr-defined]
    assert config.timeouts.idle_stream_s == 7 and config.timeouts.connect_s == 5  # type: ignore[attr-defined]
    assert config.classes == (ClassConfig("fast", 0), ClassConfig("slow", 5, 2))  # type: ignore[attr-defined]
    assert config.default_class == "fast" and config.send_priority  # type: ignore[attr-defined]
    assert config.short_prompt_tokens == 16  # type: ignore[attr-defined]
    timeouts = config.timeouts  # type: ignore[attr-defined]
    assert (timeouts.request_header_s, timeouts.request_body_s, timeouts.client_idle_s) == (2, 4, 6)
    assert config.max_connections_per_client == 8  # type: ignore[attr-defined]


def test_config_file_then_flags(tmp_path: Path) -> None:
    manifest = make_manifest(
        mode="aggregated",
        router={"maxInflight": 77, "timeouts": {"prefill": "3s"}},
        engine={"schedulingPolicy": "priority"},
        qos={"priorityClasses": [{"name": "gold", "priority": -1}]},
    )
    path = tmp_path / "isvc.yaml"
    path.write_text(yaml.safe_dump(manifest))
    config, discovery = parse(
        "--config", str(path), "--pool", "http://p:8000", "--max-inflight", "5"
    )
    assert isinstance(discovery, StaticDiscovery) and discovery.urls_by_role == {
        "pool": ["http://p:8000"]
    }
    assert config.mode == "aggregated" and config.max_inflight == 5  # type: ignore[attr-defined]
    assert config.timeouts.prefill_s == 3 and config.class_names() == ["gold"]  # type: ignore[attr-defined]
    assert config.send_priority  # type: ignore[attr-defined]


def test_require_key_marks_classes() -> None:
    config, _ = parse(
        "--pool", "http://a:1", "--class", "std", "--class", "gold:0:4",
        "--require-key", "gold", "--class-keys", "/etc/keys",
    )  # fmt: skip
    assert [c.require_key for c in config.classes] == [False, True]  # type: ignore[attr-defined]


def test_cluster_mode_flags() -> None:
    _, discovery = parse("--namespace", "ns", "--service", "chat", "--scrape-interval", "0.5")
    assert isinstance(discovery, KubeDiscovery)
    assert (discovery.namespace, discovery.service) == ("ns", "chat")
    assert discovery.base.scrape_interval_s == 0.5


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--prefill", "http://a:1"],
        ["--pool", "http://a:1", "--decode", "http://b:1"],
        ["--namespace", "ns"],
        ["--namespace", "ns", "--service", "s", "--pool", "http://a:1"],
        ["--pool", "http://a:1", "--class", "a", "--default-class", "b"],
        ["--pool", "http://a:1", "--max-inflight", "0"],
        ["--pool", "http://a:1", "--idle-timeout", "0"],
        ["--pool", "http://a:1", "--body-timeout", "-1"],
        ["--pool", "http://a:1", "--max-connections-per-client", "0"],
        ["--pool", "http://a:1", "--class", "a", "--require-key", "a"],  # no --class-keys
        ["--pool", "http://a:1", "--class-keys", "k", "--require-key", "b"],  # no such class
    ],
)
def test_usage_errors(argv: list[str]) -> None:
    with pytest.raises(SetupError):
        parse(*argv)


def test_bad_url_is_an_argparse_error() -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["router", "--pool", "a:1"])
    with pytest.raises(SystemExit):
        build_parser().parse_args(["router", "--otlp-traces-endpoint", "collector:4318"])
    args = build_parser().parse_args(
        ["router", "--otlp-traces-endpoint", "http://c:4318/v1/traces"]
    )
    assert args.otlp_traces_endpoint == "http://c:4318/v1/traces"


@pytest.mark.asyncio
@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
async def test_the_command_serves_and_drains_on_sigterm(
    sims: object, loop: str, tmp_path: Path
) -> None:
    """On both event loops: uvloop's transports are not ``asyncio.Transport`` subclasses,
    which the connection guard once asserted (every connection failed under uvloop, the
    loop ``--loop auto`` picks wherever uvloop is installed, as in vLLM's image)."""
    prefill: SimEngine = await sims("prefill")  # type: ignore[operator]
    decode: SimEngine = await sims("decode")  # type: ignore[operator]
    port = free_port()
    stderr = (tmp_path / "stderr").open("wb")  # a file: a full pipe would stall the router
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tandem.cli", "router", "--port", str(port),
        "--prefill", prefill.url, "--decode", decode.url, "--log-level", "WARNING",
        "--loop", loop,
        stdout=asyncio.subprocess.DEVNULL, stderr=stderr,
        env={**os.environ},
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:

            async def up() -> bool:
                try:
                    async with session.get(url + "/health") as resp:
                        return resp.status == 200
                except aiohttp.ClientError:
                    return False

            await poll_until(up, timeout_s=20)
            body = {"model": MODEL, "prompt": "hi", "max_tokens": 2}
            async with session.post(url + "/v1/completions", json=body) as resp:
                assert resp.status == 200
                assert (await resp.json())["choices"][0]["finish_reason"] == "length"
            async with session.post(url + "/v1/completions", json=body | {"stream": True}) as resp:
                assert resp.status == 200
                assert (await resp.read()).endswith(b"data: [DONE]\n\n")
        process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(20):
            assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        stderr.close()
    errors = (tmp_path / "stderr").read_text()
    assert "Traceback" not in errors, errors
