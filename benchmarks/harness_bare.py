"""The bare side of the harness benchmarks: each framework's training loop, alone.

The same model (built by the runner's own model module), batch, thread settings, CPU
affinity and synthetic data as the runner's; the bare CNTK loop runs under the same
interpreter and ``LD_LIBRARY_PATH`` as the CNTK runner. Each loop prints one JSON line:
its measured steps' seconds (``times``), each step's end on ``CLOCK_MONOTONIC`` in ns
(``ends``: the clock the runner's ``iter`` events stamp, so the two sides' steps can be
matched in time) and its CPU seconds per measured step (``cpu_s``).
Used by harness_overhead.py (sequential rounds) and harness_duet.py (both at once).
"""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

CHILD_DIR = Path(__file__).resolve().parents[1] / "src" / "dltop" / "runners" / "child"

BARE_TORCH = textwrap.dedent("""
    import json, os, sys, time
    if not {gpu}:
        os.sched_setaffinity(0, {affinity!r})
    import torch
    sys.path.insert(0, {child_dir!r})
    import torch_models
    torch.manual_seed(0)
    if {gpu}:
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        device = torch.device("cuda", 0)
        torch.cuda.set_device(device)
    else:
        torch.set_num_threads({threads})
        torch.set_num_interop_threads({threads})
        device = torch.device("cpu")
    model = torch_models.build({model!r}).to(device).train()
    x, y = torch_models.synthetic_batch({model!r}, {batch}, device)
    loss_fn = torch_models.loss_fn({model!r})
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    times = []
    ends = []
    c0 = time.process_time()
    for i in {steps}:
        if i == {warmup}:
            c0 = time.process_time()
            {on_warm}
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        if {gpu}:
            torch.cuda.synchronize(device)
        loss.item()
        times.append(time.perf_counter() - t0)
        ends.append(int(time.monotonic() * 1e9))
    cpu_s = (time.process_time() - c0) / max(1, len(times) - {warmup})
    print(json.dumps({{"times": times[{warmup}:], "ends": ends[{warmup}:], "cpu_s": cpu_s}}))
""")

BARE_TF = textwrap.dedent("""
    import json, os, sys, time
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.sched_setaffinity(0, {affinity!r})
    import tensorflow as tf
    sys.path.insert(0, {child_dir!r})
    import tf_models
    tf.config.threading.set_intra_op_parallelism_threads({threads})
    tf.config.threading.set_inter_op_parallelism_threads({threads})
    tf.keras.utils.set_random_seed(0)
    with tf.device("/cpu:0"):
        model = tf_models.build({model!r})
        opt = tf.keras.optimizers.SGD(learning_rate=0.01)
        opt.build(model.trainable_variables)
        x, y = tf_models.synthetic_batch({model!r}, {batch})
    loss_fn = tf_models.loss_fn({model!r})

    @tf.function
    def train(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(model(x, training=True), y)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    times = []
    ends = []
    c0 = time.process_time()
    for i in {steps}:
        if i == {warmup}:
            c0 = time.process_time()
            {on_warm}
        t0 = time.perf_counter()
        float(train(x, y).numpy())
        times.append(time.perf_counter() - t0)
        ends.append(int(time.monotonic() * 1e9))
    cpu_s = (time.process_time() - c0) / max(1, len(times) - {warmup})
    print(json.dumps({{"times": times[{warmup}:], "ends": ends[{warmup}:], "cpu_s": cpu_s}}))
""")

BARE_CNTK = textwrap.dedent("""
    import json, os, sys, time, types
    os.sched_setaffinity(0, {affinity!r})
    stub = types.ModuleType("cntk.cntk_py_init")  # as the runner: skip the ldconfig scan
    stub.cntk_check_distro_info = stub.cntk_check_libs = lambda: None
    sys.modules["cntk.cntk_py_init"] = stub
    import cntk as C
    sys.path.insert(0, {child_dir!r})
    import cntk_models
    C.cntk_py.set_max_num_cputhreads({threads})
    C.device.try_set_default_device(C.device.cpu())
    C.cntk_py.set_fixed_random_seed(1)
    model, loss, x, y = cntk_models.build({model!r})
    xb, yb = cntk_models.synthetic_batch({model!r}, {batch}, 0)
    lr = C.learning_parameter_schedule(0.01)
    trainer = C.Trainer(model, (loss, None), [C.sgd(model.parameters, lr)])
    times = []
    ends = []
    c0 = time.process_time()
    for i in {steps}:
        if i == {warmup}:
            c0 = time.process_time()
            {on_warm}
        t0 = time.perf_counter()
        trainer.train_minibatch({{x: xb, y: yb}})
        float(trainer.previous_minibatch_loss_average)
        times.append(time.perf_counter() - t0)
        ends.append(int(time.monotonic() * 1e9))
    cpu_s = (time.process_time() - c0) / max(1, len(times) - {warmup})
    print(json.dumps({{"times": times[{warmup}:], "ends": ends[{warmup}:], "cpu_s": cpu_s}}))
""")

