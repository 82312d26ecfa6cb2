"""The commands and scripts that make a run a Slurm job (no cluster needed).

One host gives one Slurm node, so what nodes > 1 generates is checked here as text
(and by bash -n); that torchrun's c10d rendezvous joins agents on two nodes is the
torchrun two-agent test on 127.0.0.1 (tests/runners), and that TensorFlow's workers
meet through their TF_CONFIG is tests/runners/test_tf_nodes.py (two runners on 127.0.0.1).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from dltop.errors import UserError
from dltop.jobs.executors.slurm_files import SlurmFiles
from dltop.jobs.executors.slurm_query import parse_job
from dltop.jobs.executors.slurm_script import (
    batch_script,
    node_script,
    runner_command,
    sbatch_argv,
    time_limit,
)
from dltop.profiles.jobspec import JobSpec
from dltop.profiles.loader import parse
from dltop.runners.registry import CHILD_DIR

from .cluster import LocalSlurm

PROFILE = """
name = "c"
[defaults]
iterations = 3
timeout_s = 600
executor = "slurm"
[[matrix]]
frameworks = ["{fw}"]
models = ["fcn-r"]
batch_sizes = [8]
devices = ["{device}"]
nodes = [{nodes}]
{slurm}
"""


def job(fw: str = "torch", device: str = "cpu:1", nodes: int = 1, slurm: str = "") -> JobSpec:
    text = PROFILE.format(fw=fw, device=device, nodes=nodes, slurm=slurm)
    (spec,) = parse(text, "c.toml", "c", logical_cores=4).jobs
    return spec


def files(tmp_path: Path) -> SlurmFiles:
    return SlurmFiles(tmp_path, tmp_path / "spec.json", tmp_path / "runner.log")


ARGV = ["/venv/bin/python", "/src/torch_runner.py", "/runs/run-7/spec.json"]


def test_sbatch_argv_carries_nodes_name_output_time_and_the_slurm_table(tmp_path: Path) -> None:
    j = job(device="gpu:2", nodes=2,
            slurm='[slurm]\npartition = "gpu"\naccount = "proj"\ngpus_per_node = 4\n'
                  'extra_args = ["--qos=short", "--begin=now"]')
    argv = sbatch_argv(j, 7, files(tmp_path))
    # the user's options first: dltop's own come later and win
    assert argv[:4] == ["sbatch", "--qos=short", "--begin=now", "--parsable"]
    assert "--nodes=2" in argv and "--job-name=dltop-7" in argv
    assert "--no-requeue" in argv  # dltop's retries make new runs; Slurm's would reuse one
    assert f"--output={tmp_path / 'runner.log'}" in argv and "--open-mode=append" in argv
    assert "--partition=gpu" in argv and "--account=proj" in argv
    assert "--gpus-per-node=4" in argv  # the table's, over the device's 2
    assert argv[-1] == str(tmp_path / "batch.sh")
    # timeout_s = 600: ten minutes plus the margin, unless the table says
    assert "--time=12" in argv and time_limit(j) == "12"
    assert time_limit(job(slurm='[slurm]\ntime = "01:00:00"')) == "01:00:00"


def test_cpu_jobs_ask_for_their_cpus_per_task(tmp_path: Path) -> None:
    assert "--cpus-per-task=2" in sbatch_argv(job(device="cpus:2"), 1, files(tmp_path))
    argv = sbatch_argv(job(device="cpu:2", slurm="[slurm]\ncpus_per_task = 8"), 1,
                       files(tmp_path))
    assert "--cpus-per-task=8" in argv


def test_batch_script_runs_setup_first_then_one_srun_task_per_node(tmp_path: Path) -> None:
    j = job(nodes=2, slurm='[slurm]\nsetup = ["module load cuda/12", "source /env/bin/activate"]')
    text = batch_script(j, 7, files(tmp_path))
    lines = text.splitlines()
    assert lines.index("module load cuda/12") < next(
        i for i, x in enumerate(lines) if x.startswith("exec srun"))
    assert "srun --nodes=2 --ntasks=2 --ntasks-per-node=1 --cpus-per-task=1 --gres=none " \
        "--mem=0 --kill-on-bad-exit=1" in text
    assert text.rstrip().endswith(str(tmp_path / "node.sh"))
    assert "--mpi=" not in text
    cntk = batch_script(job(fw="cntk"), 7, files(tmp_path))  # its runner starts mpiexec
    # the step asks for its CPUs itself (srun no longer inherits them from sbatch)
    inside = batch_script(job(device="cpus:2"), 7, files(tmp_path))
    assert "srun --nodes=1 --ntasks=1 --ntasks-per-node=1 --cpus-per-task=2 --gres=none " \
        "--mem=0 --kill-on-bad-exit=1 --job-name=dltop-7 --export=ALL /bin/bash" in inside
    for script in (text, cntk, inside, node_script(j, ARGV, files(tmp_path))):
        subprocess.run(["bash", "-n"], input=script, text=True, check=True)


def test_one_node_runs_the_runner_as_locally() -> None:
    assert runner_command(job(), ARGV) == " ".join(ARGV)
    assert runner_command(job(device="cpus:2"), ARGV) == " ".join(ARGV)


def test_torch_on_many_nodes_meets_through_c10d_on_the_first_node() -> None:
    cmd = runner_command(job(device="cpus:2", nodes=2), ARGV)
    assert cmd.startswith("/venv/bin/python -m torch.distributed.run --nnodes 2 "
                          "--rdzv-backend c10d --rdzv-endpoint ")
    assert '"$DLTOP_HEAD":$((29500 + SLURM_JOB_ID % 1000))' in cmd
    assert '--rdzv-id "$SLURM_JOB_ID"' in cmd
    assert ("--nproc-per-node 2 --max-restarts 0 --log-dir /runs/run-7/torchrun "
            "/src/torch_runner.py") in cmd
    assert "--standalone" not in cmd


def test_pytorch_and_tensorflow_span_nodes_cntk_does_not() -> None:
    """CNTK's runner starts mpiexec on one host, TensorFlow's cpus:P workers too: refused
    at load; TensorFlow's cpu:N and gpu:N run one worker per node."""
    with pytest.raises(UserError, match=r"cntk runs on one node .*mpiexec"):
        job(fw="cntk", nodes=2)
    with pytest.raises(UserError, match=r"cpus:2 runs on one node .*not built"):
        job(fw="tensorflow", device="cpus:2", nodes=2)
    assert job(fw="tensorflow", device="cpu:2", nodes=2).nodes == 2
    assert job(fw="tensorflow", device="gpu:2", nodes=4).nodes == 4


