"""Readers for the real-data variants: MNIST IDX, CIFAR-10 (python or binary), PTB text
(words for the LSTM; the transformers read text byte-level, :mod:`lm_text`).

Standard library only, valid Python 3.6. Readers return raw bytes / integer
lists plus shapes; the framework runner turns them into tensors. Every format
error raises :class:`BadData` (a ValueError the runner reports as its message,
``bad data: FILE: what was expected``, without a traceback). A header is checked
against the file's size before anything is allocated: an IDX file claiming 2^31-1
images is bad data, not an out-of-memory failure.

CIFAR-10 python batches are pickles; they are read with :mod:`safe_pickle`'s
restricted unpickler, which resolves only the numpy array globals a batch needs
(to stand-ins, not numpy) and refuses any other: a crafted ``data_batch_N`` in a
``data_dir`` cannot run code in the runner (``pickle.load`` would).
"""

import gzip
import os
import struct
from collections import Counter

import dltop_protocol
import lm_catalog
import lm_text
import model_catalog
import safe_pickle

MNIST_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte")
MNIST_TEST_FILES = ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
CIFAR_BATCHES = ["data_batch_%d" % i for i in range(1, 6)]
CIFAR_TEST_BATCHES = ["test_batch"]
PTB_TRAIN = "ptb.train.txt"
PTB_EVAL = ("ptb.valid.txt", "ptb.test.txt")
"""PTB text evaluated during training: the validation text, else the test text."""


CHUNK = 1 << 22
"""Bytes read at a time from a compressed file, whose size says nothing of its content."""


class BadData(dltop_protocol.Failed, ValueError):
    """A data file that is not what its format says: reported as ``bad data: FILE: why``."""

    def __init__(self, path, why):
        super(BadData, self).__init__("bad data: %s: %s" % (path, why))


def _open(path):
    if os.path.isfile(path):
        return open(path, "rb")
    if os.path.isfile(path + ".gz"):
        return gzip.open(path + ".gz", "rb")
    raise ValueError("%s: file not found (also tried %s.gz)" % (path, path))


def read_idx(path, expected_dims):
    """An IDX file of unsigned bytes: (shape, bytes).

    The size the header claims is checked against the file before it is read: an
    uncompressed file must hold exactly that many bytes; a gzip file is read in
    chunks and must end where the header says (never one allocation of the claim).
    """
    with _open(path) as fh:
        name = getattr(fh, "name", path)
        head = fh.read(4)
        if len(head) != 4 or head[0] != 0 or head[1] != 0 or head[2] != 0x08:
            raise BadData(name, "not an IDX file of unsigned bytes (magic %r)" % (head,))
        ndim = head[3]
        if ndim != expected_dims:
            raise BadData(name, "expected %d dimensions, file has %d" % (expected_dims, ndim))
        dims = fh.read(4 * ndim)
        if len(dims) != 4 * ndim:
            raise BadData(name, "truncated in the header")
        shape = struct.unpack(">" + "I" * ndim, dims)
        size = 1
        for d in shape:
            size *= d
        claim = "header claims %s = %d bytes of data" % (" x ".join(map(str, shape)), size)
        if not isinstance(fh, gzip.GzipFile):
            held = os.fstat(fh.fileno()).st_size - 4 - 4 * ndim
            if held != size:
                raise BadData(name, "%s, the file holds %d" % (claim, held))
            data = fh.read(size)
        else:
            parts, got = [], 0
            while got < size:
                part = fh.read(min(CHUNK, size - got))
                if not part:
                    break
                parts.append(part)
                got += len(part)
            data = b"".join(parts)
    if len(data) != size:
        raise BadData(name, "truncated: %s, got %d" % (claim, len(data)))
    return tuple(shape), data


