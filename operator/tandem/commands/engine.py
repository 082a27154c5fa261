"""``tandem engine sim``: run a simulated vLLM engine (one process, one engine) on a port.

The flags ``--role``, ``--port``, ``--model``, ``--served-model-name`` and ``--gpu`` are a
contract other tools start engines with; the rest mirror ``vllm serve`` where vLLM has the
same knob, plus the simulator's own (speed-up, fault injection, calibration overrides).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from tandem.commands import tinymodel


def _size(text: str) -> int:
    """``4096``, ``4k`` or ``4K`` (vLLM's --max-model-len syntax)."""
    value = text.strip().lower()
    mult = 1
    if value.endswith("k"):
        mult, value = 1024, value[:-1]
    elif value.endswith("m"):
        mult, value = 1024**2, value[:-1]
    try:
        return int(float(value) * mult)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a token count: {text!r}") from None


def register(sub: Any) -> None:
    engine: argparse.ArgumentParser = sub.add_parser(
        "engine", help="engine tools (simulator, the tiny model for real vLLM)"
    )
    engine_sub = engine.add_subparsers(dest="engine_command", metavar="ENGINE_COMMAND")

    def engine_help(_args: argparse.Namespace) -> int:
        engine.print_help()
        return 2

    engine.set_defaults(func=engine_help)
    p: argparse.ArgumentParser = engine_sub.add_parser(
        "sim",
        help="serve a simulated vLLM 0.34 engine (OpenAI API, /metrics, P/D handoff)",
        description="Serve a simulated vLLM engine: continuous batching, paged KV cache and a "
        "calibrated roofline cost model stepped in real time.",
    )
    g = p.add_argument_group("contract")
    g.add_argument("--role", choices=["aggregated", "prefill", "decode"], default="aggregated")
    g.add_argument("--port", type=int, default=8000)
    g.add_argument(
        "--model",
        default="llama-3.1-8b",
        help="preset (llama-3.1-8b, llama-3.1-70b, llama-2-70b) or its Hugging Face id",
    )
    g.add_argument("--served-model-name", nargs="+", default=None, metavar="NAME")
    g.add_argument("--gpu", default="h100", help="h100, h200, a100, a100-40gb, l40s")

    g = p.add_argument_group("model and hardware")
    g.add_argument("--host", default="0.0.0.0")
    g.add_argument(
        "--preset",
        type=Path,
        metavar="FILE",
        help="a measured engine: a cost-model preset, or a `tandem profile` document (its "
        "model, device, overheads, KV cache and scheduler limits; flags given win)",
    )
    g.add_argument("--model-config", type=Path, help="JSON/YAML file of ModelSpec fields")
    g.add_argument("--gpu-config", type=Path, help="JSON/YAML file of GpuSpec fields")
    g.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    g.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    g.add_argument("--num-gpu-blocks-override", type=int, default=None)
    g.add_argument("--compute-efficiency", type=float, help="override the calibration")
    g.add_argument("--memory-efficiency", type=float, help="override the calibration")
    g.add_argument("--overhead-per-layer-us", type=float, help="override the calibration")
    g.add_argument("--seq-overhead-per-layer-us", type=float, help="override the calibration")

    g = p.add_argument_group("scheduler and cache (as vllm serve)")
    g.add_argument("--max-num-seqs", type=int, default=None)
    g.add_argument("--max-num-batched-tokens", type=int, default=None)
    g.add_argument("--max-model-len", type=_size, default=None)
    g.add_argument("--block-size", type=int, default=None, help="default 16")
    g.add_argument("--scheduling-policy", choices=["fcfs", "priority"], default="fcfs")
    g.add_argument("--enable-chunked-prefill", action=argparse.BooleanOptionalAction, default=True)
    g.add_argument(
        "--long-prefill-token-threshold",
        type=int,
        default=0,
        metavar="N",
        help="most prompt tokens one request computes per step beside others (0: no cap)",
    )
    g.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=True)
    g.add_argument("--batching", choices=["continuous", "static"], default="continuous")
    g.add_argument(
        "--prioritize",
        choices=["decode", "prefill"],
        default="decode",
        help="continuous batching: who takes the token budget first",
    )
    g.add_argument("--max-num-queued-reqs", type=int, default=None)
    g.add_argument("--max-num-queued-tokens", type=int, default=None)

    g = p.add_argument_group("disaggregation")
    g.add_argument(
        "--kv-transfer-config",
        type=json.loads,
        default=None,
        help="vLLM's JSON; kv_load_failure_policy and "
        "kv_connector_extra_config.kv_lease_duration are honoured",
    )
    g.add_argument("--kv-load-failure-policy", choices=["fail", "recompute"], default=None)
    g.add_argument("--kv-lease-s", type=float, default=None, help="default 30")
    g.add_argument("--kv-bandwidth-gbps", type=float, default=50.0, help="GB/s, default 50")
    g.add_argument(
        "--kv-host",
        default=os.environ.get("VLLM_NIXL_SIDE_CHANNEL_HOST"),
        help="remote_host to advertise (default: $VLLM_NIXL_SIDE_CHANNEL_HOST, else the "
        "address each request arrived on)",
    )
    g.add_argument("--kv-port", type=int, default=None, help="remote_port to advertise")
    g.add_argument("--kv-pull-timeout-s", type=float, default=30.0)
    g.add_argument("--engine-id", default=None)

    g = p.add_argument_group("simulation")
    g.add_argument("--startup-delay", type=float, default=0.0, help="seconds of 503 /health")
    g.add_argument("--speedup", type=float, default=1.0, help="simulated s per wall s")
    g.add_argument(
        "--eos-mean-tokens",
        type=int,
        default=0,
        help="mean natural output length (0: run to max_tokens)",
    )
    g.add_argument("--fault-error-rate", type=float, default=0.0)
    g.add_argument("--fault-error-status", type=int, default=500, choices=[429, 500, 503])
    g.add_argument("--fault-hang-rate", type=float, default=0.0)
    g.add_argument("--fault-crash-after", type=int, default=None, metavar="N")
    g.add_argument("--fault-seed", type=int, default=0)
    g.add_argument("--shutdown-timeout", type=float, default=0.0)
    g.add_argument("--log-level", default="warning")
    p.set_defaults(func=run_sim)
    tinymodel.register(engine_sub)


