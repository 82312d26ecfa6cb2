"""dltop TensorFlow runner: ``python tf_runner.py SPEC.json`` (protocol v1).

Valid Python 3.6; imports only the standard library, tensorflow, numpy and its
siblings. Mirrors torch_runner: same models (tf_models), loss, optimizers with
PyTorch's semantics (tf_train), per-step timing synchronised by reading the
loss (inference: one logit) on the host.

Modes: ``train`` (forward, backward, update), ``inference`` (forward only,
``iter.loss`` null) or, for the transformers (tf_lm; their samples are tokens,
batch x seq_len), ``generate`` (tf_lm_steps: prefill and decode over a KV
cache, timed by lm_loop). Real data follows ``convergence.Plan``: ``epochs`` or
``warmup + iterations`` steps, ``eval`` events on the test files where
``eval_every`` says, ``train_s`` without the evaluations. Batches: tf_data
(``data_loader`` device or host, ``loader_workers``). ``profile = true``:
tf_profile traces five more steps after the measured ones.

Devices: ``cpu:N`` (one process, N intra- and N inter-op threads), ``gpu:1``,
``gpu:N`` (MirroredStrategy over N GPUs in this one process), ``cpus:P`` (P
processes of one thread each, MultiWorkerMirroredStrategy; tf_dist starts them:
this process is worker 0 and the only one that reports; each worker makes its
own part of the global batch). ``nodes > 1`` (Slurm; ``cpu:N`` or ``gpu:N``):
this process is one node's only worker, MultiWorkerMirroredStrategy over the
nodes from the ``TF_CONFIG`` node.sh exports (with ``gpu:N`` it mirrors the
node's N GPUs too); the world is every replica of every node, DLTOP_RANK 0
reports. Option ``xla = true`` compiles the step with XLA.

Test hooks (profile key ``inject``), fired by measure.run as in every runner:
``nan`` makes iteration 2's loss NaN once its time was taken (training only);
``hang`` sleeps forever after the first iteration; ``crash`` calls ``os._exit(1)``
after the first iteration without reporting; ``oom`` raises MemoryError before the
first iteration; ``crash-rank1``: worker 1 of a ``cpus:P`` run exits that way instead.
"""

import json
import os
import sys

import dltop_protocol as proto
import model_catalog
import tf_dist

# Before the import: TF logs every kernel registration and oneDNN notice at INFO.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# cpus:P: start workers 1..P-1 (or, in one of them, tie it to the chief) before
# TF's import, so they import it in parallel and no TF thread sees the fork.
_CLUSTER = (tf_dist.setup(proto.load_spec(), os.path.abspath(__file__), sys.argv[1])
            if __name__ == "__main__" and len(sys.argv) == 2 else None)

# TensorFlow's TFLite helpers import JAX when it is installed (for a converter this
# runner never uses): ~1 s of CPU at every run's start where JAX shares the
# environment. Marking it absent makes TF skip that optional import.
sys.modules.setdefault("jax", None)

# Import TF only after the protocol module: a failing import must still be
# reported as an error event.
try:
    import tensorflow as tf
except ImportError as exc:  # pragma: no cover - reported to the parent
    proto.Reporter().error("unsupported", "TensorFlow is not installed in %s: %s"
                           % (sys.executable, exc))
    sys.exit(proto.EXIT_ERROR)

import convergence  # noqa: E402 - after the workers started
import lm_catalog  # noqa: E402 - after the workers started
import measure  # noqa: E402 - after the workers started
import tf_data  # noqa: E402 - after the workers started
import tf_lm  # noqa: E402 - after the workers started
import tf_lm_steps  # noqa: E402 - after the workers started
import tf_models  # noqa: E402 - after the workers started
import tf_train  # noqa: E402 - after the workers started


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


