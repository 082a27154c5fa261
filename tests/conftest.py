"""Shared pytest configuration: the repository's root."""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path

import pytest

from tests.vllm.timing import DURATIONS, REPORTS, RUNNING, STARTUPS

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Real-vLLM tests (marker ``vllm``): time every phase; a failure carries the logs."""
    report = yield
    if item.get_closest_marker("vllm") is not None:
        DURATIONS[item.nodeid] = DURATIONS.get(item.nodeid, 0.0) + report.duration
        if report.failed:
            for engine in RUNNING:
                report.sections.append((f"vllm log: {engine.name}", engine.log_tail(60)))
    return report


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for title, text in REPORTS:
        terminalreporter.write_sep("=", title)
        for line in text.splitlines():
            terminalreporter.write_line(line)
    if not DURATIONS:
        return
    from tests.vllm.engines import VLLM_VERSION

    startups = ", ".join(f"{name} {s:.0f}s" for name, s in STARTUPS) or "none"
    terminalreporter.write_line(
        f"real vLLM {VLLM_VERSION} (CPU): {len(DURATIONS)} tests in "
        f"{sum(DURATIONS.values()):.0f}s (budget 1200s); engine start-ups: {startups}"
    )
    by_file: dict[str, float] = {}
    for node, seconds in DURATIONS.items():
        path = node.split("::")[0]
        by_file[path] = by_file.get(path, 0.0) + seconds
    terminalreporter.write_line(
        "  by file: " + ", ".join(f"{path} {s:.0f}s" for path, s in sorted(by_file.items()))
    )
    if any(node.startswith("tests/contract/") for node in DURATIONS):
        from tests.contract.versions import render_table

        terminalreporter.write_line(
            "vLLM 0.32 (CPU) / 0.34 (reference sheet) / tandem engine sim: the differences "
            "found (docs/vllm-differences.md)"
        )
        for line in render_table().splitlines():
            terminalreporter.write_line(line)
