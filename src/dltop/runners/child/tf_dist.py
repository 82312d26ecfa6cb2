"""TensorFlow ``cpus:P`` data parallel: P ``MultiWorkerMirroredStrategy`` worker processes.

Valid Python 3.6, standard library only: it runs before TensorFlow is imported,
so the workers start importing it while the chief does.

The runner the supervisor started becomes worker 0 (the chief, the only one
that reports events) and starts workers 1..P-1 as its children, in its own
process group, so the supervisor's TERM/KILL of the group and its after-run
sweep reach every worker. Each worker gets ``TF_CONFIG`` (a cluster of P
workers on 127.0.0.1, its task index) and ``DLTOP_RANK``.

Ports: TensorFlow has no rendezvous, every worker's address must be in
``TF_CONFIG`` before any of them starts its gRPC server. The chief binds one
socket per worker to port 0 on every address with ``SO_REUSEPORT`` and keeps
them, unlistening, until the run ends; the workers' servers bind the same ports
with ``SO_REUSEPORT`` too (``TF_GRPC_REUSE_PORT=1``; TensorFlow leaves it off
otherwise). A port is thus never free between being chosen and being served:
no other process can take it, except one of the same user that binds that
very port with ``SO_REUSEPORT`` itself.

Over nodes (``nodes > 1``, the Slurm executor only): Slurm starts one runner per node
with ``DLTOP_RANK`` and the nodes' addresses from ``node.sh``
(``dltop.jobs.executors.slurm_script``); each holds a port of its own the same way and
writes it into ``DLTOP_TF_PORTS``, a folder of the run's on the shared filesystem, then
reads the others' there to build its ``TF_CONFIG`` (:func:`over_nodes`). A port derived
from the job id, as before, was once another test cluster's job's: the worker could not
bind it and the chief trained with that job's worker. A node's failure ends the step
(``srun --kill-on-bad-exit``).

Failures: a worker asks the kernel for SIGKILL when the chief dies
(``PR_SET_PDEATHSIG``). The chief watches its workers from a thread: one that
exits with a non-zero status (or by a signal) while the run goes on makes the
chief report ``crash`` naming it and exit at once, even while its main thread
waits inside a collective that will never complete. The chief's own failure,
which it reports itself, wins over a worker's exit that follows from it
(:meth:`Cluster.end` under the same lock, after a short grace).
"""

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import dltop_protocol as proto

PORTS_WAIT_S = 300.0
"""How long a node waits for every node's port over nodes (``DLTOP_TF_PORTS_WAIT_S``)."""
_HELD = []
"""This node's held port over nodes: open until the process ends."""
GRACE_S = 3.0
"""How long the watcher lets the chief report its own failure after a worker died."""
JOIN_S = 120.0
"""How long the chief waits for the workers to exit after the last step."""


def workers(spec):
    """The number of worker processes of the spec: P for ``cpus:P``, else 1."""
    dev = spec["device"]
    return int(dev["count"]) if dev["kind"] == "cpus" else 1


def nodes(spec):
    """The nodes the job spans (one worker process on each, started by Slurm)."""
    return int(spec.get("nodes") or 1)


def setup(spec, script, spec_path):
    """Before TensorFlow's import: start the workers (chief) or bind to the chief (worker).

    Returns the chief's :class:`Cluster`, or None (a worker, a single-process run, or a
    run over nodes, whose workers Slurm started with their ``TF_CONFIG``).
    """
    world = workers(spec)
    if nodes(spec) > 1 and not os.environ.get("TF_CONFIG") and os.environ.get("DLTOP_TF_PORTS"):
        over_nodes(os.environ["DLTOP_TF_PORTS"], os.environ.get("DLTOP_NODE_ADDRS", "").split(),
                   proto.rank())
    if world < 2 or nodes(spec) > 1:
        return None
    if proto.rank() != 0:
        _bind_to_chief()
        return None
    return Cluster(world, script, spec_path)