def read_mnist(data_dir, files=MNIST_FILES):
    """MNIST training set (or ``files`` = ``MNIST_TEST_FILES``, the test set):
    (n, pixel bytes of n x 28 x 28, label bytes)."""
    (n, rows, cols), pixels = read_idx(os.path.join(data_dir, files[0]), 3)
    (m,), labels = read_idx(os.path.join(data_dir, files[1]), 1)
    if (rows, cols) != (28, 28) or n != m:
        raise BadData(data_dir, "expected n x 28 x 28 images and n labels, got %dx%dx%d and %d"
                      % (n, rows, cols, m))
    return n, pixels, labels


def read_cifar10(data_dir, batches=CIFAR_BATCHES):
    """CIFAR-10 training batches: (n, pixel bytes of n x 3 x 32 x 32, label bytes).

    Reads the python version (``data_batch_N`` pickles) or, when absent, the
    binary version (``data_batch_N.bin``: 1 label byte + 3072 pixel bytes each).
    ``batches`` = ``CIFAR_TEST_BATCHES`` reads the test set (``test_batch``).
    """
    pixels, labels = bytearray(), bytearray()
    py = [os.path.join(data_dir, b) for b in batches]
    bins = [p + ".bin" for p in py]
    sub = os.path.join(data_dir, "cifar-10-batches-bin")
    if not any(os.path.isfile(p) for p in py + bins) and os.path.isdir(sub):
        bins = [os.path.join(sub, b + ".bin") for b in batches]
    if any(os.path.isfile(p) for p in py):
        for path in (p for p in py if os.path.isfile(p)):
            with open(path, "rb") as fh:
                try:
                    batch = safe_pickle.load_batch(fh)
                except Exception as exc:
                    raise BadData(path, "not a CIFAR-10 python batch (%s)" % exc) from None
            if not isinstance(batch, dict):
                raise BadData(path, "not a CIFAR-10 python batch (a %s, expected a dict)"
                              % type(batch).__name__)
            data = batch.get(b"data")
            labs = batch.get(b"labels")
            if data is None or labs is None:
                raise BadData(path, "expected keys b'data' and b'labels'")
            try:
                raw = data.tobytes() if hasattr(data, "tobytes") else bytes(data)
                labs = labs.tolist() if hasattr(labs, "tolist") else list(labs)
                if len(raw) != 3072 * len(labs):
                    raise ValueError("expected %d x 3072 pixel bytes" % len(labs))
                labels += bytes(bytearray(labs))
            except (TypeError, ValueError) as exc:
                raise BadData(path, "not a CIFAR-10 python batch (%s)" % exc) from None
            pixels += raw
    elif any(os.path.isfile(p) for p in bins):
        for path in (p for p in bins if os.path.isfile(p)):
            with open(path, "rb") as fh:
                blob = fh.read()
            if len(blob) % 3073:
                raise BadData(path, "size %d is not a multiple of 3073 (label + 3072 pixels)"
                              % len(blob))
            for off in range(0, len(blob), 3073):
                labels.append(blob[off])
                pixels += blob[off + 1:off + 3073]
    else:
        raise ValueError("%s: no CIFAR-10 batches (%s or %s.bin)"
                         % (data_dir, _names(batches), _names(batches)))
    if any(v > 9 for v in labels):
        raise BadData(data_dir, "CIFAR-10 labels must be 0..9")
    return len(labels), bytes(pixels), bytes(labels)


def _names(batches):
    return batches[0] if len(batches) == 1 else "%s..%s" % (batches[0], batches[-1][-1])


def _ptb_words(path):
    if not os.path.isfile(path):
        raise ValueError("%s: file not found" % path)
    with open(path, encoding="utf-8") as fh:
        words = []
        for line in fh:
            words.extend(line.split())
            words.append("<eos>")
    if not words:
        raise BadData(path, "empty")
    return words


def read_ptb(data_dir, vocab_size=10000):
    """PTB training text as token ids: (ids, vocab). ``<eos>`` ends each line.

    The vocabulary holds the ``vocab_size`` most frequent words (ties broken
    alphabetically); the rest map to ``<unk>``.
    """
    words = _ptb_words(os.path.join(data_dir, PTB_TRAIN))
    counts = Counter(words)
    counts["<unk>"] += 0
    ranked = sorted(counts, key=lambda w: (-counts[w], w))
    vocab = ranked[:vocab_size]
    if "<unk>" not in vocab:
        vocab[-1] = "<unk>"
    index = {w: i for i, w in enumerate(vocab)}
    unk = index["<unk>"]
    return [index.get(w, unk) for w in words], vocab


