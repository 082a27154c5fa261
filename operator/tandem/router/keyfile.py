"""The class key files: read at start, re-read while the router runs. Does file I/O.

``--class-keys DIR`` names a directory with one file per priority class, one API key per
line (:mod:`tandem.router.keys` parses them). In a cluster it is the Secret
``<service>-class-keys`` mounted as a volume; the kubelet swaps its files atomically when
the Secret changes, and the router re-reads them every :data:`RELOAD_S`, so a rotated key
takes effect without a restart. A directory that cannot be read or parsed at start stops
the router; later, the keys last read stay in force and the problem is logged (naming the
file and line, never a key).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from tandem.router.keys import ClassKeys, KeyFileError, parse_class_keys
from tandem.router.state import Router

log = logging.getLogger("tandem.router.keys")

#: How often the key files are read again (seconds).
RELOAD_S = 10.0
#: Largest key file read (bytes): thousands of keys.
MAX_FILE_BYTES = 1 << 20


def read_class_keys(directory: Path) -> ClassKeys:
    """Every class's keys under ``directory``; :class:`KeyFileError` when unreadable.

    Hidden entries are skipped: a Secret volume keeps its real files under ``..data``
    and links them by key name.
    """
    files: dict[str, str] = {}
    try:
        entries = sorted(directory.iterdir())
    except OSError as err:
        raise KeyFileError(f"--class-keys {directory}: {err.strerror or err}") from None
    for path in entries:
        if path.name.startswith(".") or not path.is_file():
            continue
        try:
            with path.open("rb") as handle:
                raw = handle.read(MAX_FILE_BYTES + 1)
        except OSError as err:
            raise KeyFileError(f"class key file {path.name!r}: {err.strerror or err}") from None
        if len(raw) > MAX_FILE_BYTES:
            raise KeyFileError(f"class key file {path.name!r} is larger than {MAX_FILE_BYTES} B")
        try:
            files[path.name] = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise KeyFileError(f"class key file {path.name!r} is not UTF-8 text") from None
    return parse_class_keys(files)


def load_class_keys(router: Router, directory: Path) -> None:
    """Read the keys once into ``router`` (at start: errors propagate)."""
    keys = read_class_keys(directory)
    router.class_keys = keys
    keyed = [c.name for c in router.config.classes if c.require_key]
    log.info("class keys read from %s: %d keys; classes that need one: %s",
             directory, len(keys), ", ".join(keyed) or "(none)")  # fmt: skip


async def keep_class_keys(router: Router, directory: Path, *, every_s: float = RELOAD_S) -> None:
    """Re-read the keys every ``every_s``; never returns."""
    while True:
        await asyncio.sleep(every_s)
        await reload_class_keys(router, directory)


async def reload_class_keys(router: Router, directory: Path) -> bool:
    """Read the keys again; whether they were read (else the last ones stay, logged)."""
    try:
        keys = await asyncio.to_thread(read_class_keys, directory)
    except KeyFileError as err:
        log.error("keeping the class keys last read: %s", err)
        return False
    if keys != router.class_keys:
        log.info("class keys changed: %d keys", len(keys))
        router.class_keys = keys
    return True
