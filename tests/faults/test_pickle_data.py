"""Fault 10 (issue 20): a crafted CIFAR-10 python batch in ``data_dir`` must not run code.

The reader runs in the runner child, so the reproduction runs it the same way: a
fresh interpreter with the child directory as its import path.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from dltop.runners.registry import CHILD_DIR

READ = ("import sys; sys.path.insert(0, sys.argv[1]); import datasets\n"
        "try:\n    datasets.read_cifar10(sys.argv[2])\n"
        "except ValueError as exc:\n    print('ValueError:', exc); sys.exit(3)\n")


class _Payload:
    """Unpickling this calls ``func(*args)``: what a malicious batch would do."""

    def __init__(self, func: object, *args: object) -> None:
        self.func, self.args = func, args

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        return self.func, self.args


def _read_in_child(data_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", READ, str(CHILD_DIR), str(data_dir)],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("protocol", [0, 2, 5])
def test_crafted_batch_runs_no_code(tmp_path: Path, protocol: int) -> None:
    marker = tmp_path / "pwned"
    evil = {b"data": _Payload(os.system, f"touch {marker}"), b"labels": [1]}
    (tmp_path / "data_batch_1").write_bytes(pickle.dumps(evil, protocol=protocol))
    # the payload is live: plain pickle.load (what the reader used) runs it
    subprocess.run([sys.executable, "-c", "import pickle, sys; pickle.load(open(sys.argv[1], "
                    "'rb'), encoding='bytes')", str(tmp_path / "data_batch_1")], timeout=60,
                   capture_output=True)
    assert marker.exists()
    marker.unlink()
    res = _read_in_child(tmp_path)
    assert not marker.exists()
    assert res.returncode == 3, res.stderr
    assert "data_batch_1: not a CIFAR-10 python batch" in res.stdout
    assert "refused global posix.system" in res.stdout


def test_builtins_eval_and_subclass_tricks_are_refused(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    code = f"open({str(marker)!r}, 'w').close()"
    for payload in (_Payload(eval, code), _Payload(exec, code),
                    _Payload(__import__, "os")):
        (tmp_path / "data_batch_1").write_bytes(pickle.dumps({b"data": payload}))
        res = _read_in_child(tmp_path)
        assert res.returncode == 3 and "refused global" in res.stdout, res.stdout
    assert not marker.exists()


def test_a_real_batch_still_reads_in_the_child(tmp_path: Path) -> None:
    import numpy as np

    batch = {b"batch_label": b"training batch 1 of 5",
             b"data": np.arange(2 * 3072, dtype=np.uint8).reshape(2, 3072),
             b"labels": [3, 9], b"filenames": [b"a.png", b"b.png"]}
    (tmp_path / "data_batch_1").write_bytes(pickle.dumps(batch, protocol=2))
    res = subprocess.run(
        [sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); import datasets; "
         "n, px, lb = datasets.read_cifar10(sys.argv[2]); print(n, px[3073], list(lb))",
         str(CHILD_DIR), str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert res.stdout.split() == ["2", str(3073 % 256), "[3,", "9]"], res.stderr
