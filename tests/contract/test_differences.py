"""The table of differences (``tests/contract/versions.py``) is the one in the docs, and
every version-specific expectation the contract tests read names both versions."""

from __future__ import annotations

from pathlib import Path

from tests.contract import versions

DOC = Path(__file__).resolve().parents[2] / "docs" / "vllm-differences.md"


def test_the_docs_hold_the_table() -> None:
    table = versions.render_table()
    assert table in DOC.read_text(), (
        "docs/vllm-differences.md is stale: paste the output of "
        "`python -m tests.contract.versions` into it"
    )


def test_every_expectation_by_version_names_both_versions() -> None:
    tables = [versions.EXTERNAL_PROMPT_TOKENS, versions.STREAMED_PREFILL_HAS_KV_PARAMS,
              versions.CLIENT_ABORT_COUNTED, versions.PREFILL_PARAMS_ONLY_IN,
              versions.DURING_DRAIN, versions.OVERLOADED_TYPE]  # fmt: skip
    for table in tables:
        assert set(table) == {versions.V032, versions.V034}
    cases = {case for case, _ in versions.MESSAGES}
    for case in cases:
        assert {(case, versions.V032), (case, versions.V034)} <= set(versions.MESSAGES)
