"""Observation streams as JSON-ready dicts, for recording and replaying them. Pure.

A recorded stream is what the parity test feeds to both drivers (the operator's and
:class:`~tandem.sim.autoscaler.driver.AutoscalerDriver`). :func:`observation_to_dict` and
:func:`observation_from_dict` are exact inverses for everything an
:class:`~tandem.observe.types.Observation` holds (percentile keys become strings in
JSON and come back as ints); one observation per line makes a JSON-lines recording.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from tandem.observe.types import LatencyObservation, Observation, PodObservation, PoolObservation


def observation_to_dict(obs: Observation) -> dict[str, Any]:
    """A JSON-ready form of ``obs``."""
    data = asdict(obs)
    data["errors"] = list(obs.errors)
    data["empty_queries"] = list(obs.empty_queries)
    return data


def _latency(data: Mapping[str, Any] | None) -> LatencyObservation | None:
    if data is None:
        return None
    return LatencyObservation(
        ttft_s={int(k): float(v) for k, v in data.get("ttft_s", {}).items()},
        itl_s={int(k): float(v) for k, v in data.get("itl_s", {}).items()},
        requests=float(data.get("requests", 0.0)),
        source=str(data.get("source", "router")),
        requests_per_s=data.get("requests_per_s"),
        error_requests_per_s=data.get("error_requests_per_s"),
        ttft_mean_s=data.get("ttft_mean_s"),
        itl_mean_s=data.get("itl_mean_s"),
        queueing_ratio={int(k): float(v) for k, v in data.get("queueing_ratio", {}).items()},
        feasible_requests=data.get("feasible_requests"),
        infeasible_requests={
            str(k): float(v) for k, v in data.get("infeasible_requests", {}).items()
        },
    )


def _pool(data: Mapping[str, Any]) -> PoolObservation:
    values = dict(data)
    values["failed"] = dict(values.get("failed", {}))
    values["pods"] = {name: PodObservation(**pod) for name, pod in values.get("pods", {}).items()}
    values["latency"] = _latency(values.get("latency"))
    return PoolObservation(**values)


def observation_from_dict(data: Mapping[str, Any]) -> Observation:
    """Inverse of :func:`observation_to_dict`."""
    latency = {cls: _latency(v) for cls, v in data.get("latency_by_class", {}).items()}
    return Observation(
        now_s=float(data["now_s"]),
        window_s=float(data["window_s"]),
        pools={role: _pool(p) for role, p in data["pools"].items()},
        latency_by_class={cls: v for cls, v in latency.items() if v is not None},
        arrival_prompt_tokens_per_s=data.get("arrival_prompt_tokens_per_s"),
        absorbed_requests_per_s=float(data.get("absorbed_requests_per_s", 0.0)),
        absorbed_prompt_tokens_per_s=float(data.get("absorbed_prompt_tokens_per_s", 0.0)),
        errors=tuple(data.get("errors", ())),
        empty_queries=tuple(data.get("empty_queries", ())),
    )
