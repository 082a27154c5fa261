"""Fixtures for the tests against real vLLM (CPU build): install, tiny model, engines.

Engines are module-scoped: starting one takes about a minute on two cores, so the tests
of a module share theirs. Without the vLLM venv every test here fails with the command
that installs it, as the promtool tests do; nothing is skipped. A failing test's report
carries the last lines of every engine's log, and the run ends with the time the real
engines cost.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterator
from pathlib import Path

import pytest

from tests.vllm.engines import (
    INSTALL_COMMAND,
    VLLM_VERSION,
    Role,
    VllmEngine,
    VllmInstall,
    find_install,
    start_engines,
    write_tiny_model,
)

HERE = Path(__file__).resolve().parent

#: Engines alive now (for failure reports) and every start-up seen (for the summary).
RUNNING: list[VllmEngine] = []
STARTUPS: list[tuple[str, float]] = []
DURATIONS: dict[str, float] = {}

StartVllm = Callable[..., dict[str, VllmEngine]]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.vllm)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if HERE in Path(str(item.path)).parents:
        DURATIONS[item.nodeid] = DURATIONS.get(item.nodeid, 0.0) + report.duration
        if report.failed:
            for engine in RUNNING:
                report.sections.append((f"vllm log: {engine.name}", engine.log_tail(60)))
    return report


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not DURATIONS:
        return
    startups = ", ".join(f"{name} {s:.0f}s" for name, s in STARTUPS) or "none"
    terminalreporter.write_line(
        f"real vLLM {VLLM_VERSION} (CPU): {len(DURATIONS)} tests in "
        f"{sum(DURATIONS.values()):.0f}s; engine start-ups: {startups}"
    )


@pytest.fixture(scope="session")
def vllm_install() -> VllmInstall:
    install, why = find_install()
    if install is None:
        pytest.fail(
            f"real vLLM is not installed: {why}. Run `{INSTALL_COMMAND}` "
            "(about 4 minutes cold, cached under ~/.cache/tandem)",
            pytrace=False,
        )
    return install


@pytest.fixture(scope="session")
def tiny_model(vllm_install: VllmInstall) -> Path:
    """The tiny Llama's folder (written once, then reused while its digest holds)."""
    try:
        return write_tiny_model(vllm_install)
    except RuntimeError as err:
        pytest.fail(str(err), pytrace=False)


@pytest.fixture(scope="session")
def vllm_log_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("vllm-logs")


@pytest.fixture(scope="module")
def start_vllm(
    vllm_install: VllmInstall, tiny_model: Path, vllm_log_dir: Path
) -> Iterator[StartVllm]:
    """``start_vllm({"p": "prefill", "d": "decode"}, extra=(...))``: engines started side by
    side and ready; every one stopped when the module's tests are done."""
    started: list[VllmEngine] = []

    def start(
        roles: dict[str, Role], *, extra: tuple[str, ...] = (), timeout_s: float = 300.0
    ) -> dict[str, VllmEngine]:
        began = time.monotonic()
        try:
            engines = start_engines(
                vllm_install, tiny_model, vllm_log_dir, roles, extra=extra, timeout_s=timeout_s
            )
        except RuntimeError as err:
            pytest.fail(str(err), pytrace=False)
        started.extend(engines.values())
        RUNNING.extend(engines.values())
        for engine in engines.values():
            STARTUPS.append((engine.name, engine.startup_s or time.monotonic() - began))
        return engines

    yield start
    for engine in started:
        engine.stop()
        RUNNING.remove(engine)


@pytest.fixture(scope="module")
def aggregated(start_vllm: StartVllm) -> VllmEngine:
    """One aggregated engine (no KV connector) for the module."""
    return start_vllm({"aggregated": "aggregated"})["aggregated"]


@pytest.fixture(scope="module")
def pd_pair(start_vllm: StartVllm) -> tuple[VllmEngine, VllmEngine]:
    """A prefill engine (NIXL ``kv_producer``) and a decode engine (``kv_consumer``)."""
    engines = start_vllm({"prefill": "prefill", "decode": "decode"})
    return engines["prefill"], engines["decode"]
