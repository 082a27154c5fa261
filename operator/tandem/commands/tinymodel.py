"""``tandem engine tiny-model DIR``: write the tiny random-weight Llama that real vLLM
serves on a laptop (``examples/local-vllm.yaml``) and the tests use. Nothing is
downloaded: the weights and the tokenizer are made locally, deterministically."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def register(engine_sub: Any) -> None:
    p: argparse.ArgumentParser = engine_sub.add_parser(
        "tiny-model",
        help="write a tiny random-weight Llama for real vLLM (CPU) to serve",
        description="Writes a 2-layer Llama with random weights and a 512-token tokenizer "
        "(chat template included) into DIR, with the Python of vLLM's virtualenv (it has "
        "torch and transformers), and prints the file:// URI to serve it by "
        "(spec.model.uri, or tandem up --model-uri). Does nothing when DIR already holds "
        "the same model.",
    )
    p.add_argument("dir", type=Path, metavar="DIR", help="folder to write (created)")
    p.add_argument(
        "--vllm",
        default="vllm",
        metavar="PATH",
        help="the vllm executable whose virtualenv writes the model (default: vllm on PATH)",
    )
    p.add_argument("--force", action="store_true", help="write even when DIR is up to date")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tandem.local.install import VllmNotFound, find_vllm, write_tiny_model

    out: Path = args.dir.expanduser().absolute()
    try:
        install = find_vllm(args.vllm)
        line = write_tiny_model(install, out, force=args.force)
    except VllmNotFound as err:
        print(f"tandem engine tiny-model: {err}", file=sys.stderr)
        return 1
    except (RuntimeError, OSError) as err:
        print(f"tandem engine tiny-model: {err}", file=sys.stderr)
        return 1
    print(line)
    print(f"model.uri: {out.as_uri()}")
    return 0
