"""Ownership and staleness of children (pure)."""

from __future__ import annotations

from typing import Any

from tandem.control.children import compute_stale, make_owner_check, owner_key


def obj(
    name: str,
    *,
    uid: str | None = "u1",
    kind: str = "InferenceService",
    labels: dict[str, str] | None = None,
    controller: bool = True,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "labels": labels or {}}
    if uid is not None:
        meta["ownerReferences"] = [
            {
                "apiVersion": "serving.tandem.dev/v1alpha1",
                "kind": kind,
                "name": "chat",
                "uid": uid,
                "controller": controller,
            }
        ]
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta}


TANDEM = {"app.kubernetes.io/managed-by": "tandem", "serving.tandem.dev/service": "chat"}


def test_the_owner_is_the_controller_reference() -> None:
    assert owner_key(obj("a")) == ("ns", "chat")
    assert owner_key(obj("a", kind="ReplicaSet")) is None


def test_an_orphan_with_tandem_labels_belongs_to_its_service() -> None:
    assert owner_key(obj("a", uid=None, labels=TANDEM)) == ("ns", "chat")
    assert owner_key(obj("a", uid=None)) is None


def test_the_owner_check_accepts_ours_and_labelled_orphans() -> None:
    check = make_owner_check("chat", "u1")
    assert check(obj("a")) is None
    assert check(obj("a", uid=None, labels=TANDEM)) is None
    assert "controlled by" in str(check(obj("a", uid="u2")))
    assert "not managed by Tandem" in str(check(obj("a", uid=None)))


def test_stale_children_are_those_we_control_and_no_longer_want() -> None:
    live = [
        obj("keep"),
        obj("old"),
        obj("foreign", uid="u2"),
        obj("orphan", uid=None, labels=TANDEM),
    ]
    desired = [obj("keep")]
    assert [o["metadata"]["name"] for o in compute_stale(desired, live, "u1")] == ["old"]
