"""What a simulated fleet is made of, read from an InferenceService. Pure.

:func:`build_fleet_plan` turns the spec into a :class:`FleetPlan`: per pool the engine
model's configuration (preset model and GPU, tensor parallelism, vLLM's scheduler
limits unless the pool sets them), the GPUs one replica holds and its replica bounds;
for the fleet the cold start (``autoscaling.coldStart``), the drain limit
(``engine.shutdownTimeout``), the KV link, the router's settings and the latency
targets. Overrides (``model``, ``gpu``, ``cold_start_s``, ...) come from the command line.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from tandem.api import InferenceService
from tandem.api.vocab import PoolRole
from tandem.engine.model import CostModel, Engine, EngineConfig, get_model
from tandem.engine.model.cost_preset import CostPreset
from tandem.policy.config import LatencyTargets, PolicyConfig, compute_policy_config
from tandem.router.config import RouterConfig, build_router_config

#: NIXL over one 400 Gb/s RDMA NIC: 50 GB/s (the engine model's default), bytes/s.
DEFAULT_KV_LINK_BYTES_PER_S = 50e9
#: GPU preset when a pool names no ``gpu.type``.
DEFAULT_GPU = "h100"
#: The prefill engines' KV lease, seconds: the decode side heartbeats while it queues
#: a request (vLLM's NIXL connector, every lease/6), so a held KV never expires before
#: it is pulled; the lease only matters for requests nobody will pull.
HEARTBEAT_LEASE_S = 1e9


class PlanError(ValueError):
    """A spec the simulator cannot model; the message says which field to set."""


@dataclass(frozen=True)
class PoolPlan:
    """How one pool's pods are built and bounded."""

    role: PoolRole
    """``prefill``, ``decode`` or ``pool`` (aggregated)."""
    engine_config: EngineConfig
    cost: CostModel
    gpus_per_replica: int
    min_replicas: int
    max_replicas: int
    initial_replicas: int
    frontend_latency_s: float = 0.0
    """What each engine's front end adds to a request's first token (and its end), over
    the engine's own time: a measured preset's ``frontend``. Modelled as the way out to
    the client: the engine's own timings and queue are unaffected."""
    exact_engine: bool = False
    """Visit every sequence every iteration (no steady-decode shortcut): the same run,
    slower; a check of the shortcut on whole simulations."""

    def new_engine(self) -> Engine:
        """An engine model for one pod; decoding sequences kept steady (O(1) per
        iteration, :mod:`tandem.engine.model.steady`) unless ``exact_engine``."""
        config = replace(self.engine_config, steady_decode=not self.exact_engine)
        return Engine(config, self.cost)

    @property
    def kv_capacity_tokens(self) -> int:
        """KV-cache tokens of one replica (``num_gpu_blocks x block_size``)."""
        return self.engine_config.num_gpu_blocks * self.engine_config.block_size


@dataclass(frozen=True)
class FleetPlan:
    """A whole simulated service: pools, router, timings and targets."""

    mode: str
    pools: Mapping[PoolRole, PoolPlan]
    router: RouterConfig
    targets: LatencyTargets
    class_targets: Mapping[str, LatencyTargets] = field(default_factory=dict)
    class_priority: Mapping[str, int] = field(default_factory=dict)
    cold_start_s: float = 120.0
    """From a scale-up request to a ready pod, seconds."""
    shutdown_timeout_s: float = 30.0
    """How long a removed pod drains before its remaining requests are aborted, seconds."""
    kv_link_bytes_per_s: float = DEFAULT_KV_LINK_BYTES_PER_S
    router_replicas: int = 1

    @property
    def max_inflight(self) -> int:
        """Router admission over all router replicas (each admits ``maxInflight``)."""
        return self.router.max_inflight * self.router_replicas

    def targets_for(self, klass: str) -> LatencyTargets:
        return self.class_targets.get(klass, self.targets)


def resolve_model_preset(isvc: InferenceService) -> str:
    """The engine-model preset for the service's model: ``engine.simModel`` for the sim
    backend, else the Hugging Face id in ``model.uri`` or ``model.name``."""
    spec = isvc.spec
    if spec.engine.backend == "sim":
        return spec.engine.sim_model
    uri = spec.model.uri
    candidates = [spec.model.name]
    if uri.startswith("hf://"):
        candidates.insert(0, uri.removeprefix("hf://").split("@", 1)[0])
    for name in candidates:
        try:
            get_model(name)
        except KeyError:
            continue
        return name
    raise PlanError(
        f"no engine-model preset for model {candidates[0]!r}; pass --model "
        "(llama-3.1-8b, llama-3.1-70b, llama-2-70b)"
    )


