"""``bench/long_prefill.py``: Tandem without and with the prefill pool's long-prefill cap,
on the first minutes of one family member."""

from __future__ import annotations

import re
import sys

import pytest

from tests.support.bench import BENCH, load_bench_script


@pytest.fixture(scope="module")
def bench():  # type: ignore[no-untyped-def]
    sys.path.insert(0, str(BENCH))  # the script imports autoscale as its sibling
    try:
        yield load_bench_script("long_prefill")
    finally:
        sys.path.remove(str(BENCH))


def test_the_cap_reaches_the_prefill_pool_only(bench) -> None:  # type: ignore[no-untyped-def]
    spec = bench.capped_service(2048).spec
    assert spec.prefill.long_prefill_token_threshold == 2048
    assert spec.decode.long_prefill_token_threshold is None
    assert bench.capped_service(0).spec.prefill.long_prefill_token_threshold is None


def test_each_threshold_is_reported_against_no_cap(bench, capsys) -> None:  # type: ignore[no-untyped-def]
    args = ["--quick", "--trace", "long5-bursty", "--seeds", "0", "--thresholds", "2048"]
    assert bench.main(args) == 0
    out = capsys.readouterr()
    assert "long5-bursty x5 seed 0 no cap" in out.err and "cap 2048:" in out.err
    row = next(line for line in out.out.splitlines() if line.startswith("long5-bursty"))
    figures = re.findall(r"(\d+\.\d+)% .*?(\d+\.\d+) h", row)
    assert len(figures) == 2, row  # no cap, then the cap with its change
    (base_att, base_gpu), (att, gpu) = ((float(a), float(g)) for a, g in figures)
    change = re.search(r"\(([+-]\d+\.\d+)\)", row)
    assert change is not None and float(change.group(1)) == pytest.approx(att - base_att, abs=0.01)
    assert base_gpu > 0 and gpu > 0 and 0 < base_att <= 100
    assert bench.main(["--thresholds", "0"]) == 1