def _bind_to_chief():
    """Die with the chief: SIGKILL when it exits; exit now if it is gone already."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # no prctl: the supervisor's group kill and sweep still reach us
    if str(os.getppid()) != os.environ.get("DLTOP_TF_CHIEF_PID"):
        os._exit(proto.EXIT_ERROR)


def _hold_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.bind(("0.0.0.0", 0))  # every address: TF's server binds 0.0.0.0:port
    return s


def over_nodes(folder, addrs, index):
    """Set this node's ``TF_CONFIG``: hold a port, write it as ``folder/INDEX``, wait for
    every node's (``addrs``: their addresses in node order). Each node holds its port
    from before it writes it to the end of its run, so nodes that share a host never
    pick the same. Leaves ``TF_CONFIG`` unset, saying why on stderr, when the addresses
    are unknown or a node's port does not come in time (the runner then fails)."""
    if not addrs:
        sys.stderr.write("dltop: the nodes' addresses are unknown (no scontrol on the node?); "
                         "TF_CONFIG cannot be built\n")
        return
    held = _hold_port()
    _HELD.append(held)
    if not os.path.isdir(folder):
        try:
            os.mkdir(folder, 0o700)
        except OSError:  # another node made it
            pass
    mine = os.path.join(folder, str(index))
    with open(mine + ".tmp", "w") as f:
        f.write("%d\n" % held.getsockname()[1])
    os.rename(mine + ".tmp", mine)  # whole or absent to the nodes that read it
    wait_s = float(os.environ.get("DLTOP_TF_PORTS_WAIT_S") or PORTS_WAIT_S)
    deadline = time.time() + wait_s
    while True:
        ports = []
        for i in range(len(addrs)):
            try:
                with open(os.path.join(folder, str(i))) as f:
                    ports.append(int(f.read()))
            except (OSError, ValueError):
                break
        if len(ports) == len(addrs):
            break
        if time.time() > deadline:
            sys.stderr.write("dltop: node %d of the job's %d (SLURM_NODEID) wrote no TensorFlow "
                             "port into %s in %.0f s; TF_CONFIG cannot be built\n"
                             % (len(ports), len(addrs), folder, wait_s))
            return
        time.sleep(0.1)
    os.environ.update(TF_GRPC_REUSE_PORT="1", TF_CONFIG=tf_config(ports, index, addrs))


def tf_config(ports, index, hosts=None):
    """The ``TF_CONFIG`` value of worker ``index`` in a cluster on ``ports`` of ``hosts``
    (one each, in order; 127.0.0.1 for all by default)."""
    hosts = hosts or ["127.0.0.1"] * len(ports)
    return json.dumps({"cluster": {"worker": ["%s:%d" % (hosts[i], ports[i])
                                              for i in range(len(ports))]},
                       "task": {"type": "worker", "index": index}})


