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

import math
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

import tf_data
import tf_models
import tf_train


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


def _real(spec, world):
    """Real data as numpy arrays: ``(train (x, y), test (x, y) or None, test files)``."""
    import datasets

    model, data_dir = spec["model"], spec["data_dir"]
    split = getattr(datasets, "real_split", None)
    if split is not None:
        kind, _shape, train, test = split(model, data_dir, spec.get("input_size"))
    else:  # before the train/test split existed: the training files only
        kind, _shape, inputs, labels = datasets.real_data(model, data_dir)
        train, test = (inputs, labels, _shape[0]), None
    batch = int(spec["per_device_batch"]) * world
    if train[2] < batch:
        raise ValueError("data set in %s has %d samples, fewer than the batch %d"
                         % (data_dir, train[2], batch))
    arrays = []
    for part in (train, test):
        if part is None:
            arrays.append(None)
            continue
        x, y = tf_data.as_arrays(kind, *part)
        arrays.append((tf_data.shaped_for(model, x), y))
    return arrays[0], arrays[1], kind


PROFILE_STEPS = 5  # tf_profile.PROFILE_STEPS, without importing the profiler for every run

TEST_FILES = {"mnist": "t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte",
              "cifar10": "test_batch", "ptb": "ptb.valid.txt"}


def _plan(spec, n_train, world):
    """``(total steps, steps per epoch or None)`` of this run."""
    warmup = int(spec["warmup"])
    if spec.get("mode") == "inference":
        return warmup + int(spec["iterations"]), None
    spe = None if n_train is None else n_train // (int(spec["per_device_batch"]) * world)
    if spec.get("epochs"):
        return int(spec["epochs"]) * spe, spe
    return warmup + int(spec["iterations"]), spe


def _eval_after(spec, step, total, spe):
    every = spec.get("eval_every")
    if every is None:
        return False
    if step == total - 1:
        return True
    n = spe if every == "epoch" else int(every)
    return (step + 1) % n == 0


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
    inference = spec.get("mode") == "inference"
    host = spec.get("data_loader") == "host"
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
        cpu_affinity=pinned, world_size=world, mode="inference" if inference else "train",
        data_loader="host" if host else "device",
    )
    device = "/gpu:0" if kind == "gpu" else "/cpu:0"
    with strategy.scope() if strategy is not None else tf.device(device):
        model = tf_models.build(name)
        reporter.model(tf_models.param_count(model),
                       tf_models.training_flops_per_sample(name, model))
        if inject == "oom":
            raise MemoryError("injected allocation failure (inject = \"oom\")")
        opt = None
        if not inference:
            opt = tf_train.optimizer(spec)
            if scaled:
                opt = tf.keras.mixed_precision.LossScaleOptimizer(opt)
            # Create the optimizer's variables now, outside the traced step.
            opt.build(model.trainable_variables)

    train_xy = test_xy = data_kind = None
    if spec["data"] == "real":
        train_xy, test_xy, data_kind = _real(spec, world)
        if spec.get("eval_every") is not None and test_xy is None:
            raise proto.Unsupported("eval_every needs the test files of %s in %s: %s not found"
                                    % (data_kind, spec["data_dir"], TEST_FILES[data_kind]))
    n_train = None if train_xy is None else len(train_xy[0])
    total, spe = _plan(spec, n_train, world)
    _send(reporter, "plan", iterations=total, steps_per_epoch=spe if spec.get("epochs") else None,
          epochs=spec.get("epochs"), n_train=n_train,
          n_test=None if test_xy is None else len(test_xy[0]))
    if train_xy is None:
        source = tf_data.synthetic(spec, strategy, world, device, host)
    else:
        order = tf_data.Order(n_train, int(spec["per_device_batch"]) * world,
                              bool(spec.get("shuffle")), int(spec["seed"]))
        source = tf_data.real(spec, strategy, world, device, train_xy[0], train_xy[1], order,
                              total + (PROFILE_STEPS if spec.get("op_profile") else 0),
                              int(spec.get("loader_workers") or 0), host)
    if inference:
        forward = tf_train.forward_step(model, strategy, xla)

        def work(i, poison):
            x, _ = source.batch(i)
            float(forward(x).numpy())  # waits for the forward pass
            return None
    else:
        train = tf_train.train_step(model, opt, tf_models.loss_fn(name), strategy, world,
                                    scaled, xla)

        def work(i, poison):
            x, y = source.batch(i)
            return float(train(x, y, poison).numpy())  # the host needs the value: waits

    evaluate = None
    if spec.get("eval_every") is not None and not inference:
        evaluate = _evaluator(spec, reporter, model, test_xy, data_kind, spe, world)
    measured = _loop(spec, reporter, work, total, spe, evaluate, inject)
    if spec.get("op_profile"):
        import tf_profile

        tf_profile.profile(reporter, lambda i: work(i, False), total, kind, _send)
    return measured


def _send(reporter, event, **fields):
    method = getattr(reporter, event, None)
    if method is not None:
        method(**fields)
    else:
        reporter.emit(event, **fields)


def _loop(spec, reporter, work, total, spe, evaluate, inject):
    """Run, time and report every step; evaluate where the plan says; measured count."""
    warmup = int(spec["warmup"])
    samples = int(spec["samples_per_iter"])
    clock = time.perf_counter
    train_s = 0.0
    for i in range(total):
        # Fault hooks fire at the start of the second step, after the first
        # iteration has been reported.
        if i == 1 and inject == "hang":
            while True:
                time.sleep(60)
        if i == 1 and inject == "crash":
            sys.stdout.flush()
            os._exit(1)
        t0 = clock()
        loss = work(i, inject == "nan" and i == 2)
        dt = clock() - t0
        train_s += dt
        reporter.iteration(i, dt, samples, i < warmup, loss)
        if loss is not None and not math.isfinite(loss):
            raise proto.Diverged("non-finite loss %r at iteration %d" % (loss, i))
        if evaluate is not None and _eval_after(spec, i, total, spe):
            evaluate(i, train_s)
    return total - warmup


def _evaluator(spec, reporter, model, test_xy, data_kind, spe, world):
    """``evaluate(step, train_s)``: the whole test set, forward only; sends ``eval``."""
    step_fn = tf_train.eval_step(model)
    batch = int(spec["per_device_batch"]) * world
    device = "/gpu:0" if spec["device"]["kind"] == "gpu" else "/cpu:0"

    def evaluate(i, train_s):
        t0 = time.perf_counter()
        loss_sum, hits, count = 0.0, 0, 0
        for x, y in tf_data.test_batches(test_xy[0], test_xy[1], batch):
            with tf.device(device):
                lsum, h, c = step_fn(tf.convert_to_tensor(x), tf.convert_to_tensor(y))
            loss_sum += float(lsum.numpy())
            hits += int(h.numpy())
            count += int(c.numpy())
        eval_s = time.perf_counter() - t0
        mean = loss_sum / max(count, 1)
        lstm = data_kind == "ptb"
        _send(reporter, "eval", index=i, epoch=(i + 1) / float(spe) if spe else None,
              accuracy=None if lstm else hits / float(max(count, 1)),
              perplexity=_finite(_exp(mean)) if lstm else None,
              loss=_finite(mean), eval_s=eval_s,
              train_s=train_s, samples=len(test_xy[0]))
    return evaluate


def _finite(x):
    # JSON has no NaN/inf: the protocol sends them as strings.
    return x if math.isfinite(x) else str(x)


def _exp(x):
    try:
        return math.exp(x)
    except OverflowError:
        return float("inf")


if __name__ == "__main__":
    proto.main(run)
