"""dltop PyTorch runner: ``python torch_runner.py SPEC.json`` (protocol v1).

Valid Python 3.6; imports only the standard library, torch, and its siblings.

Data parallel (``cpus:P``, ``gpu:N`` with N > 1): the runner the supervisor
started becomes a launcher, before importing torch: it runs torchrun
(``python -m torch.distributed.run --standalone --nproc-per-node P``, no
restarts) on this script and relays rank 0's events from a FIFO in the run's
folder (:mod:`relay`; torchrun closes inherited descriptors). In a torchrun
worker (``TORCHELASTIC_RUN_ID`` and ``LOCAL_RANK`` set) the rank, world and
rendezvous come from torchrun's environment; only rank 0 reports, each rank
dies with torchrun's agent (:func:`relay.join`). A multi-node job runs the same
worker under one torchrun agent per node (``dltop.runners.launchers``).

Steps are timed by measure.run (the loop every runner shares), which also fires
the test hooks (profile key ``inject``, for testing dltop itself): ``nan`` makes
iteration 2's loss NaN once its time was taken; ``hang`` sleeps forever after the
first iteration; ``crash`` calls ``os._exit(1)`` after the first iteration
without reporting; ``crash-rank1`` is ``crash`` in rank 1 only. ``oom`` raises
MemoryError before the first iteration (here).
"""

import os
import sys

import dltop_protocol as proto
import model_catalog
import relay

_TORCHRUN = "TORCHELASTIC_RUN_ID" in os.environ and "LOCAL_RANK" in os.environ
"""This process is a torchrun worker."""


def _world(spec):
    """Ranks of the whole job: torchrun's WORLD_SIZE in a worker, else the spec's count."""
    if _TORCHRUN:
        return int(os.environ["WORLD_SIZE"])
    dev = spec["device"]
    return int(dev["count"]) if dev["kind"] in ("cpus", "gpu") else 1


def _torchrun_cmd(spec_path, nproc):
    """torchrun on one host (dltop.runners.launchers.torchrun_argv builds the same)."""
    run_dir = os.path.dirname(spec_path)
    return [sys.executable, "-m", "torch.distributed.run", "--standalone",
            "--nproc-per-node", str(nproc), "--max-restarts", "0",
            "--log-dir", os.path.join(run_dir, "torchrun"), os.path.abspath(__file__),
            spec_path]


def _launch(spec_path, spec):
    """Run the job's ranks under torchrun and relay rank 0's events; the exit status."""
    spec_path = os.path.abspath(spec_path)
    world = _world(spec)
    return relay.launch(_torchrun_cmd(spec_path, world), "torchrun (%d ranks)" % world,
                        directory=os.path.dirname(spec_path))


if __name__ == "__main__" and not _TORCHRUN and len(sys.argv) == 2:
    _spec = proto.load_spec()
    if _world(_spec) > 1:  # decided before importing torch: the launcher stays light
        sys.exit(_launch(sys.argv[1], _spec))
if _TORCHRUN:
    os.environ["DLTOP_LOCAL_RANK"] = os.environ["LOCAL_RANK"]
    relay.join(os.environ["RANK"])

# Import torch only after the protocol module: a failing import must still be
# reported as an error event, and thread variables come from the parent's env.
try:
    import torch
except ImportError as exc:  # pragma: no cover - reported to the parent
    proto.Reporter().error("unsupported", "PyTorch is not installed in %s: %s"
                           % (sys.executable, exc))
    sys.exit(proto.EXIT_ERROR)

import convergence  # noqa: E402
import lm_catalog  # noqa: E402
import lm_loop  # noqa: E402
import measure  # noqa: E402
import torch_data  # noqa: E402
import torch_fp8  # noqa: E402
import torch_gpu  # noqa: E402
import torch_lm  # noqa: E402
import torch_lm_steps  # noqa: E402
import torch_models  # noqa: E402
import torch_optim  # noqa: E402
import torch_profile  # noqa: E402
import torch_train  # noqa: E402


def _blas():
    try:
        cfg = torch.__config__.show()
    except Exception:  # noqa: BLE001 - informative only
        return None
    found = []
    for key in ("mkl", "openblas", "accelerate", "blis"):
        if ("BLAS_INFO=" + key) in cfg or ("USE_" + key.upper() + "=ON") in cfg:
            found.append(key)
    if "USE_MKLDNN=ON" in cfg or "USE_MKLDNN=1" in cfg:
        found.append("onednn")
    return "+".join(found) or None


def _init_group(backend):
    """Join torchrun's process group (RANK, WORLD_SIZE, MASTER_ADDR/PORT from its env)."""
    import datetime

    import torch.distributed as dist

    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=120))


