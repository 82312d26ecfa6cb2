"""dltop TensorFlow runner: ``python tf_runner.py SPEC.json`` (protocol v1).

Valid Python 3.6; imports only the standard library, tensorflow, numpy and its
siblings. Mirrors torch_runner: same models (tf_models), loss, plain SGD,
per-step timing synchronised by reading the loss on the host.

Devices: ``cpu:N`` (one process, N intra- and N inter-op threads), ``gpu:1``,
``gpu:N`` (MirroredStrategy over N GPUs). ``cpus:P`` (multi-process CPU data
parallel) is torch-only. Option ``xla = true`` compiles the step with XLA.

Test hooks (profile key ``inject``), as in torch_runner: ``nan`` makes the loss
NaN at iteration 2; ``hang`` sleeps forever after the first iteration;
``crash`` calls ``os._exit(1)`` after the first iteration without reporting;
``oom`` raises MemoryError before the first iteration. (``crash-rank1`` needs
several processes and so never fires here.)
"""

import os
import sys
import time

import dltop_protocol as proto

# Before the import: TF logs every kernel registration and oneDNN notice at INFO.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# Import TF only after the protocol module: a failing import must still be
# reported as an error event.
try:
    import tensorflow as tf
except ImportError as exc:  # pragma: no cover - reported to the parent
    proto.Reporter().error("unsupported", "TensorFlow is not installed in %s: %s"
                           % (sys.executable, exc))
    sys.exit(proto.EXIT_ERROR)

import numpy as np
import tf_models


def _build_info(key):
    try:
        return tf.sysconfig.get_build_info().get(key)
    except Exception:  # noqa: BLE001 - informative only
        return None


def _blas():
    # x86 TF builds route matmul/conv through oneDNN unless TF_ENABLE_ONEDNN_OPTS=0.
    if os.environ.get("TF_ENABLE_ONEDNN_OPTS", "1") == "0":
        return "eigen"
    return "eigen+onednn"


def _device(spec):
    """Configure TF before any op runs: (device label, threads, strategy, GPU facts)."""
    dev = spec["device"]
    kind, count = dev["kind"], int(dev["count"])
    if kind == "cpus":
        raise proto.Unsupported("TensorFlow cpus:%d (multi-process CPU data parallel) is not "
                                "supported; use framework torch for cpus:P" % count)
    if kind == "cpu":
        # Thread pools are fixed when the runtime starts: set them first.
        tf.config.threading.set_intra_op_parallelism_threads(count)
        tf.config.threading.set_inter_op_parallelism_threads(count)
        try:
            tf.config.set_visible_devices([], "GPU")  # a GPU build must not use one
        except (RuntimeError, ValueError):
            pass
        return "cpu", count, None, {}
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        raise proto.Unsupported("gpu requested but TensorFlow %s sees no GPU (CPU-only build "
                                "or CUDA not available)" % tf.__version__)
    if len(gpus) < count:
        raise proto.Unsupported("gpu:%d requested but TensorFlow sees %d GPU(s)"
                                % (count, len(gpus)))
    used = gpus[:count]
    tf.config.set_visible_devices(used, "GPU")
    for g in used:
        # Allocate as needed, so the memory telemetry shows what the model uses.
        tf.config.experimental.set_memory_growth(g, True)
    tf.config.experimental.enable_tensor_float_32_execution(spec["precision"] == "tf32")
    try:
        name = tf.config.experimental.get_device_details(used[0]).get("device_name")
    except Exception:  # noqa: BLE001 - informative only
        name = None
    strategy = None
    if count > 1:
        strategy = tf.distribute.MirroredStrategy(["/gpu:%d" % i for i in range(count)])
    label = "gpu:0" if count == 1 else "gpu:0-%d" % (count - 1)
    return label, None, strategy, {"device_name": name, "gpu_memory_growth": True}


def _precision(spec, kind):
    """Set the Keras dtype policy (before the model is built); True if loss scaling is needed."""
    precision = spec["precision"]
    if kind == "cpu" and precision in ("fp16", "tf32"):
        raise proto.Unsupported("precision %s needs a GPU (the CPU run supports fp32, bf16)"
                                % precision)
    policy = {"bf16": "mixed_bfloat16", "fp16": "mixed_float16"}.get(precision, "float32")
    tf.keras.mixed_precision.set_global_policy(policy)
    return precision == "fp16"


def _real_batches(spec, batch):
    """Batches of the model's real data set as tensors (images NHWC)."""
    import datasets

    kind, shape, inputs, labels = datasets.real_data(spec["model"], spec["data_dir"])
    if kind == "ptb":
        x = np.asarray(inputs, dtype=np.int32).reshape(shape)
        y = np.asarray(labels, dtype=np.int32).reshape(shape)
    else:
        x = np.frombuffer(inputs, dtype=np.uint8).reshape(shape)
        if len(shape) == 4:
            x = x.transpose(0, 2, 3, 1)
        x = np.ascontiguousarray(x, dtype=np.float32) / 255.0
        y = np.frombuffer(labels, np.uint8).astype(np.int32)
    return datasets.batches(x, y, batch, spec["data_dir"], lambda xb, yb: (
        tf.convert_to_tensor(xb), tf.convert_to_tensor(yb)))


