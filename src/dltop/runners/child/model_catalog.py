"""The seven benchmark models of docs/models.md: what every framework's models share.

Standard library only, valid Python 3.6 (child side). ``torch_models``,
``tf_models`` and ``cntk_models`` take names, sizes, input shapes and classes
from here and add only their framework's layers.
"""

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
    return shapes


def check_name(name, builders):
    """Raise KeyError naming the known models unless ``name`` is one of ``builders``.

    Also checks that the framework module builds exactly the catalogue.
    """
    if set(builders) != set(NAMES):
        raise RuntimeError("model builders %s differ from the catalogue %s"
                           % (sorted(builders), list(NAMES)))
    if name not in builders:
        raise KeyError("unknown model %r (known: %s)" % (name, ", ".join(NAMES)))
