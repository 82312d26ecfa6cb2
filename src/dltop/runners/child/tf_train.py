"""The TensorFlow runner's optimizers and compiled steps (train, forward, eval).

Valid Python 3.6 (child side). The optimizers follow docs/profiles.md
"Optimizers" (PyTorch's definitions), which Keras 3 needs help to match:

- ``weight_decay`` for ``sgd``/``adam`` is an L2 term added to the gradient
  (``g + wd * w``); Keras' own ``weight_decay`` argument is decoupled
  (``w -= lr * wd * w``), so it is used for ``adamw`` only.
- Keras' SGD keeps ``m = momentum * m - lr * g`` and adds ``m``; PyTorch keeps
  ``v = momentum * v + g`` and subtracts ``lr * v``. At a constant learning
  rate ``m = -lr * v`` at every step, so the updates are the same.
- Keras' Adam puts epsilon outside the bias correction of ``v``
  (``lr * sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps)``, the paper's
  "epsilon hat"); PyTorch divides by ``sqrt(v) / sqrt(1 - b2^t) + eps``. The
  Adam classes here override ``update_step`` with PyTorch's formula, eps 1e-8.
"""

import tensorflow as tf

keras = tf.keras
ops = keras.ops

BETAS = (0.9, 0.999)
EPSILON = 1e-8


def _with_l2(gradient, variable, l2):
    gradient = ops.cast(gradient, variable.dtype)
    if l2:
        gradient = ops.add(gradient, ops.multiply(variable, ops.cast(l2, variable.dtype)))
    return gradient


class SGD(keras.optimizers.SGD):
    """Keras SGD with PyTorch's coupled weight decay (L2 added to the gradient)."""

    def __init__(self, l2=0.0, **kwargs):
        super(SGD, self).__init__(**kwargs)
        self.l2 = float(l2)

    def update_step(self, gradient, variable, learning_rate):
        return super(SGD, self).update_step(_with_l2(gradient, variable, self.l2), variable,
                                            learning_rate)


def _torch_adam_step(opt, gradient, variable, learning_rate, l2):
    """``torch.optim.Adam``'s update of one variable (AdamW's decay is done by Keras)."""
    dtype = variable.dtype
    lr = ops.cast(learning_rate, dtype)
    g = _with_l2(gradient, variable, l2)
    # Bias corrections in float64, as PyTorch computes them in Python: 1 - 0.999^t from
    # a float32 beta_2 is off by 1e-5 relative at t = 1.
    t = tf.cast(opt.iterations + 1, tf.float64)
    bc1 = ops.cast(1.0 - tf.pow(tf.constant(opt.beta_1, tf.float64), t), dtype)
    bc2 = ops.cast(1.0 - tf.pow(tf.constant(opt.beta_2, tf.float64), t), dtype)
    index = opt._get_variable_index(variable)
    m, v = opt._momentums[index], opt._velocities[index]
    opt.assign_add(m, ops.multiply(ops.subtract(g, m), 1.0 - opt.beta_1))
    opt.assign_add(v, ops.multiply(ops.subtract(ops.square(g), v), 1.0 - opt.beta_2))
    denom = ops.add(ops.divide(ops.sqrt(v), ops.sqrt(bc2)), ops.cast(opt.epsilon, dtype))
    opt.assign_sub(variable, ops.divide(ops.multiply(m, lr / bc1), denom))


class Adam(keras.optimizers.Adam):
    """``torch.optim.Adam``: L2 on the gradient, epsilon added after bias correction."""

    def __init__(self, l2=0.0, **kwargs):
        super(Adam, self).__init__(**kwargs)
        self.l2 = float(l2)

    def update_step(self, gradient, variable, learning_rate):
        _torch_adam_step(self, gradient, variable, learning_rate, self.l2)


class AdamW(keras.optimizers.AdamW):
    """``torch.optim.AdamW``: Keras decays ``w -= lr * wd * w`` first, then the Adam step."""

    def update_step(self, gradient, variable, learning_rate):
        _torch_adam_step(self, gradient, variable, learning_rate, 0.0)


def optimizer(spec):
    """The spec's optimizer (``sgd``, ``adam`` or ``adamw``) with PyTorch's semantics."""
    name = spec.get("optimizer", "sgd")
    lr = float(spec["lr"])
    wd = float(spec.get("weight_decay") or 0.0)
    if name == "sgd":
        return SGD(l2=wd, learning_rate=lr, momentum=float(spec["momentum"]))
    beta_1, beta_2 = BETAS
    if name == "adam":
        return Adam(l2=wd, learning_rate=lr, beta_1=beta_1, beta_2=beta_2, epsilon=EPSILON)
    if name == "adamw":
        return AdamW(learning_rate=lr, beta_1=beta_1, beta_2=beta_2, epsilon=EPSILON,
                     weight_decay=wd)
    raise ValueError("unknown optimizer %r (sgd, adam, adamw)" % name)


def train_step(model, opt, loss_fn, strategy, world, scaled, xla):
    """A compiled step ``(x, y) -> loss``."""
    variables = model.trainable_variables

    def grads_of(x, y):
        with tf.GradientTape() as tape:
            # Each replica averages its own slice; MirroredStrategy sums the
            # gradients, so dividing by the replica count gives the global mean.
            loss = loss_fn(model(x, training=True), y) / world
            target = opt.scale_loss(loss) if scaled else loss
        return loss, tape.gradient(target, variables)

    if strategy is None:
        def single(x, y):
            loss, grads = grads_of(x, y)
            opt.apply_gradients(zip(grads, variables))  # noqa: B905 - no strict= in 3.6
            return loss
        return tf.function(single, jit_compile=xla)

    # The gradient all-reduce inside apply_gradients is a cross-replica call
    # that XLA cannot compile: only the per-replica forward/backward is jitted.
    compiled = tf.function(grads_of, jit_compile=xla)

    def replica_step(x, y):
        loss, grads = compiled(x, y)
        opt.apply_gradients(zip(grads, variables))  # noqa: B905 - no strict= in 3.6
        return loss

    @tf.function
    def step(x, y):
        losses = strategy.run(replica_step, args=(x, y))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

    return step


def forward_step(model, strategy, xla):
    """A compiled inference step ``x -> scalar``: forward only, no tape, ``training=False``.

    It returns one logit, so reading it on the host waits for the whole forward
    pass without copying the output back.
    """
    def forward(x):
        return tf.reshape(tf.cast(model(x, training=False), tf.float32), [-1])[0]

    if strategy is None:
        return tf.function(forward, jit_compile=xla)
    compiled = tf.function(forward, jit_compile=xla)

    @tf.function
    def step(x):
        out = strategy.run(compiled, args=(x,))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, out, axis=None)

    return step


def eval_step(model):
    """A compiled ``(x, y) -> (summed loss, correct predictions, predictions)`` on a test batch.

    The loss is the sum of per-sample (per-token for the LSTM) cross-entropies,
    so batches of any size add up to the test set's mean. Under a strategy the
    model reads the mirrored variables' primary copies.
    """
    def evaluate(x, y):
        logits = tf.cast(model(x, training=False), tf.float32)
        y = tf.cast(y, tf.int32)
        losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)
        hits = tf.cast(tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32), y), tf.int64)
        return (tf.reduce_sum(tf.cast(losses, tf.float64)), tf.reduce_sum(hits),
                tf.size(y, out_type=tf.int64))

    return tf.function(evaluate, reduce_retracing=True)
