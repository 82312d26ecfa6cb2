"""CNTK 2.7 learners with docs/profiles.md "Optimizers" semantics (PyTorch's definitions).

Valid Python 3.6; imported by cntk_runner.py after CNTK is importable.

How each optimizer maps (all checked against the formulas numerically, on a tiny
linear model at batch 4 and 16, by tests/runners/test_cntk_optim.py):

- Every learner gets ``minibatch_size=IGNORE``: CNTK's "compatible mode", where
  the rate multiplies the minibatch-mean gradient as in PyTorch. Without it
  ``adam`` takes steps of ``lr / samples`` (measured: a quarter of PyTorch's
  step at batch 4), since CNTK otherwise reads the rate as per sample.
- ``weight_decay`` is CNTK's ``l2_regularization_weight``. In compatible mode
  CNTK adds ``weight * w`` to the mean gradient before the update (outside it,
  ``weight * samples * w`` to the summed gradient, the same thing), so the
  weight is ``weight_decay`` unchanged and ``g + weight_decay * w`` enters the
  momentum and Adam's moments, as in PyTorch's coupled L2.
- ``sgd``: ``momentum_sgd(unit_gain=False)`` is ``v = m*v + g; w -= lr*v``;
  plain ``sgd`` at momentum 0.
- ``adam``: ``adam(unit_gain=True, variance_momentum=0.999, epsilon=1e-8)``.
  CNTK adds epsilon to the square root of the *uncorrected* second moment
  (Keras's "epsilon hat"), PyTorch to the corrected one; the two differ only
  where a gradient's magnitude is near 1e-8 (matched to 2e-6 on the test).
- ``adamw``: CNTK has no decoupled weight decay; the profile loader refuses it.
"""

import cntk as C

ADAM_BETAS = (0.9, 0.999)
ADAM_EPS = 1e-8


def make_learner(spec, params):
    """The spec's optimizer over ``params`` (not yet distributed)."""
    name = spec.get("optimizer") or "sgd"
    lr = C.learning_parameter_schedule(float(spec["lr"]))
    momentum = float(spec.get("momentum") or 0.0)
    common = dict(l2_regularization_weight=float(spec.get("weight_decay") or 0.0),
                  minibatch_size=C.learners.IGNORE)
    if name == "sgd":
        if momentum:
            return C.momentum_sgd(params, lr, C.momentum_schedule(momentum), unit_gain=False,
                                  **common)
        return C.sgd(params, lr, **common)
    if name == "adam":
        return C.adam(params, lr, C.momentum_schedule(ADAM_BETAS[0]), unit_gain=True,
                      variance_momentum=C.momentum_schedule(ADAM_BETAS[1]),
                      epsilon=ADAM_EPS, **common)
    raise ValueError("optimizer %r is not available in CNTK 2.7 (sgd, adam)" % (name,))


def learner(spec, params, world):
    """The training learner: :func:`make_learner`, data parallel over ``world`` ranks."""
    result = make_learner(spec, params)
    if world > 1:
        result = C.train.distributed.data_parallel_distributed_learner(
            result, num_quantization_bits=32, distributed_after=0)
        if C.Communicator.num_workers() != world:
            raise RuntimeError("MPI started %d workers, the job asks for %d"
                               % (C.Communicator.num_workers(), world))
    return result
