"""Volume mounts of the node agent in real mount namespaces (``unshare``; root), without
a cluster: a volume's mount point covers a directory the program lives under, as an
``emptyDir`` at ``/tmp`` does for a checkout under ``/tmp``."""

from __future__ import annotations

import subprocess
from pathlib import Path

from cluster.images import image_paths
from cluster.nodeagent.volumes import Mount, mount_namespaces_work, wrap_with_mounts


def _layout(tmp_path: Path) -> tuple[Path, Path, list[Mount]]:
    """``covered/checkout/prog`` (the program), ``volume`` (an emptyDir) at ``covered``."""
    problem = mount_namespaces_work()
    assert problem is None, f"{problem} (run the e2e suite as root, as CI does)"
    checkout = tmp_path / "covered" / "checkout"
    checkout.mkdir(parents=True)
    prog = checkout / "prog"
    prog.write_text('#!/bin/sh\necho ran; ls "$(dirname "$0")/.."; echo made > "$1"\n')
    prog.chmod(0o755)
    volume = tmp_path / "volume"
    volume.mkdir()
    (volume / "from-volume").write_text("x")
    return checkout, prog, [Mount(volume, str(tmp_path / "covered"), read_only=False)]


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)


def test_a_volume_over_the_programs_directory_hides_it_unless_kept(tmp_path: Path) -> None:
    checkout, prog, mounts = _layout(tmp_path)
    out_file = str(tmp_path / "covered" / "written")

    hidden = _run(wrap_with_mounts([str(prog), out_file], mounts))
    assert hidden.returncode == 127, (hidden.returncode, hidden.stderr)

    kept = _run(wrap_with_mounts([str(prog), out_file], mounts, keep=[checkout]))
    assert kept.returncode == 0, kept.stderr
    lines = kept.stdout.split()
    assert lines[0] == "ran"
    # The container sees the volume at the mount point, with the program's directory in it.
    assert set(lines[1:]) == {"checkout", "from-volume"}
    # What it writes there lands in the volume, not on the host's directory underneath.
    assert (tmp_path / "volume" / "written").read_text() == "made\n"
    assert not (tmp_path / "covered" / "written").exists()


def test_a_read_only_volume_stays_read_only_with_a_kept_path_inside(tmp_path: Path) -> None:
    checkout, prog, (mount,) = _layout(tmp_path)
    ro = Mount(mount.source, mount.target, read_only=True)
    out = _run(wrap_with_mounts([str(prog), str(tmp_path / "covered" / "w")], [ro], [checkout]))
    assert out.stdout.startswith("ran"), out.stderr
    assert out.returncode != 0 and "Read-only file system" in out.stderr
    assert not (tmp_path / "volume" / "w").exists()


def test_the_images_stand_ins_are_kept() -> None:
    """The repository (editable tandem, podsite) and the interpreter pods run with."""
    import sys

    paths = {str(p) for p in image_paths()}
    repo = Path(__file__).resolve().parents[2]
    assert str(repo) in paths
    assert sys.prefix in paths
