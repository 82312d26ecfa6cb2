"""A real single-node Slurm on 127.0.0.1 for the tests: munged, slurmctld and slurmd.

Everything lives in one temporary directory (configuration, munge key and socket,
state, spool, logs); the daemons run in the foreground as children of the test
process, on free ports, so several worktrees' test sessions never meet. Debian's
``slurm-wlm`` and ``munge`` packages provide the daemons.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "scontrol", "srun")
INSTALL_HINT = "apt-get install -y slurm-wlm munge"
NODE = "dltop-n1"
NODE2 = "dltop-n2"
"""Two nodes on this one host (a slurmd each, on its own port; NodeAddr 127.0.0.1, names
no resolver knows, so whatever dltop connects to must be Slurm's NodeAddr): partition
``debug`` has the first, ``two`` both, for jobs with ``nodes = 2``. (slurmctld refuses a
node named ``localhost`` beside another node of this host.)"""


def missing_daemons() -> list[str]:
    """The Slurm/munge programs this host lacks (an empty list when all are there)."""
    return [name for name in DAEMONS
            if shutil.which(name) is None and not Path("/usr/sbin", name).exists()]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _program(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


def slurm_conf(root: Path, cpus: int, munge_socket: Path) -> str:
    """The cluster's ``slurm.conf``: a node with every CPU in partition ``debug`` (the
    default), a second one-CPU node beside it in partition ``two``; no cgroups, no
    accounting."""
    ctld_port, slurmd_port, slurmd2_port = _free_port(), _free_port(), _free_port()
    return f"""\
ClusterName=dltoptest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={munge_socket}
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd-%n.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
MinJobAge=5
KillWait=5
InactiveLimit=0
SlurmctldTimeout=30
SlurmdTimeout=60
NodeName={NODE} NodeHostname={socket.gethostname()} NodeAddr=127.0.0.1 CPUs={cpus} \
RealMemory=1000 State=UNKNOWN
NodeName={NODE2} NodeHostname={socket.gethostname()} NodeAddr=127.0.0.1 Port={slurmd2_port} \
CPUs=1 RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes={NODE} Default=YES MaxTime=INFINITE State=UP
PartitionName=two Nodes={NODE},{NODE2} Default=NO MaxTime=INFINITE State=UP
PartitionName=closed Nodes={NODE} Default=NO MaxTime=INFINITE State=DOWN
"""


@dataclass
class LocalSlurm:
    """A running single-node cluster; ``env`` points the Slurm clients at it."""

    root: Path
    conf: Path
    env: dict[str, str]
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def run(self, *argv: str, timeout: float = 30.0) -> str:
        """Run a Slurm client against this cluster; its stdout (raises on failure)."""
        done = subprocess.run(argv, env=self.env, capture_output=True, text=True,
                              timeout=timeout, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr}")
        return done.stdout

    def logs(self) -> str:
        """The daemons' log tails, for a failure message."""
        out = []
        for path in sorted((self.root / "log").glob("*.log")):
            out.append(f"--- {path.name}\n" + path.read_text(errors="replace")[-3000:])
        return "\n".join(out)

    def stop(self) -> None:
        """Stop the daemons (slurmd first, munged last) and remove the directory."""
        with contextlib.suppress(Exception):
            for line in self.run("squeue", "-h", "-o", "%i").split():
                subprocess.run(["scancel", line], env=self.env, check=False, timeout=10)
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        shutil.rmtree(self.root, ignore_errors=True)


def start(root: Path, timeout_s: float = 90.0) -> LocalSlurm:
    """Bring the cluster up under ``root`` and wait until its node is idle.

    Raises:
        RuntimeError: a daemon died or the node did not become idle in time (the
            message carries the daemons' logs).
    """
    for sub in ("state", "spool", "log", "munge"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    os.chmod(root / "munge", 0o700)
    key = root / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    os.chmod(key, 0o400)
    sock = root / "munge" / "munge.socket"
    conf = root / "slurm.conf"
    conf.write_text(slurm_conf(root, os.cpu_count() or 1, sock))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    for var in [k for k in env if k.startswith(("SLURM_", "SBATCH_", "SALLOC_", "SRUN_"))]:
        if var != "SLURM_CONF":
            del env[var]
    cluster = LocalSlurm(root, conf, env)
    null = subprocess.DEVNULL
    try:
        cluster.procs.append(subprocess.Popen(
            [_program("munged"), "-F", "-f", f"--socket={sock}", f"--key-file={key}",
             f"--pid-file={root}/munge/munged.pid", f"--log-file={root}/log/munged.log",
             f"--seed-file={root}/munge/munged.seed"],
            stdin=null, stdout=null, stderr=subprocess.STDOUT, start_new_session=True))
        _wait(lambda: sock.exists(), 20.0, cluster, "munged did not open its socket")
        cluster.procs.append(subprocess.Popen(
            [_program("slurmctld"), "-D", "-i", "-f", str(conf)], env=env,
            stdin=null, stdout=null, stderr=null, start_new_session=True))
        for node in (NODE, NODE2):
            cluster.procs.append(subprocess.Popen(
                [_program("slurmd"), "-D", "-N", node, "-f", str(conf)], env=env,
                stdin=null, stdout=null, stderr=null, start_new_session=True))
        _wait(lambda: _node_idle(cluster), timeout_s, cluster, "the node never became idle")
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _node_idle(cluster: LocalSlurm) -> bool:
    for proc in cluster.procs:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited with {proc.returncode}:\n"
                               + cluster.logs())
    try:
        state = cluster.run("sinfo", "-h", "-p", "two", "-N", "-o", "%N %T", timeout=10)
    except (RuntimeError, subprocess.TimeoutExpired):
        return False
    return sorted(state.split()) == sorted([NODE, "idle", NODE2, "idle"])


def _wait(cond: object, timeout_s: float, cluster: LocalSlurm, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if callable(cond) and cond():
            return
        time.sleep(0.3)
    raise RuntimeError(f"local Slurm: {what} within {timeout_s:g} s\n{cluster.logs()}")
