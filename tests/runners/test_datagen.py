"""Generated data sets (dltop.datagen, ``dltop data synth``): real formats, deterministic,
bad input refused with exit 2 before anything is written."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from dltop import datagen
from dltop.cli import main
from dltop.runners.child import datasets


def digest(d: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.iterdir())}


def test_same_seed_same_files_other_seed_other_files(tmp_path: Path) -> None:
    for name, seed in (("a", 3), ("b", 3), ("c", 4)):
        datagen.synth("mnist", tmp_path / name, train=40, test=20, seed=seed)
    assert digest(tmp_path / "a") == digest(tmp_path / "b") != digest(tmp_path / "c")


def test_mnist_classes_are_balanced_and_distinct(tmp_path: Path) -> None:
    datagen.synth("mnist", tmp_path, train=200, test=50)
    n, pixels, labels = datasets.read_mnist(str(tmp_path))
    m, _, test_labels = datasets.read_mnist(str(tmp_path), datasets.MNIST_TEST_FILES)
    assert (n, m) == (200, 50)
    assert [list(labels).count(k) for k in range(10)] == [20] * 10
    assert sorted(set(test_labels)) == list(range(10))
    # the class means differ far more than two halves of one class do
    import numpy as np

    x = np.frombuffer(pixels, np.uint8).reshape(n, 784).astype(float)
    y = np.frombuffer(labels, np.uint8)
    means = np.stack([x[y == k].mean(0) for k in range(10)])
    between = np.abs(means[0] - means[1]).mean()
    zeros = x[y == 0]
    within = np.abs(zeros[::2].mean(0) - zeros[1::2].mean(0)).mean()
    assert between > 3 * within


def test_cifar_batches_and_ptb_texts(tmp_path: Path) -> None:
    files = datagen.synth("cifar10", tmp_path / "c", train=53, test=12)
    assert [f.name for f in files] == [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    n, pixels, labels = datasets.read_cifar10(str(tmp_path / "c"))
    assert n == 53 and len(pixels) == 53 * 3072 and max(labels) == 9
    m, _, _ = datasets.read_cifar10(str(tmp_path / "c"), datasets.CIFAR_TEST_BATCHES)
    assert m == 12
    datagen.synth("ptb", tmp_path / "p", train=500, test=100)
    text = (tmp_path / "p" / "ptb.train.txt").read_text()
    assert len(text.split()) == 500 and text.startswith(" w")
    _, vocab = datasets.read_ptb(str(tmp_path / "p"))
    assert len(vocab) <= datagen.PTB_WORDS + 1  # + <eos>; <unk> replaces the rarest
    assert len((tmp_path / "p" / "ptb.valid.txt").read_text().split()) == 100


def test_ptb_chain_is_predictable() -> None:
    import numpy as np

    trans = datagen.markov_chain(np.random.default_rng(0))
    assert np.allclose(trans.sum(1), 1.0)
    # the three likely successors carry almost all of each row
    assert (np.sort(trans, axis=1)[:, -3:].sum(1) > 0.95).all()


def test_refuses_unknown_kind_and_tiny_sizes(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown data set 'imagenet'"):
        datagen.synth("imagenet", tmp_path)
    with pytest.raises(ValueError, match="at least 10 samples"):
        datagen.synth("mnist", tmp_path, train=5)


def test_cli_writes_and_lists_files(tmp_path: Path) -> None:
    res = subprocess.run([sys.executable, "-m", "dltop", "data", "synth", "ptb",
                          str(tmp_path / "p"), "--train", "300", "--test", "50", "--seed", "2"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "ptb.valid.txt" in res.stdout and (tmp_path / "p" / "ptb.test.txt").is_file()


def test_cli_bad_input_exits_2_and_writes_nothing(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["data", "synth", "mnist", str(tmp_path / "m"), "--train", "3"]) == 2
    assert "--train: expected at least 10" in capsys.readouterr().err
    assert not (tmp_path / "m").exists()
    (tmp_path / "f").write_text("x")
    assert main(["data", "synth", "cifar10", str(tmp_path / "f")]) == 2
    assert "exists and is not a directory" in capsys.readouterr().err


def test_images_beyond_one_chunk_are_made_chunk_by_chunk(monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy as np

    protos = datagen.prototypes(np.random.default_rng(0), 10, (1, 28, 28))
    whole = datagen.images(np.random.default_rng(1), protos, 25)
    monkeypatch.setattr(datagen, "CHUNK", 10)
    x, y = datagen.images(np.random.default_rng(1), protos, 25)
    assert x.shape == (25, 1, 28, 28) and x.dtype == np.uint8 and y.shape == (25,)
    # chunks of 10, 10, 5: the first two hold every class once each
    assert sorted(y[:10]) == sorted(y[10:20]) == list(range(10))
    assert not np.array_equal(x, whole[0])  # other draws, same kind of data
    assert abs(float(x.mean()) - float(whole[0].mean())) < 10
