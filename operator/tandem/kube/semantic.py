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
  set it before;
* **the pod template is owned whole.** Under ``spec.template.spec`` of a Deployment a field
  someone else added (``privileged``, ``hostPID``, ``initContainers``, ``runAsUser: 0``)
  is removed too, unless it is a value the API server fills in by default
  (:data:`POD_SPEC_DEFAULTS`); so a hand-edited engine pod never keeps powers Tandem did
  not give it. The template's labels and annotations are merged as elsewhere
  (``kubectl rollout restart`` stamps an annotation there).

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

#: Per kind, subtrees Tandem owns whole: fields there that Tandem did not set are removed.
OWNED_WHOLE: dict[str, tuple[str, ...]] = {"Deployment": ("spec", "template", "spec")}

_PROBE_DEFAULTS = {
    ("timeoutSeconds",): 1,
    ("periodSeconds",): 10,
    ("successThreshold",): 1,
    ("failureThreshold",): 3,
    ("httpGet", "scheme"): "HTTP",
}
_CONTAINER_DEFAULTS: dict[tuple[str, ...], Any] = {
    ("terminationMessagePath",): "/dev/termination-log",
    ("terminationMessagePolicy",): "File",
    ("imagePullPolicy",): ("Always", "IfNotPresent"),
    ("resources",): {},
    ("ports", "protocol"): "TCP",
    ("env", "valueFrom", "fieldRef", "apiVersion"): "v1",
    **{
        (probe, *key): value
        for probe in ("livenessProbe", "readinessProbe", "startupProbe")
        for key, value in _PROBE_DEFAULTS.items()
        if value is not None
    },
}
#: What the API server fills into a pod template that leaves it out, by path inside the
#: pod spec (list indices left out); a tuple lists the values it may choose between.
POD_SPEC_DEFAULTS: dict[tuple[str, ...], Any] = {
    ("dnsPolicy",): "ClusterFirst",
    ("restartPolicy",): "Always",
    ("schedulerName",): "default-scheduler",
    ("terminationGracePeriodSeconds",): 30,
    ("securityContext",): {},
    ("enableServiceLinks",): True,
    ("volumes", "emptyDir"): {},
    ("volumes", "secret", "defaultMode"): 420,
    ("volumes", "configMap", "defaultMode"): 420,
    **{("containers", *key): value for key, value in _CONTAINER_DEFAULTS.items()},
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
    kind = str(desired.get("kind"))
    handed = HANDED_OFF.get(kind, frozenset())
    owned = OWNED_WHOLE.get(kind)
    patch = _diff(want, dict(live), last_applied(live), (), handed, owned)
    return patch or None


def _diff(
    want: dict[str, Any],
    live: dict[str, Any],
    before: dict[str, Any],
    path: tuple[str, ...],
    handed: frozenset[tuple[str, ...]],
    owned: tuple[str, ...] | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in want.items():
        have = live.get(key, _MISSING)
        was = before.get(key, _MISSING)
        here = (*path, key)
        if isinstance(value, dict) and isinstance(have, dict):
            sub = _diff(value, have, was if isinstance(was, dict) else {}, here, handed, owned)
            if sub:
                out[key] = sub
        elif isinstance(value, list):
            unchanged = was is _MISSING or _prune(was) == value
            covered = isinstance(have, list) and _list_covers(value, have, here, owned)
            if not (unchanged and covered):
                out[key] = value
        elif not _covers(value, have, here, owned):
            out[key] = value
    for key in before:
        if key not in want and key in live and (*path, key) not in handed:
            out[key] = None
    if _is_owned(path, owned):
        for key, have in live.items():
            if key not in want and not _is_default(path, key, have, want, owned):
                out[key] = None
    return out


def _is_owned(path: tuple[str, ...], owned: tuple[str, ...] | None) -> bool:
    return owned is not None and path[: len(owned)] == owned


def _is_default(
    path: tuple[str, ...],
    key: str,
    have: Any,
    want: Mapping[str, Any],
    owned: tuple[str, ...] | None,
) -> bool:
    """Whether ``key: have``, absent from ``want`` at ``path``, is the server's default."""
    relative = (*path[len(owned or ()) :], key)
    if relative == ("serviceAccount",):  # the server mirrors serviceAccountName here
        return bool(have == want.get("serviceAccountName"))
    default = POD_SPEC_DEFAULTS.get(relative, _MISSING)
    if isinstance(default, tuple):
        return have in default
    return default is not _MISSING and have == default


def _covers(
    want: Any, have: Any, path: tuple[str, ...], owned: tuple[str, ...] | None = None
) -> bool:
    """Whether ``have`` carries everything ``want`` says (server additions allowed, and
    inside an owned subtree only the server's defaults)."""
    if have is _MISSING:
        return False
    if isinstance(want, dict):
        return (
            isinstance(have, dict)
            and all(k in have and _covers(v, have[k], (*path, k), owned) for k, v in want.items())
            and (
                not _is_owned(path, owned)
                or all(k in want or _is_default(path, k, v, want, owned) for k, v in have.items())
            )
        )
    if isinstance(want, list):
        return isinstance(have, list) and _list_covers(want, have, path, owned)
    if want == have and type(want) is type(have):
        return True
    if (len(path) >= 2 and path[-2] in _QUANTITY_PARENTS) or path[-1:] == ("sizeLimit",):
        left, right = parse_quantity(want), parse_quantity(have)
        return left is not None and left == right
    return False


def _list_covers(
    want: list[Any], have: list[Any], path: tuple[str, ...], owned: tuple[str, ...] | None = None
) -> bool:
    return len(want) == len(have) and all(
        _covers(w, h, path, owned) for w, h in zip(want, have, strict=True)
    )
