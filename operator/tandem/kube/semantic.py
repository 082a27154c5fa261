"""Client-side apply: the patch that brings a live object to the desired one, or none. Pure.

Server-side apply would give Tandem field ownership per writer. Tandem does the
client-side equivalent (as ``kubectl apply`` does) with the same three properties, each
covered by tests against the emulator and a real cluster:

* **no write when nothing changed.** ``desired`` is compared *semantically* with the live
  object: a field only the server sets (``clusterIP``, defaulted probe fields, ``status``)
  is not a difference, lists must match element by element (list items may carry server
  defaults), and resource quantities compare by value (``1000m`` equals ``1``);
* **removed fields vanish.** The desired manifest last applied is kept in the
  ``serving.tandem.dev/last-applied`` annotation; a field in it that the new desired state
  no longer has is removed (``null`` in the merge patch) — a field someone else added is
  left alone;
* **hand-offs are never written.** ``spec.replicas`` of a Deployment whose manifest omits
  it belongs to the autoscaler: it is neither set nor removed, even when a static policy
  set it before.

The result is an RFC 7386 JSON merge patch. Lists are replaced whole when they differ,
which is what a merge patch can express for every kind, custom resources included.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

LAST_APPLIED_ANNOTATION = "serving.tandem.dev/last-applied"

#: Per kind, the fields another writer owns whenever the desired manifest leaves them out.
HANDED_OFF: dict[str, frozenset[tuple[str, ...]]] = {
    "Deployment": frozenset({("spec", "replicas")}),
}

_MISSING: Any = object()
_QUANTITY = re.compile(r"^([+-]?[0-9.]+)([eE][+-]?[0-9]+|[KMGTPE]i|[mkMGTPE])?$")
_SUFFIX = {
    "": Decimal(1),
    "m": Decimal("0.001"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}
_QUANTITY_PARENTS = frozenset({"limits", "requests", "capacity", "allocatable"})


def parse_quantity(value: Any) -> Decimal | None:
    """A Kubernetes quantity as a number: ``"500m"`` → 0.5, ``"1Gi"`` → 1073741824.

    None when ``value`` is not a quantity.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return Decimal(str(value))
    if not isinstance(value, str):
        return None
    match = _QUANTITY.match(value.strip())
    if match is None:
        return None
    try:
        number = Decimal(match[1])
    except InvalidOperation:
        return None
    suffix = match[2] or ""
    if suffix[:1] in ("e", "E"):
        return number * Decimal(10) ** int(suffix[1:])
    return number * _SUFFIX[suffix]


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def _prune(obj: Any) -> Any:
    """A copy of ``obj`` without ``None`` values (in a merge patch, null means "remove").

    Mappings and lists are new; scalars are shared (they are immutable)."""
    if isinstance(obj, dict):
        return {k: _prune(v) for k, v in obj.items() if v is not None}
    if isinstance(obj, list):
        return [_prune(v) for v in obj]
    return obj


def with_last_applied(desired: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``desired`` carrying itself in the last-applied annotation (what gets
    written); ``desired`` is not modified."""
    clean: dict[str, Any] = _prune(dict(desired))
    meta = clean.setdefault("metadata", {})
    annotations = dict(meta.get("annotations") or {})
    annotations.pop(LAST_APPLIED_ANNOTATION, None)
    if annotations:
        meta["annotations"] = annotations
    else:
        meta.pop("annotations", None)
    record = canonical_json(clean)
    meta["annotations"] = {**annotations, LAST_APPLIED_ANNOTATION: record}
    return clean


def applied_record(desired: Mapping[str, Any]) -> str:
    """The last-applied record ``desired`` would leave on the object (canonical JSON)."""
    return str(with_last_applied(desired)["metadata"]["annotations"][LAST_APPLIED_ANNOTATION])


def last_applied(live: Mapping[str, Any]) -> dict[str, Any]:
    """What Tandem applied last to ``live`` ({} when unknown or unreadable)."""
    text = ((live.get("metadata") or {}).get("annotations") or {}).get(LAST_APPLIED_ANNOTATION)
    try:
        record = json.loads(text) if isinstance(text, str) else {}
    except ValueError:
        return {}
    return record if isinstance(record, dict) else {}


def compute_apply_patch(
    desired: Mapping[str, Any], live: Mapping[str, Any]
) -> dict[str, Any] | None:
    """The merge patch that makes ``live`` carry ``desired``; None when already in sync.

    >>> live = {"kind": "Service", "metadata": {"name": "a"},
    ...         "spec": {"clusterIP": "10.0.0.1", "ports": [{"port": 80, "protocol": "TCP"}]}}
    >>> compute_apply_patch({"kind": "Service", "metadata": {"name": "a"},
    ...                      "spec": {"ports": [{"port": 80}]}}, live)["metadata"].keys()
    dict_keys(['annotations'])
    """
    want = with_last_applied(desired)
    handed = HANDED_OFF.get(str(desired.get("kind")), frozenset())
    patch = _diff(want, dict(live), last_applied(live), (), handed)
    return patch or None


def _diff(
    want: dict[str, Any],
    live: dict[str, Any],
    before: dict[str, Any],
    path: tuple[str, ...],
    handed: frozenset[tuple[str, ...]],
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in want.items():
        have = live.get(key, _MISSING)
        was = before.get(key, _MISSING)
        here = (*path, key)
        if isinstance(value, dict) and isinstance(have, dict):
            sub = _diff(value, have, was if isinstance(was, dict) else {}, here, handed)
            if sub:
                out[key] = sub
        elif isinstance(value, list):
            unchanged = was is _MISSING or _prune(was) == value
            if not (isinstance(have, list) and unchanged and _list_covers(value, have, here)):
                out[key] = value
        elif not _covers(value, have, here):
            out[key] = value
    for key in before:
        if key not in want and key in live and (*path, key) not in handed:
            out[key] = None
    return out


def _covers(want: Any, have: Any, path: tuple[str, ...]) -> bool:
    """Whether ``have`` carries everything ``want`` says (server additions allowed)."""
    if have is _MISSING:
        return False
    if isinstance(want, dict):
        return isinstance(have, dict) and all(
            k in have and _covers(v, have[k], (*path, k)) for k, v in want.items()
        )
    if isinstance(want, list):
        return isinstance(have, list) and _list_covers(want, have, path)
    if want == have and type(want) is type(have):
        return True
    if (len(path) >= 2 and path[-2] in _QUANTITY_PARENTS) or path[-1:] == ("sizeLimit",):
        left, right = parse_quantity(want), parse_quantity(have)
        return left is not None and left == right
    return False


def _list_covers(want: list[Any], have: list[Any], path: tuple[str, ...]) -> bool:
    return len(want) == len(have) and all(
        _covers(w, h, path) for w, h in zip(want, have, strict=True)
    )
