"""A pod's volumes as directories under its pod directory, and the bind mounts that put
them where the containers expect them. Writes files; the API is reached only through
the functions passed in.

Supported: ``emptyDir`` (a directory, ``medium: Memory`` included), ``configMap``,
``secret``, ``downwardAPI`` and ``projected`` (their sources ``serviceAccountToken``,
``configMap``, ``secret``, ``downwardAPI``) — the last is how the ServiceAccount admission
plugin gives every pod its token, ``ca.crt`` and ``namespace`` at
``/var/run/secrets/kubernetes.io/serviceaccount``. Contents are written once when the pod
starts; they are not refreshed (a token requested with 3607 s is extended by the
apiserver to a year, as for kubelets). Any other volume type is refused with its name.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cluster.nodeagent.podspec import Lookup, Pod, SpecError, field_ref, resource_field_ref

TokenSource = Callable[[str, int], str]
"""(audience or "", expiration seconds) -> a token bound to the pod."""


@dataclass(frozen=True)
class Mount:
    """A bind mount: ``source`` (in the pod directory) at ``target`` in the container."""

    source: Path
    target: str
    read_only: bool


def _write(directory: Path, rel: str, text: str, mode: int | None = None) -> None:
    if rel.startswith("/") or ".." in Path(rel).parts:
        raise SpecError(f"volume item path {rel!r} must be relative and stay inside the volume")
    path = directory / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode if mode is not None else 0o644)


def _write_items(
    directory: Path, data: Mapping[str, str], items: list[dict[str, Any]] | None, what: str
) -> None:
    if not items:
        for key, value in data.items():
            _write(directory, key, value)
        return
    for item in items:
        if item["key"] not in data:
            raise SpecError(f"{what} has no key {item['key']!r}")
        _write(directory, item["path"], data[item["key"]], item.get("mode"))


def _downward(
    directory: Path, pod: Pod, items: list[dict[str, Any]], allocatable: Mapping[str, str]
) -> None:
    containers = {c["name"]: c for c in pod["spec"]["containers"]}
    for item in items:
        if "fieldRef" in item:
            value = field_ref(pod, item["fieldRef"]["fieldPath"])
        else:
            ref = item["resourceFieldRef"]
            container = containers[ref.get("containerName") or next(iter(containers))]
            value = resource_field_ref(container, ref, allocatable)
        _write(directory, item["path"], value, item.get("mode"))


def _lookup(
    kind: str, lookup: Lookup, namespace: str, ref: Mapping[str, Any], key: str
) -> Mapping[str, str] | None:
    name = str(ref[key])
    data = lookup(namespace, name)
    if data is None and not ref.get("optional", False):
        raise SpecError(f"{kind} {namespace}/{name} not found")
    return data


def prepare_volumes(
    pod: Pod,
    pod_dir: Path,
    *,
    secrets: Lookup,
    configmaps: Lookup,
    token: TokenSource,
    allocatable: Mapping[str, str],
) -> dict[str, Path]:
    """Write every volume of ``pod`` under ``pod_dir/volumes``; volume name -> directory."""
    namespace = str(pod["metadata"]["namespace"])
    out: dict[str, Path] = {}
    for volume in pod["spec"].get("volumes", []) or []:
        name = str(volume["name"])
        directory = pod_dir / "volumes" / name
        directory.mkdir(parents=True, exist_ok=True)
        out[name] = directory
        if "emptyDir" in volume:
            continue
        if "configMap" in volume:
            ref = volume["configMap"]
            data = _lookup("ConfigMap", configmaps, namespace, ref, "name")
            _write_items(directory, data or {}, ref.get("items"), f"ConfigMap {ref['name']}")
        elif "secret" in volume:
            ref = volume["secret"]
            data = _lookup("Secret", secrets, namespace, ref, "secretName")
            _write_items(directory, data or {}, ref.get("items"), f"Secret {ref['secretName']}")
        elif "downwardAPI" in volume:
            _downward(directory, pod, volume["downwardAPI"].get("items", []), allocatable)
        elif "projected" in volume:
            for source in volume["projected"].get("sources", []) or []:
                if "serviceAccountToken" in source:
                    sat = source["serviceAccountToken"]
                    text = token(
                        str(sat.get("audience", "")), int(sat.get("expirationSeconds", 3607))
                    )
                    _write(directory, sat["path"], text, 0o600)
                elif "configMap" in source:
                    ref = source["configMap"]
                    data = _lookup("ConfigMap", configmaps, namespace, ref, "name")
                    _write_items(
                        directory, data or {}, ref.get("items"), f"ConfigMap {ref['name']}"
                    )
                elif "secret" in source:
                    ref = source["secret"]
                    data = _lookup("Secret", secrets, namespace, ref, "name")
                    _write_items(directory, data or {}, ref.get("items"), f"Secret {ref['name']}")
                elif "downwardAPI" in source:
                    _downward(directory, pod, source["downwardAPI"].get("items", []), allocatable)
                else:
                    raise SpecError(
                        f"volume {name}: projected source {sorted(source)} is not supported"
                    )
        else:
            kinds = sorted(k for k in volume if k != "name")
            raise SpecError(
                f"volume {name}: type {kinds} is not supported here "
                "(emptyDir, configMap, secret, downwardAPI and projected are)"
            )
    return out


def container_mounts(container: Mapping[str, Any], volumes: Mapping[str, Path]) -> list[Mount]:
    """The bind mounts of one container (``subPath`` included)."""
    mounts = []
    for vm in container.get("volumeMounts", []) or []:
        if vm["name"] not in volumes:
            raise SpecError(f"container {container['name']} mounts unknown volume {vm['name']!r}")
        source = volumes[vm["name"]]
        if vm.get("subPath"):
            source = source / vm["subPath"]
            if not source.exists():
                source.mkdir(parents=True)
        mounts.append(Mount(source, str(vm["mountPath"]), bool(vm.get("readOnly", False))))
    return mounts


# Runs inside the new mount namespace: keeps, then mounts, then becomes the program.
# "keep HOST DEST -" binds a host path into a volume's directory before that volume
# covers it; "mount SOURCE TARGET rw|ro" puts a volume in place (recursively, with the
# paths kept inside it).
_MOUNT_SCRIPT = """
while [ "$1" != "--" ]; do
  if [ "$1" = keep ]; then
    mkdir -p "$3" && mount --bind "$2" "$3" || exit 126
  else
    if [ -d "$2" ]; then mkdir -p "$3"; else mkdir -p "$(dirname "$3")"; [ -e "$3" ] || : > "$3"; fi
    mount --rbind "$2" "$3" || exit 126
    if [ "$4" = ro ]; then mount -o remount,bind,ro "$3" || exit 126; fi
  fi
  shift 4
