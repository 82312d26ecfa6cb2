"""Event relay for runners that hand their ranks to a launcher (mpiexec, torchrun).

Standard library only, valid Python 3.6 (it runs in every framework's interpreter).

A launcher starts its workers with ``subprocess`` and closes inherited
descriptors, so rank 0 cannot write the event pipe the supervisor passed
(``$DLTOP_EVENT_FD``). Instead the runner the supervisor started becomes a
relay: it makes a FIFO (:func:`create`), runs the launcher with
``$DLTOP_EVENT_FIFO`` naming it, and copies rank 0's event lines to its own
event descriptor until the launcher exits (:func:`relay`, or the whole
sequence in :func:`launch`). Each rank calls :func:`join` first thing: it dies
with its parent (the launcher's agent), and rank 0 opens the FIFO as its
event descriptor; the other ranks stay silent.
"""

import json
import os
import select
import shutil
import subprocess
import sys
import tempfile

import dltop_protocol as proto

FIFO_ENV = "DLTOP_EVENT_FIFO"
LAUNCHER_ENV = "DLTOP_LAUNCHER_PID"
PR_SET_PDEATHSIG = 1


def create(directory=None, name="events.fifo", prefix="dltop-relay-"):
    """Make a FIFO (0600) and open its read end: ``(path, read_fd, keep_fd)``.

    ``directory`` None makes a private temporary folder for it (``<prefix>*``).
    ``keep_fd``, a write end of our own, stops reads returning EOF before rank 0
    has opened the FIFO; :func:`relay` closes it once the launcher has exited.
    """
    if directory is None:
        directory = tempfile.mkdtemp(prefix=prefix)
    path = os.path.join(directory, name)
    os.mkfifo(path, 0o600)
    rfd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    keep = os.open(path, os.O_WRONLY)
    return path, rfd, keep


def _write_all(fd, data):
    while data:
        data = data[os.write(fd, data):]


def relay(rfd, keep, out_fd, proc):
    """Copy event lines from the FIFO to ``out_fd`` until ``proc`` ends; the last event name.

    ``proc`` is anything with ``poll()`` (a Popen). ``out_fd`` None writes the
    lines to stderr (a run by hand). Lines are passed on whole, in order.
    """
    buf, last = b"", None
    while True:
        ended = proc.poll() is not None
        if ended and keep is not None:
            os.close(keep)  # from now on EOF means every writer is gone
            keep = None
        if not select.select([rfd], [], [], 0.2)[0]:
            if ended:
                break
            continue
        chunk = os.read(rfd, 65536)
        if not chunk:
            break
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for line in lines:
            try:  # a line too deep to parse is passed on unread: the supervisor refuses it
                if not proto.too_deep(line):
                    last = json.loads(line.decode("utf-8")).get("event")
            except (ValueError, AttributeError):
                pass  # the supervisor counts it as a protocol error
            if out_fd is None:
                sys.stderr.write(line.decode("utf-8", "replace") + "\n")
            else:
                _write_all(out_fd, line + b"\n")
    if keep is not None:
        os.close(keep)
    return last


def launch(cmd, what, directory=None, env=None, prefix="dltop-relay-"):
    """Run a launcher ``cmd`` with a FIFO for rank 0's events and relay them; the exit status.

    ``what`` names the launcher in the error reported when it ends before rank 0
    reported the end of the run (``"torchrun (2 ranks)"``). ``directory``: where
    the FIFO is made (None: a temporary folder ``<prefix>*``, removed afterwards). Returns
    :data:`dltop_protocol.EXIT_OK` when rank 0 reported ``done`` and the
    launcher exited 0, else :data:`dltop_protocol.EXIT_ERROR`.
    """
    tmp = directory is None
    path, rfd, keep = create(directory, prefix=prefix)
    out_fd = os.environ.get("DLTOP_EVENT_FD")
    env = dict(os.environ if env is None else env)
    env.pop("DLTOP_EVENT_FD", None)
    env[FIFO_ENV] = path
    env[LAUNCHER_ENV] = str(os.getpid())
    sys.stdout.write("[dltop] launching %s\n" % " ".join(cmd))
    sys.stdout.flush()
    proc = None
    try:
        proc = subprocess.Popen(cmd, env=env)
        last = relay(rfd, keep, int(out_fd) if out_fd else None, proc)
    finally:
        if proc is None:
            os.close(keep)
        os.close(rfd)
        if tmp:
            shutil.rmtree(os.path.dirname(path), ignore_errors=True)
        else:
            _unlink(path)
    code = proc.wait()
    if last not in ("done", "error"):
        proto.Reporter().error("crash", "%s exited with status %d before rank 0 reported "
                               "the end of the run" % (what, code))
        return proto.EXIT_ERROR
    return proto.EXIT_OK if last == "done" and code == 0 else proto.EXIT_ERROR


def _unlink(path):
    try:
        os.unlink(path)
    except OSError:
        pass


def die_with_parent():
    """Ask the kernel for SIGKILL when our parent dies (Linux); False where it cannot."""
    try:
        import ctypes
        import signal

        return ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL)) == 0
    except (OSError, AttributeError):
        return False


def join(rank, remove_dir=False):
    """In a launcher's rank: die with the parent, report only from rank 0 (to the FIFO).

    Launchers put each rank in a process group (or session) of its own and
    signal that, so a rank cannot stay in the run's group; instead it dies when
    its parent, the launcher or its agent, dies (the supervisor's group kill),
    and it carries the run's token for the supervisor's sweep. Exits when the
    parent or the relaying runner (``$DLTOP_LAUNCHER_PID``) is already gone.
    Rank 0 opens ``$DLTOP_EVENT_FIFO`` as its event descriptor and removes the
    name (and, with ``remove_dir``, its folder) at once: both ends are open.
    """
    parent = os.getppid()
    os.environ["DLTOP_RANK"] = str(rank)
    os.environ.pop("DLTOP_EVENT_FD", None)
    try:
        if not die_with_parent() or os.getppid() != parent or parent == 1:
            os._exit(proto.EXIT_ERROR)
        launcher = os.environ.get(LAUNCHER_ENV)
        if launcher:
            os.kill(int(launcher), 0)  # the relaying runner gone already?
    except (OSError, ValueError):
        os._exit(proto.EXIT_ERROR)
    fifo = os.environ.get(FIFO_ENV)
    if fifo and str(rank) == "0":
        os.environ["DLTOP_EVENT_FD"] = str(os.open(fifo, os.O_WRONLY))
        _unlink(fifo)
        if remove_dir:
            try:
                os.rmdir(os.path.dirname(fifo))
            except OSError:
                pass
