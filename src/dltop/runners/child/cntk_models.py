"""The nine benchmark models of docs/models.md in CNTK 2.7, with inputs and loss.

Valid Python 3.6 (child side; CNTK 2.7 runs only on Python <= 3.7). Layer
shapes and parameter counts follow docs/models.md and the PyTorch reference
(torch_models.py) exactly; tests assert the counts. Names, sizes, input shapes
and classes come from ``model_catalog``, shared with the other frameworks.

Conventions:
- Images are channel-first (C, H, W), as in PyTorch. CNTK's ``pad=True`` is
  "same" padding, which equals PyTorch's ``padding=(k-1)/2`` for the stride-1
  convolutions and gives the same output sizes for the stride-2 ones; the one
  convolution where it would not (AlexNet-S's 11x11/4 with padding 2) pads
  its input explicitly with ``C.pad``. CNTK also refuses a kernel larger than
  its input even with ``pad=True`` (a ResNet at a small ``input_size`` ends with
  2x2 and 1x1 maps): ``_conv_bn`` pads those explicitly too.
- Parameters counted are ``model.parameters`` (learnable). BatchNormalization
  holds scale and bias as parameters and its running mean, variance and count
  as constants, which matches PyTorch counting weight and bias but not buffers.
- The LSTM is a hand-written cell (see :func:`_lstm_layer`), so that it has
  PyTorch's two bias vectors per layer.
"""

import cntk as C
import numpy as np
from cntk.layers import (
    AveragePooling,
    BatchNormalization,
    Convolution2D,
    Dense,
    Embedding,
    GlobalAveragePooling,
    MaxPooling,
    Recurrence,
    Sequential,
)
from model_catalog import (
    NUM_CLASSES,
    SEQ_LEN,
    VGG16_CONFIG,
    VOCAB,
    builder,
    builders,
    input_shape,
)

HIDDEN = 256


def _fcn(sizes):
    layers = [Dense(n, activation=C.sigmoid) for n in sizes[1:-1]]
    return Sequential(layers + [Dense(sizes[-1])])


def _alexnet_s(x):
    x = C.pad(x, pattern=[(0, 0), (2, 2), (2, 2)])  # PyTorch's padding=2 on the 11x11/4
    x = Convolution2D((11, 11), 64, strides=4, activation=C.relu)(x)
    return Sequential([
        MaxPooling((3, 3), strides=2),
        Convolution2D((5, 5), 192, pad=True, activation=C.relu), MaxPooling((3, 3), strides=2),
        Convolution2D((3, 3), 384, pad=True, activation=C.relu),
        Convolution2D((3, 3), 256, pad=True, activation=C.relu),
        Convolution2D((3, 3), 256, pad=True, activation=C.relu), MaxPooling((3, 3), strides=2),
        Dense(4096, activation=C.relu), Dense(4096, activation=C.relu), Dense(1000),
    ])(x)


def _alexnet_r(x):
    # cuda-convnet "18pct" without local response normalisation.
    return Sequential([
        Convolution2D((5, 5), 32, pad=True), MaxPooling((3, 3), strides=2), C.relu,
        Convolution2D((5, 5), 32, pad=True, activation=C.relu), MaxPooling((3, 3), strides=2),
        Convolution2D((5, 5), 64, pad=True, activation=C.relu),
        AveragePooling((3, 3), strides=2),
        Dense(10),
    ])(x)


def _lenet(x):
    # LeNet-5 on 1x28x28: "same" padding on the first 5x5 convolution (PyTorch's padding=2).
    return Sequential([
        Convolution2D((5, 5), 6, pad=True, activation=C.relu), MaxPooling((2, 2), strides=2),
        Convolution2D((5, 5), 16, activation=C.relu), MaxPooling((2, 2), strides=2),
        Dense(120, activation=C.relu), Dense(84, activation=C.relu), Dense(10),
    ])(x)


def _vgg16(x):
    # Configuration D; no dropout, no batch normalisation (as AlexNet here).
    layers = [MaxPooling((2, 2), strides=2) if width == "M"
              else Convolution2D((3, 3), width, pad=True, activation=C.relu)
              for width in VGG16_CONFIG]
    return Sequential(layers + [Dense(4096, activation=C.relu), Dense(4096, activation=C.relu),
                                Dense(1000)])(x)