done
shift
exec "$@"
"""


def _under(path: str, directory: str) -> bool:
    return path != directory and path.startswith(directory.rstrip("/") + "/")


def kept_paths(mounts: list[Mount], keep: Iterable[Path]) -> list[tuple[str, Path]]:
    """(host path, where it goes in a volume's directory) for each path of ``keep`` that a
    mount target would cover, outermost first, nested ones left out.

    The processes are the host's programs, not an image's: a volume mounted at ``/tmp``
    over a checkout under ``/tmp`` would hide the program itself (exit 127), where in a
    real container the image's files are never under a volume's mount point. The paths
    an image stands in for stay visible through the volume instead.

    >>> m = [Mount(Path("/pods/p/volumes/tmp"), "/tmp", False)]
    >>> kept_paths(m, [Path("/tmp/ci"), Path("/tmp/ci/.venv"), Path("/usr")])
    [('/tmp/ci', PosixPath('/pods/p/volumes/tmp/ci'))]
    """
    paths = sorted({os.path.normpath(str(k)) for k in keep})
    outer = [p for p in paths if not any(_under(p, q) for q in paths)]
    out: list[tuple[str, Path]] = []
    for p in outer:
        for m in mounts:
            target = os.path.normpath(m.target)
            if _under(p, target):
                out.append((p, m.source / os.path.relpath(p, target)))
                break
    return out


def wrap_with_mounts(argv: list[str], mounts: list[Mount], keep: Iterable[Path] = ()) -> list[str]:
    """``argv`` run in a private mount namespace of its own with ``mounts`` in place, so
    fixed paths (the ServiceAccount directory) differ per pod; unchanged without mounts.
    The host paths of ``keep`` (the programs standing in for the image) stay visible
    when a mount target covers them (see ``kept_paths``).

    The mount points are created when missing: as empty directories (or files) on the
    host, since the namespace shares the host's filesystem underneath.
    """
    if not mounts:
        return argv
    ops: list[str] = []
    for host, dest in kept_paths(mounts, keep):
        ops += ["keep", host, str(dest), "-"]
    for m in mounts:
        ops += ["mount", str(m.source), m.target, "ro" if m.read_only else "rw"]
    return [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "--",
        "/bin/sh",
        "-c",
        _MOUNT_SCRIPT,
        "sh",
        *ops,
        "--",
        *argv,
    ]


def mount_namespaces_work() -> str | None:
    """None when this process may make mount namespaces (root or CAP_SYS_ADMIN), else why."""
    import subprocess

    if os.geteuid() != 0:
        return "the node agent is not root: it cannot give pods their own mount namespace"
    try:
        subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "--", "true"],
            check=True,
            capture_output=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError) as err:
        return f"`unshare --mount` failed: {err}"
    return None
