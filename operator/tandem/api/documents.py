"""Reading InferenceService manifests: YAML text into documents (:func:`parse_documents`),
and the file or stdin into text (:func:`read_documents`, the one file read in ``api``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml


class ManifestError(Exception):
    """A file that cannot be read or is not YAML."""


def parse_documents(text: str) -> list[tuple[int, Any]]:
    """Non-empty YAML documents of ``text``, with their index in the stream."""
    try:
        docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError as err:
        raise ManifestError(f"not valid YAML: {err}") from None
    found = [(i, d) for i, d in enumerate(docs) if d is not None]
    if not found:
        raise ManifestError("no YAML document found")
    return found


def read_documents(path: Path) -> list[tuple[int, Any]]:
    """Non-empty YAML documents of ``path`` (``-`` is stdin), with their index."""
    try:
        text = sys.stdin.read() if str(path) == "-" else path.read_text()
    except OSError as err:
        raise ManifestError(f"cannot read: {err.strerror or err}") from None
    return parse_documents(text)