def _over_nodes(spec, implementation):
    """``nodes > 1``: MultiWorkerMirroredStrategy over one worker per node.

    ``TF_CONFIG`` (one worker per node) and ``DLTOP_RANK`` come from the Slurm
    executor's ``node.sh``; without them this process cannot know its peers.
    """
    n = tf_dist.nodes(spec)
    raw = os.environ.get("TF_CONFIG")
    if not raw:
        raise proto.Failed("nodes = %d needs TF_CONFIG (one worker per node), which each "
                           "node builds from the ports the nodes write into DLTOP_TF_PORTS "
                           "(the Slurm executor's node.sh sets it); it is not set here, "
                           "the log says why" % n)
    try:
        config = json.loads(raw)
        hosts = config["cluster"]["worker"]
        index = int(config["task"]["index"])
    except (ValueError, KeyError, TypeError) as exc:
        raise proto.Failed("TF_CONFIG is not a cluster of workers (%s): %r"
                           % (exc, raw[:200])) from None
    if len(hosts) != n or index != proto.rank():
        raise proto.Failed("TF_CONFIG lists %d workers, this one index %d; the job spans %d "
                           "nodes and DLTOP_RANK is %d" % (len(hosts), index, n, proto.rank()))
    comm = tf.distribute.experimental.CommunicationOptions(implementation=implementation)
    # Reads TF_CONFIG and waits until every node's worker is up.
    return tf.distribute.MultiWorkerMirroredStrategy(communication_options=comm)


def _device(spec):
    """Configure TF before any op runs: (device label, threads, strategy, GPU facts)."""
    dev = spec["device"]
    kind, count = dev["kind"], int(dev["count"])
    nodes = tf_dist.nodes(spec)
    if kind == "cpus" and nodes > 1:
        raise proto.Unsupported("cpus:%d with nodes = %d: P one-thread workers on each of "
                                "several nodes is not built (use cpu:N: one N-thread worker "
                                "per node)" % (count, nodes))
    if kind in ("cpu", "cpus"):
        threads = count if kind == "cpu" else 1  # a cpus:P worker runs one thread
        # Thread pools are fixed when the runtime starts: set them first.
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
        try:
            tf.config.set_visible_devices([], "GPU")  # a GPU build must not use one
        except (RuntimeError, ValueError):
            pass
        strategy = None
        if kind == "cpus" and count > 1:
            # Reads TF_CONFIG (tf_dist) and waits until all workers are up.
            comm = tf.distribute.experimental.CommunicationOptions(
                implementation=tf.distribute.experimental.CommunicationImplementation.RING)
            strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=comm)
        elif nodes > 1:
            strategy = _over_nodes(
                spec, tf.distribute.experimental.CommunicationImplementation.RING)
        return "cpu", threads, strategy, {}
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
    if nodes > 1:  # each worker mirrors its node's visible GPUs too
        strategy = _over_nodes(spec, tf.distribute.experimental.CommunicationImplementation.AUTO)
    elif count > 1:
        strategy = tf.distribute.MirroredStrategy(["/gpu:%d" % i for i in range(count)])
    label = "gpu:0" if count == 1 else "gpu:0-%d" % (count - 1)
    return label, None, strategy, {"device_name": name, "gpu_memory_growth": True}


def _precision(spec, kind):
    """Set the Keras dtype policy (before the model is built); True if loss scaling is needed."""
    precision = spec["precision"]
    if kind != "gpu" and precision in ("fp16", "tf32"):
        raise proto.Unsupported("precision %s needs a GPU (the CPU run supports fp32, bf16)"
                                % precision)
    policy = {"bf16": "mixed_bfloat16", "fp16": "mixed_float16"}.get(precision, "float32")
    tf.keras.mixed_precision.set_global_policy(policy)
    return precision == "fp16"


def _real(spec, need_test):
    """Real data as numpy arrays: ``(kind, train (x, y), test (x, y) or None)``."""
    import datasets

    kind, shape, train, test = datasets.real_split(spec["model"], spec["data_dir"],
                                                   spec.get("input_size"), need_test=need_test,
                                                   seq_len=spec.get("seq_len"))
    return (kind, tf_data.as_arrays(kind, shape, train),
            None if test is None else tf_data.as_arrays(kind, shape, test))


