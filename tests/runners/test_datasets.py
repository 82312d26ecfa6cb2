"""Real-data readers on small files in the standard formats, generated here."""

from __future__ import annotations

import pickle
from collections.abc import Callable
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


def test_real_split_gives_shapes_and_shifted_ptb_targets(tmp_path: Path) -> None:
    import dltop_protocol  # the child's own module (tests/runners/conftest.py puts it on the path)

    write_mnist(tmp_path, n=5)
    kind, shape, (pixels, labels, n), _ = datasets.real_split("fcn-r", str(tmp_path))
    assert (kind, shape, n, len(pixels), list(labels)) == (
        "mnist", (784,), 5, 5 * 784, [0, 1, 2, 3, 4])
    (tmp_path / "ptb.train.txt").write_text(" ".join(f"w{i}" for i in range(70)) + "\n")
    kind, shape, (x, y, n), _ = datasets.real_split("lstm", str(tmp_path))  # 71 ids with <eos>
    assert (kind, shape, n, len(x)) == ("ptb", (32,), 2, 64)
    ids, _ = datasets.read_ptb(str(tmp_path))
    assert x == ids[:64] and y == ids[1:65]
    with pytest.raises(dltop_protocol.Unsupported, match="no real data set for model resnet-50"):
        datasets.real_split("resnet-50", str(tmp_path))


def test_batches_wrap_and_convert() -> None:
    next_batch = datasets.batches(list(range(5)), list("abcde"), 2, "d", lambda x, y: (x, y))
    assert [next_batch() for _ in range(3)] == [
        ([0, 1], ["a", "b"]), ([2, 3], ["c", "d"]), ([0, 1], ["a", "b"])]


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_cifar_numpy_batches_read_without_numpy_objects(tmp_path: Path, protocol: int) -> None:
    """Batches pickled by numpy (as the real CIFAR-10 files are) read through the
    restricted unpickler: arrays become bytes, numpy labels become ints."""
    import numpy as np

    data = (np.arange(3 * 3072) % 251).astype(np.uint8).reshape(3, 3072)
    for labels in ([4, 0, 9], np.array([4, 0, 9], dtype=np.int64),
                   [np.int64(4), np.int64(0), np.int64(9)]):
        batch = {b"data": data, b"labels": labels, b"batch_label": b"x"}
        (tmp_path / "data_batch_1").write_bytes(pickle.dumps(batch, protocol=protocol))
        n, pixels, labs = datasets.read_cifar10(str(tmp_path))
        assert (n, list(labs), pixels) == (3, [4, 0, 9], data.tobytes())


def test_cifar_python2_style_batch(tmp_path: Path) -> None:
    """The original files: Python 2 str keys and pixel data (read as bytes)."""
    import numpy as np

    data = np.full((1, 3072), 7, dtype=np.uint8)
    blob = pickle.dumps({"data": data, "labels": [2]}, protocol=2)
    # Python 2's pickle writes str as (SHORT_)BINSTRING: rewrite the two keys so
    blob = blob.replace(b"X\x04\x00\x00\x00data", b"U\x04data").replace(
        b"X\x06\x00\x00\x00labels", b"U\x06labels")
    (tmp_path / "data_batch_1").write_bytes(blob)
    n, pixels, labs = datasets.read_cifar10(str(tmp_path))
    assert (n, pixels[:2], list(labs)) == (1, b"\x07\x07", [2])


def test_cifar_wrong_array_kinds_are_refused(tmp_path: Path) -> None:
    import numpy as np

    for data, why in ((np.zeros((1, 3072), dtype=np.float32), "not an integer type"),
                      (np.asfortranarray(np.zeros((2, 3072), dtype=np.uint8)), "Fortran")):
        (tmp_path / "data_batch_1").write_bytes(pickle.dumps({b"data": data, b"labels": [1]},
                                                             protocol=2))
        with pytest.raises(ValueError, match=why):
            datasets.read_cifar10(str(tmp_path))


