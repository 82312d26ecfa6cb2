"""The seven benchmark models of docs/models.md: what every framework's models share.

Standard library only, valid Python 3.6 (child side). ``torch_models``,
``tf_models`` and ``cntk_models`` take names, sizes, input shapes, classes and
their ``{name: builder}`` table (:func:`builders`) from here and add only their
framework's layers.
"""

import functools

VOCAB = 10000
"""PTB vocabulary (the LSTM's input and output size)."""
SEQ_LEN = 32
"""Tokens per LSTM sequence."""

NAMES = ("fcn-s", "fcn-r", "alexnet-s", "alexnet-r", "resnet-50", "resnet-56", "lstm")
"""In the paper's order (the same as ``dltop.catalog.MODELS``)."""

FCN_SIZES = {
    "fcn-s": (26752, 2048, 2048, 2048, 2048, 26752),
    "fcn-r": (784, 2048, 4096, 1024, 10),
}
"""Layer widths of the fully connected networks, input first."""

_IMAGE_CHW = {"alexnet-s": (3, 224, 224), "alexnet-r": (3, 32, 32),
              "resnet-50": (3, 224, 224), "resnet-56": (3, 32, 32)}

NUM_CLASSES = {"fcn-s": 26752, "fcn-r": 10, "alexnet-s": 1000, "alexnet-r": 10,
               "resnet-50": 1000, "resnet-56": 10, "lstm": VOCAB}
"""Output classes per sample (per token for the LSTM)."""


def input_shapes(channels_last=False):
    """One sample's input shape per model; images NCHW-style ``(C, H, W)`` or ``(H, W, C)``."""
    shapes = {"fcn-s": (FCN_SIZES["fcn-s"][0],), "fcn-r": (FCN_SIZES["fcn-r"][0],),
              "lstm": (SEQ_LEN,)}
    for name, (c, h, w) in _IMAGE_CHW.items():
        shapes[name] = (h, w, c) if channels_last else (c, h, w)
    return {name: shapes[name] for name in NAMES}


def builders(fcn, alexnet_s, alexnet_r, resnet_50, resnet_56, lstm):
    """One framework's ``{name: builder}`` table, in catalogue order.

    Every architecture is a required argument, so a framework module that
    lacks one fails at import. ``fcn`` is called with the layer widths
    (``FCN_SIZES``) first, then whatever the framework's builders take.
    """
    table = {
        "fcn-s": functools.partial(fcn, FCN_SIZES["fcn-s"]),
        "fcn-r": functools.partial(fcn, FCN_SIZES["fcn-r"]),
        "alexnet-s": alexnet_s, "alexnet-r": alexnet_r,
        "resnet-50": resnet_50, "resnet-56": resnet_56, "lstm": lstm,
    }
    return {name: table[name] for name in NAMES}


def builder(table, name):
    """``table[name]``, or a KeyError that names the known models."""
    if name not in table:
        raise KeyError("unknown model %r (known: %s)" % (name, ", ".join(NAMES)))
    return table[name]
