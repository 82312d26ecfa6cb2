"""The server a serve run starts (``server = "NAME"``, issue 41 item 5; docs/serving.md).

The ``openai`` runner starts it before its load and stops it after, so the server is a
child of the runner: inside the run's session, cgroup and token like a ``command``
job's program (:mod:`dltop.jobs.supervisor`, :mod:`dltop.jobs.containment`), its CPU
counted as the run's own tree, its GPUs the job's (``CUDA_VISIBLE_DEVICES`` from the
job's allocation, inherited). It leads a process group of its own, so that stopping it
signals the whole group (a server's workers too), TERM then KILL after
:data:`GRACE_S`; should the runner die first, the supervisor's sweep of the run (and a
later engine's ``--resume`` reaping) KILLs it with the rest of the run.

Its stdout and stderr go to ``server.log`` in the run folder, created by the engine
(0600, O_EXCL | O_NOFOLLOW) and opened here without following a link.

Run as a program (``openai_server.py SPEC LOG``: :func:`host`), it is the server a group
of runs shares (``server_scope = "group"``): the engine starts it through its supervisor
(:mod:`dltop.jobs.servergroup`) before the group's first run; it starts the server,
sends a ``server`` event once it is ready, and holds it until the engine's TERM, or until
the engine is gone (it is then stopped all the same). On Slurm it runs in a batch job
of its own (:mod:`dltop.jobs.executors.slurm_group`), its events in a file, and the
engine is gone when its heartbeat file stops changing.
"""

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import dltop_protocol as proto

GRACE_S = 5.0
"""Seconds from TERM to KILL when the server is stopped."""
HOST = "127.0.0.1"
TAIL = 2000
"""Characters of the server's log quoted when it fails to start."""


class ServerFailed(Exception):
    """The server exited before it was ready, or was not ready in time (``setup``)."""


def free_port():
    """A port nobody listens on now (the server binds it a moment later: a race another
    program could win, then the server fails to start and says so in its log)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def fill(template, model, port, devices):
    """The template's words with ``{model}``, ``{port}``, ``{devices}``, ``{host}``."""
    values = {"model": model, "port": port, "devices": devices, "host": HOST}
    return [w.format(**values) for w in shlex.split(template)]


def log_tail(path, limit=TAIL):
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - limit))
            text = f.read().decode("utf-8", "replace")
    except OSError as exc:
        return "(cannot read %s: %s)" % (path, exc)
    return text.strip() or "(empty)"


class Server:
    """One started server: :meth:`start`, :meth:`wait_ready`, :meth:`stop`."""

    def __init__(self, opts, model, log_path):
        self.port = free_port()
        devices = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        self.argv = fill(opts["server_command"], model, self.port, devices)
        self.ready_url = opts.get("server_ready_url",
                                  "http://{host}:{port}/v1/models").format(
                                      host=HOST, port=self.port)
        self.endpoint = opts["endpoint"].format(host=HOST, port=self.port)
        self.timeout_s = float(opts.get("server_timeout_s", 600.0))
        self.log_path = log_path
        self.proc = None
        self.t0 = None

    def start(self):
        fd = os.open(self.log_path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            self.t0 = time.monotonic()
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=fd,
                                         stderr=fd, process_group=0)
        except OSError as exc:
            raise ServerFailed("cannot start server %s: %s" % (self.argv[0], exc)) from None
        finally:
            os.close(fd)

    def wait_ready(self):
        """Poll the readiness URL with back-off until it answers 2xx; the cold start (s).

        Raises:
            ServerFailed: the server exited first, or ``timeout_s`` ran out.
        """
        deadline = self.t0 + self.timeout_s
        delay = 0.05
        while True:
            code = self.proc.poll()
            if code is not None:
                raise ServerFailed(self._failed(
                    "server command exited with status %d before it was ready" % code,
                    " (%s)" % " ".join(self.argv)))
            left = deadline - time.monotonic()
            if left <= 0:
                raise ServerFailed(self._failed("server not ready at %s after %g s "
                                                "(timeout_s)" % (self.ready_url,
                                                                 self.timeout_s)))
            try:
                with urllib.request.urlopen(self.ready_url, timeout=min(5.0, left)) as r:
                    if 200 <= r.status < 300:
                        return time.monotonic() - self.t0
            except (urllib.error.URLError, OSError, ValueError):
                pass
            time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 1.5, 1.0)

    def _failed(self, what, command=""):
        # A run's one-line note is its message's last line: where the log's tail runs
        # over lines, a last line says what failed beside the log's own last line
        # (a traceback's names the cause), not that line alone.
        tail = log_tail(self.log_path)
        lines = tail.splitlines()
        if len(lines) < 2:
            return "%s%s; server.log ends: %s" % (what, command, tail)
        return "%s%s; server.log ends:\n%s\n%s; server.log's last line: %s" % (
            what, command, tail, what, lines[-1].strip())

    def stop(self):
        """TERM the server's group, KILL it after :data:`GRACE_S`; the exit status."""
        if self.proc is None:
            return None
        pgid = self.proc.pid
        _signal(pgid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=GRACE_S)
        except subprocess.TimeoutExpired:
            _signal(pgid, signal.SIGKILL)
            self.proc.wait()
        _signal(pgid, signal.SIGKILL)  # what of its group outlived its leader
        return self.proc.returncode


