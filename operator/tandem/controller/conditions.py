"""Status conditions as Kubernetes writes them: the type, and the merge of one writer's
conditions into a shared list. Pure.

Several writers share one ``status.conditions`` list (the reconciler and the autoscaler
do), and a merge patch replaces lists whole: :func:`merge_conditions` builds the whole
list with one writer's conditions set and every other writer's kept in place, keeping
``lastTransitionTime`` while a condition's status holds.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

Truth = Literal["True", "False", "Unknown"]

#: The longest message kept (the API server's limit of a condition message).
MAX_MESSAGE = 32768


@dataclass(frozen=True)
class Condition:
    """A condition without its timestamps (those depend on the live status)."""

    type: str
    status: Truth
    reason: str
    message: str


def merge_conditions(
    live: list[dict[str, Any]],
    conditions: Iterable[Condition],
    managed: frozenset[str],
    generation: int | None,
    now: str,
) -> list[dict[str, Any]]:
    """The whole ``status.conditions`` list (a merge patch replaces lists) with
    ``conditions`` set, types in ``managed`` but not in ``conditions`` removed, and every
    other writer's conditions kept as they are, in place.

    A condition whose ``status`` did not change keeps its ``lastTransitionTime``.
    """
    wanted = {c.type: c for c in conditions}
    order = list(wanted.values())
    previous = {c.get("type"): c for c in live}

    def render(cond: Condition) -> dict[str, Any]:
        old = previous.get(cond.type) or {}
        same = old.get("status") == cond.status and old.get("lastTransitionTime")
        out: dict[str, Any] = {
            "type": cond.type,
            "status": cond.status,
            "reason": cond.reason,
            "message": cond.message[:MAX_MESSAGE],
            "lastTransitionTime": old["lastTransitionTime"] if same else now,
        }
        if generation is not None:
            out["observedGeneration"] = generation
        return out

    merged: list[dict[str, Any]] = []
    for cond in live:
        kind = cond.get("type")
        if kind in wanted:
            merged.append(render(wanted.pop(kind)))
        elif kind not in managed:
            merged.append(cond)
    merged += [render(c) for c in order if c.type in wanted]
    return merged
