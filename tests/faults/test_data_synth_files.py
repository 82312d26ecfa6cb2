"""Issue 27: ``dltop data synth`` writes a whole data set or nothing, never through a link.

Each case runs the real CLI in a subprocess and checks the files it leaves: a
symbolic link as the directory or as a data file is refused (its target untouched),
an existing set is replaced only with ``--force``, sizes and seeds out of bounds are
one line (no numpy traceback, nothing created), and a full or read-only file system
is one line that leaves the previous set as it was and no temporary file behind.
The full and read-only file systems are real tmpfs mounts (``mount`` needs root:
without it those two cases are skipped, saying why); an unwritable directory is
``chmod 555`` (as root, run without the capability that overrides it).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

MNIST = ["train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
         "t10k-labels-idx1-ubyte"]


def synth(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dltop", "data", "synth", *args],
                          capture_output=True, text=True, timeout=120)


def refused(res: subprocess.CompletedProcess[str], *needles: str) -> None:
    """Exit 2 with one ``dltop: error:`` line holding every needle, and no traceback."""
    assert res.returncode == 2, res.stdout + res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dltop: error: "), res.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


def digest(d: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.iterdir())
            if not p.is_symlink()}


@contextmanager
def tmpfs(where: Path, options: str) -> Iterator[Path]:
    where.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)],
                         capture_output=True, text=True, timeout=30, check=False)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs ({options}) to fill or make read-only: "
                    f"{res.stderr.strip() or res.returncode}")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], timeout=30, check=False)


def test_a_symlinked_directory_or_data_file_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    refused(synth("mnist", str(tmp_path / "link"), "--train", "10", "--test", "10"),
            f"{tmp_path / 'link'}: is a symbolic link")
    assert list(real.iterdir()) == []
    # a data file planted as a link to another file: never written through, even --force
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (real / "t10k-labels-idx1-ubyte").symlink_to(victim)
    refused(synth("mnist", str(real), "--train", "10", "--test", "10", "--force"),
            f"{real / 't10k-labels-idx1-ubyte'}: is a symbolic link")
    assert victim.read_text() == "precious"
    assert sorted(p.name for p in real.iterdir()) == ["t10k-labels-idx1-ubyte"]


def test_an_existing_set_is_replaced_only_with_force(tmp_path: Path) -> None:
    out = tmp_path / "m"
    assert synth("mnist", str(out), "--train", "10", "--test", "10").returncode == 0
    before = digest(out)
    assert sorted(before) == sorted(MNIST)
    refused(synth("mnist", str(out), "--train", "10", "--test", "10", "--seed", "1"),
            f"{out / 'train-images-idx3-ubyte'}: exists (and 3 more of the set)", "--force")
    assert digest(out) == before
    res = synth("mnist", str(out), "--train", "10", "--test", "10", "--seed", "1", "--force")
    assert res.returncode == 0, res.stderr
    after = digest(out)
    assert sorted(after) == sorted(MNIST) and after != before


@pytest.mark.parametrize(("args", "needle"), [
    (["mnist", "--train", "60001"], "--train: expected at most 60000 samples for mnist"),
    (["cifar10", "--test", "10001"], "--test: expected at most 10000 samples for cifar10"),
    (["ptb", "--train", "1000001"], "--train: expected at most 1000000 words for ptb"),
    (["cifar10", "--train", "9"], "--train: expected at least 10 samples (one per class)"),
    (["ptb", "--test", "0"], "--test: expected at least 1 words"),
    (["mnist", "--train", str(2**62)], "expected at most 60000"),
    (["mnist", "--seed", "-1"], "--seed: expected 0 to 4294967295, got -1"),
    (["ptb", "--seed", str(2**32)], "--seed: expected 0 to 4294967295"),
])
def test_sizes_and_seeds_out_of_bounds_are_one_line(tmp_path: Path, args: list[str],
                                                    needle: str) -> None:
    kind, *rest = args
    refused(synth(kind, str(tmp_path / "d"), *rest), needle)
    assert not (tmp_path / "d").exists()


def test_a_full_file_system_leaves_the_previous_set_and_no_temporary(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "full", "size=64k") as full:
        assert synth("mnist", str(full), "--train", "10", "--test", "10").returncode == 0
        before = digest(full)
        # 200 + 100 images are 235 kB: the disk fills in the middle of the set
        refused(synth("mnist", str(full), "--train", "200", "--test", "100", "--force"),
                f"{full}: cannot write: no space left on the device", "nothing was written")
        assert digest(full) == before
        assert sorted(p.name for p in full.iterdir()) == sorted(MNIST)  # no temporary left
        # into directories it had to create: they are removed again
        refused(synth("mnist", str(full / "new" / "set"), "--train", "200", "--test", "100"),
                f"{full / 'new' / 'set'}: cannot write: no space left on the device")
        assert sorted(p.name for p in full.iterdir()) == sorted(MNIST)


def test_a_read_only_file_system_is_one_line(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "ro", "ro,size=64k") as ro:
        refused(synth("ptb", str(ro), "--train", "100", "--test", "10"),
                f"{ro}: cannot write: read-only file system", "nothing was written")
        refused(synth("ptb", str(ro / "sub"), "--train", "100", "--test", "10"),
                f"{ro / 'sub'}: cannot write: read-only file system")
        assert list(ro.iterdir()) == []


def test_a_directory_this_user_cannot_write_is_one_line(tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o555)
    argv = [sys.executable, "-m", "dltop", "data", "synth", "ptb", str(ro), "--train", "100"]
    if os.geteuid() == 0:  # root ignores the mode: run without the capability that does it
        drop = "-dac_override,-dac_read_search,-fowner"
        argv = ["setpriv", f"--inh-caps={drop}", f"--bounding-set={drop}", *argv]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    refused(res, f"{ro}: cannot write: permission denied")
    assert list(ro.iterdir()) == []
