"""Text for the transformers' ``data = "real"``: a byte-level tokenizer and its windows.

Standard library only, valid Python 3.6 (child side; the host loads this file to check
a profile's text before anything is stored, as it loads ``lm_catalog``).

The tokenizer needs no download and no vocabulary file: a text's token ids are its
UTF-8 bytes, 0..255, the same ids in every model (every catalog vocabulary has
10 000 ids or more, so no id is clipped or folded; ids 256 and up simply never occur
in the data, and the model learns that within a few steps). A text must be what it
claims: it must decode as UTF-8 (strict) and hold no NUL byte, so that a binary file
named as text is refused with the offset of its first bad byte instead of training
on garbage.

``data_dir`` names either one text file (training only: no test text to evaluate
on) or a directory holding ``ptb.train.txt`` and, for evaluation, ``ptb.valid.txt``
(else ``ptb.test.txt``), as ``dltop data synth ptb`` writes them. The token stream is
cut into consecutive windows of ``seq_len + 1`` ids overlapping by one (inputs and
the targets one token ahead, stride ``seq_len``); the runners draw them in an order
reshuffled each epoch from the seed (``convergence.EpochOrder``), so every step sees
new sequences.
"""

import codecs
import os

TRAIN = "ptb.train.txt"
EVAL = ("ptb.valid.txt", "ptb.test.txt")
CHUNK = 1 << 20
"""Bytes read (and checked) at a time."""


class BadText(ValueError):
    """A text that is not what it claims; the message names the file."""

    def __init__(self, path, what):
        super(BadText, self).__init__("%s: %s" % (path, what))
        self.path = path
        self.what = what


def files(data_dir):
    """``(training text, test text or None)`` of ``data_dir`` (a file or a directory;
    a path that is neither is the file, reported missing by its own name)."""
    if not os.path.isdir(data_dir):
        return data_dir, None
    train = os.path.join(data_dir, TRAIN)
    for name in EVAL:
        path = os.path.join(data_dir, name)
        if os.path.isfile(path):
            return train, path
    return train, None


def read(path):
    """The text's token ids (its bytes).

    Raises:
        BadText: missing, empty, not UTF-8, or holding a NUL byte.
    """
    if not os.path.isfile(path):
        raise BadText(path, "file not found")
    parts = []
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    offset = 0
    with open(path, "rb") as fh:
        while True:
            chunk = fh.read(CHUNK)
            _check(path, decoder, chunk, offset, not chunk)
            if not chunk:
                break
            parts.append(chunk)
            offset += len(chunk)
    if not offset:
        raise BadText(path, "empty: a text of at least seq_len + 1 bytes is needed")
    return b"".join(parts)


def _check(path, decoder, chunk, offset, final):
    nul = chunk.find(b"\x00")
    if nul >= 0:
        raise BadText(path, "not text: a NUL byte at offset %d (a text must be UTF-8 "
                      "without NUL bytes)" % (offset + nul))
    try:
        decoder.decode(chunk, final)
    except UnicodeDecodeError as exc:
        raise BadText(path, "not UTF-8 text: byte 0x%02x at offset %d cannot be decoded "
                      "(%s)" % (bytearray(chunk[exc.start:exc.start + 1] or b"\0")[0],
                                offset + exc.start, exc.reason)) from None


def scan(path):
    """Check ``path`` as :func:`read` does without keeping it; its size in bytes."""
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    size = 0
    if not os.path.isfile(path):
        raise BadText(path, "file not found")
    with open(path, "rb") as fh:
        while True:
            chunk = fh.read(CHUNK)
            _check(path, decoder, chunk, size, not chunk)
            if not chunk:
                return size
            size += len(chunk)


def problem(data_dir, seq_len, batch):
    """Why ``data_dir`` cannot feed batches of ``batch`` sequences of ``seq_len`` tokens
    (one line naming the file), or None."""
    train, _ = files(data_dir)
    try:
        size = scan(train)
    except BadText as exc:
        return str(exc)
    except (IOError, OSError) as exc:
        return "%s: cannot be read (%s)" % (train, exc.strerror or exc)
    need = int(batch) * int(seq_len) + 1
    if size < need:
        what = "empty" if size == 0 else "%d bytes" % size
        return ("%s: %s, too short for seq_len = %d at a batch of %d (%d bytes at least: a "
                "window of seq_len + 1 byte-level tokens per sequence)"
                % (train, what, int(seq_len), int(batch), need))
    return None


def windows(ids, seq_len, path):
    """``(inputs, targets, n)``: ``n`` consecutive windows of ``seq_len`` ids as flat
    lists, the targets one id ahead.

    Raises:
        BadText: shorter than one window.
    """
    n = (len(ids) - 1) // seq_len
    if n < 1:
        raise BadText(path, "%d bytes, too short for seq_len = %d (%d bytes at least)"
                      % (len(ids), seq_len, seq_len + 1))
    return list(ids[:n * seq_len]), list(ids[1:n * seq_len + 1]), n
