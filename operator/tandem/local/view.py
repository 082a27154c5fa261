"""The live view of ``tandem up``: a progress bar for the load and a table of the pools,
redrawn in place with ``rich``. Writes to the terminal.

On a terminal the view is a ``rich.live.Live`` display: the load's progress (requests
sent of those the trace holds within the duration, served, failed), then one row per
pool (pods desired, ready, draining; waiting and running requests; KV cache usage; the
last decision), then the router's latency against the targets. Scale changes and
engine failures are printed above it as they happen, so they stay in the scrollback.
Elsewhere (a pipe, a log file) only those lines are printed; the summary at the end is
the same everywhere.
"""

from __future__ import annotations

import math
from types import TracebackType
from typing import TextIO

from rich.console import Console, Group
from rich.live import Live
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from tandem.api import InferenceService
from tandem.local.fleet import LocalFleet
from tandem.local.load import LoadStats
from tandem.observe.types import Observation
from tandem.policy.types import Decision


class LiveView:
    """The live display of one run; a context manager around ``rich.live.Live``."""

    def __init__(self, isvc: InferenceService, out: TextIO, enabled: bool) -> None:
        self.isvc = isvc
        self.console = Console(file=out, highlight=False, soft_wrap=True)
        self.live_on = enabled and self.console.is_terminal
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[detail]}"),
            TimeElapsedColumn(),
            console=self.console,
        )
        self._task = self.progress.add_task("starting engines", total=None, detail="")
        self._table: Table | None = None
        self._live = Live(
            self._render(), console=self.console, refresh_per_second=4, transient=False
        )

    def __enter__(self) -> LiveView:
        if self.live_on:
            self._live.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self.live_on:
            self._live.stop()

    def say(self, line: str) -> None:
        """A line that stays: above the live display, or alone without one."""
        self.console.print(line, markup=False, highlight=False)

    def starting(self, fleet: LocalFleet) -> None:
        """Engines are starting: how many of each pool are ready."""
        ready = ", ".join(
            f"{role} {len(fleet.ready(role))}/{fleet.replicas(role)}" for role in fleet.pods
        )
        self.progress.update(self._task, description="starting engines", detail=ready)
        self._refresh()

    def loading(self, stats: LoadStats | None, duration_s: float | None) -> None:
        """The load began (or, without one, the fleet is up)."""
        if stats is None:
            what = f"serving for {duration_s:g}s" if duration_s else "serving (Ctrl-C stops)"
            self.progress.update(self._task, description=what, detail="", total=None)
        else:
            self.progress.reset(self._task, description="load", total=stats.planned or None)
        self._refresh()

    def update(
        self,
        now_s: float,
        fleet: LocalFleet,
        obs: Observation | None,
        decision: Decision | None,
        stats: LoadStats | None,
    ) -> None:
        """Redraw with the latest tick (``obs``/``decision`` None between ticks)."""
        if stats is not None:
            self.progress.update(
                self._task,
                total=stats.planned or None,
                completed=stats.sent,
                detail=f"served {stats.ok}, failed {stats.failed}",
            )
        if obs is not None:
            self._table = self._pools_table(now_s, fleet, obs, decision)
        self._refresh()

    def _refresh(self) -> None:
        if self.live_on:
            self._live.update(self._render())

    def _render(self) -> Group:
        parts: list[Progress | Table] = [self.progress]
        if self._table is not None:
            parts.append(self._table)
        return Group(*parts)

    def _pools_table(
        self, now_s: float, fleet: LocalFleet, obs: Observation, decision: Decision | None
    ) -> Table:
        table = Table(
            title=f"{self.isvc.name} at t={now_s:.0f}s",
            title_justify="left",
            caption=self._latency(obs),
            caption_justify="left",
        )
        for column in ("pool", "desired", "ready", "draining", "waiting", "running", "KV"):
            table.add_column(column, justify="left" if column == "pool" else "right")
        table.add_column("last decision", overflow="fold")
        draining = fleet.draining()
        for role in fleet.pods:
            pool = obs.pools.get(role)
            reason = decision.pools[role].reason if decision and role in decision.pools else ""
            table.add_row(
                role,
                str(fleet.replicas(role)),
                str(len(fleet.ready(role))),
                str(draining) if draining else "",
                _count(pool.waiting_requests if pool else math.nan),
                _count(pool.running_requests if pool else math.nan),
                "-" if pool is None or math.isnan(pool.kv_usage) else f"{pool.kv_usage:.0%}",
                reason,
            )
        return table

    def _latency(self, obs: Observation) -> str:
        qos = self.isvc.spec.qos
        parts = []
        for name, lat in obs.latency_by_class.items():
            ttft = lat.ttft_s.get(qos.ttft.percentile)
            itl = lat.itl_s.get(qos.itl.percentile)
            infeasible = "".join(
                f", {n:g} infeasible ({reason})"
                for reason, n in sorted(lat.infeasible_requests.items())
            )
            parts.append(
                f"{name}: TTFT p{qos.ttft.percentile} {_ms(ttft)} (target "
                f"{_ms(qos.ttft.seconds)}), ITL p{qos.itl.percentile} {_ms(itl)} (target "
                f"{_ms(qos.itl.seconds)}) from the {lat.source}{infeasible}"
            )
        if obs.absorbed_requests_per_s:
            parts.append(
                f"absorbed by decode engines: {obs.absorbed_requests_per_s:.2g} req/s, "
                f"{obs.absorbed_prompt_tokens_per_s:.3g} prompt tok/s"
            )
        return "; ".join(parts) or "latency: no requests yet"


def _count(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.0f}"


def _ms(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "-"
    return f"{value * 1000:.0f}ms" if value < 10 else f"{value:.0f}s"
