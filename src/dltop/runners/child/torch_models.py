"""The nine benchmark models of docs/models.md in PyTorch, with inputs, loss and FLOPs.

Valid Python 3.6 (child side). Layer shapes and parameter counts follow
docs/models.md exactly; tests assert the counts. Names, sizes, input shapes
and classes come from ``model_catalog``, shared with the other frameworks.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
from model_catalog import (
    NUM_CLASSES,
    VGG16_CONFIG,
    VOCAB,
    build_model,
    builders,
    input_shape,
)


def _fcn(sizes):
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(nn.Sigmoid())
    return nn.Sequential(*layers)


def _alexnet_s():
    return nn.Sequential(
        nn.Conv2d(3, 64, 11, stride=4, padding=2), nn.ReLU(inplace=True),
        nn.MaxPool2d(3, 2),
        nn.Conv2d(64, 192, 5, padding=2), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2),
        nn.Conv2d(192, 384, 3, padding=1), nn.ReLU(inplace=True),
        nn.Conv2d(384, 256, 3, padding=1), nn.ReLU(inplace=True),
        nn.Conv2d(256, 256, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2),
        nn.Flatten(),
        nn.Linear(9216, 4096), nn.ReLU(inplace=True),
        nn.Linear(4096, 4096), nn.ReLU(inplace=True),
        nn.Linear(4096, 1000),
    )


def _alexnet_r():
    # cuda-convnet "18pct" without local response normalisation.
    return nn.Sequential(
        nn.Conv2d(3, 32, 5, padding=2), nn.MaxPool2d(3, 2), nn.ReLU(inplace=True),
        nn.Conv2d(32, 32, 5, padding=2), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2),
        nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(inplace=True), nn.AvgPool2d(3, 2),
        nn.Flatten(), nn.Linear(576, 10),
    )


def _lenet():
    # LeNet-5 on 1x28x28 (the first convolution pads by 2, as for 32x32 inputs).
    return nn.Sequential(
        nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(inplace=True), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5), nn.ReLU(inplace=True), nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(400, 120), nn.ReLU(inplace=True),
        nn.Linear(120, 84), nn.ReLU(inplace=True),
        nn.Linear(84, 10),
    )


def _vgg16():
    # Configuration D; no dropout, no batch normalisation (as AlexNet here).
    layers, channels = [], 3
    for width in VGG16_CONFIG:
        if width == "M":
            layers.append(nn.MaxPool2d(2))
        else:
            layers += [nn.Conv2d(channels, width, 3, padding=1), nn.ReLU(inplace=True)]
            channels = width
    return nn.Sequential(*layers, nn.Flatten(),
                         nn.Linear(512 * 7 * 7, 4096), nn.ReLU(inplace=True),
                         nn.Linear(4096, 4096), nn.ReLU(inplace=True),
                         nn.Linear(4096, 1000))


class _Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes, planes, stride):
        super(_Bottleneck, self).__init__()
        out = planes * 4
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out)
        self.down = None
        if stride != 1 or inplanes != out:
            self.down = nn.Sequential(nn.Conv2d(inplanes, out, 1, stride=stride, bias=False),
                                      nn.BatchNorm2d(out))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)), inplace=True)
        y = F.relu(self.bn2(self.conv2(y)), inplace=True)
        y = self.bn3(self.conv3(y))
        return F.relu(y + (x if self.down is None else self.down(x)), inplace=True)


class ResNet50(nn.Module):
    """ResNet-50 v1 (bottlenecks 3-4-6-3); the stride sits on the 3x3 conv."""

    def __init__(self, num_classes=1000, input_size=None):
        # Any input_size works: the global average pool takes what the stages leave.
        super(ResNet50, self).__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False),
                                  nn.BatchNorm2d(64), nn.ReLU(inplace=True),
                                  nn.MaxPool2d(3, stride=2, padding=1))
        blocks, inplanes = [], 64
        for planes, count, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            for i in range(count):
                blocks.append(_Bottleneck(inplanes, planes, stride if i == 0 else 1))
                inplanes = planes * 4
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(2048, num_classes)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class _BasicBlockA(nn.Module):
    """CIFAR basic block; option A shortcut: subsample and zero-pad channels (no parameters)."""

    def __init__(self, inplanes, planes, stride):
        super(_BasicBlockA, self).__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.stride = stride
        self.pad = planes - inplanes

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)), inplace=True)
        y = self.bn2(self.conv2(y))
        short = x
        if self.stride != 1 or self.pad:
            short = x[:, :, ::self.stride, ::self.stride]
            short = F.pad(short, (0, 0, 0, 0, self.pad // 2, self.pad - self.pad // 2))
        return F.relu(y + short, inplace=True)


class ResNet56(nn.Module):
    """CIFAR ResNet-56: 3 stages x 9 basic blocks (16, 32, 64 channels)."""

    def __init__(self, num_classes=10, input_size=None):
        super(ResNet56, self).__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(16)
        blocks, inplanes = [], 16
        for planes, stride in ((16, 1), (32, 2), (64, 2)):
            for i in range(9):
                blocks.append(_BasicBlockA(inplanes, planes, stride if i == 0 else 1))
                inplanes = planes
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(64, num_classes)

    def forward(self, x):
        x = self.blocks(F.relu(self.bn(self.conv(x)), inplace=True))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class LSTMModel(nn.Module):
    """Embedding 10000->256, 2-layer LSTM (hidden 256), Linear 256->10000 at every step."""

    def __init__(self):
        super(LSTMModel, self).__init__()
        self.embed = nn.Embedding(VOCAB, 256)
        self.lstm = nn.LSTM(256, 256, num_layers=2, batch_first=True)
        self.out = nn.Linear(256, VOCAB)

    def forward(self, ids):
        y, _ = self.lstm(self.embed(ids))
        return self.out(y)


_BUILDERS = builders(fcn=_fcn, alexnet_s=_alexnet_s, alexnet_r=_alexnet_r, resnet_50=ResNet50,
                     resnet_56=ResNet56, lstm=LSTMModel, lenet=_lenet, vgg16=_vgg16)
NAMES = tuple(_BUILDERS)


def build(name, input_size=None):
    """A freshly initialised model by docs/models.md name (``input_size``: ResNets only)."""
    return build_model(_BUILDERS, name, input_size)


def param_count(model):
    """Trainable parameters (BatchNorm running statistics are buffers, not counted)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def synthetic_batch(name, batch, device, generator=None, input_size=None):
    """Random inputs and labels of the model's shapes, created on ``device``."""
    shape = (batch,) + input_shape(name, input_size=input_size)
    if name == "lstm":
        x = torch.randint(0, VOCAB, shape, device=device)
        y = torch.randint(0, VOCAB, shape, device=device)
    else:
        x = torch.randn(shape, device=device)
        y = torch.randint(0, NUM_CLASSES[name], (batch,), device=device)
    return x, y


