"""Optimizers of docs/profiles.md "Optimizers" in PyTorch (child side, Python 3.6 valid).

PyTorch's own definitions are the reference the other frameworks match, so each
optimizer is the stock class with its defaults pinned explicitly: a later
PyTorch changing a default (AdamW's weight_decay is 0.01 unless given) must not
change what a profile means.
"""

import dltop_protocol as proto
import torch

ADAM_BETAS = (0.9, 0.999)
ADAM_EPS = 1e-8


def build(spec, params, device=None):
    """The optimizer the spec names over ``params``.

    ``sgd``: ``v = momentum*v + (g + weight_decay*w)``, ``w -= lr*v`` (no dampening,
    no Nesterov). ``adam``: Adam on ``g + weight_decay*w`` (L2, coupled).
    ``adamw``: Adam on ``g``, then ``w -= lr*weight_decay*w`` (decoupled).
    ``momentum`` applies to ``sgd`` only; Adam's moments use the fixed betas.
    On a CUDA ``device`` AdamW runs PyTorch's fused kernel (``fused=True``: one
    launch for every parameter, the same update); elsewhere the default one.
    """
    name = spec.get("optimizer") or "sgd"
    lr = float(spec["lr"])
    wd = float(spec.get("weight_decay") or 0.0)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=float(spec.get("momentum") or 0.0),
                               dampening=0.0, nesterov=False, weight_decay=wd)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, betas=ADAM_BETAS, eps=ADAM_EPS,
                                weight_decay=wd, amsgrad=False)
    if name == "adamw":
        fused = {"fused": True} if device is not None and device.type == "cuda" else {}
        return torch.optim.AdamW(params, lr=lr, betas=ADAM_BETAS, eps=ADAM_EPS,
                                 weight_decay=wd, amsgrad=False, **fused)
    raise proto.Unsupported("optimizer %r is not one of sgd, adam, adamw" % (name,))
