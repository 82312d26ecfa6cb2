"""A ``dltop serve`` process for tests: started, its URL (with the token) read from what it
printed, stopped with SIGINT; and a database for it to show."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import psutil

from dltop.jobs import campaign
from dltop.procs import process_start_time
from dltop.profiles.loader import parse
from dltop.store import Store, connect

PROFILE = """
name = "serve-demo"
[defaults]
iterations = 20
warmup = 5
[[matrix]]
frameworks = ["torch"]
models = ["fcn-r", "alexnet-r", "resnet-56"]
batch_sizes = [64]
devices = ["cpu:1", "cpu:2"]
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def seed(tmp_path: Path, engine_pid: int) -> Path:
    """A campaign: one run ok, one crashed, one running (12 of 25), three queued."""
    db_path = tmp_path / "serve.db"
    store = Store(connect(db_path))
    plan = campaign.preflight([parse(PROFILE, "serve-demo.toml", "serve-demo")], 0, False)
    cid, queued = campaign.create(store, plan, ["dltop", "run", "serve-demo.toml"])
    ids = [q.job_id for q in queued]
    for k, status in ((0, "ok"), (1, "crashed")):
        rid = store.start_run(ids[k], cid, 1, "", 64)
        store.finish_run(rid, ids[k], status, {
            "median_s": 0.05 * (k + 1), "samples_per_s": 1280.0 / (k + 1), "cv": 0.01,
            "n_iterations": 20, "error_message": "boom" if status == "crashed" else None})
    rid = store.start_run(ids[2], cid, 1, "", 64)
    store.add_iterations(rid, [{"idx": i, "seconds": 0.1 + 0.01 * (i % 4), "samples": 64,
                                "warmup": int(i < 5), "loss": 2.0} for i in range(12)])
    with store.db.conn:
        store.db.execute("update campaigns set status = 'running', engine_pid = ?, "
                         "engine_start_time = ?",
                         [engine_pid, process_start_time(engine_pid)])
    store.db.conn.close()
    return db_path


def tuis_of(db: Path) -> list[psutil.Process]:
    """``dltop tui`` processes showing ``db`` (the ones the server started)."""
    out = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        cmd = p.info["cmdline"] or []
        if "tui" in cmd and str(db) in cmd:
            out.append(p)
    return out


@dataclass
class Served:
    """A running ``dltop serve``."""

    proc: subprocess.Popen[str]
    url: str
    """The URL it printed, token included."""
    port: int
    token: str
    printed: str
    """Its first line on stdout."""
    log: Path
    """Its stderr."""

    def logged(self) -> str:
        return self.log.read_text()


@contextmanager
def serving(db: Path, log: Path, wait_until: Callable[..., None], *args: str
            ) -> Iterator[Served]:
    """``dltop serve --db db --port P args...`` until the block ends (then SIGINT)."""
    port = free_port()
    with log.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "dltop", "serve", "--db", str(db), "--port", str(port),
             *args], stdout=subprocess.PIPE, stderr=err, text=True, start_new_session=True)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()  # the URL is printed before the server binds
        url = first.split(" at ", 1)[-1].strip()
        assert url.startswith(f"http://127.0.0.1:{port}/?token="), (first, log.read_text())
        token = parse_qs(urlsplit(url).query)["token"][0]
        wait_until(lambda: listening(port) or proc.poll() is not None, 60,
                   "dltop serve to listen")
        assert proc.poll() is None, log.read_text()
        yield Served(proc, url, port, token, first, log)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
