"""``tandem profile URL``: measure an engine, write its profile block and a fitted preset.

The shell around :mod:`tandem.profile`: reads the flags (and an InferenceService for the
targets), asks the engine its limits, runs the sweep with a progress bar on stderr,
fits, prints the summary and writes ``--json`` and ``--plot`` files.
"""

from __future__ import annotations

import argparse
import secrets
import sys
from pathlib import Path
from typing import Any

DEFAULT_TTFT = "1s"
DEFAULT_ITL = "50ms"
DEFAULT_MAX_NUM_SEQS = 256
DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048

DESCRIPTION = """\
Drive a vLLM-compatible engine (or a prefill engine URL and a decode engine --decode URL)
through a sweep of prompt lengths (one request at a time: TTFT) and concurrencies (waves
of streamed requests: ITL), fit the simulated engine's cost model to what it measured, and
write the pool profile block of an InferenceService and that cost-model preset.

profile block, one replica, read from the fitted model:
  prefillTokensPerS  prompt tokens/s of the largest burst of typical prompts whose last
                     first token comes within the TTFT target
  kvTokenCapacity    KV-cache tokens: num_gpu_blocks x block_size of the engine's
                     vllm:cache_config_info gauge; an engine without it (or
                     --measure-kv) has it measured: vllm:kv_cache_usage_perc read during
                     the decode waves against the tokens their requests hold
  maxBatchAtItl      the largest decode batch whose step stays within the ITL target at
                     the typical context (prompt + output/2), within max_num_seqs and KV

targets: --ttft and --itl, else the InferenceService of --service (spec.qos.ttft and
spec.qos.itl), else TTFT 1s and ITL 50ms; the summary says which were used.

The preset needs the model's architecture: --sim-model or --model-config, else the preset
the served model's id names, else the config.json in the model folder the engine reports
(an engine on this machine). --quick runs a shorter sweep (under 5 minutes on a CPU
engine). The engine must serve nothing else meanwhile: its /metrics latency histograms
are read around every wave. On a GPU node, point it at vLLM there and paste the printed
block into the InferenceService; `tandem engine sim --preset OUT` and
`tandem simulate --preset OUT` run the engine model with the fitted preset."""


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "profile",
        help="measure an engine: the pool profile block and a fitted cost-model preset",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "url", metavar="URL", help="the engine (or the prefill engine), http://host:port"
    )
    p.add_argument("--decode", metavar="URL", help="the decode engine: profile a P/D pair")
    p.add_argument("--model", metavar="NAME", help="served model name (default: the first listed)")
    p.add_argument("--json", type=Path, metavar="OUT", help="write the profile document")
    p.add_argument("--plot", type=Path, metavar="OUT.png", help="measured against modelled")
    p.add_argument("--quick", action="store_true", help="a shorter sweep (fewer points, waves)")
    g = p.add_argument_group("targets and the typical request")
    g.add_argument("--ttft", metavar="DURATION", help=f"TTFT target (default {DEFAULT_TTFT})")
    g.add_argument("--itl", metavar="DURATION", help=f"ITL target (default {DEFAULT_ITL})")
    g.add_argument("--service", type=Path, metavar="FILE",
                   help="InferenceService whose qos targets and pool limits to use")  # fmt: skip
    g.add_argument("--prompt-tokens", type=int, metavar="N",
                   help="typical prompt (default min(1024, max_model_len/2))")  # fmt: skip
    g.add_argument("--output-tokens", type=int, metavar="N",
                   help="typical output (default min(256, max_model_len/4))")  # fmt: skip
    g = p.add_argument_group("the engine")
    g.add_argument("--max-num-seqs", type=int, metavar="N",
                   help="what the engine runs with (default: --service's pool, else "
                   f"{DEFAULT_MAX_NUM_SEQS})")  # fmt: skip
    g.add_argument("--max-num-batched-tokens", type=int, metavar="N",
                   help="what the engine runs with (default: --service's pool, else "
                   f"{DEFAULT_MAX_NUM_BATCHED_TOKENS})")  # fmt: skip
    g.add_argument("--sim-model", metavar="PRESET", help="architecture: a model preset")
    g.add_argument("--model-config", type=Path, metavar="FILE",
                   help="architecture: ModelSpec fields or a Hugging Face config.json")  # fmt: skip
    g.add_argument("--measure-kv", action="store_true",
                   help="measure the KV capacity even where the engine reports it")  # fmt: skip
    g = p.add_argument_group("the sweep")
    g.add_argument("--max-concurrency", type=int, metavar="N",
                   help="largest wave (default 256, --quick 64; at most max_num_seqs)")  # fmt: skip
    g.add_argument("--seed", type=int, metavar="N",
                   help="prompts' seed (default: a new one each run, so that no prompt is "
                   "in the engine's prefix cache from an earlier run)")  # fmt: skip
    g.add_argument("--timeout", type=float, default=600.0, metavar="S", help="per request (600)")
    g.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import asyncio

    from tandem.profile.measure import ProfileError
    from tandem.profile.run import SetupError, profile

    try:
        request = _request(args)
    except SetupError as err:
        print(f"tandem profile: {err}", file=sys.stderr)
        return 2
    show = not args.quiet and sys.stderr.isatty()
    try:
        outcome = asyncio.run(profile(request, show_progress=show))
    except SetupError as err:
        print(f"tandem profile: {err}", file=sys.stderr)
        return 2
    except ProfileError as err:
        print(f"tandem profile: {err}", file=sys.stderr)
        return 1
    print(outcome.summary)
    if args.json:
        import json

        args.json.write_text(json.dumps(outcome.document, indent=2) + "\n")
    if args.plot:
        from tandem.profile.figure import render_png

        args.plot.write_bytes(render_png(outcome.document["points"], outcome.title))
    return 0


