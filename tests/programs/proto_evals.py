"""A stand-in runner child speaking protocol v1 with the events of issue 17 (stdlib only).

Run as ``python proto_evals.py ... SPEC.json`` (the runner command's last argument is
the job spec). It writes to ``$DLTOP_EVENT_FD`` what a framework runner would:
``hello``, ``model``, ``plan``, the iterations (reported seconds, no real work),
``eval`` events after every epoch (epochs runs) or every ``eval_every`` steps, and a
``profile`` event when the spec asks for one. Everything it reports is a known
function of the spec, so a test can compute what dltop must store and export:

- step ``i`` takes ``STEP_S * (1 + (i % 3) / 10)`` seconds; inference batches too;
- training set :data:`N_TRAIN` samples, test set :data:`N_TEST`;
- the evaluation after epoch ``e`` (fractional for ``eval_every = N``) has accuracy
  ``min(0.99, 0.3 + 0.25 * e)`` and takes :data:`EVAL_S` seconds;
- one bad ``eval`` event (accuracy 1.5) comes before the first good one: dltop must
  count it as a protocol error and store nothing of it;
- the profile's third operator is a CUDA-style template kernel named with
  :data:`LONG_KERNEL` (2 000 characters, as CUTLASS names run): it must be stored whole.
"""

import json
import os
import sys
import time

N_TRAIN = 64
N_TEST = 32
STEP_S = 0.01
EVAL_S = 0.05
LONG_KERNEL = ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_"
               + "".join("cute::tuple<cute::C<%d>, cute::C<%d>>, " % (i, 2 * i)
                         for i in range(200)))[:1999] + ">"


def step_s(i):
    return STEP_S * (1 + (i % 3) / 10.0)


def accuracy(epoch):
    return min(0.99, 0.3 + 0.25 * epoch)


def main():
    spec = json.load(open(sys.argv[-1]))
    fd = int(os.environ["DLTOP_EVENT_FD"])

    def send(name, **fields):
        os.write(fd, (json.dumps(dict(v=1, event=name, **fields)) + "\n").encode())

    send("hello", framework="torch", framework_version="0-fake", python_version="3",
         device="cpu", threads=1, pid=os.getpid())
    send("model", param_count=1000, flops_per_sample=2000.0)
    batch = spec["batch_size"]
    warmup = spec["warmup"]
    epochs = spec.get("epochs")
    inference = spec.get("mode") == "inference"
    if epochs:
        per_epoch = N_TRAIN // batch
        total = epochs * per_epoch
    else:
        per_epoch = None
        total = warmup + spec["iterations"]
    send("plan", iterations=total, steps_per_epoch=per_epoch, epochs=epochs,
         n_train=N_TRAIN if epochs else None, n_test=N_TEST if spec.get("eval_every") else None)
    every = spec.get("eval_every")
    train_s = 0.0
    sent_bad = False
    for i in range(total):
        seconds = step_s(i)
        train_s += seconds
        send("iter", index=i, seconds=seconds, samples=batch, warmup=i < warmup,
             loss=None if inference else 2.0 / (i + 1), t_mono_ns=time.monotonic_ns())
        ends_epoch = per_epoch and (i + 1) % per_epoch == 0
        due = (every == "epoch" and ends_epoch) or (
            isinstance(every, int) and ((i + 1) % every == 0 or i + 1 == total))
        if due:
            epoch = (i + 1) / float(per_epoch) if per_epoch else None
            if not sent_bad:
                send("eval", index=i, epoch=epoch, accuracy=1.5, loss=1.0, eval_s=EVAL_S,
                     train_s=train_s, samples=N_TEST)
                sent_bad = True
            send("eval", index=i, epoch=epoch, accuracy=accuracy(epoch or 0.0),
                 perplexity=None, loss=1.0 / (i + 1), eval_s=EVAL_S, train_s=train_s,
                 samples=N_TEST)
    if spec.get("op_profile"):
        send("profile", steps=5, step_ms=10.0, device="cpu", ops=[
            {"name": "aten::addmm", "calls": 15, "self_cpu_ms": 30.0, "self_device_ms": None,
             "total_ms": 32.0, "shapes": "[[8, 784], [784, 10]]"},
            {"name": "aten::relu", "calls": 10, "self_cpu_ms": 5.0, "self_device_ms": None,
             "total_ms": 5.0, "shapes": None},
            {"name": LONG_KERNEL, "calls": 5, "self_cpu_ms": 1.0, "self_device_ms": None,
             "total_ms": 1.0, "shapes": None}])
    send("done", iterations=total - warmup)


if __name__ == "__main__":
    main()
