"""A restricted unpickler for CIFAR-10 python-format batches: data only, never code.

``pickle.load`` calls any global a file names (``os.system`` through
``__reduce__``), so a crafted ``data_batch_N`` in a ``data_dir`` would run code in
the runner. :func:`load_batch` resolves only the globals a CIFAR batch needs, and
to stand-ins defined here rather than the real functions:

- ``numpy.core.multiarray._reconstruct`` / ``numpy._core.multiarray._reconstruct``
  with ``numpy.ndarray`` and ``numpy.dtype`` (how numpy pickles an array with
  protocols 0-4; the original CIFAR-10 files are Python 2, protocol 2);
- ``numpy.core.numeric._frombuffer`` / ``numpy._core.numeric._frombuffer``
  (protocol 5);
- ``numpy.core.multiarray.scalar`` (a numpy integer label);
- ``_codecs.encode`` with ``latin1`` (how Python 3 pickles ``bytes`` at protocol 2).

An array becomes an :class:`Array` (its raw bytes, shape and dtype), never a numpy
object, so this module needs neither numpy nor any code a file names. Any other
global raises :class:`pickle.UnpicklingError` naming it. Standard library only,
valid Python 3.6 (CNTK's interpreter runs it).
"""

import pickle
import struct

NUMPY_MODULES = ("numpy.core.multiarray", "numpy._core.multiarray")
NUMERIC_MODULES = ("numpy.core.numeric", "numpy._core.numeric")
INT_CODES = {"b": 1, "B": 1, "h": 2, "H": 2, "i": 4, "I": 4, "q": 8, "Q": 8}
DTYPES = {"u1": "B", "i1": "b", "u2": "H", "i2": "h", "u4": "I", "i4": "i",
          "u8": "Q", "i8": "q", "b1": "B"}
"""numpy integer dtype names -> struct codes (the only dtypes a CIFAR batch holds)."""


class DType(object):
    """A numpy dtype as pickled: its name (``u1``, ``<i8``) and byte order."""

    def __init__(self, name, align=False, copy=True):
        if not isinstance(name, str):
            raise pickle.UnpicklingError("dtype %r is not a name" % (name,))
        order = "<"
        if name[:1] in "<>|=":
            order, name = name[:1], name[1:]
        if name not in DTYPES:
            raise pickle.UnpicklingError("dtype %r is not an integer type" % name)
        self.code = DTYPES[name]
        self.order = order

    def __setstate__(self, state):
        # (version, byte order, subarray, names, fields, elsize, alignment, flags)
        if isinstance(state, tuple) and len(state) > 1 and state[1] in ("<", ">", "|", "="):
            self.order = state[1]

    @property
    def itemsize(self):
        return INT_CODES[self.code]

    def fmt(self, n):
        """The struct format of ``n`` items."""
        return (">" if self.order == ">" else "<") + self.code * n


class Array(object):
    """A numpy array as pickled: raw bytes, shape, dtype (C order only)."""

    def __init__(self, raw=b"", shape=(0,), dtype=None):
        self.raw, self.shape, self.dtype = bytes(raw), tuple(shape), dtype

    def __setstate__(self, state):
        if not (isinstance(state, tuple) and len(state) == 5):
            raise pickle.UnpicklingError("unexpected array state")
        _version, shape, dtype, fortran, raw = state
        if not isinstance(dtype, DType):
            raise pickle.UnpicklingError("array without an integer dtype")
        if fortran:
            raise pickle.UnpicklingError("Fortran-ordered array (expected C order)")
        if isinstance(raw, str):
            raw = raw.encode("latin1")
        if not isinstance(raw, (bytes, bytearray)):
            raise pickle.UnpicklingError("array data is %s, not bytes" % type(raw).__name__)
        self.raw, self.shape, self.dtype = bytes(raw), tuple(shape), dtype
        self._check()

    def _check(self):
        size = self.dtype.itemsize
        for d in self.shape:
            if not isinstance(d, int) or d < 0:
                raise pickle.UnpicklingError("bad array shape %r" % (self.shape,))
            size *= d
        if size != len(self.raw):
            raise pickle.UnpicklingError("array of shape %r needs %d bytes, has %d"
                                         % (self.shape, size, len(self.raw)))

    def tobytes(self):
        """The raw bytes, as ``numpy.ndarray.tobytes`` gives them (C order)."""
        if self.dtype.itemsize != 1:
            raise ValueError("array items are %d bytes, expected bytes" % self.dtype.itemsize)
        return self.raw

    def tolist(self):
        """The items as a flat list of ints."""
        n = len(self.raw) // self.dtype.itemsize
        return list(struct.unpack(self.dtype.fmt(n), self.raw))

    def __len__(self):
        return self.shape[0] if self.shape else 1

    def __iter__(self):
        if len(self.shape) != 1:
            raise ValueError("only a one-dimensional array is iterable here")
        return iter(self.tolist())


class _NdarrayType(object):
    """Stands for ``numpy.ndarray`` (the first argument of ``_reconstruct``)."""


def _reconstruct(cls, shape, dtype_code):
    if cls is not _NdarrayType:
        raise pickle.UnpicklingError("_reconstruct of something other than ndarray")
    return Array()


def _frombuffer(buf, dtype, shape, order):
    if not isinstance(dtype, DType) or order not in ("C", "A"):
        raise pickle.UnpicklingError("unexpected array in a protocol-5 pickle")
    array = Array(bytes(buf), shape, dtype)
    array._check()
    return array


def _scalar(dtype, raw=None):
    if not isinstance(dtype, DType) or not isinstance(raw, (bytes, str)):
        raise pickle.UnpicklingError("unexpected numpy scalar")
    if isinstance(raw, str):
        raw = raw.encode("latin1")
    if len(raw) != dtype.itemsize:
        raise pickle.UnpicklingError("numpy scalar of %d bytes" % len(raw))
    return struct.unpack(dtype.fmt(1), raw)[0]


def _encode(text, encoding="utf-8"):
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise pickle.UnpicklingError("_codecs.encode(%r) is not bytes in latin1" % encoding)
    return text.encode("latin1")


ALLOWED = {("numpy", "ndarray"): _NdarrayType, ("numpy", "dtype"): DType,
           ("_codecs", "encode"): _encode}
for _m in NUMPY_MODULES:
    ALLOWED[(_m, "_reconstruct")] = _reconstruct
    ALLOWED[(_m, "scalar")] = _scalar
for _m in NUMERIC_MODULES:
    ALLOWED[(_m, "_frombuffer")] = _frombuffer


class RestrictedUnpickler(pickle.Unpickler):
    """Resolves only :data:`ALLOWED` globals, each to its stand-in here."""

    def find_class(self, module, name):
        found = ALLOWED.get((module, name))
        if found is None:
            raise pickle.UnpicklingError(
                "refused global %s.%s (a CIFAR-10 batch holds only arrays, bytes, "
                "lists and ints)" % (module, name))
        return found

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("refused persistent id %r" % (pid,))


def load_batch(fh):
    """Unpickle one CIFAR-10 python batch from the open binary file ``fh``.

    Returns:
        The batch's dict; arrays in it are :class:`Array` objects.

    Raises:
        pickle.UnpicklingError: the file names a global other than those above,
            or holds an array of another kind.
    """
    return RestrictedUnpickler(fh, encoding="bytes").load()