def _load_mapping(path: Path) -> dict[str, Any]:
    text = path.read_text()
    if path.suffix in (".yaml", ".yml"):
        import yaml

        data = yaml.safe_load(text)
    else:
        data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping of fields")
    return data


def build_options(args: argparse.Namespace) -> Any:
    """The :class:`SimOptions` the flags describe (raises ValueError/KeyError if invalid)."""
    from tandem.engine.model import (
        get_gpu,
        gpu_spec_from_mapping,
        lookup_calibration,
        model_spec_from_mapping,
    )
    from tandem.engine.model.calibration import Calibration
    from tandem.engine.model.config import KVLoadFailurePolicy
    from tandem.engine.model.cost_preset import cost_preset_from_mapping
    from tandem.engine.server.config import FaultConfig
    from tandem.engine.server.factory import SimOptions

    model_spec = (
        model_spec_from_mapping(_load_mapping(args.model_config)) if args.model_config else None
    )
    gpu_spec = gpu_spec_from_mapping(_load_mapping(args.gpu_config)) if args.gpu_config else None
    preset = None
    if args.preset is not None:
        if args.model_config or args.gpu_config:
            raise ValueError("--preset names the model and the device: drop --model-config "
                             "and --gpu-config, or drop --preset")  # fmt: skip
        preset = cost_preset_from_mapping(_load_mapping(args.preset), str(args.preset))
        model_spec, gpu_spec = preset.model, preset.gpu
    calibration = preset.calibration if preset else None
    overrides = (
        args.compute_efficiency,
        args.memory_efficiency,
        args.overhead_per_layer_us,
        args.seq_overhead_per_layer_us,
    )
    if any(v is not None for v in overrides):
        family = (gpu_spec or get_gpu(args.gpu)).calibration_family
        base = calibration or lookup_calibration(family, args.tensor_parallel_size)
        calibration = Calibration(
            args.compute_efficiency or base.compute_efficiency,
            args.memory_efficiency or base.memory_efficiency,
            base.overhead_s_per_layer if overrides[2] is None else overrides[2] * 1e-6,
            base.seq_overhead_s_per_layer if overrides[3] is None else overrides[3] * 1e-6,
        )
    kv_config = args.kv_transfer_config or {}
    extra = kv_config.get("kv_connector_extra_config") or {}
    raw = args.kv_load_failure_policy or kv_config.get("kv_load_failure_policy") or "fail"
    policy: KVLoadFailurePolicy = "recompute" if raw == "recompute" else "fail"
    if raw not in ("fail", "recompute"):
        raise ValueError(
            f"kv_load_failure_policy is {raw!r}; valid: 'fail' (end the request) or "
            "'recompute' (prefill it locally)"
        )
    lease_s = args.kv_lease_s or float(extra.get("kv_lease_duration", 30.0))
    faults = FaultConfig(
        error_rate=args.fault_error_rate,
        error_status=args.fault_error_status,
        hang_rate=args.fault_hang_rate,
        crash_after=args.fault_crash_after,
        seed=args.fault_seed,
    )

    def measured(flag: Any, field: str) -> Any:
        """A flag given wins; else the preset's measured value; else the default."""
        return flag if flag is not None or preset is None else getattr(preset, field)

    return SimOptions(
        role=args.role,
        model=args.model,
        model_spec=model_spec,
        gpu=args.gpu,
        gpu_spec=gpu_spec,
        tensor_parallel=preset.tensor_parallel if preset else args.tensor_parallel_size,
        served_model_names=tuple(args.served_model_name or ()),
        calibration=calibration,
        gpu_memory_utilization=args.gpu_memory_utilization,
        num_gpu_blocks=measured(args.num_gpu_blocks_override, "num_gpu_blocks"),
        max_num_seqs=measured(args.max_num_seqs, "max_num_seqs"),
        max_num_batched_tokens=measured(args.max_num_batched_tokens, "max_num_batched_tokens"),
        max_model_len=measured(args.max_model_len, "max_model_len"),
        block_size=measured(args.block_size, "block_size") or 16,
        scheduling_policy=args.scheduling_policy,
        batching=args.batching,
        prioritize=args.prioritize,
        enable_chunked_prefill=args.enable_chunked_prefill,
        long_prefill_token_threshold=args.long_prefill_token_threshold,
        enable_prefix_caching=args.enable_prefix_caching,
        kv_lease_s=lease_s,
        kv_link_bytes_per_s=args.kv_bandwidth_gbps * 1e9,
        kv_load_failure_policy=policy,
        startup_delay_s=args.startup_delay,
        speedup=args.speedup,
        eos_mean_tokens=args.eos_mean_tokens,
        max_num_queued_reqs=args.max_num_queued_reqs,
        max_num_queued_tokens=args.max_num_queued_tokens,
        kv_host=args.kv_host,
        kv_port=args.kv_port,
        kv_pull_timeout_s=args.kv_pull_timeout_s,
        faults=faults,
        frontend_latency_s=preset.frontend_latency_s if preset else 0.0,
        engine_id=args.engine_id,
    )