def _conv_bn(x, filters, k, stride=1, relu=True):
    if k > 1 and min(x.shape[1:]) < k:
        # CNTK refuses a kernel larger than its input even with pad=True (a ResNet at a
        # small input_size): pad explicitly, as PyTorch does; same output size.
        p = (k - 1) // 2
        x = C.pad(x, pattern=[(0, 0), (p, p), (p, p)])
        x = Convolution2D((k, k), filters, strides=stride, bias=False)(x)
    else:
        x = Convolution2D((k, k), filters, strides=stride, pad=k > 1, bias=False)(x)
    x = BatchNormalization(map_rank=1)(x)
    return C.relu(x) if relu else x


def _bottleneck(x, inplanes, planes, stride):
    out = planes * 4
    y = _conv_bn(x, planes, 1)
    y = _conv_bn(y, planes, 3, stride)  # the stride on the 3x3 conv, as torch_models.py
    y = _conv_bn(y, out, 1, relu=False)
    if stride != 1 or inplanes != out:
        x = _conv_bn(x, out, 1, stride, relu=False)
    return C.relu(y + x)


def _resnet50(x, input_size=None):
    # Any input_size: the global average pool takes what the stages leave.
    x = _conv_bn(x, 64, 7, 2)
    x = MaxPooling((3, 3), strides=2, pad=True)(x)
    inplanes = 64
    for planes, count, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(count):
            x = _bottleneck(x, inplanes, planes, stride if i == 0 else 1)
            inplanes = planes * 4
    return Dense(1000)(GlobalAveragePooling()(x))


