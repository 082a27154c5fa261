"""The router's engine pools: endpoints by role, kept across discovery updates. Pure.

Discovery (static flags or the pod watch) hands over the full URL list of a role each
time something changes; :meth:`Pool.set_urls` keeps the load and health state of
engines that stay, adds new ones fresh and drops the rest. A request that already holds
a dropped endpoint finishes with it and its accounting goes nowhere.
"""

from __future__ import annotations

from collections.abc import Iterable

from tandem.router.selection import Endpoint

#: Roles of the two modes: the pools a router of that mode needs.
ROLES_BY_MODE = {"disaggregated": ("prefill", "decode"), "aggregated": ("pool",)}
#: Weight of each new prompt in the running mean of prompt sizes.
PROMPT_EWMA_WEIGHT = 0.05


class Pool:
    """The endpoints of one role (``prefill``, ``decode`` or ``pool``)."""

    def __init__(self, role: str, urls: Iterable[str] = ()) -> None:
        self.role = role
        self.endpoints: dict[str, Endpoint] = {}
        self.version = 0
        """Bumped on every membership change, so waiters can tell something moved."""
        self.set_urls(urls)

    def set_urls(self, urls: Iterable[str]) -> bool:
        """Make the pool exactly ``urls``; return whether membership changed."""
        wanted = list(dict.fromkeys(u.rstrip("/") for u in urls))
        if wanted == list(self.endpoints):
            return False
        self.endpoints = {
            url: self.endpoints.get(url) or Endpoint(url=url, role=self.role) for url in wanted
        }
        self.version += 1
        return True

    def members(self) -> list[Endpoint]:
        return list(self.endpoints.values())

    def __len__(self) -> int:
        return len(self.endpoints)


class PromptSizes:
    """A running mean of prompt sizes (tokens), for valuing other routers' queued work.

    An exponentially weighted mean with weight 0.05 follows a change in the traffic mix
    within a few dozen requests. It starts at 512 tokens, a typical chat prompt.
    """

    def __init__(self, initial_tokens: float = 512.0) -> None:
        self.mean_tokens = initial_tokens

    def add(self, tokens: int) -> None:
        self.mean_tokens += PROMPT_EWMA_WEIGHT * (tokens - self.mean_tokens)