def _signal(pgid, sig):
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


WATCH_S = 0.2
"""How often a shared server's host looks for its server's exit or its engine's death."""


def host(argv=None):
    """Start the server of ``argv`` = [SPEC, LOG], report it ready, hold it until TERM.

    The ``server`` event carries the endpoint, the cold start and the server's pid; a
    server that fails to start is an ``error`` of kind ``setup`` (its message as a
    runner's). Exits once the server has stopped, or at once should the server exit or
    the engine die (this process is reparented).
    """
    spec_path, log_path = (sys.argv[1:] if argv is None else argv)
    with open(spec_path) as fh:
        spec = json.load(fh)
    reporter = proto.Reporter()
    engine = os.getppid()
    server = Server(spec.get("options") or {}, spec["model"], log_path)
    signal.signal(signal.SIGTERM, _stop_on_term)
    code = 0
    try:
        server.start()
        cold_s = server.wait_ready()
        reporter.emit("server", endpoint=server.endpoint, ready_url=server.ready_url,
                      cold_start_s=cold_s, pid=server.proc.pid, argv=server.argv,
                      # the node it runs on (a group's runs are pinned there), not
                      # a multi-node salloc's whole list
                      nodes=(os.environ.get("SLURMD_NODENAME")
                             or os.environ.get("SLURM_JOB_NODELIST")))
        alive = _Heartbeat(os.environ.get("DLTOP_SERVER_HEARTBEAT"))
        while server.proc.poll() is None and os.getppid() == engine and alive.beating():
            time.sleep(WATCH_S)
        if server.proc.returncode is not None:
            reporter.error("crash", "the shared server exited (status %d)"
                           % server.proc.returncode)
            code = 3
    except ServerFailed as exc:
        reporter.error("setup", str(exc))
        code = 3
    except SystemExit:
        pass
    finally:
        stopped = server.stop()
        sys.stdout.write("[dltop] shared server stopped (exit status %s)\n" % stopped)
        sys.stdout.flush()
    os._exit(code)


HEARTBEAT_LOST_S = 60.0
"""A Slurm group's host stops its server when the engine's heartbeat file has not
changed for this long: the engine on the login host is gone (or cut off)."""
LOST_ENV = "DLTOP_SERVER_HEARTBEAT_LOST_S"
"""Overrides :data:`HEARTBEAT_LOST_S` (a test hook; at least 15 s, three beats): the engine
writes it into the group's job script when its own environment has it."""


def heartbeat_lost_s():
    """:data:`HEARTBEAT_LOST_S`, or :data:`LOST_ENV`'s seconds when they are a number."""
    try:
        return max(15.0, float(os.environ.get(LOST_ENV) or HEARTBEAT_LOST_S))
    except ValueError:
        return HEARTBEAT_LOST_S


class _Heartbeat:
    """The engine's heartbeat file (on Slurm, where the engine is not this host's parent):
    the engine rewrites it every few seconds; a change is timed on this node's own clock.
    Its content is read, not its mtime: a shared filesystem's open revalidates the data
    (NFS's close-to-open), where a cached mtime may lag by a minute."""

    def __init__(self, path):
        self._path, self._seen = path, None
        self._at = self._read_at = time.monotonic()
        self._lost_s = heartbeat_lost_s()

    def beating(self):
        now = time.monotonic()
        if not self._path or now - self._read_at < 1.0:
            return True
        self._read_at = now
        try:
            with open(self._path, "rb") as f:
                beat = f.read()
        except OSError:
            beat = None
        if beat != self._seen:
            self._seen, self._at = beat, now
        return now - self._at < self._lost_s


def _stop_on_term(signum, frame):
    raise SystemExit(128 + signum)


if __name__ == "__main__":
    host()
