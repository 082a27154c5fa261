"""The operator's object cache: newer versions win, own writes are recognised (pure)."""

from __future__ import annotations

from typing import Any

from tandem.controller.cache import ObjectCache, is_older


def obj(name: str, rv: str, group: str = "g") -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": rv, "labels": {"group": group}}}


def make() -> ObjectCache[str, str]:
    return ObjectCache(lambda o: o["metadata"]["name"], lambda o: o["metadata"]["labels"]["group"])


def test_an_older_version_never_replaces_a_newer_one() -> None:
    cache = make()
    assert cache.observe(obj("a", "10"))
    assert not cache.observe(obj("a", "9"))
    assert not cache.observe(obj("a", "10"))
    assert cache.get("a")["metadata"]["resourceVersion"] == "10"  # type: ignore[index]
    assert cache.observe(obj("a", "11"))


def test_opaque_versions_are_taken_as_they_come() -> None:
    assert not is_older("abc", "10") and not is_older(None, "3")
    assert is_older("9", "10") and not is_older("10", "9")


def test_groups_follow_the_objects() -> None:
    cache = make()
    cache.observe(obj("a", "1", "x"))
    cache.observe(obj("b", "2", "x"))
    cache.observe(obj("a", "3", "y"))
    assert [o["metadata"]["name"] for o in cache.in_group("x")] == ["b"]
    cache.forget(obj("b", "4"))
    assert cache.in_group("x") == [] and len(cache) == 1


def test_a_late_deletion_of_an_older_version_keeps_the_newer_object() -> None:
    cache = make()
    cache.observe(obj("a", "5"))
    cache.forget(obj("a", "4"))
    assert cache.get("a") is not None


def test_the_echo_of_an_own_write_is_recognised() -> None:
    cache = make()
    cache.observe(obj("a", "5"), written=True)
    assert cache.is_echo(obj("a", "5"))
    assert not cache.is_echo(obj("a", "6"))
    cache.observe(obj("a", "6"))
    assert not cache.is_echo(obj("a", "6"))
