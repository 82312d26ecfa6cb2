"""dltop JAX runner: ``python jax_runner.py SPEC.json`` (protocol v1).

Valid Python 3.6; imports only the standard library, jax, numpy and its siblings.
Pure JAX (jax_models, jax_train): no flax, no optax, so that the layers, the
initialisation and the optimizer formulas are the few lines docs/models.md and
docs/profiles.md define, with nothing of a library's defaults in between.

The train step is one ``jax.jit`` function with the weights, batch-norm state and
optimizer state donated (updated in place). It is compiled ahead of the timed loop
(``lower().compile()``), so no iteration, warm-up included, contains compilation; the
compile seconds are reported apart in ``hello`` (``compile_s``, kept in the run's
environment row). Each step is timed to ``jax.block_until_ready`` on everything it
returns, then the loss is read on the host.

Devices: ``cpu:N`` pins the process to the N CPUs the parent chose before XLA starts
(XLA:CPU sizes its thread pool by the CPUs it may run on) and, for N = 1, turns off
Eigen's own threads (``--xla_cpu_multi_thread_eigen=false``); ``gpu:1``; ``gpu:N``
data parallel in one process over a ``jax.sharding`` mesh (jax_data.Placement).
``cpus:P`` (P single-thread processes) is unsupported: JAX's multi-process runtime
needs a coordinator per host and its CPU collectives are not what torch's gloo ranks
measure; use ``cpu:N``.

Precision: ``fp32`` is full float32 (on a GPU JAX would otherwise use TF32 for float32
matrix products: ``jax_default_matmul_precision = "highest"``); ``tf32`` on a GPU is
JAX's ``"tensorfloat32"`` matmul precision, on a CPU unsupported; ``bf16`` computes in
bfloat16 over float32 weights; ``fp16`` (GPU only) adds dynamic loss scaling. The
operator profile (``profile = true``) is unsupported: jax.profiler writes a trace
that dltop does not read yet.

Transformers (lm_catalog's models): jax_lm builds them and jax_lm_steps adapts them;
training and inference take this same step with seq_len tokens per sample, and
``mode = "generate"`` runs jax_lm_steps' jitted prefill and decode under lm_loop.

Test hooks (profile key ``inject``), fired by measure.run as in every runner: ``nan``
makes iteration 2's loss NaN once its time was taken (training only); ``hang`` sleeps
forever after the first iteration; ``crash`` calls ``os._exit(1)`` after the first
iteration without reporting; ``oom`` raises MemoryError before the first iteration.
"""

import os
import sys
import time

import dltop_protocol as proto
import model_catalog

# Import JAX only after the protocol module: a failing import must still be
# reported as an error event. Importing jax starts no backend: flags set in run() count.
try:
    import jax
except ImportError as exc:  # pragma: no cover - reported to the parent
    proto.Reporter().error("unsupported", "JAX is not installed in %s: %s (pip install "
                           "'dltop[jax]')" % (sys.executable, exc))
    sys.exit(proto.EXIT_ERROR)

import convergence
import jax.numpy as jnp
import jax_data
import jax_lm_steps
import jax_models
import jax_train
import lm_catalog
import measure

MATMUL_PRECISION = {"fp32": "highest", "tf32": "tensorfloat32"}
"""``jax_default_matmul_precision`` per precision on a GPU (the others keep JAX's own)."""


def _configure(spec):
    """Flags and platform, before XLA's backend starts: (thread count, XLA_FLAGS set)."""
    dev = spec["device"]
    kind, count = dev["kind"], int(dev["count"])
    if kind == "cpus":
        raise proto.Unsupported(
            "JAX cpus:%d (multi-process CPU data parallel) is not supported: use cpu:N (one "
            "process, N threads) or framework torch for cpus:P" % count)
    if spec.get("op_profile"):
        raise proto.Unsupported("the operator profile (profile = true) is not implemented for "
                                "JAX (jax.profiler writes a trace dltop does not read yet)")
    if kind == "cpu" and spec["precision"] in ("fp16", "tf32"):
        raise proto.Unsupported("precision %s needs a GPU (the CPU run supports fp32, bf16)"
                                % spec["precision"])
    flags = os.environ.get("XLA_FLAGS", "")
    if kind == "cpu":
        jax.config.update("jax_platforms", "cpu")
        if count == 1:
            flags = (flags + " --xla_cpu_multi_thread_eigen=false").strip()
            os.environ["XLA_FLAGS"] = flags
        return count, flags or None
    if spec["precision"] in MATMUL_PRECISION:
        jax.config.update("jax_default_matmul_precision", MATMUL_PRECISION[spec["precision"]])
    # JAX takes 75 % of GPU memory at start by default: allocate as needed instead, so
    # the memory telemetry shows what the model uses (TensorFlow's memory growth).
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    return None, flags or None