class Cluster(object):
    """The chief's side: held ports, the worker processes and the thread that watches them."""

    def __init__(self, world, script, spec_path):
        self.world = world
        self._held = [_hold_port() for _ in range(world)]
        self.ports = [s.getsockname()[1] for s in self._held]
        base = dict(os.environ, TF_GRPC_REUSE_PORT="1", DLTOP_WORLD=str(world),
                    DLTOP_TF_CHIEF_PID=str(os.getpid()))
        base.pop("DLTOP_EVENT_FD", None)  # only the chief reports
        os.environ.update(TF_CONFIG=tf_config(self.ports, 0), TF_GRPC_REUSE_PORT="1",
                          DLTOP_RANK="0", DLTOP_WORLD=str(world))
        sys.stdout.write("[dltop] TensorFlow cluster of %d workers on 127.0.0.1 ports %s\n"
                         % (world, ",".join(str(p) for p in self.ports)))
        sys.stdout.flush()
        # No start_new_session: the workers stay in the run's process group.
        self.procs = [subprocess.Popen(
            [sys.executable, script, spec_path],
            env=dict(base, DLTOP_RANK=str(i), TF_CONFIG=tf_config(self.ports, i)))
            for i in range(1, world)]
        self._lock = threading.Lock()
        self._ended = False
        self._stop = threading.Event()
        self._reporter = proto.Reporter()
        self._thread = threading.Thread(target=self._watch, name="dltop-tf-workers")
        self._thread.daemon = True
        self._thread.start()

    def _watch(self):
        while not self._stop.wait(0.2):
            for i, proc in enumerate(self.procs, 1):
                code = proc.poll()
                if code is None or code == 0:
                    continue
                # The chief may be failing too (a NaN every worker sees): its report wins.
                if self._stop.wait(GRACE_S):
                    return
                with self._lock:
                    if self._ended:
                        return
                    self._reporter.error("crash", "TensorFlow worker %d of %d (pid %d) %s "
                                         "during the run; its output is in runner.log"
                                         % (i, self.world, proc.pid, _how(code)))
                    sys.stdout.flush()
                    os._exit(proto.EXIT_ERROR)

    def end(self):
        """The chief ends (its last step done, or failing): stop watching the workers."""
        with self._lock:
            self._ended = True
        self._stop.set()
        if threading.current_thread() is not self._thread:
            self._thread.join()

    def dead_worker(self, wait_s=1.0):
        """What ended the first worker that failed (waiting up to ``wait_s``), or None."""
        deadline = time.monotonic() + wait_s
        while True:
            for i, proc in enumerate(self.procs, 1):
                code = proc.poll()
                if code is not None and code != 0:
                    return ("TensorFlow worker %d of %d (pid %d) %s"
                            % (i, self.world, proc.pid, _how(code)))
            if time.monotonic() > deadline:
                return None
            time.sleep(0.05)

    def finish(self):
        """After the chief's last step: wait for every worker; raise if one failed."""
        self.end()
        try:
            for i, proc in enumerate(self.procs, 1):
                try:
                    code = proc.wait(timeout=JOIN_S)
                except subprocess.TimeoutExpired:
                    raise proto.Failed("TensorFlow worker %d of %d (pid %d) did not exit "
                                       "within %d s of the last step"
                                       % (i, self.world, proc.pid, JOIN_S)) from None
                if code != 0:
                    raise proto.Failed("TensorFlow worker %d of %d (pid %d) %s"
                                       % (i, self.world, proc.pid, _how(code)))
        finally:
            for s in self._held:
                s.close()


def _how(code):
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = "signal %d" % -code
        return "was killed by %s" % name
    return "exited with status %d" % code


def _gist(text):
    """The line of a TF error that says what happened (its first line says only where)."""
    lines = [x.strip() for x in text.splitlines() if x.strip()]
    found = [x for x in lines if "aborted by" in x]
    return ((found or lines or [""])[0])[:300]


def end_barrier(ctx, timeout_ms, rank, unavailable):
    """Meet every worker at the run's end barrier (:func:`tf_runner._leaving_together`).

    Worker 0's process holds the coordination service and, over nodes, leaves as soon as
    the barrier passes (its report sent, nothing waits for the others): its service can
    go before another worker's answer is sent, and that worker's barrier then fails
    ``unavailable`` ("Socket closed", seen in CI over two Slurm nodes: the worker exited 3
    and srun terminated worker 0's step, a finished run stored as crashed). Every worker
    had arrived, or worker 0 died: either way worker 0's report and exit status say how
    the run ended, so another worker says so and ends as it would have. Worker 0's own
    failure there is raised."""
    try:
        ctx.wait_at_barrier("dltop-run-end", timeout_ms)
    except unavailable as exc:
        if rank == 0:
            raise
        sys.stderr.write("[dltop] worker %d: worker 0 was gone at the end barrier (%s); the "
                         "run's outcome is worker 0's report\n" % (rank, _gist(str(exc))))


def guarded(run, cluster):
    """``run`` for :func:`dltop_protocol.main`, joined with the workers when there are some."""
    if cluster is None:
        return run

    def chief(spec, reporter):
        try:
            n = run(spec, reporter)
        except (proto.Unsupported, proto.Diverged, MemoryError, KeyboardInterrupt):
            cluster.end()  # our own report, not a worker's exit it causes
            raise
        except Exception as exc:
            cluster.end()
            # TF saw a peer vanish (UnavailableError from a collective): name the worker.
            dead = cluster.dead_worker()
            if dead is None:
                raise
            raise proto.Failed("%s; worker 0 then failed: %s: %s"
                               % (dead, type(exc).__name__, _gist(str(exc)))) from exc
        cluster.finish()
        return n
    return chief
