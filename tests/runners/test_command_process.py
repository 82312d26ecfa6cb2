"""Command jobs: stopping the program, short runs, its own modules, its leftovers, its log.

Real ``dltop run`` processes over the example programs in tests/programs/.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from dltop.runners.registry import CHILD_DIR

from .conftest import RunJob, program

pytestmark = pytest.mark.slow

def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_program_that_never_ends_is_stopped_after_warmup_and_iterations(
        tmp_path: Path, command_job: RunJob, wait_until: Callable[..., None]) -> None:
    truth = tmp_path / "truth"
    pids = tmp_path / "pid"
    prog = ["/bin/sh", "-c", f'echo $$ > {pids}; exec "$@"', "sh",
            *program("cmd_seconds.py", -1, truth)]
    r = command_job(prog, iterations=5, warmup=2, timeout_s=120,
                    iteration_regex=r"took (?P<seconds>[0-9.]+)s")
    assert r.run["status"] == "ok" and r.code == 0, (r.run, r.stderr)
    assert r.run["n_iterations"] == 5 and len(r.seconds) == 7  # nothing past the count
    assert r.run["wall_s"] < 60  # stopped, not timed out
    wait_until(lambda: gone(int(pids.read_text())), 10, "the program to be gone")


def test_fewer_iterations_than_asked_is_short(tmp_path: Path, command_job: RunJob) -> None:
    r = command_job(program("cmd_seconds.py", 5), iterations=10, warmup=2,
                    iteration_regex=r"took (?P<seconds>[0-9.]+)s")
    assert r.run["status"] == "short", r.run
    assert r.run["n_iterations"] == 3 and "3 of 10" in str(r.run["error_message"])
    assert r.code == 4  # a result the user must look at, told apart from a failure (1)
    res = subprocess.run([sys.executable, "-m", "dltop", "export", "--db", str(tmp_path / "d.db"),
                          "--format", "csv"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and ",short 3/10" in res.stdout, res.stdout + res.stderr


def test_a_timeout_stops_the_program_too(tmp_path: Path, command_job: RunJob,
                                         wait_until: Callable[..., None]) -> None:
    pids = tmp_path / "pid"
    prog = ["/bin/sh", "-c", f'echo $$ > {pids}; exec "$@"', "sh",
            *program("cmd_seconds.py", -1)]
    r = command_job(prog, iterations=100000, timeout_s=3,
                    iteration_regex=r"took (?P<seconds>[0-9.]+)s")
    assert r.run["status"] == "timeout", r.run
    assert len(r.seconds) > 2  # what it measured before is kept
    wait_until(lambda: gone(int(pids.read_text())), 10, "the program to be gone")
    # the run's log says what the program last printed (the run detail shows its tail)
    assert "last output lines:\n  step " in str(r.run["log_tail"]), r.run["log_tail"]


def test_a_timeout_of_a_silent_program_says_it_printed_nothing(command_job: RunJob) -> None:
    # a program that is not Python block-buffers its output into a pipe: nothing comes
    r = command_job(["/bin/sleep", "60"], iterations=5, timeout_s=2,
                    iteration_regex=r"took (?P<seconds>[0-9.]+)s")
    assert r.run["status"] == "timeout", r.run
    assert "the program printed nothing" in str(r.run["log_tail"]), r.run["log_tail"]


def test_nan_loss_is_diverged(tmp_path: Path, command_job: RunJob) -> None:
    r = command_job(program("cmd_nan.py", -1), iterations=10, warmup=1,
                    iteration_regex=r"took (?P<seconds>[0-9.]+)s loss (?P<loss>\S+)")
    assert r.run["status"] == "diverged", r.run
    assert "nan" in str(r.run["error_message"]) and len(r.seconds) == 4


def test_nan_loss_through_dltop_report_is_diverged(command_job: RunJob) -> None:
    prog = ("from dltop_report import report\n"
            "for i in range(10): report(0.01, loss=float('nan') if i == 4 else 1.0)\n")
    r = command_job([sys.executable, "-c", prog], iterations=8)
    assert r.run["status"] == "diverged", r.run


@pytest.mark.parametrize("seconds", ["float('nan')", "-1.0", "0", "float('inf')"])
def test_a_bad_helper_time_is_a_noted_protocol_error_not_a_step(command_job: RunJob,
                                                                 seconds: str) -> None:
    prog = ("from dltop_report import report\n"
            f"for i in range(8): report({seconds} if i == 3 else 0.01)\n")
    r = command_job([sys.executable, "-c", prog], iterations=6, warmup=1)
    assert r.run["status"] == "ok" and len(r.seconds) == 7, r.run  # warm-up + 6 of 7 good
    assert r.run["protocol_errors"] == 1 and "seconds" in str(r.run["note"]), r.run


def test_workers_without_the_pipe_report_through_the_fifo(tmp_path: Path,
                                                         command_job: RunJob) -> None:
    # torchrun and accelerate launch close inherited descriptors in their workers: a
    # Trainer's HFCallback there reported nothing ("the command reported no iteration")
    own = tmp_path / "own"
    r = command_job(program("cmd_launcher.py", 2, 6, own), iterations=6, warmup=2)
    # rank 0's 6 steps only (each rank runs every step; rank 1 sends none): 4 of 6
    # measured, where both ranks' 12 would have filled the 8 asked
    assert r.run["status"] == "short" and r.run["n_iterations"] == 4, r.run
    assert len(r.seconds) == 6 and set(r.samples) == {16}
    assert all(0.009 < s < 1.0 for s in r.seconds)
    # each worker held its own file under the pipe's number: nothing written into it
    assert [own.with_suffix(f".{k}").read_bytes() for k in (0, 1)] == [b"", b""]
    assert not list((tmp_path / "d-runs").rglob("report.fifo"))  # removed at the end


def test_the_programs_own_modules_win_over_dltops(tmp_path: Path, command_job: RunJob) -> None:
    # A module named like each of dltop's child modules, in the program's directory and
    # on the user's own PYTHONPATH: the program must get the user's, and dltop_report.
    own, on_path = tmp_path / "prog", tmp_path / "lib"
    own.mkdir()
    on_path.mkdir()
    names = sorted({p.stem for p in CHILD_DIR.rglob("*.py")} - {"dltop_report"})
    assert {"datasets", "torch_models", "dltop_protocol"} <= set(names)
    for i, name in enumerate(names):
        (own if i % 2 else on_path).joinpath(f"{name}.py").write_text("MINE = True\n")
    (own / "train.py").write_text(
        "import importlib\nfrom dltop_report import report\n"
        f"for name in {names!r}:\n"
        "    assert getattr(importlib.import_module(name), 'MINE', False), name\n"
        "for i in range(2): report(0.01)\n")
    r = command_job(["python", "train.py"], cwd="prog", iterations=2, warmup=0,
                    extra=f'env = {{ PYTHONPATH = "{on_path}" }}')
    assert r.run["status"] == "ok", (r.run, r.stderr)
    launch = r.spec["command_launch"]
    assert launch["argv"][0] == launch["executable"] == sys.executable  # bare "python"
    assert "python" in launch["notes"][0] and launch["cwd"] == str(own)


def test_a_grandchild_holding_the_output_open_neither_hangs_nor_survives_the_run(
        tmp_path: Path, command_job: RunJob, wait_until: Callable[..., None]) -> None:
    pidfile = tmp_path / "grandchild"
    r = command_job(program("cmd_grandchild.py", "{total}", "/dev/null", pidfile),
                    iterations=3, warmup=1, timeout_s=100,
                    iteration_regex=r"took (?P<seconds>[0-9.]+)s")
    assert r.run["status"] == "ok" and r.run["wall_s"] < 50, r.run
    pid = int(pidfile.read_text())
    wait_until(lambda: gone(pid), 10, "the setsid grandchild to be killed")


def test_short_after_a_grandchild_kept_the_pipe(tmp_path: Path, command_job: RunJob) -> None:
    # the program ends by itself (short) while its grandchild still holds stdout
    pidfile = tmp_path / "grandchild"
    r = command_job(program("cmd_grandchild.py", 3, "/dev/null", pidfile),
                    iterations=10, warmup=1, timeout_s=100,
                    iteration_regex=r"took (?P<seconds>[0-9.]+)s")
    assert r.run["status"] == "short" and r.run["wall_s"] < 50, r.run


def test_an_output_flood_is_capped_in_runner_log(tmp_path: Path, command_job: RunJob) -> None:
    # 1.5 MiB after each step line; stopped at the third (warm-up 1 + 2)
    r = command_job(program("cmd_flood.py", 4, "/dev/null", 6), iterations=2, warmup=1,
                    iteration_regex=r"took (?P<seconds>[0-9.]+)s")
    assert r.run["status"] == "ok", r.run
    log = Path(r.run["log_path"]).read_bytes()
    assert len(log) < 3.2 * 2**20  # head 1 MiB, at most 2 MiB of tail
    assert b"runner.log capped" in log
    assert b"step 0 took" in log[:4096] and b"step 2 took" in log[-2**20:]


def test_a_crash_note_names_the_last_lines_and_the_log(command_job: RunJob) -> None:
    r = command_job(program("cmd_crash.py"), iterations=5,
                    iteration_regex=r"took (?P<seconds>[0-9.]+)s")
    assert r.run["status"] == "crashed" and r.code == 1
    message = str(r.run["error_message"])
    assert "exited with status 1 after 2 iterations" in message
    assert "CUDA error: device-side assert triggered" in message
    assert "log line 29" in message and "log line 10" not in message  # the last 20
    assert "\x1b" not in message and str(r.run["log_path"]) in message


def test_cwd_defaults_to_the_profile_directory(tmp_path: Path, command_job: RunJob) -> None:
    prog = ("import os\nfrom dltop_report import report\n"
            "open('where', 'w').write(os.getcwd())\nfor i in range({total}): report(0.01)\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    cwd = os.getcwd()
    os.chdir(elsewhere)  # dltop started from another directory
    try:
        r = command_job([sys.executable, "-c", prog], iterations=2, warmup=0)
    finally:
        os.chdir(cwd)
    assert r.run["status"] == "ok", r.run
    assert (tmp_path / "where").read_text() == str(tmp_path)


def test_resume_reaps_the_program_of_a_dead_engines_run(
        tmp_path: Path, profile_text: Any, wait_until: Callable[..., None]) -> None:
    # The program runs in its own process group inside the runner's session: the
    # engine is SIGKILLed, and the resumed engine must kill the program too.
    pids = tmp_path / "pids"
    prog = ("import os, time\n"
            f"open({str(pids)!r}, 'a').write('%d\\n' % os.getpid())\n"
            "for i in range(1000):\n    time.sleep(0.25)\n    try:\n"
            "        print('took 0.25s', flush=True)\n"
            "    except OSError:\n        pass  # its reader is gone: it lives on\n")
    prof = tmp_path / "p.toml"
    prof.write_text(profile_text({
        "frameworks": ["command"], "models": ["m"], "batch_sizes": [8], "devices": ["cpu:1"],
        "warmup": 0, "iterations": 12, "timeout_s": 60, "command": [sys.executable, "-c", prog],
        "iteration_regex": r"took (?P<seconds>[0-9.]+)s"}))
    db = tmp_path / "d.db"
    run = [sys.executable, "-m", "dltop", "run", "--headless", "--no-telemetry", "--db", str(db)]
    engine = subprocess.Popen([*run, str(prof)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    wait_until(pids.exists, 60, "the program to start")
    engine.kill()
    engine.wait()
    first = int(pids.read_text().split()[0])
    assert not gone(first)
    res = subprocess.run([*run, "--resume"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    wait_until(lambda: gone(first), 10, "the first program to be gone")


def test_the_kernel_peak_rss_of_a_program_that_allocates_200_mib(command_job: RunJob) -> None:
    # The program holds 200 MiB for 0.05 s: the 2 Hz tree samples can miss it, the
    # kernel's ru_maxrss (wait4 on the runner, which waits for its program) cannot.
    code = ("import time\nb = b'x' * (200 << 20)\ntime.sleep(0.05)\ndel b\n"
            "for i in range(4):\n    print('took 0.01s', flush=True)\n")
    r = command_job([sys.executable, "-c", code], iterations=3, warmup=1,
                    iteration_regex=r"took (?P<seconds>[0-9.]+)s")
    assert r.run["status"] == "ok", (r.run, r.stderr)
    assert r.run["rss_peak_kernel_bytes"] >= 200 << 20
    assert r.run["gpu_mem_framework_peak_bytes"] is None  # no framework GPU figure on CPU
