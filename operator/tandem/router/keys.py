"""API keys that grant priority classes: parsing the key files and reading a request's key.
Pure.

A priority class may require a key (``requireKey``): a request may then name that class
only with ``Authorization: Bearer KEY`` for a key the class's file lists. The keys come
from a directory with one file per class, named after the class, one key per line (``#``
comments and blank lines ignored): the layout of a Kubernetes Secret mounted as a volume,
whose keys are the class names. The router never sees the Kubernetes API for them; it
reads the files (:mod:`tandem.router.keyfile`).

Only SHA-256 digests of the keys are kept, so a key never sits in memory as text longer
than the parse, and a lookup compares digests, not secrets.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field

#: Shortest key accepted: 16 characters (a random hex or base64 key of 64+ bits).
MIN_KEY_CHARS = 16
#: Longest key accepted.
MAX_KEY_CHARS = 512


class KeyFileError(ValueError):
    """A key file the router refuses; the message names the file and the line, never
    the key."""


@dataclass(frozen=True)
class ClassKeys:
    """Which classes each key grants, by the key's digest."""

    grants: Mapping[bytes, frozenset[str]] = field(default_factory=dict)

    def classes_of(self, key: str | None) -> frozenset[str]:
        """The classes ``key`` grants (none for no key or an unknown one).

        >>> keys = parse_class_keys({"gold": "k" * 16})
        >>> sorted(keys.classes_of("k" * 16)), sorted(keys.classes_of("nope"))
        (['gold'], [])
        """
        if key is None:
            return frozenset()
        return self.grants.get(digest(key), frozenset())

    def __len__(self) -> int:
        return len(self.grants)


def digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()


def parse_class_keys(files: Mapping[str, str]) -> ClassKeys:
    """Keys by class from ``{class name: file text}``; :class:`KeyFileError` on a bad line.

    >>> keys = parse_class_keys({"gold": "# ops\\n" + "a" * 20, "silver": "a" * 20})
    >>> sorted(keys.classes_of("a" * 20))
    ['gold', 'silver']
    """
    grants: dict[bytes, set[str]] = {}
    for name, text in sorted(files.items()):
        for number, line in enumerate(text.splitlines(), start=1):
            key = line.strip()
            if not key or key.startswith("#"):
                continue
            if not MIN_KEY_CHARS <= len(key) <= MAX_KEY_CHARS or any(c.isspace() for c in key):
                raise KeyFileError(
                    f"class key file {name!r}, line {number}: a key is {MIN_KEY_CHARS} to "
                    f"{MAX_KEY_CHARS} characters without spaces, one per line"
                )
            grants.setdefault(digest(key), set()).add(name)
    return ClassKeys({d: frozenset(names) for d, names in grants.items()})


def parse_bearer(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer TOKEN`` header, else ``None``.

    >>> parse_bearer("Bearer abc"), parse_bearer("bearer  abc "), parse_bearer("Basic x")
    ('abc', 'abc', None)
    """
    if header is None:
        return None
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token