def read_ptb_eval(path, vocab):
    """Another PTB text (valid or test) as ids of the training ``vocab`` (unknown: ``<unk>``)."""
    index = {w: i for i, w in enumerate(vocab)}
    unk = index["<unk>"]
    return [index.get(w, unk) for w in _ptb_words(path)]


def dataset_for(model, input_size=None):
    """Which real data set a model trains on, or None.

    ResNet-50 has one at ``input_size`` 32 (CIFAR-10, as Liu et al. ran it); a
    CIFAR model at another ``input_size`` has none (the images are 32 x 32).
    """
    if model == "resnet-50":
        return "cifar10" if input_size == 32 else None
    if lm_catalog.is_transformer(model):
        return "ptb"
    kind = {"fcn-r": "mnist", "lenet": "mnist", "alexnet-r": "cifar10",
            "resnet-56": "cifar10", "lstm": "ptb"}.get(model)
    if kind == "cifar10" and input_size not in (None, 32):
        return None
    return kind


NO_REAL_DATA = ("no real data set for model %s (real data: fcn-r and lenet MNIST, "
                "alexnet-r/resnet-56 CIFAR-10, resnet-50 CIFAR-10 at input_size 32, lstm and the "
                "transformers PTB)")


def _mnist_shape(model):
    return (1, 28, 28) if model == "lenet" else (784,)


def _first_present(data_dir, names):
    for name in names:
        path = os.path.join(data_dir, name)
        if os.path.isfile(path) or os.path.isfile(path + ".gz"):
            return path
    return None


def test_file(kind, data_dir):
    """The test (evaluation) file a data set reads first: whether present, and its name.

    Returns ``(path, present)``; the path names the file to report when absent.
    """
    if kind == "mnist":
        names = MNIST_TEST_FILES
        missing = [n for n in names if _first_present(data_dir, [n]) is None]
        return os.path.join(data_dir, (missing or names)[0]), not missing
    if kind == "cifar10":
        names = ["test_batch", "test_batch.bin", os.path.join("cifar-10-batches-bin",
                                                              "test_batch.bin")]
        found = _first_present(data_dir, names)
        return found or os.path.join(data_dir, "test_batch"), found is not None
    found = _first_present(data_dir, PTB_EVAL)
    return found or os.path.join(data_dir, PTB_EVAL[0]), found is not None


