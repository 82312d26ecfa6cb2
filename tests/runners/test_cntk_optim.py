"""CNTK's learners (cntk_learn.py) against docs/profiles.md's optimizer formulas.

A tiny linear model (3 -> 2, squared error) trains three steps on one batch
under the CNTK interpreter; the same steps are computed in float64 numpy from
PyTorch's definitions (coupled L2, Adam with bias correction). Batch sizes 4
and 16 both run, so a weight decay or learning rate scaled by the batch (CNTK's
"per sample" conventions) would show.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from dltop import envsetup
from dltop.runners.registry import CHILD_DIR

from .test_cntk_runner import cntk_env  # noqa: F401 - the session fixture

pytestmark = [pytest.mark.slow, pytest.mark.cntk]

SCRIPT = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import cntk_runner  # noqa: F401 - stubs CNTK's slow library check
import cntk as C
import numpy as np
import cntk_learn

def check(opt, momentum, wd, nb, lr=0.1, steps=3):
    rng = np.random.RandomState(nb)
    x = C.input_variable(3)
    y = C.input_variable(2)
    w = C.Parameter((3, 2), init=C.glorot_uniform(seed=1))
    b = C.Parameter((2,), init=0.1)
    z = C.times(x, w) + b
    learner = cntk_learn.make_learner(
        {"optimizer": opt, "lr": lr, "momentum": momentum, "weight_decay": wd}, [w, b])
    trainer = C.Trainer(z, (C.squared_error(z, y), None), [learner])
    xb = rng.randn(nb, 3).astype(np.float32)
    yb = rng.randn(nb, 2).astype(np.float32)
    ref = [w.value.astype(np.float64), b.value.astype(np.float64)]
    state = [[np.zeros_like(p), np.zeros_like(p)] for p in ref]
    worst, first = 0.0, 0.0
    for t in range(1, steps + 1):
        d = 2.0 * (xb @ ref[0] + ref[1] - yb) / nb  # d(mean loss)/dz
        grads = [xb.T @ d, d.sum(0)]
        for i, (p, g) in enumerate(zip(ref, grads)):
            g = g + wd * p
            m, v = state[i]
            if opt == "sgd":
                m = momentum * m + g if momentum else g
                p = p - lr * m
            else:
                m = 0.9 * m + 0.1 * g
                v = 0.999 * v + 0.001 * g * g
                p = p - lr * (m / (1 - 0.9 ** t)) / (np.sqrt(v / (1 - 0.999 ** t)) + 1e-8)
            state[i] = [m, v]
            ref[i] = p
        trainer.train_minibatch({x: xb, y: yb})
        diff = max(float(np.abs(w.value - ref[0]).max()), float(np.abs(b.value - ref[1]).max()))
        worst = max(worst, diff)
        if t == 1:
            first = diff
    moved = float(np.abs(ref[0] - 0).max())
    return {"first": first, "worst": worst, "moved": moved}

out = {}
for nb in (4, 16):
    out["sgd-m0.9-wd0.5-b%d" % nb] = check("sgd", 0.9, 0.5, nb)
    out["sgd-m0-wd0.5-b%d" % nb] = check("sgd", 0.0, 0.5, nb)
    out["adam-wd0-b%d" % nb] = check("adam", 0.0, 0.0, nb)
    out["adam-wd0.5-b%d" % nb] = check("adam", 0.0, 0.5, nb)
try:
    cntk_learn.make_learner({"optimizer": "adamw", "lr": 0.1}, [C.Parameter((1,))])
    out["adamw"] = "accepted"
except ValueError as exc:
    out["adamw"] = str(exc)
print(json.dumps(out))
"""


def test_sgd_and_adam_follow_the_formulas(cntk_env: envsetup.CntkEnv) -> None:  # noqa: F811
    res = subprocess.run([cntk_env.python, "-c", SCRIPT, str(CHILD_DIR)], capture_output=True,
                         text=True, env=cntk_env.child_env(os.environ), timeout=300)
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert "not available in CNTK" in got.pop("adamw")
    for case, r in got.items():
        # float32 parameters against a float64 reference: steps of ~0.1 agree to ~1e-6.
        assert r["first"] < 1e-5, (case, r)
        assert r["worst"] < 1e-5, (case, r)