def _request(args: argparse.Namespace) -> Any:
    """The run the flags describe (:class:`~tandem.profile.run.ProfileRequest`)."""
    from tandem.api.durations import parse_duration
    from tandem.profile.run import ProfileRequest, SetupError

    ttft_s = itl_s = None
    seqs, tokens = args.max_num_seqs, args.max_num_batched_tokens
    source = "defaults"
    if args.service is not None:
        ttft_s, itl_s, pool_seqs, pool_tokens = _read_service(args.service)
        seqs, tokens = seqs or pool_seqs, tokens or pool_tokens
        source = f"{args.service}: spec.qos"
    given: list[str] = []
    for flag, value in (("--ttft", args.ttft), ("--itl", args.itl)):
        if value is None:
            continue
        try:
            seconds = parse_duration(value)
        except ValueError as err:
            raise SetupError(f"{flag} {value!r}: {err}; e.g. 800ms, 1s, 1m30s") from None
        if seconds <= 0:
            raise SetupError(f"{flag} {value!r}: must be longer than 0")
        if flag == "--ttft":
            ttft_s = seconds
        else:
            itl_s = seconds
        given.append(flag)
    if given:
        source = "flags" if source == "defaults" else f"{source} and {' '.join(given)}"
    for flag, value in (("--max-num-seqs", seqs), ("--max-num-batched-tokens", tokens),
                        ("--prompt-tokens", args.prompt_tokens),
                        ("--output-tokens", args.output_tokens),
                        ("--max-concurrency", args.max_concurrency)):  # fmt: skip
        if value is not None and value < 1:
            raise SetupError(f"{flag} {value}: must be 1 or more")
    if args.sim_model and args.model_config:
        raise SetupError("--sim-model and --model-config both name the architecture; give one")
    for flag, url in (("URL", args.url), ("--decode", args.decode)):
        if url is not None and not url.startswith(("http://", "https://")):
            raise SetupError(f"{flag} {url!r}: expected http://host:port")
    return ProfileRequest(
        url=args.url.rstrip("/"),
        decode_url=args.decode.rstrip("/") if args.decode else None,
        model=args.model,
        quick=args.quick,
        ttft_s=ttft_s or parse_duration(DEFAULT_TTFT),
        itl_s=itl_s or parse_duration(DEFAULT_ITL),
        targets_source=source,
        max_num_seqs=seqs or DEFAULT_MAX_NUM_SEQS,
        max_num_batched_tokens=tokens or DEFAULT_MAX_NUM_BATCHED_TOKENS,
        prompt_tokens=args.prompt_tokens,
        output_tokens=args.output_tokens,
        max_concurrency=args.max_concurrency or (64 if args.quick else 256),
        sim_model=args.sim_model,
        model_config=args.model_config,
        measure_kv=args.measure_kv,
        seed=args.seed if args.seed is not None else secrets.randbelow(2**40),
        timeout_s=args.timeout,
    )


def _read_service(path: Path) -> tuple[float, float | None, int | None, int | None]:
    """(TTFT target, ITL target, max_num_seqs, max_num_batched_tokens) of the file's
    InferenceService: its decode pool's limits (or the aggregated pool's)."""
    from tandem.api.documents import ManifestError, read_documents
    from tandem.api.validate import SpecError, load_inference_service
    from tandem.profile.run import SetupError

    try:
        docs = read_documents(path)
        if not docs:
            raise SetupError(f"--service {path}: no document in it")
        isvc = load_inference_service(docs[0][1])
    except (OSError, ManifestError, SpecError) as err:
        raise SetupError(f"--service {path}: {err}") from None
    spec = isvc.spec
    pools = spec.pools()
    pool = pools.get("decode") or pools.get("pool") or next(iter(pools.values()))
    ttft, itl = spec.qos.ttft.seconds, spec.qos.itl.seconds
    return ttft, itl, pool.max_num_seqs, pool.max_num_batched_tokens
