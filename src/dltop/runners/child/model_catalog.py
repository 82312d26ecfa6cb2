"""The nine benchmark models of docs/models.md: what every framework's models share.

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

NAMES = ("fcn-s", "fcn-r", "alexnet-s", "alexnet-r", "resnet-50", "resnet-56", "lstm",
         "lenet", "vgg16")
"""In the paper's order, then the thesis's LeNet and VGG16 (as ``dltop.catalog.MODELS``)."""

FCN_SIZES = {
    "fcn-s": (26752, 2048, 2048, 2048, 2048, 26752),
    "fcn-r": (784, 2048, 4096, 1024, 10),
}
"""Layer widths of the fully connected networks, input first."""

_IMAGE_CHW = {"alexnet-s": (3, 224, 224), "alexnet-r": (3, 32, 32),
              "resnet-50": (3, 224, 224), "resnet-56": (3, 32, 32),
              "lenet": (1, 28, 28), "vgg16": (3, 224, 224)}

NUM_CLASSES = {"fcn-s": 26752, "fcn-r": 10, "alexnet-s": 1000, "alexnet-r": 10,
               "resnet-50": 1000, "resnet-56": 10, "lstm": VOCAB, "lenet": 10, "vgg16": 1000}
"""Output classes per sample (per token for the LSTM). ``input_size`` does not change them."""

INPUT_SIZE_MODELS = ("resnet-50", "resnet-56")
"""Models whose square image side ``input_size`` may set (as ``dltop.catalog``)."""
MIN_INPUT_SIZE = 8

VGG16_CONFIG = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M",
                512, 512, 512, "M")
"""VGG configuration D: 3x3 convolutions (padding 1) of these widths, "M" a 2x2/2 max-pool."""


def input_shape(name, channels_last=False, input_size=None):
    """One sample's input shape; images ``(C, H, W)`` or ``(H, W, C)``.

    ``input_size`` (ResNets only) replaces the image side; None keeps the model's own.

    Raises:
        ValueError: ``input_size`` for another model, or below ``MIN_INPUT_SIZE``.
    """
    if name in ("fcn-s", "fcn-r"):
        shape = (FCN_SIZES[name][0],)
    elif name == "lstm":
        shape = (SEQ_LEN,)
    else:
        c, h, w = _IMAGE_CHW[name]
        if input_size is not None:
            h = w = checked_input_size(name, input_size)
        return (h, w, c) if channels_last else (c, h, w)
    if input_size is not None:
        checked_input_size(name, input_size)
    return shape


def checked_input_size(name, input_size):
    """``input_size`` as an int, or ValueError when ``name`` takes none or it is too small."""
    if name not in INPUT_SIZE_MODELS:
        raise ValueError("input_size applies to %s, not %s"
                         % (", ".join(INPUT_SIZE_MODELS), name))
    if int(input_size) < MIN_INPUT_SIZE:
        raise ValueError("input_size must be at least %d, not %r" % (MIN_INPUT_SIZE, input_size))
    return int(input_size)


def builders(fcn, alexnet_s, alexnet_r, resnet_50, resnet_56, lstm, lenet, vgg16):
    """One framework's ``{name: builder}`` table, in catalogue order.

    Every architecture is a required argument, so a framework module that
    lacks one fails at import. ``fcn`` is called with the layer widths
    (``FCN_SIZES``) first, then whatever the framework's builders take. The
    ResNet builders take an ``input_size`` keyword (None: the model's own side).
    """
    table = {
        "fcn-s": functools.partial(fcn, FCN_SIZES["fcn-s"]),
        "fcn-r": functools.partial(fcn, FCN_SIZES["fcn-r"]),
        "alexnet-s": alexnet_s, "alexnet-r": alexnet_r,
        "resnet-50": resnet_50, "resnet-56": resnet_56, "lstm": lstm,
        "lenet": lenet, "vgg16": vgg16,
    }
    return {name: table[name] for name in NAMES}


def builder(table, name):
    """``table[name]``, or a KeyError that names the known models."""
    if name not in table:
        raise KeyError("unknown model %r (known: %s)" % (name, ", ".join(NAMES)))
    return table[name]


def build_model(table, name, input_size=None):
    """A fresh model from a framework's ``table`` (:func:`builders`) by name.

    ``input_size``: the ResNets' image side (None: the model's own).

    Raises:
        KeyError: an unknown model.
        ValueError: ``input_size`` for another model, or below ``MIN_INPUT_SIZE``.
    """
    make = builder(table, name)
    if input_size is None:
        return make()
    input_shape(name, input_size=input_size)  # ValueError unless a ResNet
    return make(input_size=int(input_size))


def flops_for_mode(training_flops, mode):
    """FLOPs per sample of a run in ``mode``: a training step is counted as 3 x the
    forward pass (docs/models.md), an inference step is the forward pass alone."""
    if training_flops is None:
        return None
    return training_flops / 3.0 if mode == "inference" else training_flops
