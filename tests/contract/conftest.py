"""Fixtures of the engine contract: every test runs once per kind of engine.

``engine_kind`` is ``sim`` (``tandem engine sim``) or ``vllm`` (real vLLM, CPU build,
marked ``vllm``); the engines come from one session-wide :class:`~tests.contract.fleet.Fleet`
so that each real engine starts once for all the contract modules. Without the real-vLLM
venv the ``vllm`` halves fail with the command that installs it; nothing is skipped.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.contract.collector import Collector
from tests.contract.fleet import Engine, Fleet, Kind
from tests.vllm.engines import INSTALL_COMMAND, VllmInstall, find_install, write_tiny_model
from tests.vllm.timing import RUNNING, STARTUPS

PD_ROLES = {"prefill": "prefill", "decode": "decode"}


# Package scope: the engines stop once the contract tests are done. An idle vLLM CPU
# engine's worker still spins (about half a core each), which would slow every test after.
@pytest.fixture(scope="package")
def collector() -> Iterator[Collector]:
    """The OTLP/HTTP collector every real engine of the package sends its spans to."""
    found = Collector()
    yield found
    found.close()


@pytest.fixture(scope="package")
def fleet(tmp_path_factory: pytest.TempPathFactory, collector: Collector) -> Iterator[Fleet]:
    cache: list[tuple[VllmInstall, Path]] = []

    def install() -> tuple[VllmInstall, Path]:
        if not cache:
            found, why = find_install()
            if found is None:
                pytest.fail(f"real vLLM is not installed: {why}. Run `{INSTALL_COMMAND}` "
                            "(about 4 minutes cold, cached under ~/.cache/tandem)",
                            pytrace=False)  # fmt: skip
            cache.append((found, write_tiny_model(found)))
        return cache[0]

    fleet = Fleet(tmp_path_factory.mktemp("engines"), install, traces_url=collector.url)
    yield fleet
    STARTUPS.extend(s for s in fleet.startups if s[0].startswith("vllm"))
    fleet.close()


@pytest.fixture(params=["sim", pytest.param("vllm", marks=pytest.mark.vllm)])
def engine_kind(request: pytest.FixtureRequest) -> Kind:
    kind: Kind = request.param
    return kind


def _get(fleet: Fleet, kind: Kind, roles: dict[str, str]) -> dict[str, Engine]:
    try:
        engines = fleet.get(kind, roles)  # type: ignore[arg-type]
    except RuntimeError as err:
        pytest.fail(str(err), pytrace=False)
    for engine in engines.values():
        if engine.kind == "vllm" and engine not in RUNNING:
            RUNNING.append(engine)
    return engines


@pytest.fixture
def aggregated(fleet: Fleet, engine_kind: Kind) -> Engine:
    """The aggregated engine (no KV connector) of ``engine_kind``."""
    return _get(fleet, engine_kind, {"aggregated": "aggregated"})["aggregated"]


@pytest.fixture
def pd(fleet: Fleet, engine_kind: Kind) -> tuple[Engine, Engine]:
    """A prefill engine (vLLM: NIXL ``kv_producer``) and a decode engine (``kv_consumer``)."""
    engines = _get(fleet, engine_kind, PD_ROLES)
    return engines["prefill"], engines["decode"]
