"""dltop CNTK 2.7 runner: ``python cntk_runner.py SPEC.json`` (protocol v1).

Valid Python 3.6; imports only the standard library, numpy, cntk and its
siblings. Runs in the interpreter ``dltop env setup cntk`` builds, with that
environment's ``LD_LIBRARY_PATH`` (CNTK links against Open MPI 1.10 sonames).

Devices: ``cpu:N`` is one process with N CPU threads
(``cntk_py.set_max_num_cputhreads``); ``gpu:1`` the first GPU (the pip package
``cntk`` is CPU-only, so it reports unsupported unless ``cntk-gpu`` is
installed). ``cpus:P`` and ``gpu:N`` with more than one worker train data
parallel (``data_parallel_distributed_learner``, 32-bit all-reduce): the
runner started by the parent becomes a launcher that runs
``mpiexec -n P --allow-run-as-root`` on this script and relays rank 0's events
(through a FIFO, since mpiexec closes inherited descriptors) to the parent.
Only rank 0 reports; every rank dies with mpiexec (see :func:`_join_launcher`).

Test hooks (profile key ``inject``, for testing dltop itself), as in
torch_runner.py: ``nan`` makes the loss NaN at iteration 2; ``hang`` sleeps
forever after the first iteration; ``crash`` calls ``os._exit(1)`` after the
first iteration without reporting; ``oom`` raises MemoryError before the
first iteration.
"""

import os
import sys
import types

import dltop_protocol as proto
import model_catalog
import relay

_MPI_RANK = os.environ.get("OMPI_COMM_WORLD_RANK")


def _join_launcher():
    """In an mpiexec rank: die with mpiexec, and let only rank 0 report (to the FIFO).

    mpiexec puts each rank in a process group of its own (and signals that whole
    group), so a rank cannot join the launcher's group; :func:`relay.join` asks the
    kernel for SIGKILL when mpiexec, its parent, dies (the parent's group kill).
    """
    relay.join(_MPI_RANK, remove_dir=True)


def _world(spec):
    dev = spec["device"]
    return int(dev["count"]) if dev["kind"] in ("cpus", "gpu") else 1


def _launch(spec_path, spec):
    """Run the data-parallel job under mpiexec and relay rank 0's events; the exit status."""
    import shutil

    mpiexec = shutil.which("mpiexec")
    if mpiexec is None:
        proto.Reporter().error("unsupported", "CNTK data-parallel runs need mpiexec on PATH "
                               "(Debian: apt-get install openmpi-bin; see `dltop env setup "
                               "cntk`)")
        return proto.EXIT_ERROR
    world = _world(spec)
    cmd = [mpiexec, "-n", str(world), "--allow-run-as-root", "--oversubscribe",
           "--bind-to", "none", sys.executable, os.path.abspath(__file__), spec_path]
    return relay.launch(cmd, "mpiexec (%d ranks)" % world, prefix="dltop-cntk-")


if __name__ == "__main__" and _MPI_RANK is None and len(sys.argv) == 2:
    _spec = proto.load_spec()
    if _world(_spec) > 1:  # decided before importing CNTK: no MPI in the launcher
        sys.exit(_launch(sys.argv[1], _spec))
    # Pin before CNTK's MKL/OpenMP start their threads: a thread keeps the affinity
    # it was created with. (Pinning after the import measured 1.7 % slower.)
    proto.pin(_spec)
if _MPI_RANK is not None:
    _join_launcher()

# CNTK's import runs ~14 `ldconfig -N -v` shell pipelines (which create soname
# links as root) only to print warnings about optional GPU/OpenCV libraries;
# stub that check out. A failing import must still reach the parent.
_stub = types.ModuleType("cntk.cntk_py_init")
_stub.cntk_check_distro_info = _stub.cntk_check_libs = lambda: None
sys.modules["cntk.cntk_py_init"] = _stub
try:
    import cntk as C
    import numpy  # noqa: F401 - checked here, used by the sibling modules
except ImportError as exc:  # pragma: no cover - reported to the parent
    proto.Reporter().error(
        "unsupported", "CNTK is not importable by %s (LD_LIBRARY_PATH=%s): %s; build its "
        "environment with `dltop env setup cntk`"
        % (sys.executable, os.environ.get("LD_LIBRARY_PATH", ""), exc))
    sys.exit(proto.EXIT_ERROR)

import cntk_data  # noqa: E402
import cntk_learn  # noqa: E402
import cntk_models  # noqa: E402
import cntk_train  # noqa: E402