TF_ARGV = ["/venv/bin/python", "/src/tf_runner.py", "/runs/run-7/spec.json"]


def test_tensorflow_on_many_nodes_gets_tf_config_from_slurm(slurm_env: LocalSlurm,
                                                             tmp_path: Path) -> None:
    """node.sh gives the runner the nodes' addresses (Slurm's node order), DLTOP_RANK =
    SLURM_NODEID and the folder where the nodes exchange their ports, then runs the
    runner as is (no torchrun); the runners' own start (tf_dist.over_nodes, run here by a
    probe for each of the two nodes at once) builds one TF_CONFIG from them; the address
    builder runs here with scontrol's own hostlist expansion."""
    j = job(fw="tensorflow", device="gpu:2", nodes=2)
    assert runner_command(j, TF_ARGV) == " ".join(TF_ARGV)
    text = node_script(j, TF_ARGV, files(tmp_path))
    subprocess.run(["bash", "-n"], input=text, text=True, check=True)
    assert "torch.distributed.run" not in text and "mkfifo" not in text
    assert text.index("export DLTOP_TF_PORTS DLTOP_RANK") < text.index(" ".join(TF_ARGV))
    assert "exec 3>/dev/null" in text  # only the first node reports
    # the same lines, the runner replaced by what it does first, then a print of it
    probe = [sys.executable, "-c", f"import os, sys; sys.path.insert(0, {str(CHILD_DIR)!r}); "
             "import tf_dist; tf_dist.over_nodes(os.environ['DLTOP_TF_PORTS'], "
             "os.environ['DLTOP_NODE_ADDRS'].split(), int(os.environ['DLTOP_RANK'])); "
             "print(os.environ.get('TF_CONFIG', '')); print(os.environ['DLTOP_RANK'])"]
    script = node_script(j, probe, files(tmp_path), agent=False)
    env = {**os.environ, "SLURM_JOB_NODELIST": "gpu[07-08]", "SLURM_JOB_ID": "4242",
           "DLTOP_TF_PORTS_WAIT_S": "30"}
    nodes = [subprocess.Popen(["bash", "-c", script], env={**env, "SLURM_NODEID": str(n)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for n in (1, 0)]
    outs = [p.communicate(timeout=60)[0].splitlines() for p in nodes]
    configs = [json.loads(out[0]) for out in outs]
    workers = configs[0]["cluster"]["worker"]
    assert [c["cluster"]["worker"] for c in configs] == [workers, workers]
    assert [w.split(":")[0] for w in workers] == ["gpu07", "gpu08"]
    assert len({w.split(":")[1] for w in workers}) == 2  # one host here: distinct ports
    assert [(c["task"]["index"], out[1]) for c, out in zip(configs, outs, strict=True)] == [
        (1, "1"), (0, "0")]
    assert sorted(os.listdir(tmp_path / "tf-ports-4242-0")) == ["0", "1"]
    # node 1 alone: node 0's port never comes; TF_CONFIG stays empty, the log says why
    env["SLURM_JOB_ID"], env["DLTOP_TF_PORTS_WAIT_S"] = "4243", "0.5"
    res = subprocess.run(["bash", "-c", script], env={**env, "SLURM_NODEID": "1"},
                         check=True, capture_output=True, text=True)
    assert res.stdout.splitlines() == ["", "1"]
    assert ("node 0 of the job's 2 (SLURM_NODEID) wrote no TensorFlow port into "
            f"{tmp_path}/tf-ports-4243-0 in 0 s") in res.stderr
    # no scontrol on the node: no addresses, TF_CONFIG stays empty, saying why
    env["PATH"] = str(tmp_path)
    res = subprocess.run(["/bin/bash", "-c", script], env={**env, "SLURM_NODEID": "1"},
                         check=True, capture_output=True, text=True)
    assert res.stdout.splitlines() == ["", "1"]
    assert "the nodes' addresses are unknown" in res.stderr


def test_node_script_reports_events_from_the_first_node_only(tmp_path: Path) -> None:
    text = node_script(job(), ARGV, files(tmp_path))
    assert f"exec 3>>{tmp_path / 'events.jsonl'}" in text
    assert "exec 3>/dev/null" in text and "DLTOP_EVENT_FD=3" in text
    # the agent hook: started before the runner, stopped after it, the status kept
    assert text.index("-m dltop agent --out") < text.index(" ".join(ARGV))
    assert 'kill "$DLTOP_AGENT_PID"' in text and text.rstrip().endswith('exit "$status"')


def test_node_script_exits_with_the_runner_status_and_writes_events(tmp_path: Path) -> None:
    argv = [sys.executable, "-c",
            "import os; os.write(int(os.environ['DLTOP_EVENT_FD']), b'{\"v\": 1}\\n');"
            " raise SystemExit(3)"]
    script = node_script(job(), argv, files(tmp_path), agent=False)
    env = {**os.environ, "SLURM_JOB_NODELIST": "localhost", "SLURM_NODEID": "0"}
    done = subprocess.run(["bash", "-c", script], env=env, check=False)
    assert done.returncode == 3
    assert (tmp_path / "events.jsonl").read_text() == '{"v": 1}\n'
    assert (tmp_path / "runner-exit").read_text() == "3\n"  # what --resume goes by


def test_parse_job_reads_scontrol_one_liners() -> None:
    info = parse_job("JobId=12 JobName=dltop-3 JobState=PENDING Reason=BeginTime "
                     "NodeList=(null) ExitCode=0:0 Command=/x/batch.sh")
    assert info["JobState"] == "PENDING" and info["Reason"] == "BeginTime"
    assert info["ExitCode"] == "0:0"


RANK0 = ("import json, os; f = os.environ['DLTOP_EVENT_FIFO']; "
         "fd = os.open(f, os.O_WRONLY) if os.environ['SLURM_NODEID'] == '1' else None; "
         "fd is not None and os.unlink(f); "
         "fd is not None and os.write(fd, b'{\"v\": 1, \"event\": \"done\"}\\n')")


def test_torch_nodes_relay_rank_0s_fifo_wherever_c10d_put_it(
        slurm_env: LocalSlurm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two node.sh on this host as two nodes; the stand-in's rank 0 is on node 1, as c10d
    may decide (the torchrun branch's relay.join opens the FIFO and removes its name)."""
    from dltop.jobs.executors import slurm_script
    monkeypatch.setattr(slurm_script, "runner_command",
                        lambda job, argv: shlex.join([sys.executable, "-c", RANK0]))
    script = node_script(job(device="cpus:1", nodes=2), ARGV, files(tmp_path), agent=False)
    assert "mkfifo -m 600" in script
    procs = [subprocess.Popen(["bash", "-c", script], env={
        **os.environ, "SLURM_NODEID": str(n), "SLURM_JOB_NODELIST": "localhost",
        "SLURM_JOB_ID": "5"}) for n in (0, 1)]
    assert [p.wait(timeout=60) for p in procs] == [0, 0]
    assert (tmp_path / "events.jsonl").read_text() == '{"v": 1, "event": "done"}\n'
    assert not list(tmp_path.glob("*.fifo"))  # both FIFOs gone, no copy left waiting
