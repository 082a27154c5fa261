"""Fixtures for the tests against real vLLM (CPU build): the install and the tiny model.

The engines themselves come from ``tests/contract/fleet.py``, shared by every contract
module (starting one takes about a minute on two cores). Without the vLLM venv every test
here fails with the command that installs it, as the promtool tests do; nothing is
skipped. The run ends with the time the real engines cost (``tests/conftest.py``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.vllm.engines import (
    INSTALL_COMMAND,
    VllmInstall,
    find_install,
    write_tiny_model,
)

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.vllm)


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
