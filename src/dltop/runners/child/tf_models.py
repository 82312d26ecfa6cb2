"""The nine benchmark models of docs/models.md in tf.keras, with inputs, loss and FLOPs.

Valid Python 3.6 (child side). Same layers, shapes and trainable parameter
counts as torch_models (names, sizes, shapes and classes from ``model_catalog``);
images are NHWC (channels_last), the layout TF's CPU convolutions need.
Explicit ``ZeroPadding2D`` reproduces torch's symmetric padding where Keras'
``"same"`` would pad asymmetrically (strided convs, pools).
Initialisers copy torch's defaults (weights and biases uniform in +-1/sqrt(fan_in),
embedding N(0, 1)) so that loss curves are comparable across frameworks.
"""

import math

import tensorflow as tf
from model_catalog import (
    NUM_CLASSES,
    SEQ_LEN,
    VGG16_CONFIG,
    VOCAB,
    build_model,
    builders,
    input_shape,
)

keras = tf.keras
layers = tf.keras.layers


def _prod(dims):
    n = 1
    for d in dims:
        n *= int(d)
    return n


def _kernel_init():
    # torch's kaiming_uniform_(a=sqrt(5)): bound = sqrt(1 / fan_in).
    return keras.initializers.VarianceScaling(1.0 / 3.0, "fan_in", "uniform")


def _bias_init(fan_in):
    bound = 1.0 / math.sqrt(fan_in)
    return keras.initializers.RandomUniform(-bound, bound)


def _dense(x, units, activation=None):
    return layers.Dense(units, activation=activation, kernel_initializer=_kernel_init(),
                        bias_initializer=_bias_init(int(x.shape[-1])))(x)


def _conv(x, filters, k, stride=1, pad=0, bias=True):
    if pad and not (stride == 1 and 2 * pad == k - 1):
        x = layers.ZeroPadding2D(pad)(x)
        padding = "valid"
    else:
        padding = "same" if pad else "valid"
    fan_in = int(x.shape[-1]) * k * k
    return layers.Conv2D(filters, k, strides=stride, padding=padding, use_bias=bias,
                         kernel_initializer=_kernel_init(),
                         bias_initializer=_bias_init(fan_in) if bias else "zeros")(x)


def _bn(x):
    # torch's BatchNorm2d defaults (Keras' are momentum 0.99, epsilon 1e-3).
    return layers.BatchNormalization(momentum=0.9, epsilon=1e-5)(x)


def _relu(x):
    return layers.ReLU()(x)


def _maxpool(x, k=3, stride=2, pad=0):
    if pad:
        x = layers.ZeroPadding2D(pad)(x)  # follows a ReLU: zeros act like torch's -inf
    return layers.MaxPooling2D(k, stride)(x)


def _fcn(sizes):
    inp = keras.Input((sizes[0],))
    x = inp
    for i, size in enumerate(sizes[1:]):
        x = _dense(x, size, "sigmoid" if i < len(sizes) - 2 else None)
    return keras.Model(inp, x)


def _alexnet_s():
    inp = keras.Input((224, 224, 3))
    x = _maxpool(_relu(_conv(inp, 64, 11, 4, 2)))
    x = _maxpool(_relu(_conv(x, 192, 5, 1, 2)))
    x = _relu(_conv(x, 384, 3, 1, 1))
    x = _relu(_conv(x, 256, 3, 1, 1))
    x = _maxpool(_relu(_conv(x, 256, 3, 1, 1)))
    x = layers.Flatten()(x)
    x = _dense(_dense(x, 4096, "relu"), 4096, "relu")
    return keras.Model(inp, _dense(x, 1000))


def _alexnet_r():
    # cuda-convnet "18pct" without local response normalisation.
    inp = keras.Input((32, 32, 3))
    x = _relu(_maxpool(_conv(inp, 32, 5, 1, 2)))
    x = _maxpool(_relu(_conv(x, 32, 5, 1, 2)))
    x = layers.AveragePooling2D(3, 2)(_relu(_conv(x, 64, 5, 1, 2)))
    return keras.Model(inp, _dense(layers.Flatten()(x), 10))