def _build(spec, lm):
    """The model and its ``model`` event's ``(param_count, flops_per_sample)``."""
    name = spec["model"]
    if lm:
        model = tf_lm.build(name, spec["attention"], spec.get("mode") == "generate")
        return model, tf_lm.param_count(model), lm_catalog.flops_per_token(
            name, spec["seq_len"], spec.get("mode"))
    model = tf_models.build(name, spec.get("input_size"))
    return model, tf_models.param_count(model), model_catalog.flops_for_mode(
        tf_models.training_flops_per_sample(name, model, spec.get("input_size")),
        spec.get("mode"))


def run(spec, reporter):
    # Transformers: samples are tokens; generate runs its own loop (tf_lm_steps).
    lm = lm_catalog.is_transformer(spec["model"])
    if lm:
        spec = tf_lm_steps.with_defaults(spec)
    generate = spec.get("mode") == "generate"
    options = spec.get("options") or {}
    inject = options.get("inject")
    xla = bool(options.get("xla", False))
    pinned = proto.pin(spec)
    label, threads, strategy, gpu_facts = _device(spec)
    kind = spec["device"]["kind"]
    nodes = tf_dist.nodes(spec)
    if nodes > 1:
        # One worker per node feeds its node's replicas (1, or N GPUs) its part.
        world = strategy.num_replicas_in_sync
        multi, local, local_world = True, strategy, world // nodes
    else:
        world = int(spec["device"]["count"]) if kind in ("gpu", "cpus") else 1
        # cpus:P: each worker feeds its own replica its part of the global batch.
        multi = kind == "cpus" and world > 1
        local, local_world = (None, 1) if multi else (strategy, world)
    chief = proto.rank() == 0
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
        cpu_affinity=pinned, world_size=world, **({"nodes": nodes} if nodes > 1 else {})
    )
    device = "/gpu:0" if kind == "gpu" else "/cpu:0"
    with strategy.scope() if strategy is not None else tf.device(device):
        if generate and world * nodes > 1:
            raise proto.Unsupported("generate runs on one device (one process, one GPU or "
                                    "cpu:N); this job spans %d replicas" % (world * nodes))
        model, count, flops = _build(spec, lm)
        reporter.model(count, flops)
        if inject == "oom":
            raise MemoryError("injected allocation failure (inject = \"oom\")")
        if generate:
            return tf_lm_steps.run_generate(spec, reporter, model, device, xla)
        opt = None
        if not inference:
            opt = tf_train.optimizer(spec)
            if scaled:
                opt = tf.keras.mixed_precision.LossScaleOptimizer(opt)
            # Create the optimizer's variables now, outside the traced step.
            opt.build(model.trainable_variables)
    if multi:  # same initial weights everywhere (MWMS broadcasts them), data differs
        tf.keras.utils.set_random_seed(int(spec["seed"]) + 1000 * proto.rank())

    batch = int(spec["per_device_batch"]) * world
    evaluating = spec.get("eval_every") is not None and not inference
    train_xy = test_xy = data_kind = None
    if spec["data"] == "real":
        data_kind, train_xy, test_xy = _real(spec, evaluating and chief)
    n_train = None if train_xy is None else len(train_xy[0])
    if n_train is not None and n_train < batch:
        raise ValueError("data set in %s has %d samples, fewer than the batch %d"
                         % (spec["data_dir"], n_train, batch))
    plan = convergence.Plan(n_train, batch, None if inference else spec.get("epochs"),
                            spec["iterations"], spec["warmup"],
                            spec.get("eval_every") if evaluating else None)
    plan.timed(spec, _rank0_decides(strategy) if multi else None, reporter=reporter)
    plan.report(reporter, None if test_xy is None else len(test_xy[0]))
    profiling = bool(spec.get("op_profile"))
    if train_xy is None:
        source = tf_data.synthetic(spec, local, local_world, device, host)
    else:
        order = tf_data.Order(convergence.EpochOrder(n_train, spec.get("shuffle"), spec["seed"]),
                              batch, plan.steps_per_epoch,
                              (proto.rank(), int(spec["per_device_batch"]) * local_world)
                              if multi else None)
        source = tf_data.real(spec, local, local_world, device, train_xy[0], train_xy[1], order,
                              None if plan.is_timed else
                              plan.total_steps + (PROFILE_STEPS if profiling else 0),
                              int(spec.get("loader_workers") or 0), host)
    if inference:
        forward = tf_train.forward_step(model, strategy, xla)

        def work(i):
            x, _ = source.batch(i)
            return forward(x)
    else:
        train = tf_train.train_step(model, opt, tf_models.loss_fn(name), strategy, world,
                                    scaled, xla)

        def work(i):
            x, y = source.batch(i)
            return train(x, y)
    # Reading the scalar on the host waits for the step (one logit in inference).
    sync = measure.host_read(loss=not inference)

    evaluate = None
    if evaluating and chief:  # the others wait at the next step's all-reduce
        evaluate = _evaluator(model, test_xy, data_kind == "ptb", batch, device)
    samples = int(spec["samples_per_iter"]) * (int(spec["seq_len"]) if lm else 1)
    measure.run(work, plan, reporter, samples, evaluate, inject, sync)
    if profiling and not chief:  # the same collective steps, unprofiled
        for i in range(PROFILE_STEPS):
            sync(work(plan.total_steps + i))
    elif profiling:
        import tf_profile

        tf_profile.profile(reporter, lambda i: sync(work(i)), plan.total_steps,
                           "gpu" if kind == "gpu" else "cpu")
    return plan.measured_steps


