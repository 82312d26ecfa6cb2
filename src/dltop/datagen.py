"""Small generated data sets in the real on-disk formats, that a model can actually learn.

The real MNIST, CIFAR-10 and PTB cannot be downloaded on every machine (tests, CI,
offline hosts), yet convergence runs need data whose accuracy rises. This module
writes stand-ins in the standard formats the runners read
(:mod:`dltop.runners.child.datasets`):

- ``mnist``: IDX files ``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``,
  ``t10k-images-idx3-ubyte``, ``t10k-labels-idx1-ubyte``;
- ``cifar10``: the python version, pickles ``data_batch_1`` .. ``data_batch_5``
  (the training samples split evenly) and ``test_batch``, each a dict with
  ``b"data"`` (uint8 array n x 3072), ``b"labels"``, ``b"batch_label"``,
  ``b"filenames"``;
- ``ptb``: ``ptb.train.txt``, ``ptb.valid.txt``, ``ptb.test.txt``.

Images: each class has a fixed random prototype (smooth blobs); a sample is its
class's prototype mixed with up to 40 % of another class's, shifted by up to one
pixel, plus Gaussian noise. A small network separates the classes within a few
hundred steps, well above chance but not at once. Text: sentences from a Markov
chain over ``PTB_WORDS`` words where each word has three likely successors, so an
LSTM's perplexity falls far below the vocabulary size. Everything depends only on
the seed. Core module; numpy only (not imported by the CLI's quick commands).
"""

from __future__ import annotations

import gzip
import pickle
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

KINDS = ("mnist", "cifar10", "ptb")
"""The data sets :func:`synth` writes."""
PTB_WORDS = 200
"""Vocabulary of the generated PTB text (``<eos>`` and ``<unk>`` come on top)."""


@dataclass(frozen=True)
class Sizes:
    """How many samples each split gets (images) or tokens (PTB)."""

    train: int
    test: int


DEFAULT_SIZES = {"mnist": Sizes(6000, 1000), "cifar10": Sizes(5000, 1000),
                 "ptb": Sizes(60000, 6000)}
"""Default sizes: images per split, or words per PTB training / valid / test text."""


def synth(kind: str, out_dir: Path, train: int | None = None, test: int | None = None,
          seed: int = 0) -> list[Path]:
    """Write a generated data set of ``kind`` into ``out_dir`` (created if needed).

    Args:
        kind: one of :data:`KINDS`.
        out_dir: the directory (a profile's ``data_dir``).
        train: training samples (images) or words (PTB); the default per kind
            is in :data:`DEFAULT_SIZES`.
        test: test samples (images) or words of each of the PTB valid and test texts.
        seed: the random seed; equal seeds give equal files.

    Returns:
        The files written, in order.

    Raises:
        ValueError: an unknown kind or a size below 1 (10 for images: every class).
    """
    if kind not in KINDS:
        raise ValueError(f"unknown data set {kind!r} (known: {', '.join(KINDS)})")
    sizes = DEFAULT_SIZES[kind]
    n_train = sizes.train if train is None else train
    n_test = sizes.test if test is None else test
    least = 1 if kind == "ptb" else 10
    if n_train < least or n_test < least:
        raise ValueError(f"{kind}: train and test need at least {least} "
                         f"{'words' if kind == 'ptb' else 'samples'} each")
    out_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    if kind == "mnist":
        return _mnist(out_dir, rng, n_train, n_test)
    if kind == "cifar10":
        return _cifar10(out_dir, rng, n_train, n_test)
    return _ptb(out_dir, rng, n_train, n_test)


def prototypes(rng: np.random.Generator, classes: int, shape: tuple[int, ...]) -> np.ndarray:
    """``classes`` smooth random patterns of ``shape`` (C, H, W), values in [0, 1]."""
    c, h, w = shape
    yy, xx = np.mgrid[0:h, 0:w]
    out = np.zeros((classes, c, h, w))
    for k in range(classes):
        for ch in range(c):
            for _ in range(4):
                cy, cx = rng.uniform(3, h - 3), rng.uniform(3, w - 3)
                r = rng.uniform(2.0, h / 5)
                out[k, ch] += np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * r * r))
    clipped: np.ndarray = np.clip(out / out.max(axis=(2, 3), keepdims=True), 0.0, 1.0)
    return clipped