def _lenet():
    # LeNet-5 on 28x28x1: padding 2 on the first convolution ("same" at stride 1).
    inp = keras.Input((28, 28, 1))
    x = layers.MaxPooling2D(2, 2)(_relu(_conv(inp, 6, 5, 1, 2)))
    x = layers.MaxPooling2D(2, 2)(_relu(_conv(x, 16, 5)))
    x = _dense(_dense(layers.Flatten()(x), 120, "relu"), 84, "relu")
    return keras.Model(inp, _dense(x, 10))


def _vgg16():
    # Configuration D; no dropout, no batch normalisation (as AlexNet here).
    inp = keras.Input((224, 224, 3))
    x = inp
    for width in VGG16_CONFIG:
        x = layers.MaxPooling2D(2, 2)(x) if width == "M" else _relu(_conv(x, width, 3, 1, 1))
    x = _dense(_dense(layers.Flatten()(x), 4096, "relu"), 4096, "relu")
    return keras.Model(inp, _dense(x, 1000))


def _bottleneck(x, planes, stride):
    out = planes * 4
    y = _relu(_bn(_conv(x, planes, 1, bias=False)))
    y = _relu(_bn(_conv(y, planes, 3, stride, 1, bias=False)))  # v1: stride on the 3x3
    y = _bn(_conv(y, out, 1, bias=False))
    short = x
    if stride != 1 or int(x.shape[-1]) != out:
        short = _bn(_conv(x, out, 1, stride, bias=False))
    return _relu(layers.Add()([y, short]))


def _resnet50(input_size=None):
    inp = keras.Input(input_shape("resnet-50", True, input_size))
    x = _maxpool(_relu(_bn(_conv(inp, 64, 7, 2, 3, bias=False))), pad=1)
    for planes, count, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(count):
            x = _bottleneck(x, planes, stride if i == 0 else 1)
    return keras.Model(inp, _dense(layers.GlobalAveragePooling2D()(x), 1000))