def _device(spec):
    """Select the device: (device, threads, device name)."""
    dev = spec["device"]
    if dev["kind"] in ("cpu", "cpus"):
        n = int(dev["count"]) if dev["kind"] == "cpu" else 1
        C.cntk_py.set_max_num_cputhreads(n)
        C.device.try_set_default_device(C.device.cpu())
        return "cpu", n, proto.cpu_name()
    gpus = [d for d in C.device.all_devices() if d.type() == C.device.DeviceKind.GPU]
    if not gpus:
        raise proto.Unsupported(
            "gpu requested but CNTK %s sees no GPU (the pip package `cntk` is CPU-only; a GPU "
            "run needs `cntk-gpu` 2.7 with CUDA 10.0 and cuDNN 7)" % C.__version__.strip())
    if len(gpus) < _world(spec):
        raise proto.Unsupported("gpu:%d requested but CNTK sees %d GPU(s)"
                                % (_world(spec), len(gpus)))
    C.device.try_set_default_device(C.device.gpu(gpus[proto.rank()].id()))
    return "gpu:%d" % gpus[proto.rank()].id(), None, "GPU %d" % gpus[proto.rank()].id()


_PRECISION = {
    "bf16": "precision bf16 is not supported by CNTK 2.7 (float32, float64 or float16 only)",
    "tf32": "precision tf32 is not supported by CNTK 2.7 (it has no TF32 switch)",
    "fp16": "precision fp16 is not implemented in dltop's CNTK runner",
}


def _check_precision(spec, device):
    precision = spec["precision"]
    if precision in ("fp16", "tf32") and device == "cpu":
        raise proto.Unsupported("precision %s needs a GPU (the CNTK CPU run supports fp32)"
                                % precision)
    if precision in _PRECISION:
        raise proto.Unsupported(_PRECISION[precision])


def _feed(spec, name, world, evaluates):
    """The run's batches: :class:`cntk_data.Synthetic` or :class:`cntk_data.Real`."""
    per_device = int(spec["per_device_batch"])
    if spec["data"] != "real":
        return cntk_data.Synthetic(name, per_device, int(spec["seed"]) + 1000 * proto.rank(),
                                   host=spec.get("data_loader") == "host",
                                   input_size=spec.get("input_size"))
    import datasets

    split = datasets.real_split(name, spec["data_dir"], spec.get("input_size"),
                                need_test=evaluates)
    return cntk_data.Real(name, split, spec, per_device, proto.rank() if world > 1 else 0)


def _check_mode(spec, world):
    if spec.get("mode") == "inference" and world > 1:
        raise proto.Unsupported("inference on %s:%d: CNTK's data parallelism is a training "
                                "learner; time inference on one process (cpu:N or gpu:1)"
                                % (spec["device"]["kind"], world))


def run(spec, reporter):
    inject = (spec.get("options") or {}).get("inject")
    pinned = proto.pin(spec)
    device, threads, device_name = _device(spec)
    world = _world(spec)
    # Same initial weights on every rank; data differs.
    C.cntk_py.set_fixed_random_seed(int(spec["seed"]) + 1)
    name = spec["model"]
    reporter.hello("cntk", C.__version__.strip(), device, threads, device_name=device_name,
                   blas="mklml", cntk_cpu_threads=C.cntk_py.get_max_num_cputhreads(),
                   cpu_affinity=pinned, world_size=world,
                   # MKL-ML 2018 takes slow non-AVX paths on AMD CPUs unless this is 5.
                   mkl_debug_cpu_type=os.environ.get("MKL_DEBUG_CPU_TYPE"))
    model, loss, x, y = cntk_models.build(name, spec.get("input_size"))
    reporter.model(cntk_models.param_count(model), model_catalog.flops_for_mode(
        cntk_models.training_flops_per_sample(name, model), spec.get("mode")))
    if inject == "oom":
        raise MemoryError("injected allocation failure (inject = \"oom\")")
    _check_precision(spec, device)
    _check_mode(spec, world)
    inference = spec.get("mode") == "inference"
    feed = _feed(spec, name, world, spec.get("eval_every") is not None and not inference)
    try:
        if inference:
            return cntk_train.infer(spec, reporter, model, x, feed, device)
        trainer = C.Trainer(model, (loss, None),
                            [cntk_learn.learner(spec, model.parameters, world)])
        n = cntk_train.train(spec, reporter, trainer, model, loss, x, y, feed, world,
                                 device)
    finally:
        feed.close()
    if world > 1:
        C.Communicator.finalize()
    return n


if __name__ == "__main__":
    proto.main(run)