def images(rng: np.random.Generator, protos: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` labelled samples around ``protos``: (uint8 images n x C x H x W, uint8 labels)."""
    classes = protos.shape[0]
    labels = np.arange(n) % classes
    rng.shuffle(labels)
    other = (labels + rng.integers(1, classes, n)) % classes
    mix = rng.uniform(0.0, 0.4, n)[:, None, None, None]
    x = (1.0 - mix) * protos[labels] + mix * protos[other]
    shifts = rng.integers(-1, 2, (n, 2))
    for dy in (-1, 0, 1):
        for dx in (-1, 0, 1):
            sel = (shifts[:, 0] == dy) & (shifts[:, 1] == dx)
            x[sel] = np.roll(x[sel], (dy, dx), axis=(2, 3))
    x = x * 200.0 + 20.0 + rng.normal(0.0, 30.0, x.shape)
    return np.clip(x, 0, 255).astype(np.uint8), labels.astype(np.uint8)


def write_idx(path: Path, array: np.ndarray) -> Path:
    """An IDX file of unsigned bytes (``path`` ending ``.gz`` is gzip-compressed)."""
    head = bytes([0, 0, 0x08, array.ndim]) + struct.pack(">" + "I" * array.ndim, *array.shape)
    blob = head + np.ascontiguousarray(array, dtype=np.uint8).tobytes()
    path.write_bytes(gzip.compress(blob) if path.suffix == ".gz" else blob)
    return path


def _mnist(out: Path, rng: np.random.Generator, n_train: int, n_test: int) -> list[Path]:
    protos = prototypes(rng, 10, (1, 28, 28))
    files = []
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        x, y = images(rng, protos, n)
        files.append(write_idx(out / f"{prefix}-images-idx3-ubyte", x.reshape(n, 28, 28)))
        files.append(write_idx(out / f"{prefix}-labels-idx1-ubyte", y))
    return files


def _cifar_batch(path: Path, label: str, x: np.ndarray, y: np.ndarray) -> Path:
    batch = {b"batch_label": label.encode(), b"labels": [int(v) for v in y],
             b"data": x.reshape(len(y), 3072),
             b"filenames": [f"synth_{i:06d}.png".encode() for i in range(len(y))]}
    # Protocol 2, as the original (Python 2) files.
    path.write_bytes(pickle.dumps(batch, protocol=2))
    return path


def _cifar10(out: Path, rng: np.random.Generator, n_train: int, n_test: int) -> list[Path]:
    protos = prototypes(rng, 10, (3, 32, 32))
    x, y = images(rng, protos, n_train)
    files = []
    for i, part in enumerate(np.array_split(np.arange(n_train), 5), start=1):
        files.append(_cifar_batch(out / f"data_batch_{i}", f"training batch {i} of 5",
                                  x[part], y[part]))
    tx, ty = images(rng, protos, n_test)
    files.append(_cifar_batch(out / "test_batch", "testing batch 1 of 1", tx, ty))
    return files


def markov_chain(rng: np.random.Generator, words: int = PTB_WORDS) -> np.ndarray:
    """Transition matrix (words x words): each word has three likely successors."""
    trans = np.full((words, words), 0.02 / words)
    for w in range(words):
        nxt = rng.choice(words, 3, replace=False)
        trans[w, nxt] += (0.6, 0.25, 0.13)
    rows: np.ndarray = trans / trans.sum(axis=1, keepdims=True)
    return rows


def sentences(rng: np.random.Generator, trans: np.ndarray, n_words: int) -> list[Sequence[str]]:
    """Lines of about ``n_words`` words in total walked along ``trans`` (5 to 20 words each)."""
    words = trans.shape[0]
    cum = np.cumsum(trans, axis=1)
    lines: list[Sequence[str]] = []
    total = 0
    w = int(rng.integers(words))
    while total < n_words:
        length = min(int(rng.integers(5, 21)), n_words - total)
        line = []
        for u in rng.random(length):
            line.append(f"w{w}")
            w = min(int(np.searchsorted(cum[w], u)), words - 1)
        lines.append(line)
        total += length
    return lines


def _ptb(out: Path, rng: np.random.Generator, n_train: int, n_test: int) -> list[Path]:
    trans = markov_chain(rng)
    files = []
    for name, n in (("ptb.train.txt", n_train), ("ptb.valid.txt", n_test),
                    ("ptb.test.txt", n_test)):
        path = out / name
        # The real files start every line with a space.
        path.write_text("".join(" " + " ".join(line) + " \n"
                                for line in sentences(rng, trans, n)))
        files.append(path)
    return files
