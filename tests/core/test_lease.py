"""The host-wide device lease with real processes (milliseconds), and the resume race."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dltop.jobs import lease
from dltop.jobs.foreign import is_runner_argv, sharing_runners
from dltop.jobs.lease import DeviceLease, device_names

HOLD = textwrap.dedent("""
    import sys, time
    from dltop.jobs.lease import DeviceLease
    held = DeviceLease(sys.argv[2:], {"campaign": 7, "name": "other", "db": "x.db"},
                       __import__("pathlib").Path(sys.argv[1]))
    assert held.poll() is None and not held.unavailable
    print("held", flush=True)
    time.sleep(60)
""")


WAIT = textwrap.dedent("""
    import sys, time
    from dltop.jobs.lease import DeviceLease
    waits = DeviceLease(sys.argv[3:], {"campaign": int(sys.argv[2]), "name": "w", "db": "w.db"},
                        __import__("pathlib").Path(sys.argv[1]))
    print(waits.poll(), flush=True)
    time.sleep(60)
""")


def hold(directory: Path, *names: str) -> subprocess.Popen[str]:
    """Another process holding ``names`` until killed."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(directory), *names],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "held\n"
    return proc


def try_once(directory: Path, name: str) -> str | None:
    """One poll of a lease of ``name``, then released (its ticket too): busy or None."""
    probe = DeviceLease([name], {}, directory)
    try:
        return probe.poll()
    finally:
        probe.release()


def queue_up(directory: Path, campaign: int, *names: str) -> subprocess.Popen[str]:
    """Another process waiting in line for ``names`` (one poll: it holds its ticket)."""
    proc = subprocess.Popen([sys.executable, "-c", WAIT, str(directory), str(campaign), *names],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() != "None\n"
    return proc


def test_names_are_in_one_global_order() -> None:
    assert device_names([1, 0], [3, 0, 3]) == ("cpu-0", "cpu-3", "gpu-0", "gpu-1")
    assert DeviceLease(["gpu-0", "cpu-10", "cpu-2"], {}, Path("/x")).names == (
        "cpu-2", "cpu-10", "gpu-0")


def test_a_device_held_by_another_process_is_busy_until_it_dies(tmp_path: Path) -> None:
    other = hold(tmp_path, "cpu-0")
    mine = DeviceLease(["cpu-0"], {"campaign": 1}, tmp_path)
    try:
        assert mine.poll() == "cpu-0" and not mine.complete
        who = mine.holder_of("cpu-0")
        assert "campaign 7 `other`" in who and f"pid {other.pid}" in who
    finally:
        other.send_signal(signal.SIGKILL)
        other.wait()
    # The kernel dropped the dead holder's lock: nothing stale to clean up.
    assert mine.poll() is None and mine.complete and mine.unavailable is None
    assert json.loads((tmp_path / "cpu-0.lock").read_text())["campaign"] == 1
    mine.release()
    assert DeviceLease(["cpu-0"], {}, tmp_path).poll() is None  # released


def test_locks_are_kept_while_the_rest_are_awaited(tmp_path: Path) -> None:
    other = hold(tmp_path, "cpu-1")
    try:
        whole = DeviceLease(["cpu-0", "cpu-1"], {}, tmp_path)
        assert whole.poll() == "cpu-1"
        # cpu-0 stays taken by the waiting lease: a packing engine cannot keep it
        # busy forever and starve the engine that waits for the whole host.
        assert try_once(tmp_path, "cpu-0") == "cpu-0"
    finally:
        other.kill()
        other.wait()
    assert whole.poll() is None and len(whole.fds) == 2


def test_a_child_that_inherits_the_locks_keeps_the_devices_leased(tmp_path: Path) -> None:
    mine = DeviceLease(["gpu-0"], {}, tmp_path)
    assert mine.poll() is None
    # An orphaned runner (its engine killed) goes on using the device.
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                             pass_fds=mine.fds)
    try:
        mine.release()
        assert try_once(tmp_path, "gpu-0") == "gpu-0"
    finally:
        child.kill()
        child.wait()
    assert DeviceLease(["gpu-0"], {}, tmp_path).poll() is None


def test_the_shared_directory_and_files_are_usable_by_every_user(tmp_path: Path) -> None:
    d = tmp_path / "shared"
    held = DeviceLease(["cpu-0"], {}, d)
    assert held.poll() is None
    assert stat.S_IMODE(d.stat().st_mode) == 0o1777
    assert stat.S_IMODE((d / "cpu-0.lock").stat().st_mode) == 0o666


def test_a_symlink_planted_in_the_directory_is_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious")
    d = tmp_path / "locks"
    d.mkdir()
    (d / "cpu-0.lock").symlink_to(victim)
    held = DeviceLease(["cpu-0"], {}, d)
    assert held.poll() is None and held.unavailable and "cpu-0.lock" in held.unavailable
    assert victim.read_text() == "precious"