def loss_fn(name):
    """Cross-entropy; for the LSTM averaged over every step of every sequence."""
    if name == "lstm":
        return lambda out, y: F.cross_entropy(out.reshape(-1, VOCAB), y.reshape(-1))
    return F.cross_entropy


def training_flops_per_sample(name, model=None, input_size=None):
    """Approximate FLOPs of one training sample: 3 x forward (2 x multiply-accumulates).

    Counts Linear, Conv2d and LSTM multiply-accumulates with forward hooks on a
    batch of one; element-wise work (activations, BN, pooling) is left out.
    """
    model = model if model is not None else build(name, input_size)
    macs = [0]

    def on_linear(mod, inp, out):
        macs[0] += mod.in_features * mod.out_features * (out.numel() // out.shape[-1])

    def on_conv(mod, inp, out):
        k = mod.kernel_size[0] * mod.kernel_size[1] * mod.in_channels // mod.groups
        macs[0] += out.numel() * k

    def on_lstm(mod, inp, out):
        steps = inp[0].shape[1] if mod.batch_first else inp[0].shape[0]
        h = mod.hidden_size
        for layer in range(mod.num_layers):
            i = mod.input_size if layer == 0 else h
            macs[0] += steps * 4 * h * (i + h)

    hooks = []
    for m in model.modules():
        if isinstance(m, nn.Linear):
            hooks.append(m.register_forward_hook(on_linear))
        elif isinstance(m, nn.Conv2d):
            hooks.append(m.register_forward_hook(on_conv))
        elif isinstance(m, nn.LSTM):
            hooks.append(m.register_forward_hook(on_lstm))
    try:
        with torch.no_grad():
            x, _ = synthetic_batch(name, 1, torch.device("cpu"), input_size=input_size)
            was_training = model.training
            model.eval()
            model(x)
            model.train(was_training)
    finally:
        for h in hooks:
            h.remove()
    return 3.0 * 2.0 * macs[0]