def _batches(spec, strategy, world, device):
    """``next_batch() -> (x, y)``: the global batch, split per replica under a strategy."""
    per_replica = int(spec["per_device_batch"])
    batch = per_replica * world
    with tf.device(device):
        if spec["data"] == "real":
            plain = _real_batches(spec, batch)
        else:
            fixed = tf_models.synthetic_batch(spec["model"], batch)

            def plain():
                return fixed
    if strategy is None:
        return plain

    def split(xy):
        def part(ctx):
            k = ctx.replica_id_in_sync_group
            return tuple(t[k * per_replica:(k + 1) * per_replica] for t in xy)
        return strategy.experimental_distribute_values_from_function(part)

    if spec["data"] == "real":
        return lambda: split(plain())
    fixed_split = split(fixed)
    return lambda: fixed_split


def _train_step(model, opt, loss_fn, strategy, world, scaled, xla):
    """A compiled step ``(x, y, poison) -> loss``; ``poison`` (a Python bool) NaNs the loss."""
    variables = model.trainable_variables

    def grads_of(x, y, poison):
        with tf.GradientTape() as tape:
            # Each replica averages its own slice; MirroredStrategy sums the
            # gradients, so dividing by the replica count gives the global mean.
            loss = loss_fn(model(x, training=True), y) / world
            if poison:
                loss = loss * float("nan")
            target = opt.scale_loss(loss) if scaled else loss
        return loss, tape.gradient(target, variables)

    if strategy is None:
        def single(x, y, poison):
            loss, grads = grads_of(x, y, poison)
            opt.apply_gradients(zip(grads, variables))  # noqa: B905 - no strict= in 3.6
            return loss
        return tf.function(single, jit_compile=xla)

    # The gradient all-reduce inside apply_gradients is a cross-replica call
    # that XLA cannot compile: only the per-replica forward/backward is jitted.
    compiled = tf.function(grads_of, jit_compile=xla)

    def replica_step(x, y, poison):
        loss, grads = compiled(x, y, poison)
        opt.apply_gradients(zip(grads, variables))  # noqa: B905 - no strict= in 3.6
        return loss

    @tf.function
    def step(x, y, poison):
        losses = strategy.run(replica_step, args=(x, y, poison))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

    return step


def run(spec, reporter):
    options = spec.get("options") or {}
    inject = options.get("inject")
    xla = bool(options.get("xla", False))
    pinned = proto.pin(spec)
    label, threads, strategy, gpu_facts = _device(spec)
    kind = spec["device"]["kind"]
    world = int(spec["device"]["count"]) if kind == "gpu" else 1
    scaled = _precision(spec, kind)
    tf.keras.utils.set_random_seed(int(spec["seed"]))
    name = spec["model"]
    reporter.hello(
        "tensorflow", tf.__version__, label, threads, blas=_blas(),
        keras_version=getattr(tf.keras, "__version__", None),
        cuda_version=_build_info("cuda_version"),
        cudnn_version=_build_info("cudnn_version") if kind == "gpu" else None,
        device_name=gpu_facts.get("device_name") if kind == "gpu" else proto.cpu_name(),
        intra_op_threads=tf.config.threading.get_intra_op_parallelism_threads(),
        inter_op_threads=tf.config.threading.get_inter_op_parallelism_threads(),
        xla=xla, gpu_memory_growth=gpu_facts.get("gpu_memory_growth", False),
        precision_policy=tf.keras.mixed_precision.global_policy().name,
        cpu_affinity=pinned, world_size=world,
    )
    device = "/gpu:0" if kind == "gpu" else "/cpu:0"
    with strategy.scope() if strategy is not None else tf.device(device):
        model = tf_models.build(name)
        reporter.model(tf_models.param_count(model),
                       tf_models.training_flops_per_sample(name, model))
        if inject == "oom":
            raise MemoryError("injected allocation failure (inject = \"oom\")")
        opt = tf.keras.optimizers.SGD(learning_rate=float(spec["lr"]),
                                      momentum=float(spec["momentum"]))
        if scaled:
            opt = tf.keras.mixed_precision.LossScaleOptimizer(opt)
        # Create the optimizer's variables now, outside the traced step.
        opt.build(model.trainable_variables)
    next_batch = _batches(spec, strategy, world, device)
    train = _train_step(model, opt, tf_models.loss_fn(name), strategy, world, scaled, xla)
    state = {"i": 0}

    def step():
        # Fault hooks fire at the start of the second step, after the first
        # iteration has been reported.
        if state["i"] == 1 and inject == "hang":
            while True:
                time.sleep(60)
        if state["i"] == 1 and inject == "crash":
            sys.stdout.flush()
            os._exit(1)
        x, y = next_batch()
        loss = train(x, y, inject == "nan" and state["i"] == 2)
        value = float(loss.numpy())  # waits for the step: the host needs the value
        state["i"] += 1
        return value

    return proto.measure(step, spec, reporter)


if __name__ == "__main__":
    proto.main(run)
