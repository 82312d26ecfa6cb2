"""The JAX runner's optimizers and its steps (train, forward, eval), to be jitted.

Valid Python 3.6 (child side). Pure JAX, no optax: the optimizers are a few lines each
and must make exactly the updates of docs/profiles.md "Optimizers" (PyTorch's
definitions, torch_optim.py); a library's defaults (optax's AdamW decays by 1e-4
unless told, its SGD has no coupled weight decay) would be one more thing to pin.

- ``sgd``: ``v = momentum*v + (g + wd*w)``, ``w -= lr*v`` (no dampening, no Nesterov);
- ``adam``: Adam on ``g + wd*w`` (L2, coupled), epsilon added after the bias correction
  of ``v`` as PyTorch does: ``w -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps)``;
- ``adamw``: ``w -= lr*wd*w`` first, then Adam on ``g`` (decoupled).

Mixed precision (``bf16``, ``fp16``) is the model's: ``jax_models.build(...,
dtype=...)`` computes each layer in that type over float32 weights, so the gradients
and the updates stay float32 (what autocast does); the loss is computed in float32.
``fp16`` scales the loss dynamically like ``torch.amp.GradScaler`` (2**16, x2 after 2000
finite steps, /2 and the update skipped on an overflow).
"""

import math

import jax
import jax.numpy as jnp

BETAS = (0.9, 0.999)
EPSILON = 1e-8
SCALE_INIT = 2.0 ** 16
SCALE_GROWTH_INTERVAL = 2000

_map = jax.tree_util.tree_map


def _zeros(params):
    return _map(jnp.zeros_like, params)


def optimizer(spec):
    """``(init(params) -> opt_state, update(grads, opt_state, params) -> (params, opt_state))``.

    Raises:
        ValueError: an optimizer other than sgd, adam, adamw.
    """
    name = spec.get("optimizer") or "sgd"
    lr = float(spec["lr"])
    wd = float(spec.get("weight_decay") or 0.0)
    if name == "sgd":
        return _sgd(lr, float(spec.get("momentum") or 0.0), wd)
    if name in ("adam", "adamw"):
        return _adam(lr, wd, decoupled=name == "adamw")
    raise ValueError("unknown optimizer %r (sgd, adam, adamw)" % (name,))


def _sgd(lr, momentum, wd):
    def init(params):
        return _zeros(params) if momentum else ()

    def update(grads, state, params):
        if wd:
            grads = _map(lambda g, w: g + wd * w, grads, params)
        if not momentum:
            return _map(lambda w, g: w - lr * g, params, grads), state
        v = _map(lambda b, g: momentum * b + g, state, grads)
        return _map(lambda w, b: w - lr * b, params, v), v

    return init, update


def _adam(lr, wd, decoupled):
    b1, b2 = BETAS
    # 1 - b**t as -expm1(t * log(b)), the logs taken in float64 here: 1 - 0.999**t in
    # float32 would be 1e-5 off (relative) at t = 1.
    log_b1, log_b2 = math.log(b1), math.log(b2)

    def init(params):
        return {"t": jnp.zeros((), jnp.int32), "m": _zeros(params), "v": _zeros(params)}

    def update(grads, state, params):
        t = state["t"] + 1
        tf = t.astype(jnp.float32)
        bc1 = -jnp.expm1(tf * log_b1)
        bc2 = -jnp.expm1(tf * log_b2)
        if decoupled and wd:
            params = _map(lambda w: w - lr * wd * w, params)
        elif wd:
            grads = _map(lambda g, w: g + wd * w, grads, params)
        m = _map(lambda a, g: a + (g - a) * (1.0 - b1), state["m"], grads)
        v = _map(lambda a, g: a + (g * g - a) * (1.0 - b2), state["v"], grads)
        step = lr / bc1
        root_bc2 = jnp.sqrt(bc2)
        new = _map(lambda w, a, b: w - step * a / (jnp.sqrt(b) / root_bc2 + EPSILON),
                   params, m, v)
        return new, {"t": t, "m": m, "v": v}

    return init, update


def _like(new, old):
    # Batch-norm statistics computed in bf16 go back to their own type: the step's
    # output types must equal its inputs' (donation, no retracing).
    return _map(lambda n, o: n.astype(o.dtype), new, old)


def scaler_init():
    """The fp16 loss scaler's state: ``(scale, finite steps since the last change)``."""
    return (jnp.asarray(SCALE_INIT, jnp.float32), jnp.zeros((), jnp.int32))


def train_step(model, loss_fn, update, scaled=False):
    """``step(params, state, opt_state, x, y) -> (params, state, opt_state, loss)``, unjitted.

    ``model`` is a ``jax_models.Model``; ``loss_fn(logits, labels)``; ``update`` the
    optimizer's. With ``scaled`` (fp16) ``opt_state`` is ``(optimizer state,
    scaler_init())``.
    """
    apply = model.apply

    def forward_loss(params, state, x, y, scale):
        logits, new_state = apply(params, state, x, True)
        loss = loss_fn(logits.astype(jnp.float32), y)
        return loss * scale, (loss, _like(new_state, state))

    grad = jax.grad(forward_loss, has_aux=True)

    def step(params, state, opt_state, x, y):
        if not scaled:
            grads, (loss, state) = grad(params, state, x, y, 1.0)
            params, opt_state = update(grads, opt_state, params)
            return params, state, opt_state, loss
        inner, (scale, good) = opt_state
        grads, (loss, new_state) = grad(params, state, x, y, scale)
        grads = _map(lambda g: g / scale, grads)
        finite = jnp.all(jnp.asarray([jnp.all(jnp.isfinite(g))
                                      for g in jax.tree_util.tree_leaves(grads)]))
        new_params, new_inner = update(grads, inner, params)

        def keep(a, b):
            return _map(lambda n, o: jnp.where(finite, n, o), a, b)

        grown = good + 1 >= SCALE_GROWTH_INTERVAL
        scale = jnp.where(finite, jnp.where(grown, scale * 2.0, scale), scale * 0.5)
        good = jnp.where(finite & ~grown, good + 1, 0)
        return (keep(new_params, params), keep(new_state, state),
                (keep(new_inner, inner), (scale, good)), loss)

    return step


def forward_step(model):
    """``forward(params, state, x) -> logits``: inference (``train=False``), unjitted."""
    apply = model.apply

    def forward(params, state, x):
        return apply(params, state, x, False)[0]

    return forward


def eval_step(model):
    """``(params, state, x, y, mask) -> (summed loss, hits, targets)`` over a padded test batch.

    ``mask`` (one 0/1 per sample) leaves the padding out, so every batch has one
    shape and the evaluation compiles once. The LSTM counts per token.
    """
    forward = forward_step(model)

    def evaluate(params, state, x, y, mask):
        logits = forward(params, state, x).astype(jnp.float32)
        logp = jax.nn.log_softmax(logits)
        nll = -jnp.take_along_axis(logp, y[..., None].astype(jnp.int32), axis=-1)[..., 0]
        hits = (jnp.argmax(logits, axis=-1) == y).astype(jnp.float32)
        w = mask.reshape(mask.shape + (1,) * (nll.ndim - 1)) * jnp.ones_like(nll)
        return jnp.sum(nll * w), jnp.sum(hits * w), jnp.sum(w)

    return evaluate