def _device(spec):
    dev = spec["device"]
    if dev["kind"] == "cpus":
        torch.set_num_threads(1)
        if _TORCHRUN:
            _init_group("gloo")
        return torch.device("cpu"), 1
    if dev["kind"] == "cpu":
        n = int(dev["count"])
        torch.set_num_threads(n)
        try:
            torch.set_num_interop_threads(n)
        except RuntimeError:
            pass  # already set (only possible once per process)
        if _TORCHRUN:  # cpu:N on several nodes: one N-thread rank per node
            _init_group("gloo")
        return torch.device("cpu"), n
    if not torch.cuda.is_available():
        raise proto.Unsupported("gpu requested but CUDA is not available to PyTorch %s"
                                % torch.__version__)
    per_node = int(dev["count"])
    if torch.cuda.device_count() < per_node:
        raise proto.Unsupported("gpu:%d requested but PyTorch sees %d GPU(s)"
                                % (per_node, torch.cuda.device_count()))
    torch.backends.cudnn.benchmark = True
    tf32 = spec["precision"] == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    local = proto.local_rank()
    torch.cuda.set_device(local)
    if _TORCHRUN:
        _init_group("nccl")
    return torch.device("cuda", local), None


def _precision(spec, device):
    """Autocast context factory and GradScaler (or None) for the precision mode."""
    precision = spec["precision"]
    if device.type == "cpu" and precision in ("fp16", "tf32"):
        raise proto.Unsupported("precision %s needs a GPU (the CPU run supports fp32, bf16)"
                                % precision)
    if precision == "fp8":
        torch_fp8.check_device(device)  # what torchao leaves unconverted runs in bf16
    if precision in ("fp16", "bf16", "fp8"):
        dtype = torch.float16 if precision == "fp16" else torch.bfloat16
        scaler = None
        if precision == "fp16":
            scaler = torch.amp.GradScaler("cuda")
        return (lambda: torch.autocast(device.type, dtype=dtype)), scaler
    return None, None


def _leave_group():
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def _data(spec, device):
    """Training batches, the step plan, the test part (or None) and n_test of the spec's data.

    Returns ``(next_batch, close, plan, test, n_test)``; ``close()`` stops loader workers.
    """
    name = spec["model"]
    host = spec.get("data_loader") == "host"
    batch = int(spec["per_device_batch"])
    global_batch = int(spec["samples_per_iter"])
    epochs, every = spec.get("epochs"), spec.get("eval_every")
    seq_len = spec.get("seq_len") if lm_catalog.is_transformer(name) else None
    if spec["data"] != "real":
        plan = convergence.Plan(None, global_batch, epochs, spec["iterations"], spec["warmup"],
                                every)
        if seq_len is not None:
            next_batch = torch_lm_steps.synthetic(name, batch, seq_len, device, host)
        else:
            next_batch = torch_data.synthetic(name, batch, device, host,
                                              spec.get("input_size"))
        return next_batch, lambda: None, plan, None, None
    import datasets

    kind, shape, train, test = datasets.real_split(name, spec["data_dir"],
                                                   spec.get("input_size"),
                                                   need_test=every is not None,
                                                   seq_len=seq_len)
    n = train[2]
    plan = convergence.Plan(n, global_batch, epochs, spec["iterations"], spec["warmup"], every)
    epoch_order = convergence.EpochOrder(n, spec.get("shuffle"), spec["seed"]).order

    def order_for(dev):
        return torch_data.Order(n, global_batch, batch, proto.rank(), epoch_order, dev)

    next_batch, close = torch_data.real(kind, shape, train, device,
                                        spec.get("data_loader") or "device",
                                        int(spec.get("loader_workers") or 0), order_for)
    return (next_batch, close, plan, None if test is None else (kind, shape, test),
            None if test is None else test[2])


def _evaluator(spec, model, device, world, autocast, test):
    """``evaluate()`` for :func:`convergence.send_eval`: (loss, accuracy or None, samples)."""
    kind, shape, part = test
    parts, to_device = torch_data.test_batches(kind, shape, part,
                                               int(spec["per_device_batch"]), device,
                                               proto.rank(), world)
    vocab = None
    if kind == "ptb":
        vocab = (lm_catalog.shape(spec["model"])["vocab"]
                 if lm_catalog.is_transformer(spec["model"]) else torch_models.VOCAB)

    def evaluate():
        loss, acc, _, samples = torch_train.evaluate(model, parts, to_device, autocast,
                                                     vocab, world)
        return loss, acc, samples

    return evaluate


def _samples(spec):
    """Samples of one step: sequences, or for a transformer tokens (sequences x seq_len)."""
    samples = int(spec["samples_per_iter"])
    if lm_catalog.is_transformer(spec["model"]):
        samples *= int(spec["seq_len"])
    return samples


def _launcher_facts():
    """What started the ranks (stored with the run's environment)."""
    if not _TORCHRUN:
        return {}
    return {"launcher": "torchrun", "nodes": int(os.environ.get("GROUP_WORLD_SIZE", "1"))}


