"""CPU energy from a fake powercap tree: sums, wraps, faults, permissions, the run's window."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dltop.telemetry.fake import FakeGpuBackend
from dltop.telemetry.rapl import ROOT_ENV, RaplReader
from dltop.telemetry.runstats import RunAccumulator
from dltop.telemetry.sampler import Sampler

S = 1_000_000_000
RANGE_UJ = 262_143_328_850  # a real package's max_energy_range_uj


def zone(root: Path, name: str, label: str, uj: int, range_uj: int = RANGE_UJ) -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "name").write_text(label + "\n")
    (d / "energy_uj").write_text(f"{uj}\n")
    (d / "max_energy_range_uj").write_text(f"{range_uj}\n")
    return d / "energy_uj"


@pytest.fixture
def tree(tmp_path: Path) -> dict[str, Path]:
    """Two packages with a dram subzone each, a core subzone and psys (neither counted)."""
    root = tmp_path / "powercap"
    return {"root": root,
            "p0": zone(root, "intel-rapl:0", "package-0", 1_000_000),
            "d0": zone(root, "intel-rapl:0:0", "dram", 500_000),
            "c0": zone(root, "intel-rapl:0:1", "core", 7),
            "p1": zone(root, "intel-rapl:1", "package-1", 2_000_000),
            "d1": zone(root, "intel-rapl:1:0", "dram", 0),
            "psys": zone(root, "intel-rapl:2", "psys", 9)}


def bump(path: Path, uj: int) -> None:
    path.write_text(f"{int(path.read_text()) + uj}\n")


def test_packages_and_dram_are_summed_core_and_psys_left_out(tree: dict[str, Path]) -> None:
    r = RaplReader(tree["root"])
    assert r.unavailable_reason() is None
    first = r.read(0)
    assert first is not None and (first.package_j, first.dram_j) == (0.0, 0.0)
    for k in ("p0", "p1"):
        bump(tree[k], 30_000_000)  # 30 J each
    bump(tree["d0"], 4_000_000)
    bump(tree["c0"], 10**9)
    bump(tree["psys"], 10**9)
    s = r.read(S)
    assert s is not None and (s.package_j, s.dram_j, s.faults) == (60.0, 4.0, 0)


def test_a_wrap_is_undone(tree: dict[str, Path]) -> None:
    tree["p0"].write_text(f"{RANGE_UJ - 1_000_000}\n")
    r = RaplReader(tree["root"])
    r.read(0)
    tree["p0"].write_text("2000000\n")  # wrapped: 1 J before the top, 2 J after
    s = r.read(S // 2)
    assert s is not None and s.package_j == pytest.approx(3.0) and s.faults == 0


@pytest.mark.parametrize(("content", "says"), [("999000", "went backwards"),
                                               ("garbage", "not a counter"), ("", "not a counter")])
def test_a_counter_backwards_or_garbage_is_a_fault_not_a_figure(
        tree: dict[str, Path], content: str, says: str) -> None:
    r = RaplReader(tree["root"])
    r.read(0)
    tree["p0"].write_text(content + "\n")
    s = r.read(S)
    assert s is not None and s.package_j is None and s.faults == 1
    assert s.fault_note is not None and says in s.fault_note and "intel-rapl:0" in s.fault_note
    tree["p0"].write_text("5000000\n")  # the zone goes on from a good value
    later = r.read(2 * S)
    assert later is not None and later.package_j is not None and later.faults == 1


def test_no_powercap_tree_says_so(tmp_path: Path) -> None:
    r = RaplReader(tmp_path / "absent")
    assert r.read(0) is None
    assert "no RAPL package zone" in (r.unavailable_reason() or "")


def test_a_root_only_counter_says_permission_denied(tmp_path: Path) -> None:
    # energy_uj is 0400 root on Linux >= 5.10. Here the file is unreadable to the reader:
    # mode 000; as root, owned by someone else and read without root's capabilities
    # (setpriv, util-linux), which is what an unprivileged dltop meets.
    counter = zone(tmp_path, "amd-rapl:0", "package-0", 123)
    counter.chmod(0)
    prefix: list[str] = []
    if os.geteuid() == 0:
        os.chown(counter, 65534, 65534)
        prefix = ["setpriv", "--inh-caps=-all", "--bounding-set=-all", "--"]
    code = ("import sys; from dltop.telemetry.rapl import RaplReader; "
            "print(RaplReader(sys.argv[1]).unavailable_reason())")
    src = str(Path(__file__).resolve().parents[2] / "src")
    res = subprocess.run([*prefix, sys.executable, "-c", code, str(tmp_path)],
                         capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": src})
    assert "energy_uj: permission denied" in res.stdout, res.stdout + res.stderr


def test_a_runs_cpu_energy_over_its_window(tree: dict[str, Path]) -> None:
    r = RaplReader(tree["root"])
    acc = RunAccumulator(1, os.getpid(), (), cpu_energy_unavailable=None)
    for k in range(21):  # every 0.5 s: package 100 W in all, dram 10 W
        if k:
            bump(tree["p0"], 25_000_000)
            bump(tree["p1"], 25_000_000)
            bump(tree["d0"], 5_000_000)
        s = r.read(k * S // 2)
        assert s is not None
        acc.add_rapl(s)
        if k == 6:
            acc.iteration(int(2.25 * S), 1.0, warmup=True)
        if k == 17:
            acc.iteration(int(8.25 * S), 6.0, warmup=False)
    t = acc.summary(samples=120)
    assert t.cpu_energy_j == pytest.approx(600.0) and t.dram_energy_j == pytest.approx(60.0)
    assert t.cpu_joules_per_sample == pytest.approx(660.0 / 120)
    # Linear between readings: half a 0.5 s step at each edge, package and dram.
    assert t.cpu_energy_bound_j == pytest.approx(2 * 0.5 * (50.0 + 5.0))
    assert t.cpu_energy_note is None


def test_a_fault_in_the_window_is_na_with_the_note(tree: dict[str, Path]) -> None:
    r = RaplReader(tree["root"])
    acc = RunAccumulator(1, os.getpid(), (), cpu_energy_unavailable=None)
    for k in range(10):
        bump(tree["p0"], 10_000_000)
        if k == 5:
            tree["p0"].write_text("12\n")  # backwards
        s = r.read(k * S // 2)
        assert s is not None
        acc.add_rapl(s)
    acc.iteration(int(1.0 * S), 1.0, warmup=True)
    acc.iteration(int(4.0 * S), 3.0, warmup=False)
    t = acc.summary(samples=10)
    assert t.cpu_energy_j is None and t.cpu_joules_per_sample is None
    assert t.cpu_energy_note is not None and "went backwards" in t.cpu_energy_note
    assert t.window_s == 3.0  # the rest of the summary is kept


def test_the_sampler_reads_the_tree_that_the_environment_names(
        tree: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ROOT_ENV, str(tree["root"]))
    sampler = Sampler(FakeGpuBackend(0), on_batch=lambda b: None)
    sampler.begin_run(1, os.getpid(), ())
    sampler.tick()
    t0 = time.monotonic_ns()
    for k in ("p0", "p1"):
        bump(tree[k], 50_000_000)
    sampler.iteration(1, t0, 0.1, warmup=True)
    sampler.tick()
    sampler.iteration(1, time.monotonic_ns(), 0.1, warmup=False)
    sampler.tick()
    t = sampler.end_run(1, samples=10)
    assert t is not None and t.cpu_energy_note is None
    assert t.cpu_energy_j is not None and 0 < t.cpu_energy_j <= 100.0 + 1e-9
    monkeypatch.setenv(ROOT_ENV, str(tree["root"] / "nothing"))
    other = Sampler(FakeGpuBackend(0), on_batch=lambda b: None)
    other.begin_run(2, os.getpid(), ())
    other.iteration(2, time.monotonic_ns(), 0.1, warmup=False)
    u = other.end_run(2, samples=10)
    assert u is not None and u.cpu_energy_j is None
    assert "no RAPL package zone" in (u.cpu_energy_note or "")


def test_the_host_idle_power_over_a_serve_runs_wait_before_its_load(
        tree: dict[str, Path]) -> None:
    """20 W while the runner waits (2-4 s), 100 W after; the wait is told, and the
    warm-up's end trims the readings, before the reading that closes the wait."""
    r = RaplReader(tree["root"])
    acc = RunAccumulator(1, os.getpid(), (), cpu_energy_unavailable=None)
    for k in range(161):  # every 0.05 s to 8 s: more readings than the edges keep
        if k:
            watts = 20.0 if k <= 80 else 100.0
            for zone_name in ("p0", "p1"):
                bump(tree[zone_name], int(watts / 2 * 0.05 * 1e6))
        if k == 80:
            acc.idle(2 * S, 4 * S)
            acc.iteration(int(4.5 * S), 0.5, warmup=True)  # told before its reading
        s = r.read(k * S // 20)
        assert s is not None
        acc.add_rapl(s)
        if k == 150:
            acc.iteration(int(7.5 * S), 3.0, warmup=False)
    t = acc.summary(samples=10)
    assert t.cpu_idle_power_w == pytest.approx(20.0)
    assert t.cpu_energy_j == pytest.approx(300.0)  # 100 W over 4.5-7.5 s
