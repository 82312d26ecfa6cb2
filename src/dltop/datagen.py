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

Files are written through :class:`dltop.fileset.FileSet`: all or nothing, never
through a symbolic link, an existing data set replaced only with ``force``.
Sizes are bounded by :data:`MAX_SIZES` (the real data sets' sizes), and images
are generated in chunks of :data:`CHUNK` samples, so memory stays near a gigabyte
whatever the size.
"""

from __future__ import annotations

import gzip
import pickle
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dltop.fileset import FileSet

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
MAX_SIZES = {"mnist": Sizes(60000, 10000), "cifar10": Sizes(50000, 10000),
             "ptb": Sizes(1_000_000, 100_000)}
"""Largest sizes: the real MNIST and CIFAR-10 splits; PTB about its 887 521 training
words (and 70-80 thousand of valid and test), rounded up."""
MIN_SIZES = {"mnist": 10, "cifar10": 10, "ptb": 1}
"""Smallest size of each split: one image per class, or one word."""
CHUNK = 10000
"""Images generated at a time (float64 intermediates: about 1 GB for CIFAR-10)."""
SEED_MAX = 2**32 - 1
FILES = {"mnist": ["train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                   "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"],
         "cifar10": [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"],
         "ptb": ["ptb.train.txt", "ptb.valid.txt", "ptb.test.txt"]}
"""The files each kind writes, in order."""


def size_problem(kind: str, split: str, value: int) -> str | None:
    """Why ``value`` samples (words) is no size for ``split`` (train/test) of ``kind``, or None."""
    low = MIN_SIZES[kind]
    high = getattr(MAX_SIZES[kind], split)
    what = "words" if kind == "ptb" else "samples"
    if value < low:
        return (f"expected at least {low} {what}{'' if kind == 'ptb' else ' (one per class)'}, "
                f"got {value}")
    if value > high:
        return f"expected at most {high} {what} for {kind}, got {value}"
    return None


def synth(kind: str, out_dir: Path, train: int | None = None, test: int | None = None,
          seed: int = 0, *, force: bool = False) -> list[Path]:
    """Write a generated data set of ``kind`` into ``out_dir`` (created if needed).

    Args:
        kind: one of :data:`KINDS`.
        out_dir: the directory (a profile's ``data_dir``).
        train: training samples (images) or words (PTB); the default per kind
            is in :data:`DEFAULT_SIZES`.
        test: test samples (images) or words of each of the PTB valid and test texts.
        seed: the random seed (0 to 2^32-1); equal seeds give equal files.
        force: replace the files of an existing data set.

    Returns:
        The files written, in order.

    Raises:
        ValueError: an unknown kind, a size out of :data:`MIN_SIZES` .. :data:`MAX_SIZES`,
            or a seed out of range.
        UserError: ``out_dir`` or a data file in it is a symbolic link, a data file
            exists (without ``force``), or the directory cannot be written (full,
            read-only): nothing was written.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown data set {kind!r} (known: {', '.join(KINDS)})")
    sizes = DEFAULT_SIZES[kind]
    n_train = sizes.train if train is None else train
    n_test = sizes.test if test is None else test
    for split, n in (("train", n_train), ("test", n_test)):
        problem = size_problem(kind, split, n)
        if problem:
            raise ValueError(f"{kind} {split}: {problem}")
    if not 0 <= seed <= SEED_MAX:
        raise ValueError(f"seed: expected 0 to {SEED_MAX}, got {seed}")
    rng = np.random.default_rng(seed)
    with FileSet(out_dir, FILES[kind], force=force) as files:
        if kind == "mnist":
            _mnist(files, rng, n_train, n_test)
        elif kind == "cifar10":
            _cifar10(files, rng, n_train, n_test)
        else:
            _ptb(files, rng, n_train, n_test)
        return files.commit()


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
    """``n`` labelled samples around ``protos``: (uint8 images n x C x H x W, uint8 labels).

    Made :data:`CHUNK` samples at a time (one chunk: the same bytes as before chunking).
    """
    if n > CHUNK:
        parts = [_images(rng, protos, min(CHUNK, n - i)) for i in range(0, n, CHUNK)]
        return (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))
    return _images(rng, protos, n)


def _images(rng: np.random.Generator, protos: np.ndarray,
            n: int) -> tuple[np.ndarray, np.ndarray]:
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


def idx_bytes(array: np.ndarray, compress: bool = False) -> bytes:
    """An IDX file of unsigned bytes holding ``array`` (gzip-compressed if ``compress``)."""
    head = bytes([0, 0, 0x08, array.ndim]) + struct.pack(">" + "I" * array.ndim, *array.shape)
    blob = head + np.ascontiguousarray(array, dtype=np.uint8).tobytes()
    return gzip.compress(blob) if compress else blob


def _mnist(out: FileSet, rng: np.random.Generator, n_train: int, n_test: int) -> None:
    protos = prototypes(rng, 10, (1, 28, 28))
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        x, y = images(rng, protos, n)
        out.add(f"{prefix}-images-idx3-ubyte", idx_bytes(x.reshape(n, 28, 28)))
        out.add(f"{prefix}-labels-idx1-ubyte", idx_bytes(y))


def _cifar_batch(label: str, x: np.ndarray, y: np.ndarray) -> bytes:
    batch = {b"batch_label": label.encode(), b"labels": [int(v) for v in y],
             b"data": x.reshape(len(y), 3072),
             b"filenames": [f"synth_{i:06d}.png".encode() for i in range(len(y))]}
    # Protocol 2, as the original (Python 2) files.
    return pickle.dumps(batch, protocol=2)


def _cifar10(out: FileSet, rng: np.random.Generator, n_train: int, n_test: int) -> None:
    protos = prototypes(rng, 10, (3, 32, 32))
    x, y = images(rng, protos, n_train)
    for i, part in enumerate(np.array_split(np.arange(n_train), 5), start=1):
        out.add(f"data_batch_{i}", _cifar_batch(f"training batch {i} of 5", x[part], y[part]))
    tx, ty = images(rng, protos, n_test)
    out.add("test_batch", _cifar_batch("testing batch 1 of 1", tx, ty))


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


def _ptb(out: FileSet, rng: np.random.Generator, n_train: int, n_test: int) -> None:
    trans = markov_chain(rng)
    for name, n in (("ptb.train.txt", n_train), ("ptb.valid.txt", n_test),
                    ("ptb.test.txt", n_test)):
        # The real files start every line with a space.
        out.add(name, "".join(" " + " ".join(line) + " \n"
                              for line in sentences(rng, trans, n)).encode())