def _build(spec, device):
    """The model, its ``model`` event fields (parameters, FLOPs per sample) and its loss.

    A transformer is made directly on the device (llama-1b's 1.2 billion weights
    are initialised there, not on the host); the others on the host as before.
    """
    name = spec["model"]
    if lm_catalog.is_transformer(name):
        model = torch_lm.build(name, spec["attention"], device,
                               generate=spec.get("mode") == "generate")
        flops = lm_catalog.flops_per_token(name, spec["seq_len"], spec.get("mode"))
        return (model, torch_lm.param_count(model), flops,
                torch_lm.loss_fn(lm_catalog.shape(name)["vocab"]))
    input_size = spec.get("input_size")
    model = torch_models.build(name, input_size)
    flops = model_catalog.flops_for_mode(
        torch_models.training_flops_per_sample(name, model, input_size), spec.get("mode"))
    return model, torch_models.param_count(model), flops, torch_models.loss_fn(name)


def _generate(spec, reporter, model, device):
    """``mode = "generate"``: :func:`lm_loop.run_generate` over a :class:`Generator`."""
    gen = torch_lm_steps.Generator(spec, model, device)
    gen.prepare(reporter)
    n = lm_loop.run_generate(spec, reporter, gen.prefill, gen.decode,
                             tokens=lambda: gen.tokens)
    if spec.get("op_profile"):
        torch_profile.profile_steps(gen.profile_step, device, reporter)
    return n


def run(spec, reporter):
    if lm_catalog.is_transformer(spec["model"]):
        spec = torch_lm_steps.with_defaults(spec)
    elif spec.get("mode") == "generate":
        raise proto.Unsupported("mode \"generate\" needs a transformer model (%s); %s is "
                                "not one" % (", ".join(lm_catalog.NAMES), spec["model"]))
    inject = (spec.get("options") or {}).get("inject")
    pinned = proto.pin(spec)
    device, threads = _device(spec)
    torch_gpu.configure(spec, device)
    # Same initial weights on every rank (DDP also broadcasts rank 0's); data differs.
    torch.manual_seed(int(spec["seed"]))
    world = _world(spec)
    inference = spec.get("mode") == "inference"
    reporter.hello(
        "torch", torch.__version__, str(device), threads, blas=_blas(),
        cuda_version=torch.version.cuda,
        cudnn_version=(torch.backends.cudnn.version() if device.type == "cuda" else None),
        device_name=(torch.cuda.get_device_name(device.index) if device.type == "cuda"
                     else proto.cpu_name()),
        torch_threads=torch.get_num_threads(), cpu_affinity=pinned, world_size=world,
        **_launcher_facts())
    model, params, flops, loss_fn = _build(spec, device)
    reporter.model(params, flops)
    if inject == "oom":
        raise MemoryError("injected allocation failure (inject = \"oom\")")
    torch_gpu.check(spec, device, world)
    if spec.get("mode") == "generate":
        n = _generate(spec, reporter, model, device)
        reporter.gpu_mem_peak_bytes = _gpu_mem_peak(device)
        _leave_group()
        return n
    # Inference: eval mode (dropout off, batch norm on running statistics), no DDP:
    # each rank runs its own forward passes.
    model.to(device).train(not inference)
    if spec["precision"] == "fp8":  # before DDP, compile and the optimizer see the layers
        model = torch_fp8.convert(model, spec, device)
    bare = torch_gpu.prepare(model, spec)
    if world > 1 and not inference:
        from torch.nn.parallel import DistributedDataParallel

        model = DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None)
    model = torch_gpu.compiled(model, spec)
    torch.manual_seed(int(spec["seed"]) + 1000 * proto.rank())
    autocast, scaler = _precision(spec, device)
    next_batch, close, plan, test, n_test = _data(spec, device)
    next_batch = torch_gpu.batches(next_batch, spec)
    evaluate = None
    if inference:
        step = torch_gpu.inference_step(spec, model, next_batch, autocast, device)
    else:
        opt = torch_optim.build(spec, model.parameters(), device)
        step = torch_gpu.train_step(spec, model, opt, loss_fn,
                                    next_batch, autocast, scaler, device)
        if test is not None and spec.get("eval_every") is not None:
            evaluate = _evaluator(spec, bare, device, world, autocast, test)
    plan.timed(spec, torch_train.rank0_decides(device), reporter=reporter)
    plan.report(reporter, n_test)
    try:
        sync = torch_train.synchronizer(device)
        torch_gpu.prime(step, spec, reporter, sync)
        n = measure.run(step, plan, reporter, _samples(spec), evaluate, inject, sync)
        if spec.get("op_profile"):
            torch_profile.profile_steps(lambda: sync(step()), device, reporter)
    finally:
        close()
    reporter.gpu_mem_peak_bytes = _gpu_mem_peak(device)
    _leave_group()
    return n


def _gpu_mem_peak(device):
    """PyTorch's own peak of allocated GPU memory on ``device`` (this rank's), or None on CPU.

    The caching allocator's count of tensors' bytes: less than NVML's device figure,
    which adds the allocator's cache, the CUDA context and other processes.
    """
    if device.type != "cuda":
        return None
    return int(torch.cuda.max_memory_allocated(device))


if __name__ == "__main__":
    proto.main(run)