def run_sim(args: argparse.Namespace) -> int:
    import asyncio
    import logging

    from tandem.engine.server import build_server_config, create_app
    from tandem.engine.server.app import serve

    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    try:
        config = build_server_config(build_options(args))
    except (ValueError, KeyError, OSError) as exc:
        print(f"tandem engine sim: {exc}", file=sys.stderr)
        return 2

    def on_crash() -> None:
        print("tandem engine sim: injected crash, exiting", file=sys.stderr, flush=True)
        os._exit(1)

    app = create_app(config, on_crash=on_crash)
    eng = config.engine
    print(
        f"tandem engine sim: role={config.role} model={config.served_model_names[0]} "
        f"gpu={config.cost.gpu.name}x{config.cost.tensor_parallel} blocks={eng.num_gpu_blocks} "
        f"max_num_seqs={eng.max_num_seqs} on http://{args.host}:{args.port}",
        flush=True,
    )
    # vLLM's shutdown: on SIGTERM the listener stays open, running requests finish within
    # --shutdown-timeout and new ones are refused (tandem.engine.server.app.drain).
    asyncio.run(
        serve(
            app,
            args.host,
            args.port,
            shutdown_timeout_s=args.shutdown_timeout,
            backlog=2048,  # as vLLM's server: a router opens hundreds of connections at once
        )
    )
    return 0
