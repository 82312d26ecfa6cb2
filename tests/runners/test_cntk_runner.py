"""The CNTK 2.7 runner as a real child process in its own Python 3.6 environment.

The ``cntk`` marker fails every test here when the environment was never built
(unless ``DLTOP_ALLOW_MISSING=cntk``); the session fixture then checks that the
built environment still works (``dltop.envsetup.setup_cntk`` reuses it).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from dltop import envsetup
from dltop.runners.registry import CHILD_DIR

from .conftest import LazyModule, spec, write_cifar_python, write_mnist

torch_models = LazyModule("dltop.runners.child.torch_models")

# Both CNTK modules on one worker: the session's CNTK environment is then set up once,
# not once per worker and module (under `make test`'s --dist loadgroup).
pytestmark = [pytest.mark.slow, pytest.mark.cntk, pytest.mark.xdist_group("cntk")]

COUNTS = {"fcn-s": 122_194_048, "fcn-r": 14_205_962, "alexnet-s": 61_100_840,
          "alexnet-r": 85_098, "resnet-50": 25_557_032, "resnet-56": 853_018,
          "lstm": 6_182_672, "lenet": 61_706, "vgg16": 138_357_544}


@pytest.fixture(scope="session")
def cntk_env() -> Iterator[envsetup.CntkEnv]:
    try:
        env = envsetup.setup_cntk(envsetup.default_prefix(), log=lambda _line: None)
    except Exception as exc:
        pytest.fail(f"the CNTK environment does not work (dltop.envsetup.setup_cntk): {exc}")
    yield env


def cntk_spec(model: str = "fcn-r", device: str = "cpu:1", **kw: Any) -> dict[str, Any]:
    return spec(model, device, framework="cntk", **kw)


def run_cntk(env: envsetup.CntkEnv, tmp_path: Path, job: dict[str, Any],
             extra_env: dict[str, str] | None = None,
             timeout: float = 300) -> tuple[int, list[dict[str, Any]], str]:
    """Run cntk_runner.py like the supervisor does, under the CNTK interpreter."""
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(job))
    r, w = os.pipe()
    child = env.child_env({**os.environ, "DLTOP_EVENT_FD": str(w), "CUDA_VISIBLE_DEVICES": "",
                           "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", **(extra_env or {})})
    proc = subprocess.Popen([env.python, str(CHILD_DIR / "cntk_runner.py"), str(path)],
                            pass_fds=(w,), env=child, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    os.close(w)
    with os.fdopen(r, "rb") as fh:
        lines = fh.read().splitlines()
    out, _ = proc.communicate(timeout=timeout)
    return proc.returncode, [json.loads(x) for x in lines], out.decode(errors="replace")


def kinds(events: list[dict[str, Any]]) -> list[object]:
    return [e["event"] for e in events]


def unsupported(events: list[dict[str, Any]]) -> str:
    assert events[-1]["event"] == "error" and events[-1]["kind"] == "unsupported", events
    return str(events[-1]["message"])


def test_param_counts_and_flops_match_models_md_and_torch(cntk_env: envsetup.CntkEnv) -> None:
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); import cntk_runner, cntk_models "
            "as M\nout = {}\nfor n in M.NAMES:\n    m = M.build(n)[0]\n"
            "    out[n] = [M.param_count(m), M.training_flops_per_sample(n, m)]\n"
            "print(json.dumps(out))")
    res = subprocess.run([cntk_env.python, "-c", code, str(CHILD_DIR)], capture_output=True,
                         text=True, env=cntk_env.child_env(os.environ), timeout=300)
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert {n: c for n, (c, _) in got.items()} == COUNTS
    for name, (_, flops) in got.items():
        assert flops == torch_models.training_flops_per_sample(name), name


@pytest.mark.parametrize(("name", "size"), [("resnet-50", 32), ("resnet-50", 8),
                                            ("resnet-56", 64)])
def test_input_size_matches_torch(cntk_env: envsetup.CntkEnv, name: str, size: int) -> None:
    # At 32 (and 8) ResNet-50's last stages see 2x2 and 1x1 maps, smaller than a 3x3
    # kernel, which CNTK refuses with pad=True: cntk_models pads those explicitly.
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); import cntk_models as M\n"
            "n, s = sys.argv[2], int(sys.argv[3])\nm, _, x, _ = M.build(n, s)\n"
            "xb, _ = M.synthetic_batch(n, 2, input_size=s)\n"
            "print(json.dumps([M.param_count(m), M.training_flops_per_sample(n, m), "
            "list(x.shape), list(m.eval({x: xb}).shape)]))")
    res = subprocess.run([cntk_env.python, "-c", code, str(CHILD_DIR), name, str(size)],
                         capture_output=True, text=True, env=cntk_env.child_env(os.environ),
                         timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    params, flops, shape, out = json.loads(res.stdout.strip().splitlines()[-1])
    assert params == COUNTS[name] and shape == [3, size, size]
    assert flops == torch_models.training_flops_per_sample(name, input_size=size)
    assert out == [2, torch_models.NUM_CLASSES[name]]


@pytest.mark.parametrize("model", ["fcn-r", "alexnet-r", "resnet-56", "lstm"])
def test_synthetic_run_reports_every_iteration(cntk_env: envsetup.CntkEnv, tmp_path: Path,
                                               model: str) -> None:
    code, events, out = run_cntk(cntk_env, tmp_path, cntk_spec(model, iterations=2, warmup=1))
    assert code == 0, out
    assert kinds(events) == ["hello", "model", "plan", "iter", "iter", "iter", "done"]
    hello = events[0]
    assert hello["framework"] == "cntk" and hello["framework_version"] == cntk_env.cntk_version
    assert hello["threads"] == 1 and hello["cntk_cpu_threads"] == 1
    assert hello["python_version"].startswith("3.6") and hello["device"] == "cpu"
    assert events[1]["param_count"] == COUNTS[model]
    assert [e["warmup"] for e in events if e["event"] == "iter"] == [True, False, False]
    assert all(e["seconds"] > 0 and e["samples"] == 4 and isinstance(e["loss"], float)
               for e in events if e["event"] == "iter")
    assert events[-1]["iterations"] == 2
    assert "[dltop] run 1: cntk" in out


def test_cpu_threads_follow_the_device(cntk_env: envsetup.CntkEnv, tmp_path: Path) -> None:
    code, events, out = run_cntk(cntk_env, tmp_path, cntk_spec(device="cpu:2"),
                                 {"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"})
    assert code == 0, out
    assert events[0]["threads"] == 2 and events[0]["cntk_cpu_threads"] == 2


def test_diverged(cntk_env: envsetup.CntkEnv, tmp_path: Path) -> None:
    code, events, _ = run_cntk(cntk_env, tmp_path,
                               cntk_spec(iterations=4, options={"inject": "nan"}))
    assert code == 3
    assert events[-1]["event"] == "error" and events[-1]["kind"] == "diverged"


def test_injected_oom_and_crash(cntk_env: envsetup.CntkEnv, tmp_path: Path) -> None:
    code, events, _ = run_cntk(cntk_env, tmp_path, cntk_spec(options={"inject": "oom"}))
    assert code == 3 and events[-1]["kind"] == "oom"
    code, events, _ = run_cntk(cntk_env, tmp_path, cntk_spec(options={"inject": "crash"}))
    assert code == 1 and kinds(events) == ["hello", "model", "plan", "iter"]


@pytest.mark.parametrize("precision", ["fp16", "tf32"])
def test_gpu_only_precisions_are_unsupported_on_cpu(cntk_env: envsetup.CntkEnv,
                                                    tmp_path: Path, precision: str) -> None:
    code, events, _ = run_cntk(cntk_env, tmp_path, cntk_spec(precision=precision))
    assert code == 3 and "needs a GPU" in unsupported(events)


def test_bf16_is_unsupported(cntk_env: envsetup.CntkEnv, tmp_path: Path) -> None:
    code, events, _ = run_cntk(cntk_env, tmp_path, cntk_spec(precision="bf16"))
    assert code == 3 and "bf16 is not supported by CNTK" in unsupported(events)


def test_gpu_without_gpu_is_unsupported(cntk_env: envsetup.CntkEnv, tmp_path: Path) -> None:
    code, events, _ = run_cntk(cntk_env, tmp_path, cntk_spec(device="gpu:1"))
    assert code == 3 and "sees no GPU" in unsupported(events)


def test_missing_mpi_libraries_are_reported(cntk_env: envsetup.CntkEnv, tmp_path: Path) -> None:
    bare = envsetup.CntkEnv(cntk_env.python, "/nonexistent", cntk_env.cntk_version)
    code, events, _ = run_cntk(bare, tmp_path, cntk_spec())
    message = unsupported(events)
    assert code == 3 and cntk_env.python in message and "libmpi" in message


def test_real_data(cntk_env: envsetup.CntkEnv, tmp_path: Path) -> None:
    write_mnist(tmp_path, n=10)
    code, events, out = run_cntk(cntk_env, tmp_path, cntk_spec("fcn-r", data="real",
                                                                data_dir=str(tmp_path)))
    assert code == 0, out
    write_cifar_python(tmp_path, n=8)
    code, events, out = run_cntk(cntk_env, tmp_path, cntk_spec("resnet-56", data="real",
                                                                data_dir=str(tmp_path)))
    assert code == 0, out
    words = " ".join(f"w{i % 37}" for i in range(300))
    (tmp_path / "ptb.train.txt").write_text(words + "\n" + words + "\n")
    code, events, out = run_cntk(cntk_env, tmp_path, cntk_spec("lstm", data="real",
                                                                data_dir=str(tmp_path)))
    assert code == 0, out
    code, events, _ = run_cntk(cntk_env, tmp_path, cntk_spec("alexnet-s", data="real",
                                                             data_dir=str(tmp_path)))
    assert code == 3 and "no real data set" in unsupported(events)


def _ranks_alive(spec_path: Path) -> list[int]:
    return [p.pid for p in psutil.process_iter(["cmdline"])
            if str(spec_path) in (p.info["cmdline"] or [])]


def test_data_parallel_under_mpiexec(cntk_env: envsetup.CntkEnv, tmp_path: Path) -> None:
    job = cntk_spec("fcn-r", device="cpus:2", batch_size=8, iterations=2, warmup=1)
    code, events, out = run_cntk(cntk_env, tmp_path, job)
    assert code == 0, out
    assert kinds(events) == ["hello", "model", "plan", "iter", "iter", "iter", "done"]
    assert events[0]["world_size"] == 2 and events[0]["threads"] == 1
    assert all(e["samples"] == 8 for e in events if e["event"] == "iter")
    assert "mpiexec -n 2" in out


def test_data_parallel_worker_crash_is_reported(cntk_env: envsetup.CntkEnv, tmp_path: Path,
                                                wait_until: Any) -> None:
    job = cntk_spec("fcn-r", device="cpus:2", batch_size=8, iterations=3,
                    options={"inject": "crash-rank1"})
    code, events, out = run_cntk(cntk_env, tmp_path, job)
    assert code == 3, out
    assert events[-1]["event"] == "error" and events[-1]["kind"] == "crash"
    wait_until(lambda: not _ranks_alive(tmp_path / "spec.json"), 30, "every rank to end")


def test_killing_the_runner_group_ends_every_rank(cntk_env: envsetup.CntkEnv, tmp_path: Path,
                                                  wait_until: Any) -> None:
    """The supervisor kills the runner's process group; mpiexec's ranks must die too."""
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(cntk_spec("fcn-r", device="cpus:2", batch_size=8,
                                         options={"inject": "hang"})))
    r, w = os.pipe()
    proc = subprocess.Popen([cntk_env.python, str(CHILD_DIR / "cntk_runner.py"), str(path)],
                            pass_fds=(w,), env=cntk_env.child_env({**os.environ,
                                                                   "DLTOP_EVENT_FD": str(w)}),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    os.close(w)
    with os.fdopen(r, "rb") as fh:
        line = b"?"
        while line and b'"event":"iter"' not in line:
            line = fh.readline()
        assert line, "the runner ended before its first iteration"
        assert len(_ranks_alive(path)) >= 2  # launcher plus ranks, hanging
        os.killpg(proc.pid, 9)
    proc.wait()
    wait_until(lambda: not _ranks_alive(path), 30, "every rank to end")
