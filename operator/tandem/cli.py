"""The ``tandem`` command: one entry point, one module per subcommand.

Each subcommand module exposes ``register(subparsers)``, which adds its parser and sets
``func`` to a callable taking the parsed namespace and returning an exit code. A command
module keeps its top-level imports light (argparse only) and imports its implementation
inside ``func``, so ``tandem crd`` never pays for importing the operator or the servers.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

#: subcommand name -> module that registers it (imported lazily).
COMMANDS: dict[str, str] = {
    "crd": "tandem.commands.crd",
    "render": "tandem.commands.render",
    "validate": "tandem.commands.validate",
    "engine": "tandem.commands.engine",
    "router": "tandem.commands.router",
    "operator": "tandem.commands.operator",
    "up": "tandem.commands.up",
    "simulate": "tandem.commands.simulate",
    "profile": "tandem.commands.profile",
    "trace": "tandem.commands.trace",
}


def build_parser() -> argparse.ArgumentParser:
    from tandem import __version__

    parser = argparse.ArgumentParser(
        prog="tandem",
        description="Kubernetes operator and autoscaler for disaggregated LLM inference fleets.",
    )
    parser.add_argument("--version", action="version", version=f"tandem {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in COMMANDS.values():
        importlib.import_module(module).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else list(argv))
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    code: int = func(args)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