def build_fleet_plan(
    isvc: InferenceService,
    *,
    model: str | None = None,
    gpu: str | None = None,
    cold_start_s: float | None = None,
    kv_link_bytes_per_s: float = DEFAULT_KV_LINK_BYTES_PER_S,
    mode: str | None = None,
    exact_engine: bool = False,
    preset: CostPreset | None = None,
) -> FleetPlan:
    """The fleet an InferenceService declares (``mode`` may force ``aggregated``);
    ``preset``: every pool's engines are the measured one (its model, device, KV cache
    and scheduler limits; the pool's own ``maxNumSeqs``/``maxNumBatchedTokens`` win)."""
    spec = isvc.spec
    if preset is not None:
        model = model or "measured"
    model_name = model or resolve_model_preset(isvc)
    pools: dict[PoolRole, PoolPlan] = {}
    specs = spec.pools()
    if mode == "aggregated" and spec.mode != "aggregated":
        specs = {"pool": spec.decode or spec.prefill or next(iter(specs.values()))}
    for role, pool in specs.items():
        gpu_name = gpu or (pool.gpu.type.lower() if pool.gpu.type else DEFAULT_GPU)
        overrides: dict[str, object] = {
            "scheduling_policy": spec.engine.scheduling_policy,
            "enable_prefix_caching": False,
            "kv_link_bytes_per_s": kv_link_bytes_per_s,
            "kv_load_failure_policy": spec.engine.kv_transfer.load_failure_policy,
        }
        if role == "prefill":
            overrides["kv_lease_s"] = HEARTBEAT_LEASE_S
        if pool.max_num_seqs:
            overrides["max_num_seqs"] = pool.max_num_seqs
        if pool.max_num_batched_tokens:
            overrides["max_num_batched_tokens"] = pool.max_num_batched_tokens
        if pool.long_prefill_token_threshold:
            overrides["long_prefill_token_threshold"] = pool.long_prefill_token_threshold
        try:
            if preset is not None:
                probe = Engine(preset.engine_config(**overrides), preset.cost_model())
            else:
                probe = Engine.from_presets(
                    model_name,
                    gpu_name,
                    pool.tp_size,
                    gpu_memory_utilization=pool.gpu_memory_utilization or 0.9,
                    **overrides,
                )
        except KeyError as err:
            raise PlanError(str(err.args[0]) if err.args else str(err)) from None
        except ValueError as err:
            raise PlanError(f"{role}: the preset's engine: {err}") from None
        config = probe.config
        if spec.model.max_model_len:
            try:
                config = replace(config, max_model_len=spec.model.max_model_len)
            except ValueError as err:
                raise PlanError(f"spec.model.maxModelLen: {err}") from None
        if config.num_gpu_blocks < 1:
            raise PlanError(f"{role}: {model_name} does not fit on {pool.tp_size} x {gpu_name}")
        pools[role] = PoolPlan(
            role=role,
            engine_config=config,
            cost=probe.cost,
            gpus_per_replica=max(pool.gpu.count, 1),
            min_replicas=pool.replicas.min,
            max_replicas=pool.replicas.max,
            initial_replicas=pool.replicas.start,
            frontend_latency_s=preset.frontend_latency_s if preset is not None else 0.0,
            exact_engine=exact_engine,
        )
    policy = compute_policy_config(isvc)
    fleet_mode = "aggregated" if "pool" in pools else "disaggregated"
    router = replace(build_router_config(isvc), mode=fleet_mode)  # type: ignore[arg-type]
    return FleetPlan(
        mode=fleet_mode,
        pools=pools,
        router=router,
        targets=policy.targets,
        class_targets=dict(policy.class_targets),
        class_priority={c.name: c.priority for c in router.classes},
        cold_start_s=policy.cold_start_s if cold_start_s is None else cold_start_s,
        shutdown_timeout_s=spec.engine.shutdown_timeout,
        kv_link_bytes_per_s=kv_link_bytes_per_s,
        router_replicas=spec.router.replicas,
    )


def build_policy_config(isvc: InferenceService, plan: FleetPlan) -> PolicyConfig:
    """The policy configuration, with the cold start the simulation uses."""
    return replace(compute_policy_config(isvc), cold_start_s=plan.cold_start_s)
