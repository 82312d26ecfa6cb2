"""tf_dist.py without TensorFlow: the held ports, TF_CONFIG, and worker 0's watcher with
stand-in workers (real processes that exit as told)."""

from __future__ import annotations

import errno
import json
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import tf_dist

from dltop.runners.registry import CHILD_DIR


def test_a_held_port_is_refused_to_others_and_shared_with_a_reuseport_server() -> None:
    held = tf_dist._hold_port()
    port = held.getsockname()[1]
    try:
        plain = socket.socket()
        with pytest.raises(OSError) as err:
            plain.bind(("127.0.0.1", port))  # what a port picked and closed would let happen
        assert err.value.errno == errno.EADDRINUSE
        plain.close()
        server = socket.socket()  # what TF's gRPC server does with TF_GRPC_REUSE_PORT=1
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        server.bind(("0.0.0.0", port))
        server.listen()
        client = socket.create_connection(("127.0.0.1", port), timeout=5)
        conn, _ = server.accept()  # the listener, not the held socket, gets the connection
        conn.close()
        client.close()
        server.close()
    finally:
        held.close()


def test_tf_config_names_every_worker_and_this_task() -> None:
    conf = json.loads(tf_dist.tf_config([4001, 4002, 4003], 2))
    assert conf == {"cluster": {"worker": ["127.0.0.1:4001", "127.0.0.1:4002",
                                           "127.0.0.1:4003"]},
                    "task": {"type": "worker", "index": 2}}


def chief(tmp_path: Path, worker_code: str, chief_code: str) -> subprocess.CompletedProcess[str]:
    """Worker 0 in a process of its own (the watcher ends it with ``os._exit``), its worker
    a script that runs ``worker_code``; events go to stderr (no event pipe)."""
    worker = tmp_path / "worker.py"
    worker.write_text(worker_code)
    code = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(CHILD_DIR)!r})
        import dltop_protocol as proto
        import tf_dist
        cluster = tf_dist.Cluster(2, {str(worker)!r}, "spec.json")
        """) + textwrap.dedent(chief_code)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, cwd=tmp_path)


def events(res: subprocess.CompletedProcess[str]) -> list[dict[str, object]]:
    return [json.loads(x) for x in res.stderr.splitlines() if x.startswith("{")]


@pytest.mark.slow  # over 1.5 s on an idle 2-core machine
def test_the_watcher_reports_a_worker_that_died_while_worker_0_is_stuck(
        tmp_path: Path) -> None:
    res = chief(tmp_path, "import os; os._exit(7)\n", "time.sleep(50)\n")
    assert res.returncode == 3
    (error,) = events(res)
    assert error["event"] == "error" and error["kind"] == "crash"
    assert "TensorFlow worker 1 of 2" in str(error["message"])
    assert "exited with status 7" in str(error["message"])


def test_worker_0s_own_failure_wins_over_the_worker_exit_it_causes(tmp_path: Path) -> None:
    res = chief(tmp_path, "import os; os._exit(3)\n", """
        def run(spec, reporter):
            time.sleep(1)  # the worker is gone already, within the watcher's grace
            raise proto.Diverged("non-finite loss nan at iteration 2")
        tf_dist.guarded(run, cluster)({}, proto.Reporter())
        """)
    assert res.returncode == 1  # the Diverged propagated: nothing reported for the worker
    assert events(res) == []
    assert "Diverged" in res.stderr


def test_worker_0_fails_the_run_when_a_worker_ends_badly_after_the_last_step(
        tmp_path: Path) -> None:
    res = chief(tmp_path, "import time, os; time.sleep(0.5); os._exit(5)\n", """
        def run(spec, reporter):
            return 4
        try:
            tf_dist.guarded(run, cluster)({}, proto.Reporter())
        except proto.Failed as exc:
            print("FAILED", exc)
        """)
    assert res.returncode == 0, res.stderr
    assert "FAILED TensorFlow worker 1 of 2" in res.stdout
    assert "exited with status 5" in res.stdout


def test_workers_get_their_own_tf_config_and_no_event_pipe(tmp_path: Path) -> None:
    res = chief(tmp_path, textwrap.dedent("""
        import json, os
        with open("seen.json", "w") as fh:
            json.dump({k: os.environ.get(k) for k in ("TF_CONFIG", "DLTOP_RANK",
                       "DLTOP_EVENT_FD", "TF_GRPC_REUSE_PORT", "DLTOP_TF_CHIEF_PID")}, fh)
        """), """
        print("PID", __import__("os").getpid())
        print("CHIEF", __import__("os").environ["TF_CONFIG"])
        tf_dist.guarded(lambda spec, reporter: 1, cluster)({}, proto.Reporter())
        """)
    assert res.returncode == 0, res.stderr
    seen = json.loads((tmp_path / "seen.json").read_text())
    pid = res.stdout.split("PID ")[1].split()[0]
    chief_conf = json.loads(res.stdout.split("CHIEF ")[1].splitlines()[0])
    worker_conf = json.loads(seen["TF_CONFIG"])
    assert chief_conf["task"]["index"] == 0 and worker_conf["task"]["index"] == 1
    assert chief_conf["cluster"] == worker_conf["cluster"]
    assert seen["DLTOP_RANK"] == "1" and seen["DLTOP_EVENT_FD"] is None
    assert seen["TF_GRPC_REUSE_PORT"] == "1" and seen["DLTOP_TF_CHIEF_PID"] == pid