PROFILE_STEPS = 5  # tf_profile.PROFILE_STEPS, without importing the profiler for every run


def _rank0_decides(strategy):
    """``agree(code)`` for :meth:`convergence.Plan.timed` over several worker processes:
    the chief's code, taken by an all-reduce (the SUM of the chief's code and the
    others' 0: ReduceOp has no MAX), so every worker runs the same steps and no
    collective waits forever."""
    chief = proto.rank() == 0

    @tf.function
    def reduce_max(code):
        per_replica = strategy.run(lambda: tf.identity(code))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    def agree(code):
        return int(reduce_max(tf.constant(int(code) if chief else 0, tf.int64)).numpy())

    return agree


def _evaluator(model, test_xy, language_model, batch, device):
    """``evaluate() -> (mean loss, accuracy or None, samples)`` over the whole test set."""
    step_fn = tf_train.eval_step(model)
    x, y = test_xy

    def evaluate():
        totals = convergence.EvalTotals()
        for i, j in convergence.eval_slices(len(x), batch):
            with tf.device(device):
                loss_sum, hits, count = step_fn(tf.convert_to_tensor(x[i:j]),
                                                tf.convert_to_tensor(y[i:j]))
            # EvalTotals takes each batch's mean over samples; the LSTM's loss is
            # per token, so its per-sample mean is the token mean.
            tokens = float(count.numpy())
            totals.add(float(loss_sum.numpy()) / tokens, int(hits.numpy()), j - i)
        return totals.result(language_model)
    return evaluate


def _leaving_together(run):
    """``run``, then (MultiWorkerMirroredStrategy only) wait until every worker's is done.

    A ring all-reduce's last chunk is pulled from its sender's server (gRPC
    ``RecvBuf``): a worker whose own last step is complete could exit while a peer is
    still pulling from it, failing that peer's step with "Socket closed" (seen in CI,
    cpus:2). Every worker therefore meets at a barrier of the coordination service that
    MultiWorkerMirroredStrategy starts, after its last collective and before it exits;
    a run that failed skips it (its peers fail on their own). Worker 0 may leave before
    another worker's answer from the barrier is sent (tf_dist.end_barrier).
    """
    def ending(spec, reporter):
        n = run(spec, reporter)
        from tensorflow.python.eager import context  # the barrier has no public API

        ctx = context.context()
        if getattr(ctx, "coordination_service", None) and hasattr(ctx, "wait_at_barrier"):
            # The chief may still evaluate or trace after its last step; the supervisor's
            # timeout, not this one, bounds the run.
            tf_dist.end_barrier(ctx, int(float(spec.get("timeout_s") or 86400) * 1000)
                                + 60000, proto.rank(), tf.errors.UnavailableError)
        return n
    return ending


if __name__ == "__main__":
    proto.main(tf_dist.guarded(_leaving_together(run), _CLUSTER))
