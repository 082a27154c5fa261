"""Class keys without HTTP: the key files, the bearer token, which class a request gets."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tandem.router.classes import ClassDenied, UnknownClass, resolve_class
from tandem.router.config import ClassConfig, RouterConfig
from tandem.router.keyfile import read_class_keys
from tandem.router.keys import KeyFileError, parse_bearer, parse_class_keys

GOLD_KEY = "gold-0123456789abcdef"
SILVER_KEY = "silver-0123456789abcdef"
CONFIG = RouterConfig(
    classes=(
        ClassConfig("std"),
        ClassConfig("silver", 5, require_key=True),
        ClassConfig("gold", 0, require_key=True),
    ),
    default_class="std",
)
KEYS = parse_class_keys({"gold": f"# the ops team\n{GOLD_KEY}\n", "silver": SILVER_KEY})


def test_a_keyed_class_needs_a_key_that_grants_it() -> None:
    assert resolve_class("gold", CONFIG) == ClassDenied("gold", keyed=False)
    assert resolve_class("gold", CONFIG, KEYS.classes_of("made-up-key-1234567")) == ClassDenied(
        "gold", keyed=False
    )
    denied = resolve_class("gold", CONFIG, KEYS.classes_of(SILVER_KEY))
    assert denied == ClassDenied("gold", keyed=True) and denied.status == 403
    granted = resolve_class("gold", CONFIG, KEYS.classes_of(GOLD_KEY))
    assert isinstance(granted, ClassConfig) and granted.name == "gold"


def test_a_key_without_a_header_gets_its_class_and_no_key_the_default() -> None:
    chosen = resolve_class(None, CONFIG, KEYS.classes_of(SILVER_KEY))
    assert isinstance(chosen, ClassConfig) and chosen.name == "silver"
    default = resolve_class(None, CONFIG)
    assert isinstance(default, ClassConfig) and default.name == "std"
    assert isinstance(resolve_class("vip", CONFIG, KEYS.classes_of(GOLD_KEY)), UnknownClass)


@given(
    header=st.none() | st.sampled_from(["std", "silver", "gold", " gold ", "", "x"]),
    token=st.none() | st.text(max_size=40) | st.sampled_from([GOLD_KEY, SILVER_KEY]),
)
def test_no_request_gets_a_keyed_class_its_key_does_not_grant(
    header: str | None, token: str | None
) -> None:
    granted = KEYS.classes_of(token)
    chosen = resolve_class(header, CONFIG, granted)
    if isinstance(chosen, ClassConfig) and chosen.require_key:
        assert chosen.name in granted


@pytest.mark.parametrize(
    ("files", "named"),
    [
        ({"gold": "short"}, "'gold', line 1"),
        ({"gold": f"{GOLD_KEY}\nwith space 0123456789"}, "'gold', line 2"),
        ({"silver": "x" * 600}, "'silver', line 1"),
    ],
)
def test_a_bad_key_line_names_the_file_and_line_never_the_key(
    files: dict[str, str], named: str
) -> None:
    with pytest.raises(KeyFileError) as err:
        parse_class_keys(files)
    assert named in str(err.value)
    for text in files.values():
        for line in text.splitlines():
            assert line not in str(err.value)


def test_bearer_tokens() -> None:
    assert parse_bearer(f"Bearer {GOLD_KEY}") == GOLD_KEY
    assert parse_bearer("Basic dXNlcjpwYXNz") is None
    assert parse_bearer("Bearer") is None and parse_bearer(None) is None


def test_the_key_directory_as_a_secret_volume_lays_it_out(tmp_path: Path) -> None:
    """Kubernetes keeps the files under ..data and links them by key name."""
    data = tmp_path / "..2026_12_04_10_00_00.123"
    data.mkdir()
    (data / "gold").write_text(GOLD_KEY + "\n")
    (tmp_path / "..data").symlink_to(data.name)
    (tmp_path / "gold").symlink_to("..data/gold")
    keys = read_class_keys(tmp_path)
    assert keys.classes_of(GOLD_KEY) == {"gold"} and len(keys) == 1


def test_unreadable_key_directories_are_errors(tmp_path: Path) -> None:
    with pytest.raises(KeyFileError, match="--class-keys"):
        read_class_keys(tmp_path / "missing")
    (tmp_path / "gold").write_bytes(b"\xff\xfe not utf-8")
    with pytest.raises(KeyFileError, match="'gold' is not UTF-8"):
        read_class_keys(tmp_path)