BARE_JAX = textwrap.dedent("""
    import json, os, sys, time
    os.sched_setaffinity(0, {affinity!r})
    if {threads} == 1:  # the runner's cpu:1 flag; XLA sizes its pool by the affinity
        os.environ["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false"
    import jax
    jax.config.update("jax_platforms", "cpu")
    sys.path.insert(0, {child_dir!r})
    import jax_models
    model = jax_models.build({model!r}, jax.random.PRNGKey(0))
    x, y = jax_models.synthetic_batch({model!r}, {batch}, jax.random.PRNGKey(1))

    def step(params, state, x, y):
        def loss(p):
            logits, new_state = model.apply(p, state, x, True)
            return jax_models.loss({model!r}, logits, y), new_state
        (value, state), grads = jax.value_and_grad(loss, has_aux=True)(params)
        return jax.tree_util.tree_map(lambda w, g: w - 0.01 * g, params, grads), state, value

    train = jax.jit(step, donate_argnums=(0, 1))
    params, state = model.params, model.state
    times = []
    ends = []
    c0 = time.process_time()
    for i in {steps}:
        if i == {warmup}:
            c0 = time.process_time()
            {on_warm}
        t0 = time.perf_counter()
        params, state, value = train(params, state, x, y)
        float(value)
        times.append(time.perf_counter() - t0)
        ends.append(int(time.monotonic() * 1e9))
    cpu_s = (time.process_time() - c0) / max(1, len(times) - {warmup})
    print(json.dumps({{"times": times[{warmup}:], "ends": ends[{warmup}:], "cpu_s": cpu_s}}))
""")

BARE_TORCH_LM = textwrap.dedent("""
    import json, os, sys, time
    if not {gpu}:
        os.sched_setaffinity(0, {affinity!r})
    import torch
    sys.path.insert(0, {child_dir!r})
    import lm_catalog, torch_lm
    torch.manual_seed(0)
    if {gpu}:
        torch.backends.cuda.matmul.allow_tf32 = False
        device = torch.device("cuda", 0)
        torch.cuda.set_device(device)
    else:
        torch.set_num_threads({threads})
        torch.set_num_interop_threads({threads})
        device = torch.device("cpu")
    shape = lm_catalog.shape({model!r})
    model = torch_lm.build({model!r}, "fused", device).train()
    torch.manual_seed(1)
    x, y = torch_lm.token_batch({model!r}, {batch}, shape["seq_len"], device)
    loss_fn = torch_lm.loss_fn(shape["vocab"])
    fused = {{"fused": True}} if {gpu} else {{}}
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.0, amsgrad=False, **fused)
    dtype = {{"bf16": torch.bfloat16}}.get({precision!r})
    times = []
    ends = []
    c0 = time.process_time()
    for i in {steps}:
        if i == {warmup}:
            c0 = time.process_time()
            {on_warm}
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        if dtype is not None:
            with torch.autocast(device.type, dtype=dtype):
                loss = loss_fn(model(x), y)
        else:
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        if {gpu}:
            torch.cuda.synchronize(device)
        loss.item()
        times.append(time.perf_counter() - t0)
        ends.append(int(time.monotonic() * 1e9))
    cpu_s = (time.process_time() - c0) / max(1, len(times) - {warmup})
    print(json.dumps({{"times": times[{warmup}:], "ends": ends[{warmup}:], "cpu_s": cpu_s}}))
""")

BARE = {"torch": BARE_TORCH, "tensorflow": BARE_TF, "cntk": BARE_CNTK, "jax": BARE_JAX}


def is_lm(model: str) -> bool:
    """True for a transformer shape (lm_catalog's), whose bare loop is BARE_TORCH_LM."""
    sys.path.insert(0, str(CHILD_DIR))
    import lm_catalog

    return bool(lm_catalog.is_transformer(model))


THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def until_file(stop: Path) -> str:
    """A template's ``steps``: step numbers until ``stop`` exists or the benchmark that
    started the loop is gone (duet mode: a benchmark killed mid-round left its bare loop
    stepping on the pinned core for 40 minutes, waiting for a file nobody would write)."""
    return (f'__import__("itertools").takewhile(lambda _i, _p=os.getppid(): '
            f'not os.path.exists({str(stop)!r}) and os.getppid() == _p, range(10 ** 7))')


def touch_when_warm(path: Path) -> str:
    """A template's ``on_warm``: create ``path`` once the warm-up steps are done."""
    return f"open({str(path)!r}, 'w').close()"


def bare_command(framework: str, model: str, batch: int, threads: int, warmup: int,
                 steps: str, affinity: list[int], gpu: bool = False,
                 precision: str = "fp32",
                 on_warm: str = "pass") -> tuple[list[str], dict[str, str]]:
    """The bare loop's argv and environment; ``steps``: the loop's iterable (Python text:
    ``range(N)`` or :func:`until_file`), the first ``warmup`` steps not measured;
    ``on_warm``: a statement run once they are done (:func:`touch_when_warm`)."""
    if is_lm(model):
        if framework != "torch":
            raise SystemExit(f"the bare transformer loop is PyTorch's; not {framework}")
        template = BARE_TORCH_LM
    else:
        template = BARE[framework]  # --device gpu: PyTorch only, checked by the callers
    code = template.format(child_dir=str(CHILD_DIR), model=model, batch=batch,
                           threads=threads, steps=steps, warmup=warmup,
                           affinity=affinity, gpu=gpu, precision=precision,
                           on_warm=on_warm)
    python, env = framework_env(framework, threads, gpu)
    return [python, "-c", code], env


def framework_env(framework: str, threads: int,
                  gpu: bool = False) -> tuple[str, dict[str, str]]:
    """The framework's interpreter and a runner's environment as dltop's child_env makes
    it: a gpu:1 job gets GPU 0 through CUDA_VISIBLE_DEVICES and no thread variables."""
    from dltop.runners.registry import interpreter

    python, _, extra = interpreter(framework)
    threads_env = {} if gpu else {v: str(threads) for v in THREAD_VARS}
    return python, {**os.environ, **threads_env, "CUDA_VISIBLE_DEVICES": "0" if gpu else "",
                    **dict(extra)}