class ShortcutA(layers.Layer):
    """Option A shortcut of He et al.: subsample, then zero-pad channels (no parameters)."""

    def __init__(self, stride, pad, **kwargs):
        super(ShortcutA, self).__init__(**kwargs)
        self.stride = stride
        self.pad = pad

    def call(self, x):
        s = self.stride
        x = x[:, ::s, ::s, :]
        return tf.pad(x, [[0, 0], [0, 0], [0, 0], [self.pad // 2, self.pad - self.pad // 2]])


def _basic_block_a(x, planes, stride):
    y = _relu(_bn(_conv(x, planes, 3, stride, 1, bias=False)))
    y = _bn(_conv(y, planes, 3, 1, 1, bias=False))
    pad = planes - int(x.shape[-1])
    short = ShortcutA(stride, pad)(x) if stride != 1 or pad else x
    return _relu(layers.Add()([y, short]))


def _resnet56(input_size=None):
    inp = keras.Input(input_shape("resnet-56", True, input_size))
    x = _relu(_bn(_conv(inp, 16, 3, 1, 1, bias=False)))
    for planes, stride in ((16, 1), (32, 2), (64, 2)):
        for i in range(9):
            x = _basic_block_a(x, planes, stride if i == 0 else 1)
    return keras.Model(inp, _dense(layers.GlobalAveragePooling2D()(x), 10))


class TorchLSTM(layers.Layer):
    """One LSTM layer with torch's (and cuDNN's) parameterisation.

    Keras' LSTM has one bias vector per layer; torch's ``nn.LSTM`` has two,
    ``b_ih`` and ``b_hh``, and docs/models.md counts both (6,182,672). Their sum acts
    as a single bias, but both are separate trained variables in torch, so
    here too: ``bias_ih`` is added to the input projection of all steps at
    once, ``bias_hh`` to the recurrent projection at every step, and both
    receive gradients and SGD updates. Gate order i, f, g, o and the uniform
    +-1/sqrt(hidden) initialisation follow torch. Zero initial state; the
    sequence length is static, so the time loop unrolls in the traced graph.
    """

    def __init__(self, units, **kwargs):
        super(TorchLSTM, self).__init__(**kwargs)
        self.units = units

    def build(self, input_shape):
        h, i = self.units, int(input_shape[-1])
        init = keras.initializers.RandomUniform(-1.0 / math.sqrt(h), 1.0 / math.sqrt(h))
        self.kernel = self.add_weight(shape=(i, 4 * h), initializer=init, name="kernel")
        self.recurrent_kernel = self.add_weight(shape=(h, 4 * h), initializer=init,
                                                name="recurrent_kernel")
        self.bias_ih = self.add_weight(shape=(4 * h,), initializer=init, name="bias_ih")
        self.bias_hh = self.add_weight(shape=(4 * h,), initializer=init, name="bias_hh")

    def call(self, x):
        h_size, steps = self.units, int(x.shape[1])
        kernel = tf.convert_to_tensor(self.kernel)
        u = tf.convert_to_tensor(self.recurrent_kernel)
        b_hh = tf.convert_to_tensor(self.bias_hh)
        xw = tf.tensordot(x, kernel, 1) + tf.convert_to_tensor(self.bias_ih)
        batch = tf.shape(x)[0]
        h = tf.zeros(tf.stack([batch, h_size]), dtype=xw.dtype)
        c = h
        outs = []
        for t in range(steps):
            z = xw[:, t] + tf.matmul(h, u) + b_hh
            i, f, g, o = tf.split(z, 4, axis=1)
            c = tf.sigmoid(f) * c + tf.sigmoid(i) * tf.tanh(g)
            h = tf.sigmoid(o) * tf.tanh(c)
            outs.append(h)
        return tf.stack(outs, axis=1)

    def get_config(self):
        config = super(TorchLSTM, self).get_config()
        config["units"] = self.units
        return config


def _lstm():
    inp = keras.Input((SEQ_LEN,), dtype="int32")
    x = layers.Embedding(VOCAB, 256,
                         embeddings_initializer=keras.initializers.RandomNormal(0.0, 1.0))(inp)
    x = TorchLSTM(256)(TorchLSTM(256)(x))
    return keras.Model(inp, _dense(x, VOCAB))


_BUILDERS = builders(fcn=_fcn, alexnet_s=_alexnet_s, alexnet_r=_alexnet_r, resnet_50=_resnet50,
                     resnet_56=_resnet56, lstm=_lstm, lenet=_lenet, vgg16=_vgg16)
NAMES = tuple(_BUILDERS)


def build(name, input_size=None):
    """A freshly initialised (built) Keras model by docs/models.md name.

    ``input_size``: the ResNets' image side (ValueError for another model).
    """
    return build_model(_BUILDERS, name, input_size)


def param_count(model):
    """Trainable parameters (BatchNorm moving statistics are not trainable, not counted)."""
    return sum(_prod(v.shape) for v in model.trainable_variables)


def synthetic_batch(name, batch, input_size=None):
    """Random inputs and labels of the model's shapes, on the current default device."""
    shape = (batch,) + input_shape(name, True, input_size)
    if name == "lstm":
        x = tf.random.uniform(shape, 0, VOCAB, dtype=tf.int32)
        y = tf.random.uniform(shape, 0, VOCAB, dtype=tf.int32)
    else:
        x = tf.random.normal(shape)
        y = tf.random.uniform((batch,), 0, NUM_CLASSES[name], dtype=tf.int32)
    return x, y


def loss_fn(name):
    """Mean sparse cross-entropy from logits; for the LSTM over every step of every sequence.

    Logits are cast to float32 first (under mixed precision they are bf16/fp16),
    as torch's autocast does for cross-entropy. The same function serves all models.
    """
    def loss(logits, labels):
        logits = tf.cast(logits, tf.float32)
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=tf.cast(labels, tf.int32), logits=logits))
    return loss


def training_flops_per_sample(name, model=None, input_size=None):
    """Approximate FLOPs of one training sample: 3 x forward (2 x multiply-accumulates).

    The same formula as torch_models: Dense, Conv2D and LSTM multiply-accumulates
    from the functional graph's static shapes; element-wise work is left out.
    """
    model = model if model is not None else build(name, input_size)
    macs = 0
    for layer in model.layers:
        if isinstance(layer, layers.Dense):
            out = layer.output.shape
            tokens = _prod(out[1:-1]) if len(out) > 2 else 1
            macs += int(layer.input.shape[-1]) * int(out[-1]) * tokens
        elif isinstance(layer, layers.Conv2D):
            k = layer.kernel_size[0] * layer.kernel_size[1] * int(layer.input.shape[-1])
            macs += _prod(layer.output.shape[1:]) * k
        elif isinstance(layer, TorchLSTM):
            steps, i, h = int(layer.input.shape[1]), int(layer.input.shape[-1]), layer.units
            macs += steps * 4 * h * (i + h)
    return 3.0 * 2.0 * macs