def _devices(spec):
    dev = spec["device"]
    if dev["kind"] == "cpu":
        return jax.devices("cpu")[:1]
    count = int(dev["count"])
    try:
        gpus = jax.devices("gpu")
    except RuntimeError as exc:
        raise proto.Unsupported("gpu requested but JAX %s has no GPU backend (CPU-only jaxlib "
                                "or CUDA not available): %s" % (jax.__version__, exc)) from exc
    if len(gpus) < count:
        raise proto.Unsupported("gpu:%d requested but JAX sees %d GPU(s)" % (count, len(gpus)))
    return gpus[:count]


def _facts(devices, threads, flags, pinned):
    """The ``hello`` event's fields besides framework, version, device and threads."""
    gpu = devices[0].platform != "cpu"
    version = getattr(devices[0].client, "platform_version", None)
    return dict(
        blas="xla", jaxlib_version=getattr(jax.lib, "__version__", None) or _jaxlib(),
        backend=devices[0].platform, backend_version=version,
        cuda_version=version if gpu else None, cudnn_version=None,
        device_name=devices[0].device_kind if gpu else proto.cpu_name(),
        xla_flags=flags, matmul_precision=jax.config.jax_default_matmul_precision,
        cpu_affinity=pinned, world_size=len(devices) if gpu else 1,
        intra_op_threads=threads,
        gpu_memory_preallocate=os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE") if gpu else None)


def _jaxlib():
    try:
        import jaxlib

        return jaxlib.__version__
    except (ImportError, AttributeError):
        return None


def _label(devices):
    if devices[0].platform == "cpu":
        return "cpu"
    return "gpu:0" if len(devices) == 1 else "gpu:0-%d" % (len(devices) - 1)


def _data(spec, placement, evaluating):
    """``(source, plan, test batches or None)`` of the spec's data."""
    batch = int(spec["samples_per_iter"])
    inference = spec.get("mode") == "inference"
    host = spec.get("data_loader") == "host"
    epochs = None if inference else spec.get("epochs")
    every = spec.get("eval_every") if evaluating else None
    transformer = lm_catalog.is_transformer(spec["model"])
    if spec["data"] != "real":
        plan = convergence.Plan(None, batch, epochs, spec["iterations"], spec["warmup"], every)
        fixed = jax_lm_steps.synthetic_batch(spec, batch) if transformer else None
        return jax_data.synthetic(spec, placement, host, fixed), plan, None, None
    import datasets
    import numpy as np

    kind, shape, train, test = datasets.real_split(
        spec["model"], spec["data_dir"], spec.get("input_size"), need_test=evaluating,
        seq_len=spec["seq_len"] if transformer else None)
    x, y = jax_data.as_arrays(kind, shape, train)
    plan = convergence.Plan(len(x), batch, epochs, spec["iterations"], spec["warmup"], every)
    epoch_order = convergence.EpochOrder(len(x), spec.get("shuffle"), spec["seed"])

    def order(step):
        return np.asarray(epoch_order.batch(step, batch, plan.steps_per_epoch), np.int32)

    source = jax_data.real(placement, x, y, order, int(spec.get("loader_workers") or 0), host)
    tests = None
    if test is not None and evaluating:
        tx, ty = jax_data.as_arrays(kind, shape, test)
        tests = (jax_data.test_batches(tx, ty, batch), len(tx), kind == "ptb")
    return source, plan, tests, None if test is None else test[2]


def run(spec, reporter):
    inject = (spec.get("options") or {}).get("inject")
    pinned = proto.pin(spec)
    threads, flags = _configure(spec)
    devices = _devices(spec)
    placement = jax_data.Placement(devices)
    name = spec["model"]
    inference = spec.get("mode") == "inference"
    facts = _facts(devices, threads, flags, pinned)
    said = []

    def hello(**more):
        if not said:
            said.append(True)
            facts.update(more)
            reporter.hello("jax", jax.__version__, _label(devices), threads, **facts)

    try:
        n = _run(spec, reporter, inject, placement, name, inference, hello)
        reporter.gpu_mem_peak_bytes = _gpu_mem_peak(devices)
        return n
    except BaseException:
        hello()  # a failure still leaves the run's environment
        raise


def _gpu_mem_peak(devices):
    """XLA's own peak of bytes in use, summed over the run's GPUs; None on CPU or when a
    device keeps no memory statistics."""
    total = 0
    for d in devices:
        if d.platform == "cpu":
            return None
        try:
            stats = d.memory_stats()
        except Exception:  # noqa: BLE001 - a backend without statistics: no figure
            return None
        if not stats or stats.get("peak_bytes_in_use") is None:
            return None
        total += int(stats["peak_bytes_in_use"])
    return total or None


def _run(spec, reporter, inject, placement, name, inference, hello):
    precision = spec["precision"]
    compute = {"bf16": jnp.bfloat16, "fp16": jnp.float16}.get(precision)
    tokens = 1  # samples per sequence: seq_len tokens for a transformer
    lm = None
    if lm_catalog.is_transformer(name):
        spec = jax_lm_steps.with_defaults(spec)
        lm, model = jax_lm_steps.build(spec, compute or jnp.float32, placement.devices[0])
        if spec.get("mode") == "generate":
            return _generate(spec, reporter, inject, placement, lm, model, hello)
        tokens = int(spec["seq_len"])
        flops = lm_catalog.flops_per_token(name, tokens, spec.get("mode"))
    elif spec.get("mode") == "generate":
        raise proto.Unsupported("mode generate is for the transformers (%s), not %s"
                                % (", ".join(lm_catalog.NAMES), name))
    else:
        model = jax_models.build(name, jax.random.PRNGKey(int(spec["seed"])),
                                 spec.get("input_size"), compute or jnp.float32)
        flops = model_catalog.flops_for_mode(
            jax_models.training_flops_per_sample(name, spec.get("input_size")), spec.get("mode"))
    params = jax_models.param_count(model.params)
    if inject == "oom":
        raise MemoryError("injected allocation failure (inject = \"oom\")")
    evaluating = spec.get("eval_every") is not None and not inference
    source, plan, tests, n_test = _data(spec, placement, evaluating)
    weights, state = placement.weights(model.params), placement.weights(model.state)
    x0, y0 = source.batch(0)
    opt_state = None
    if not inference:
        init, update = jax_train.optimizer(spec)
        opt_state = init(model.params)
        if precision == "fp16":
            opt_state = (opt_state, jax_train.scaler_init())
        opt_state = placement.weights(opt_state)

    def compile_step(model):
        if inference:
            fwd = placement.jit(jax_train.forward_step(model), 2, 1, 1)
            return fwd.lower(weights, state, x0).compile()
        step = jax_train.train_step(model, lambda lg, lb: jax_models.loss(name, lg, lb),
                                    update, precision == "fp16")
        jitted = placement.jit(step, 3, 2, 4, donate=(0, 1, 2))
        return jitted.lower(weights, state, opt_state, x0, y0).compile()

    t0 = time.perf_counter()
    more = {}
    if lm is None:
        compiled = compile_step(model)
    else:
        lm, compiled = jax_lm_steps.with_fallback(
            lm, lambda lm: compile_step(jax_lm_steps.as_model(lm, model.params)))
        model = jax_lm_steps.as_model(lm, model.params)
        more = jax_lm_steps.facts(lm)
    compile_s = time.perf_counter() - t0
    sys.stdout.write("[dltop] jax: step compiled in %.3f s (outside the timed iterations)\n"
                     % compile_s)
    sys.stdout.flush()
    hello(compile_s=compile_s, precision_compute=None if compute is None
          else jnp.dtype(compute).name, **more)
    reporter.model(params, flops)
    plan.timed(spec, reporter=reporter)  # one process drives every device: no ranks
    plan.report(reporter, n_test)
    holder = {"w": weights, "s": state, "o": opt_state}
    evaluate = None
    if tests is not None:
        on_test_set = _evaluator(placement, model, tests)

        def evaluate():
            return on_test_set(holder["w"], holder["s"])
    if inference:
        def work(i):
            x, _ = source.batch(i)
            return compiled(holder["w"], holder["s"], x)
    else:
        def work(i):
            x, y = source.batch(i)
            out = compiled(holder["w"], holder["s"], holder["o"], x, y)
            # The new state's arrays, still being computed: the next step waits on them.
            holder["w"], holder["s"], holder["o"] = out[0], out[1], out[2]
            return out
    sync = measure.blocked(jax.block_until_ready, None if inference else 3)
    samples = int(spec["samples_per_iter"]) * int(tokens)
    try:
        return measure.run(work, plan, reporter, samples, evaluate, inject, sync)
    finally:
        source.close()


def _generate(spec, reporter, inject, placement, lm, model, hello):
    """``mode = "generate"`` on one device (jax_lm_steps); the run's request count."""
    if len(placement.devices) > 1:
        raise proto.Unsupported("mode generate runs on one device (gpu:1 or cpu:N), not %d"
                                % len(placement.devices))
    if spec["data"] == "real":
        raise proto.Unsupported("mode generate decodes from synthetic prompts (data = "
                                "\"synthetic\"), not real data")
    if inject == "oom":
        raise MemoryError("injected allocation failure (inject = \"oom\")")
    return jax_lm_steps.run_generate(spec, reporter, hello, lm, model, placement.devices[0])


def _evaluator(placement, model, tests):
    """``evaluate(weights, state) -> (mean loss, accuracy or None, samples)``: the test set."""
    batches, n_test, language_model = tests
    step = placement.jit(jax_train.eval_step(model), 2, 3, 3)

    def evaluate(weights, state):
        loss_sum = hits = targets = 0.0
        for x, y, mask in batches:
            a, b, c = step(weights, state, *placement.batch((x, y, mask)))
            loss_sum, hits, targets = loss_sum + float(a), hits + float(b), targets + float(c)
        if not targets:
            return float("nan"), None, 0
        loss = loss_sum / targets
        return loss, None if language_model else hits / targets, n_test

    return evaluate


if __name__ == "__main__":
    proto.main(run)