def test_an_unusable_directory_means_no_lease_and_says_why(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    held = DeviceLease(["cpu-0"], {}, tmp_path / "file" / "locks")
    assert held.poll() is None and held.complete and held.fds == ()
    assert held.unavailable and "lock directory" in held.unavailable


def test_lock_dir_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(lease.LOCK_DIR_ENV, "/somewhere")
    assert lease.lock_dir() == Path("/somewhere")
    monkeypatch.delenv(lease.LOCK_DIR_ENV)
    assert lease.lock_dir() == Path("/tmp/dltop-locks")


def test_wait_for_reports_the_holder_and_gives_up_on_stop(tmp_path: Path) -> None:
    other = hold(tmp_path, "cpu-0")
    told: list[str] = []

    async def go() -> bool:
        stop = asyncio.Event()

        async def busy(what: str) -> None:
            told.append(what)
            stop.set()

        return await lease.wait_for(DeviceLease(["cpu-0"], {}, tmp_path), stop, busy, 0.01)

    try:
        assert asyncio.run(go()) is False
    finally:
        other.kill()
        other.wait()
    assert len(told) == 1 and told[0].startswith("cpu 0: 1st in line; cpu-0 held by campaign 7 "
                                                 "`other`"), told


FAKE_RUNNER = "import time; time.sleep(60)"


def test_other_engines_runners_on_our_cpus_are_found(tmp_path: Path) -> None:
    script = tmp_path / "runners" / "child" / "torch_runner.py"
    script.parent.mkdir(parents=True)
    script.write_text(FAKE_RUNNER)
    assert is_runner_argv(["python", str(script), "spec.json"])
    assert not is_runner_argv(["python", "train.py"])
    # Started by an intermediate process that exits, as another engine's runner is
    # not our child.
    out = subprocess.run([sys.executable, "-c",
                          "import subprocess, sys; print(subprocess.Popen([sys.executable, "
                          f"{str(script)!r}, 'spec.json'], start_new_session=True, "
                          "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).pid)"],
                         capture_output=True, text=True, check=True)
    pid = int(out.stdout)
    try:
        cpu = sorted(os.sched_getaffinity(pid))[0]
        assert pid in sharing_runners([cpu], [])
        assert pid in sharing_runners(None, [])
        assert pid not in sharing_runners([], [0])  # it has no GPU
    finally:
        os.kill(pid, signal.SIGKILL)


def test_a_run_leases_its_devices_when_packing_else_the_whole_host() -> None:
    from dltop.jobs.allocator import Allocation, DeviceAllocator

    lone = DeviceAllocator(2, [0, 1, 2], pack=False)
    packs = DeviceAllocator(2, [0, 1, 2], pack=True)
    assert lease.run_devices(Allocation((), (0,)), lone) == (
        "cpu-0", "cpu-1", "cpu-2", "gpu-0", "gpu-1")
    assert lease.run_devices(Allocation((), (2,)), packs) == ("cpu-2",)
    assert lease.run_devices(Allocation((1,), None), packs) == ("gpu-1",)
    assert lease.run_devices(Allocation((), None, exclusive=True), packs) == (
        "cpu-0", "cpu-1", "cpu-2")


def test_a_later_waiter_defers_to_an_earlier_live_one_until_it_dies(tmp_path: Path) -> None:
    holder = hold(tmp_path, "cpu-0")
    first = queue_up(tmp_path, 8, "cpu-0", "cpu-1")
    try:
        mine = DeviceLease(["cpu-1"], {"campaign": 9}, tmp_path)
        # cpu-1 is free, but the earlier waiter wants it too: no jumping the line.
        assert mine.poll() == "cpu-1" and mine.fds == ()
        assert mine.waiting_text("cpu-1") == (
            f"cpu 1: 2nd in line behind campaign 8 `w` (pid {first.pid}, user "
            f"{lease._user()}, db w.db)")
        # A waiter for other devices is not held up by the line.
        assert DeviceLease(["cpu-2"], {}, tmp_path).poll() is None
        first.kill()
        first.wait()
        # The dead waiter's ticket is removed by the next poll: its place is free.
        assert mine.poll() is None and len(mine.fds) == 1
        assert sorted(p.name for p in (tmp_path / "tickets").iterdir()) == ["counter"]
    finally:
        for p in (holder, first):
            p.kill()
            p.wait()


def test_the_first_in_line_says_who_holds_the_device(tmp_path: Path) -> None:
    holder = hold(tmp_path, "cpu-1")
    try:
        mine = DeviceLease(["cpu-0", "cpu-1", "gpu-0"], {"campaign": 2}, tmp_path)
        assert mine.poll() == "cpu-1"
        text = mine.waiting_text("cpu-1")
        assert text.startswith("cpu 0-1, gpu 0: 1st in line; cpu-1 held by campaign 7 `other`")
    finally:
        holder.kill()
        holder.wait()
    assert mine.poll() is None
    mine.release()
    assert not list((tmp_path / "tickets").glob("*.json")), "the ticket outlived the wait"


def test_a_ticket_of_a_reused_pid_is_stale(tmp_path: Path) -> None:
    from dltop.jobs import tickets

    # Our own live pid, but recorded with another start time: the waiter that wrote
    # it died and the pid went to another process.
    stale = tickets.take(tmp_path, ["cpu-0"], {"campaign": 4})
    path = tmp_path / "tickets" / f"{stale.number}.json"
    body = json.loads(path.read_text())
    path.write_text(json.dumps({**body, "start_time_s": body["start_time_s"] - 100}))
    mine = DeviceLease(["cpu-0"], {}, tmp_path)
    assert mine.poll() is None and not path.exists()
    mine.release()
    assert tickets.take(tmp_path, ["cpu-0"], {}).number > stale.number + 1, \
        "numbers go on from the counter"


def test_devices_and_places_read_as_words() -> None:
    from dltop.jobs.tickets import describe_devices, ordinal

    assert describe_devices(["cpu-0", "cpu-1", "cpu-3", "gpu-2"]) == "cpu 0-1,3, gpu 2"
    assert [ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 102)] == [
        "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "102nd"]


@pytest.fixture(scope="module")
def module_lock_dir() -> str | None:
    # What a module-scoped fixture that starts an engine would lease in.
    return os.environ.get(lease.LOCK_DIR_ENV)


def test_module_fixtures_lease_in_a_private_directory(module_lock_dir: str | None,
                                                      private_lock_dir: str) -> None:
    assert module_lock_dir is not None and Path(module_lock_dir) != lease.DEFAULT_LOCK_DIR
    assert module_lock_dir != private_lock_dir  # the per-test one stays per test


# packed runs take any free device of their kind (issue 38) ---------------------------
def flocked(directory: Path, name: str) -> bool:
    """Whether some open file holds ``name``'s lock (a raw probe: no ticket, no line)."""
    import fcntl

    fd = os.open(directory / f"{name}.lock", os.O_RDONLY | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def test_an_any_of_lease_takes_a_free_device_not_the_one_named(tmp_path: Path) -> None:
    from dltop.jobs.allocator import Allocation

    other = hold(tmp_path, "cpu-0")
    mine = DeviceLease(["cpu-0", "cpu-1"], {"campaign": 1}, tmp_path, any_of=1)
    try:
        assert mine.poll() is None and mine.complete and mine.held == ("cpu-1",)
        assert mine.bound(Allocation((), (0,))) == Allocation((), (1,))
        assert flocked(tmp_path, "cpu-1")  # really locked
    finally:
        mine.release()
        other.kill()
        other.wait()


def test_an_any_of_lease_holds_all_or_nothing(tmp_path: Path) -> None:
    from dltop.jobs.allocator import Allocation

    other = hold(tmp_path, "gpu-1")
    mine = DeviceLease(["gpu-0", "gpu-1", "gpu-2"], {}, tmp_path, any_of=3)
    try:
        assert mine.poll() == "gpu-1" and not mine.complete and mine.held == ()
        assert not flocked(tmp_path, "gpu-0")  # no part of it held while it waits
        assert "any 3 of gpu 0-2: 1st in line; gpu-1 held by campaign 7" in \
            mine.waiting_text("gpu-1")
        assert mine.bound(Allocation((0, 1, 2), None)) == Allocation((0, 1, 2), None)
    finally:
        mine.release()
        other.kill()
        other.wait()


def test_an_any_of_waiter_keeps_its_place_in_line(tmp_path: Path) -> None:
    holder = hold(tmp_path, "cpu-1")
    earlier = queue_up(tmp_path, 3, "cpu-0", "cpu-1")  # waits for both; cpu-1 is held
    mine = DeviceLease(["cpu-0", "cpu-1"], {}, tmp_path, any_of=1)
    try:
        # cpu-0 is free, but the earlier waiter wants it: first come, first served
        assert mine.poll() == "cpu-0" and mine.held == ()
        earlier.kill()
        earlier.wait()
        assert mine.poll() is None and mine.held == ("cpu-0",)
    finally:
        mine.release()
        for p in (earlier, holder):
            p.kill()
            p.wait()


def test_a_packed_run_leases_any_devices_of_its_kind() -> None:
    from dltop.jobs.allocator import Allocation, DeviceAllocator

    packed = DeviceAllocator(2, (0, 2, 1, 3), pack=True)
    cpu = lease.run_lease(("cpu-2",), Allocation((), (2,)), packed, {})
    assert cpu.any_of == 1 and cpu._order == ("cpu-0", "cpu-2", "cpu-1", "cpu-3")
    gpu = lease.run_lease(("gpu-1",), Allocation((1,), None), packed, {})
    assert gpu.any_of == 1 and gpu.names == ("gpu-0", "gpu-1")
    # exactly what was named: a lone engine's whole host, an unpinned run, a Slurm job
    alone = DeviceAllocator(2, (0, 1), pack=False)
    names = lease.run_devices(Allocation((), (0,)), alone)
    assert lease.run_lease(names, Allocation((), (0,)), alone, {}).any_of is None
    wide = Allocation((), None, exclusive=True)
    assert lease.run_lease(("cpu-0", "cpu-1"), wide, packed, {}).any_of is None
    assert lease.run_lease((), Allocation((), (0,)), packed, {}).names == ()