def real_split(model, data_dir, input_size=None, need_test=False, seq_len=None):
    """The model's real data set split into training and test samples, raw.

    The test samples come from the standard test files: MNIST ``t10k-*``, CIFAR-10
    ``test_batch`` (python or ``.bin``), PTB ``ptb.valid.txt`` (the text evaluated
    during training, as usual for PTB; ``ptb.test.txt`` when there is no valid text).

    Args:
        model: a model name with a real data set (:func:`dataset_for`).
        data_dir: the directory holding the files.
        input_size: the ResNets' image side (32 gives resnet-50 CIFAR-10).
        need_test: raise when the test files are absent (a run that evaluates).
        seq_len: PTB tokens per sequence (the transformers' ``seq_len``); None: the
            LSTM's ``SEQ_LEN``.

    Returns:
        ``(kind, shape, train, test)``: ``shape`` is ONE sample's shape, ``(784,)``
        (fcn-r), ``(1, 28, 28)`` (lenet), ``(3, 32, 32)`` (CIFAR-10, channels first
        as stored) or ``(SEQ_LEN,)`` (PTB). ``train`` and ``test`` are ``(inputs,
        labels, n)``: pixel bytes and label bytes, or for PTB lists of ``n * SEQ_LEN``
        ids with the labels one token ahead (test ids use the training vocabulary).
        ``test`` is None when its files are absent and ``need_test`` is false.

    Raises:
        dltop_protocol.Unsupported: the model has no real data set, or
            ``need_test`` and the test file (named) is absent.
        ValueError: a file is missing or malformed.
    """
    kind = dataset_for(model, input_size)
    if kind is None:
        raise dltop_protocol.Unsupported(NO_REAL_DATA % model)
    if lm_catalog.is_transformer(model):
        return _text_split(data_dir, int(seq_len or lm_catalog.shape(model)["seq_len"]),
                           need_test)
    path, present = test_file(kind, data_dir)
    if not present and need_test:
        raise dltop_protocol.Unsupported(
            "evaluation needs the %s test set: %s not found (also tried %s.gz)"
            % (kind, path, path) if kind == "mnist" else
            "evaluation needs the %s test set: %s not found" % (kind, path))
    if kind == "mnist":
        n, pixels, labels = read_mnist(data_dir)
        train = (pixels, labels, n)
        test = None
        if present:
            m, tpix, tlab = read_mnist(data_dir, MNIST_TEST_FILES)
            test = (tpix, tlab, m)
        return kind, _mnist_shape(model), train, test
    if kind == "cifar10":
        n, pixels, labels = read_cifar10(data_dir)
        test = None
        if present:
            m, tpix, tlab = read_cifar10(data_dir, CIFAR_TEST_BATCHES)
            test = (tpix, tlab, m)
        return kind, (3, 32, 32), (pixels, labels, n), test
    seq_len = int(seq_len or model_catalog.SEQ_LEN)
    ids, vocab = read_ptb(data_dir)
    train = _windows(ids, seq_len, os.path.join(data_dir, PTB_TRAIN))
    test = _windows(read_ptb_eval(path, vocab), seq_len, path) if present else None
    return kind, (seq_len,), train, test


def _text_split(data_dir, seq_len, need_test):
    """A transformer's text (:mod:`lm_text`: byte-level ids) as :func:`real_split` gives
    PTB, kind ``"ptb"`` (token ids: the runners' LM path)."""
    train_path, test_path = lm_text.files(data_dir)
    if test_path is None and need_test:
        if os.path.isfile(data_dir):
            raise dltop_protocol.Unsupported(
                "evaluation needs a test text: data_dir %s is one text file (give a "
                "directory with %s and %s)" % (data_dir, lm_text.TRAIN, lm_text.EVAL[0]))
        raise dltop_protocol.Unsupported("evaluation needs the ptb test set: %s not found"
                                         % os.path.join(data_dir, lm_text.EVAL[0]))
    try:
        train = lm_text.windows(lm_text.read(train_path), seq_len, train_path)
        test = None if test_path is None else \
            lm_text.windows(lm_text.read(test_path), seq_len, test_path)
    except lm_text.BadText as exc:
        raise BadData(exc.path, exc.what) from None
    return "ptb", (seq_len,), train, test


def _windows(ids, seq_len, path):
    n = (len(ids) - 1) // seq_len
    if n < 1:
        raise ValueError("%s: PTB text shorter than one sequence" % path)
    return ids[:n * seq_len], ids[1:n * seq_len + 1], n


def batches(inputs, labels, batch, data_dir, convert):
    """A function returning the next ``convert(inputs[i:j], labels[i:j])``, wrapping."""
    next_slice = batch_cycler(len(inputs), batch, data_dir)

    def next_batch():
        i, j = next_slice()
        return convert(inputs[i:j], labels[i:j])

    return next_batch


def batch_cycler(n_samples, batch, data_dir):
    """A function returning the next (start, end) slice of ``batch`` samples, wrapping."""
    if n_samples < batch:
        raise ValueError("data set in %s has %d samples, fewer than the batch %d"
                         % (data_dir, n_samples, batch))
    state = {"i": 0}

    def next_slice():
        i = state["i"]
        if i + batch > n_samples:
            i = 0
        state["i"] = i + batch
        return i, i + batch

    return next_slice