def _basic_block_a(x, inplanes, planes, stride):
    """CIFAR basic block; option A shortcut: subsample, zero-pad channels (no parameters)."""
    y = _conv_bn(x, planes, 3, stride)
    y = _conv_bn(y, planes, 3, relu=False)
    short = x
    if stride != 1:
        short = MaxPooling((1, 1), strides=stride)(short)  # x[:, ::s, ::s]
    pad = planes - inplanes
    if pad:
        short = C.pad(short, pattern=[(pad // 2, pad - pad // 2), (0, 0), (0, 0)])
    return C.relu(y + short)


def _resnet56(x, input_size=None):
    x = _conv_bn(x, 16, 3)
    inplanes = 16
    for planes, stride in ((16, 1), (32, 2), (64, 2)):
        for i in range(9):
            x = _basic_block_a(x, inplanes, planes, stride if i == 0 else 1)
            inplanes = planes
    return Dense(10)(GlobalAveragePooling()(x))


def _lstm_layer(input_dim, dim):
    """One LSTM layer with PyTorch's parameters: W_ih, W_hh, b_ih and b_hh.

    CNTK's own ``layers.LSTM`` has a single bias vector per layer, 1024
    parameters fewer than PyTorch's ``nn.LSTM`` (which adds ``b_ih`` and
    ``b_hh``). This cell has both biases and really adds both to the gate
    pre-activations, exactly like PyTorch, so the parameter count (and the
    work) is the same. Gate order i, f, g, o as in PyTorch.
    """
    init = C.uniform(1.0 / np.sqrt(dim))  # PyTorch's U(-1/sqrt(h), 1/sqrt(h))
    w_ih = C.Parameter((input_dim, 4 * dim), init=init, name="W_ih")
    w_hh = C.Parameter((dim, 4 * dim), init=init, name="W_hh")
    b_ih = C.Parameter((4 * dim,), init=init, name="b_ih")
    b_hh = C.Parameter((4 * dim,), init=init, name="b_hh")

    @C.Function
    def step(h, c, x):
        z = C.times(x, w_ih) + b_ih + C.times(h, w_hh) + b_hh
        i = C.sigmoid(C.slice(z, 0, 0, dim))
        f = C.sigmoid(C.slice(z, 0, dim, 2 * dim))
        g = C.tanh(C.slice(z, 0, 2 * dim, 3 * dim))
        o = C.sigmoid(C.slice(z, 0, 3 * dim, 4 * dim))
        c2 = f * c + i * g
        return o * C.tanh(c2), c2

    return Recurrence(step)


def _lstm(x):
    """Embedding -> 2 LSTM layers over the sequence axis -> Linear at every step."""
    x = Embedding(HIDDEN)(x)
    x = _lstm_layer(HIDDEN, HIDDEN)(x)
    x = _lstm_layer(HIDDEN, HIDDEN)(x)
    return Dense(VOCAB)(x)


_BUILDERS = builders(fcn=lambda sizes, x: _fcn(sizes)(x), alexnet_s=_alexnet_s,
                     alexnet_r=_alexnet_r, resnet_50=_resnet50, resnet_56=_resnet56, lstm=_lstm,
                     lenet=_lenet, vgg16=_vgg16)
NAMES = tuple(_BUILDERS)


def inputs(name, input_size=None):
    """The model's input and label variables.

    The LSTM's are sequences (CNTK's dynamic sequence axis) of sparse one-hot
    token vectors: one label per step, so CNTK averages the loss over every
    step of every sequence, as PyTorch's flattened cross-entropy does.
    """
    if name == "lstm":
        return (C.sequence.input_variable(VOCAB, is_sparse=True, name="tokens"),
                C.sequence.input_variable(VOCAB, is_sparse=True, name="labels"))
    return (C.input_variable(input_shape(name, input_size=input_size), name="features"),
            C.input_variable(NUM_CLASSES[name], name="labels"))


def build(name, input_size=None):
    """``(model, loss, x, y)``: a freshly initialised model by docs/models.md name.

    ``input_size``: the ResNets' image side (ValueError for another model).
    """
    make = builder(_BUILDERS, name)
    x, y = inputs(name, input_size)
    model = make(x) if input_size is None else make(x, input_size=int(input_size))
    loss = C.cross_entropy_with_softmax(model, y)
    return model, loss, x, y


def param_count(model):
    """Learnable parameters (BatchNormalization running statistics are constants)."""
    return int(sum(int(np.prod(p.shape)) for p in model.parameters))


def training_flops_per_sample(name, model):
    """Approximate FLOPs of one training sample: 3 x forward (2 x multiply-accumulates).

    The convention of torch_models.py: the multiply-accumulates of dense
    products (Dense, LSTM gates) and convolutions, per sequence step for the
    LSTM; embedding lookups and element-wise work are left out.
    """
    from cntk.logging.graph import depth_first_search

    ops = depth_first_search(
        model, lambda f: (isinstance(f, C.Function) and not f.is_block
                          and f.op_name in ("Times", "Convolution")), depth=-1)
    macs = 0
    for f in ops:
        w = [i for i in f.inputs if i.is_parameter][0]
        if f.op_name == "Convolution":
            macs += int(np.prod(f.output.shape)) * int(np.prod(w.shape)) // w.shape[0]
        elif w.name != "E":  # Embedding's table: a lookup, not a product
            macs += int(np.prod(w.shape))
    return 6.0 * macs * (SEQ_LEN if name == "lstm" else 1)


def labels_one_hot(labels, classes):
    """A dense float32 one-hot matrix for integer labels."""
    out = np.zeros((len(labels), classes), dtype=np.float32)
    out[np.arange(len(labels)), np.asarray(labels, dtype=np.int64)] = 1.0
    return out


def sequences(ids, vocab=VOCAB):
    """Sparse one-hot CNTK value for a (batch, steps) array of token ids."""
    return C.Value.one_hot([list(map(int, row)) for row in ids], vocab)


def synthetic_batch(name, batch, seed=0, input_size=None):
    """Random inputs and labels of the model's shapes, ready to feed ``(x, y)``."""
    rng = np.random.RandomState(seed)
    if name == "lstm":
        return (sequences(rng.randint(0, VOCAB, (batch, SEQ_LEN))),
                sequences(rng.randint(0, VOCAB, (batch, SEQ_LEN))))
    x = rng.standard_normal((batch,) + input_shape(name, input_size=input_size)).astype(
        np.float32)
    return x, labels_one_hot(rng.randint(0, NUM_CLASSES[name], batch), NUM_CLASSES[name])
