"""dltop PyTorch runner: ``python torch_runner.py SPEC.json`` (protocol v1).

Valid Python 3.6; imports only the standard library, torch, and its siblings.

Test hooks (profile key ``inject``, for testing dltop itself):
``nan`` makes the loss NaN at iteration 2; ``hang`` sleeps forever after the
first iteration; ``crash`` calls ``os._exit(1)`` after the first iteration
without reporting; ``oom`` raises MemoryError before the first iteration.
"""

import os
import sys

import dltop_protocol as proto
import model_catalog

# Import torch only after the protocol module: a failing import must still be
# reported as an error event, and thread variables come from the parent's env.
try:
    import torch
except ImportError as exc:  # pragma: no cover - reported to the parent
    proto.Reporter().error("unsupported", "PyTorch is not installed in %s: %s"
                           % (sys.executable, exc))
    sys.exit(proto.EXIT_ERROR)

import convergence
import torch_data
import torch_gpu
import torch_models
import torch_optim
import torch_profile
import torch_train

_WORKERS = []


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


def _free_port():
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _start_workers(spec, world):
    """Rank 0 starts ranks 1..world-1 in its own process group (the supervisor's to kill)."""
    import subprocess

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(_free_port())
    workers = []
    for rank in range(1, world):
        env = dict(os.environ, DLTOP_RANK=str(rank), DLTOP_WORLD=str(world))
        env.pop("DLTOP_EVENT_FD", None)
        workers.append(subprocess.Popen([sys.executable, os.path.abspath(__file__),
                                         sys.argv[1]], env=env))
    return workers


def _init_group(spec, world, backend):
    """Start the other ranks (from rank 0) and join the process group."""
    import datetime

    import torch.distributed as dist

    if proto.rank() == 0:
        _WORKERS.extend(_start_workers(spec, world))
    dist.init_process_group(backend, rank=proto.rank(), world_size=world,
                            timeout=datetime.timedelta(seconds=120))


def _device(spec):
    dev = spec["device"]
    if dev["kind"] == "cpus":
        world = int(dev["count"])
        torch.set_num_threads(1)
        if world > 1:
            _init_group(spec, world, "gloo")
        return torch.device("cpu"), 1
    if dev["kind"] == "cpu":
        n = int(dev["count"])
        torch.set_num_threads(n)
        try:
            torch.set_num_interop_threads(n)
        except RuntimeError:
            pass  # already set (only possible once per process)
        return torch.device("cpu"), n
    if not torch.cuda.is_available():
        raise proto.Unsupported("gpu requested but CUDA is not available to PyTorch %s"
                                % torch.__version__)
    world = int(dev["count"])
    if torch.cuda.device_count() < world:
        raise proto.Unsupported("gpu:%d requested but PyTorch sees %d GPU(s)"
                                % (world, torch.cuda.device_count()))
    torch.backends.cudnn.benchmark = True
    tf32 = spec["precision"] == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.cuda.set_device(proto.rank())
    if world > 1:
        _init_group(spec, world, "nccl")
    return torch.device("cuda", proto.rank()), None


def _precision(spec, device):
    """Autocast context factory and GradScaler (or None) for the precision mode."""
    precision = spec["precision"]
    if device.type == "cpu" and precision in ("fp16", "tf32"):
        raise proto.Unsupported("precision %s needs a GPU (the CPU run supports fp32, bf16)"
                                % precision)
    if precision in ("fp16", "bf16"):
        dtype = torch.float16 if precision == "fp16" else torch.bfloat16
        scaler = None
        if precision == "fp16":
            scaler = torch.amp.GradScaler("cuda")
        return (lambda: torch.autocast(device.type, dtype=dtype)), scaler
    return None, None


def _finish_workers():
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    for w in _WORKERS:
        if w.wait(timeout=60) != 0:
            raise RuntimeError("data-parallel worker pid %d exited with status %s"
                               % (w.pid, w.returncode))


def _data(spec, device):
    """Training batches, the step plan, the test part (or None) and n_test of the spec's data.

    Returns ``(next_batch, close, plan, test, n_test)``; ``close()`` stops loader workers.
    """
    name = spec["model"]
    host = spec.get("data_loader") == "host"
    batch = int(spec["per_device_batch"])
    global_batch = int(spec["samples_per_iter"])
    epochs, every = spec.get("epochs"), spec.get("eval_every")
    if spec["data"] != "real":
        plan = convergence.Plan(None, global_batch, epochs, spec["iterations"], spec["warmup"],
                                every)
        next_batch = torch_data.synthetic(name, batch, device, host, spec.get("input_size"))
        return next_batch, lambda: None, plan, None, None
    import datasets

    kind, shape, train, test = datasets.real_split(name, spec["data_dir"],
                                                   spec.get("input_size"),
                                                   need_test=every is not None)
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
    vocab = torch_models.VOCAB if kind == "ptb" else None

    def evaluate():
        loss, acc, _, samples = torch_train.evaluate(model, parts, to_device, autocast,
                                                     vocab, world)
        return loss, acc, samples

    return evaluate


def run(spec, reporter):
    inject = (spec.get("options") or {}).get("inject")
    pinned = proto.pin(spec)
    device, threads = _device(spec)
    torch_gpu.configure(spec, device)
    # Same initial weights on every rank (DDP also broadcasts rank 0's); data differs.
    torch.manual_seed(int(spec["seed"]))
    world = int(spec["device"]["count"]) if spec["device"]["kind"] in ("cpus", "gpu") else 1
    name = spec["model"]
    inference = spec.get("mode") == "inference"
    reporter.hello(
        "torch", torch.__version__, str(device), threads, blas=_blas(),
        cuda_version=torch.version.cuda,
        cudnn_version=(torch.backends.cudnn.version() if device.type == "cuda" else None),
        device_name=(torch.cuda.get_device_name(device.index) if device.type == "cuda"
                     else proto.cpu_name()),
        torch_threads=torch.get_num_threads(), cpu_affinity=pinned, world_size=world,
    )
    input_size = spec.get("input_size")
    model = torch_models.build(name, input_size)
    reporter.model(torch_models.param_count(model), model_catalog.flops_for_mode(
        torch_models.training_flops_per_sample(name, model, input_size), spec.get("mode")))
    if inject == "oom":
        raise MemoryError("injected allocation failure (inject = \"oom\")")
    torch_gpu.check(spec, device, world)
    # Inference: eval mode (dropout off, batch norm on running statistics), no DDP:
    # each rank runs its own forward passes.
    model.to(device).train(not inference)
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
        step = torch_gpu.inference_step(spec, model, next_batch, autocast, device, inject)
    else:
        opt = torch_optim.build(spec, model.parameters())
        step = torch_gpu.train_step(spec, model, opt, torch_models.loss_fn(name),
                                    next_batch, autocast, scaler, device, inject)
        if test is not None and spec.get("eval_every") is not None:
            evaluate = _evaluator(spec, bare, device, world, autocast, test)
    plan.report(reporter, n_test)
    try:
        torch_gpu.prime(step, spec, reporter)
        n = torch_train.run_steps(step, plan, reporter, int(spec["samples_per_iter"]),
                                  evaluate)
        if spec.get("op_profile"):
            torch_profile.profile_steps(step, device, reporter)
    finally:
        close()
    _finish_workers()
    return n


if __name__ == "__main__":
    proto.main(run)
