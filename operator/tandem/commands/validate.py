"""``tandem validate FILE``: schema and semantic checks, every problem listed."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "validate", help="check InferenceService manifests (exit 1 listing every problem)"
    )
    p.add_argument(
        "files", nargs="+", type=Path, metavar="FILE", help="YAML manifest(s); - for stdin"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tandem.api.documents import ManifestError, read_documents
    from tandem.api.validate import validate_manifest

    failed = False
    for file in args.files:
        try:
            docs = read_documents(file)
        except ManifestError as err:
            print(f"{file}: {err}", file=sys.stderr)
            failed = True
            continue
        for index, doc in docs:
            where = f"{file}" if len(docs) == 1 else f"{file} (document {index + 1})"
            problems = validate_manifest(doc)
            if problems:
                failed = True
                print(f"{where}: {len(problems)} problem(s)", file=sys.stderr)
                for problem in problems:
                    print(f"  {problem}", file=sys.stderr)
            else:
                name = doc.get("metadata", {}).get("name", "?")
                print(f"{where}: InferenceService {name} is valid")
    return 1 if failed else 0
