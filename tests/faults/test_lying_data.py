"""Issue 27: a data file whose header lies is ``bad data`` naming the file, not ``oom``.

An IDX file claiming 2^31-1 images made the reader ask for 1.6 TB at once: the
run ended ``oom``, as if the model had not fit. The reader now checks a header
against the file's size first. The run case goes through ``dltop run`` with the
real PyTorch runner; the other formats through the child's reader in a fresh
interpreter, as the runner imports it.
"""

from __future__ import annotations

import gzip
import os
import pickle
import sqlite3
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from dltop.runners.registry import CHILD_DIR

LIE = 2**31 - 1
READ = ("import sys; sys.path.insert(0, sys.argv[1]); import datasets, dltop_protocol\n"
        "try:\n    getattr(datasets, sys.argv[2])(sys.argv[3])\n"
        "except dltop_protocol.Failed as exc:\n    print(exc); sys.exit(3)\n")


def idx(n: int, held: int, dims: tuple[int, ...] = (28, 28)) -> bytes:
    """An IDX header claiming ``n`` samples of ``dims``, followed by ``held`` samples."""
    size = 1
    for d in dims:
        size *= d
    return (bytes([0, 0, 8, 1 + len(dims)]) + struct.pack(">" + "I" * (1 + len(dims)), n, *dims)
            + bytes(held * size))


def read_in_child(func: str, data_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", READ, str(CHILD_DIR), func, str(data_dir)],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.slow
def test_idx_claiming_2_31_images_is_bad_data_through_the_runner(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "train-images-idx3-ubyte").write_bytes(idx(LIE, 16))
    (data / "train-labels-idx1-ubyte").write_bytes(idx(16, 16, ()))
    prof = tmp_path / "p.toml"
    prof.write_text(f'[defaults]\niterations = 2\nwarmup = 0\ndata = "real"\n'
                    f'data_dir = "{data}"\ntimeout_s = 120\n[[matrix]]\nframeworks = ["torch"]\n'
                    'models = ["fcn-r"]\nbatch_sizes = [8]\ndevices = ["cpu:1"]\n')
    res = subprocess.run([sys.executable, "-m", "dltop", "run", "--headless", str(prof)],
                         capture_output=True, text=True, timeout=240,
                         env={**os.environ, "DLTOP_DB": str(tmp_path / "d.db")})
    assert res.returncode == 1, res.stdout + res.stderr  # a failed run, not a failed dltop
    conn = sqlite3.connect(tmp_path / "d.db")
    (kind, message), = conn.execute("select error_kind, error_message from runs").fetchall()
    conn.close()
    assert kind != "oom"
    assert message.startswith(f"bad data: {data / 'train-images-idx3-ubyte'}: header claims "
                              f"{LIE} x 28 x 28"), message
    assert "the file holds 12544" in message and "Traceback" not in message


def test_gzip_idx_claiming_more_than_it_holds_is_bad_data(tmp_path: Path) -> None:
    (tmp_path / "train-images-idx3-ubyte.gz").write_bytes(gzip.compress(idx(LIE, 3)))
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(idx(3, 3, ()))
    res = read_in_child("read_mnist", tmp_path)
    assert res.returncode == 3, res.stderr
    assert res.stdout.startswith(f"bad data: {tmp_path / 'train-images-idx3-ubyte.gz'}: "
                                 f"truncated: header claims {LIE} x 28 x 28"), res.stdout
    assert "got 2352" in res.stdout


def test_idx_labels_shorter_than_claimed_and_extra_bytes_are_bad_data(tmp_path: Path) -> None:
    (tmp_path / "train-images-idx3-ubyte").write_bytes(idx(3, 3))
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(idx(LIE, 3, ()))
    res = read_in_child("read_mnist", tmp_path)
    assert res.returncode == 3 and "train-labels-idx1-ubyte: header claims" in res.stdout
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(idx(3, 4, ()))  # a byte too many
    res = read_in_child("read_mnist", tmp_path)
    assert res.returncode == 3 and "= 3 bytes of data, the file holds 4" in res.stdout


def test_cifar_batches_claiming_more_samples_than_their_bytes_are_bad_data(
        tmp_path: Path) -> None:
    import numpy as np

    # a python batch: more labels than images
    batch = {b"data": np.zeros((2, 3072), dtype=np.uint8), b"labels": [1] * 1000}
    (tmp_path / "data_batch_1").write_bytes(pickle.dumps(batch, protocol=2))
    res = read_in_child("read_cifar10", tmp_path)
    assert res.returncode == 3, res.stderr
    assert res.stdout.startswith(f"bad data: {tmp_path / 'data_batch_1'}: not a CIFAR-10"), \
        res.stdout
    assert "expected 1000 x 3072 pixel bytes" in res.stdout
    # an array whose shape claims 2^31-1 rows over two rows of bytes
    raw = pickle.dumps({b"data": np.zeros((2, 3072), dtype=np.uint8), b"labels": [1, 2]},
                       protocol=2)
    # the shape tuple (2, 3072) as protocol 2 writes it: BININT1 2, BININT2 3072, TUPLE2
    forged = raw.replace(b"K\x02M\x00\x0c\x86", b"J" + struct.pack("<i", LIE) + b"M\x00\x0c\x86")
    assert forged != raw
    (tmp_path / "data_batch_1").write_bytes(forged)
    res = read_in_child("read_cifar10", tmp_path)
    assert res.returncode == 3 and "data_batch_1: not a CIFAR-10 python batch" in res.stdout, \
        res.stdout + res.stderr
    # a binary batch one byte short of a whole sample
    (tmp_path / "data_batch_1").unlink()
    (tmp_path / "data_batch_1.bin").write_bytes(bytes(3073 * 2 - 1))
    res = read_in_child("read_cifar10", tmp_path)
    assert res.returncode == 3 and "data_batch_1.bin: size 6145 is not a multiple" in res.stdout
