"""Real-data readers on small files in the standard formats, generated here."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from dltop.runners.child import datasets

from .conftest import write_cifar_python, write_mnist


@pytest.mark.parametrize("gz", [False, True])
def test_mnist(tmp_path: Path, gz: bool) -> None:
    write_mnist(tmp_path, n=5, gz=gz)
    n, pixels, labels = datasets.read_mnist(str(tmp_path))
    assert n == 5 and len(pixels) == 5 * 784
    assert pixels[785] == 785 % 256 and list(labels) == [0, 1, 2, 3, 4]


def test_mnist_bad_magic_and_missing(tmp_path: Path) -> None:
    (tmp_path / "train-images-idx3-ubyte").write_bytes(b"\x00\x00\x09\x03" + b"\0" * 12)
    with pytest.raises(ValueError, match="train-images-idx3-ubyte: not an IDX"):
        datasets.read_mnist(str(tmp_path))
    with pytest.raises(ValueError, match="file not found"):
        datasets.read_mnist(str(tmp_path / "nowhere"))


def test_cifar_python_and_binary(tmp_path: Path) -> None:
    write_cifar_python(tmp_path, n=3)
    n, pixels, labels = datasets.read_cifar10(str(tmp_path))
    assert n == 3 and len(pixels) == 3 * 3072 and list(labels) == [0, 1, 2]
    assert pixels[10] == 70
    b = tmp_path / "bin"
    b.mkdir()
    rec = bytes([7]) + bytes(range(256)) * 12
    (b / "data_batch_1.bin").write_bytes(rec * 2)
    n, pixels, labels = datasets.read_cifar10(str(b))
    assert (n, list(labels), pixels[:3]) == (2, [7, 7], bytes([0, 1, 2]))
    (b / "data_batch_1.bin").write_bytes(rec[:-1])
    with pytest.raises(ValueError, match="not a multiple of 3073"):
        datasets.read_cifar10(str(b))


def test_cifar_bad_pickle(tmp_path: Path) -> None:
    (tmp_path / "data_batch_1").write_bytes(pickle.dumps({b"nothing": 1}))
    with pytest.raises(ValueError, match="expected keys"):
        datasets.read_cifar10(str(tmp_path))


def test_ptb_vocab_and_unk(tmp_path: Path) -> None:
    (tmp_path / "ptb.train.txt").write_text(" a b a\n c a b\n")
    ids, vocab = datasets.read_ptb(str(tmp_path), vocab_size=3)
    # frequencies: a 3, <eos> 2, b 2, c 1 -> vocab a, <eos>, then <unk> replaces the last
    assert vocab == ["a", "<eos>", "<unk>"]
    assert ids == [0, 2, 0, 1, 2, 0, 2, 1]
