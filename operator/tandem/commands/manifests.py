"""Reading InferenceService manifests from YAML files for the CLI (file I/O only)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any


class ManifestError(Exception):
    """A file that cannot be read or is not YAML."""


def read_documents(path: Path) -> list[tuple[int, Any]]:
    """Non-empty YAML documents of ``path`` (``-`` is stdin), with their index."""
    import yaml

    try:
        text = sys.stdin.read() if str(path) == "-" else path.read_text()
    except OSError as err:
        raise ManifestError(f"cannot read: {err.strerror or err}") from None
    try:
        docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError as err:
        raise ManifestError(f"not valid YAML: {err}") from None
    found = [(i, d) for i, d in enumerate(docs) if d is not None]
    if not found:
        raise ManifestError("no YAML document found")
    return found
