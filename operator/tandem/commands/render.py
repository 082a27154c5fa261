"""``tandem render FILE``: print every child manifest as YAML, like ``helm template``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "render", help="print the Deployments, Services, ... an InferenceService becomes"
    )
    p.add_argument("file", type=Path, metavar="FILE", help="InferenceService YAML; - for stdin")
    p.add_argument(
        "--owner-uid",
        help="uid of the live InferenceService, to emit ownerReferences (omitted without it: "
        "a reference to a uid that does not exist gets children garbage-collected)",
    )
    p.add_argument(
        "--operator-namespace",
        default="tandem-system",
        metavar="NS",
        help="the operator's namespace, whose pods the engines' NetworkPolicy admits",
    )
    p.add_argument(
        "--prometheus-namespace",
        action="append",
        default=None,
        metavar="NS",
        help="namespaces of Prometheus (with a PodMonitor; default: monitoring)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import yaml

    from tandem.api.documents import ManifestError, read_documents
    from tandem.api.validate import SpecError, load_inference_service
    from tandem.manifests import NetworkPeers, Owner, build_children

    try:
        docs = read_documents(args.file)
    except ManifestError as err:
        print(f"{args.file}: {err}", file=sys.stderr)
        return 1
    out: list[dict[str, Any]] = []
    for _, doc in docs:
        try:
            isvc = load_inference_service(doc)
        except SpecError as err:
            print(
                f"{args.file}: invalid InferenceService:\n  " + str(err).replace("\n", "\n  "),
                file=sys.stderr,
            )
            return 1
        uid = args.owner_uid or isvc.metadata.uid
        owner = Owner(isvc.api_version, isvc.kind, isvc.name, uid or "")
        peers = NetworkPeers(
            args.operator_namespace, tuple(args.prometheus_namespace or ["monitoring"])
        )
        for child in build_children(isvc, owner, peers):
            if not uid:
                child["metadata"].pop("ownerReferences", None)
            out.append(child)
    sys.stdout.write(yaml.safe_dump_all(out, sort_keys=False, width=120))
    return 0