@pytest.mark.slow  # over 1.5 s on an idle 2-core machine
def test_real_split_reads_the_standard_test_files(synth_data: Callable[[str], Path]) -> None:
    kind, shape, train, test = datasets.real_split("fcn-r", str(synth_data("mnist")))
    assert (kind, shape, train[2], test[2]) == ("mnist", (784,), 6000, 1000)
    assert len(train[0]) == 6000 * 784 and len(test[1]) == 1000
    assert set(test[1]) == set(range(10))
    kind, shape, train, test = datasets.real_split("lenet", str(synth_data("mnist")))
    assert shape == (1, 28, 28) and test is not None
    kind, shape, train, test = datasets.real_split("resnet-56", str(synth_data("cifar10")))
    assert (kind, shape, train[2], test[2]) == ("cifar10", (3, 32, 32), 5000, 1000)
    assert len(train[0]) == 5000 * 3072 and len(test[0]) == 1000 * 3072
    _, shape, _, test = datasets.real_split("resnet-50", str(synth_data("cifar10")), input_size=32)
    assert shape == (3, 32, 32) and test is not None


def test_real_split_ptb_evaluates_on_valid_text_with_the_training_vocabulary(
        tmp_path: Path) -> None:
    (tmp_path / "ptb.train.txt").write_text(" ".join(f"w{i % 40}" for i in range(200)) + "\n")
    (tmp_path / "ptb.test.txt").write_text(" ".join("w1 zz" for _ in range(40)) + "\n")
    kind, shape, train, test = datasets.real_split("lstm", str(tmp_path))
    ids, vocab = datasets.read_ptb(str(tmp_path))
    assert (kind, shape, train[2]) == ("ptb", (32,), 6)
    assert train[0] == ids[:192] and train[1] == ids[1:193]
    # no ptb.valid.txt: the test text; its unknown word zz is <unk> of the training vocabulary
    assert test[2] == 2 and test[0][:2] == [vocab.index("w1"), vocab.index("<unk>")]
    (tmp_path / "ptb.valid.txt").write_text(" ".join("w2" for _ in range(40)) + "\n")
    _, _, _, test = datasets.real_split("lstm", str(tmp_path))
    assert test[2] == 1 and set(test[0]) == {vocab.index("w2")}


def test_real_split_without_test_files(tmp_path: Path) -> None:
    import dltop_protocol

    write_mnist(tmp_path, n=5)
    _, _, train, test = datasets.real_split("fcn-r", str(tmp_path))
    assert (train[2], test) == (5, None)
    with pytest.raises(dltop_protocol.Unsupported, match=r"t10k-images-idx3-ubyte not found"):
        datasets.real_split("fcn-r", str(tmp_path), need_test=True)
    write_cifar_python(tmp_path, n=3)
    with pytest.raises(dltop_protocol.Unsupported, match=r"test_batch not found"):
        datasets.real_split("alexnet-r", str(tmp_path), need_test=True)
    (tmp_path / "ptb.train.txt").write_text(" ".join(f"w{i}" for i in range(70)) + "\n")
    with pytest.raises(dltop_protocol.Unsupported, match=r"ptb\.valid\.txt not found"):
        datasets.real_split("lstm", str(tmp_path), need_test=True)
    for model, size in (("resnet-50", None), ("vgg16", None), ("resnet-56", 64)):
        with pytest.raises(dltop_protocol.Unsupported, match="no real data set"):
            datasets.real_split(model, str(tmp_path), input_size=size)


def test_cifar_binary_test_batch(tmp_path: Path) -> None:
    rec = bytes([3]) + bytes(range(256)) * 12
    sub = tmp_path / "cifar-10-batches-bin"
    sub.mkdir()
    (sub / "data_batch_1.bin").write_bytes(rec * 4)
    (sub / "test_batch.bin").write_bytes(rec * 2)
    _, _, train, test = datasets.real_split("alexnet-r", str(tmp_path), need_test=True)
    assert (train[2], test[2], list(test[1])) == (4, 2, [3, 3])


def test_real_split_gives_lenet_images(synth_data: Callable[[str], Path]) -> None:
    kind, shape, (pixels, _, n), _ = datasets.real_split("lenet", str(synth_data("mnist")))
    assert (kind, shape, n, len(pixels)) == ("mnist", (1, 28, 28), 6000, 6000 * 784)
