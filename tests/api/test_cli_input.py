"""``tandem validate`` and ``tandem render`` on hostile files: a clear error and bounded
work, never a traceback or a hang."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from tandem.cli import main
from tests.factories import make_manifest


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _both(capsys: pytest.CaptureFixture[str], path: Path) -> list[tuple[int, str, str]]:
    return [_run(capsys, "validate", str(path)), _run(capsys, "render", str(path))]


def _manifest_with(extra_config_yaml: str) -> str:
    text = yaml.safe_dump(make_manifest(), sort_keys=False)
    return text.replace(
        "  engine:\n", f"  engine:\n    kvTransfer:\n      extraConfig:\n{extra_config_yaml}", 1
    )


def test_a_file_that_is_not_utf8_is_named_with_its_first_bad_byte(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(yaml.safe_dump(make_manifest()).encode() + "# caf\xe9\n".encode("latin-1"))
    for code, _, err in _both(capsys, path):
        assert code == 1 and "not UTF-8 text: byte" in err and "b'\\xe9'" in err, err


def test_deep_nesting_is_refused_before_it_is_walked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "deep.yaml"
    path.write_text(_manifest_with("        x: " + "[" * 600 + "]" * 600 + "\n"))
    for code, _, err in _both(capsys, path):
        assert code == 1 and "nested more than 64 levels deep" in err, err


def test_yaml_dates_stay_strings_as_kubectl_sends_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "date.yaml"
    path.write_text(_manifest_with("        since: 2024-01-02\n"))
    (vcode, _, verr), (rcode, out, rerr) = _both(capsys, path)
    assert (vcode, rcode) == (0, 0), verr + rerr
    assert '"since":"2024-01-02"' in out or "since" in out


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("        key: !!binary aGVsbG8=\n", "!!binary has no JSON form"),
        ("        set: !!set {a, b}\n", "YAML set"),
        ("        rate: .inf\n", "'.inf' is not a JSON number"),
        ("        pairs: !!omap [a: 1]\n", "!!omap"),
    ],
)
def test_values_without_a_json_form_are_refused_with_their_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str, words: str
) -> None:
    path = tmp_path / "odd.yaml"
    path.write_text(_manifest_with(value))
    for code, _, err in _both(capsys, path):
        assert code == 1 and words in err and "line " in err, err


def test_an_alias_bomb_is_refused_in_bounded_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = ['        l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [
        f"        l{i}: &l{i} [" + ",".join(f"*l{i - 1}" for _ in range(9)) + "]"
        for i in range(1, 9)
    ]
    path = tmp_path / "bomb.yaml"
    path.write_text(_manifest_with("\n".join(lines) + "\n"))
    assert path.stat().st_size < 2500
    started = time.perf_counter()
    for code, out, err in _both(capsys, path):
        assert code == 1 and "expands to more than 200000 values" in err, err
        assert len(out) < 1000
    assert time.perf_counter() - started < 5.0


def test_a_file_larger_than_the_api_server_takes_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "big.yaml"
    path.write_text("# " + "x" * (5 * 1024 * 1024) + "\n")
    code, _, err = _run(capsys, "validate", str(path))
    assert code == 1 and "at most 4194304" in err, err
