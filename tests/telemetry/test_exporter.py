"""Prometheus metrics: the families' values and units, and a real exporter scraped over HTTP
while a real campaign runs."""

from __future__ import annotations

import re
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from dltop.live.devices import DevicePoller
from dltop.live.exporter import MetricsSource, PrometheusCollector
from dltop.live.metrics import MIB, gpu_families
from dltop.telemetry.fake import FakeGpuBackend
from dltop.telemetry.values import HostSample

PROGRAMS = Path(__file__).resolve().parents[1] / "programs"
DCGM = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE",
        "DCGM_FI_DEV_FB_TOTAL", "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK")
HOST = ("dltop_host_cpu_percent", "dltop_host_memory_used_bytes",
        "dltop_host_memory_total_bytes", "dltop_host_load1", "dltop_host_cpus")
RUN = ("dltop_run_iterations_done", "dltop_run_iterations_planned", "dltop_run_in_warmup",
       "dltop_run_last_iteration_seconds", "dltop_run_iterations_per_second",
       "dltop_run_samples_per_second")


def fixed_host() -> HostSample:
    return HostSample(0, (25.0, 75.0), 0.5, 3 * 2**30, 16 * 2**30, 0, cpu_user_pct=40.0)


def parse(text: str) -> dict[str, list[Any]]:
    """Samples by metric name (families with one sample name, as all of dltop's are)."""
    out: dict[str, list[Any]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append(s)
    return out


def test_gpu_values_are_in_dcgm_exporter_units() -> None:
    poller = DevicePoller(FakeGpuBackend(2, clock_ns=lambda: 5 * 10**9), fixed_host)
    frame = poller.poll()  # the first frame is a slow one: temperature and clocks
    fams = {f.name: f for f in gpu_families(frame, "h1")}
    g = frame.gpus[1]
    labels, used = fams["DCGM_FI_DEV_FB_USED"].samples[1]
    # a simulated GPU has no PCI bus nor /dev/nvidia1: those labels are empty, not made up
    assert dict(labels) == {"gpu": "1", "UUID": "GPU-fake-0001", "pci_bus_id": "",
                            "device": "", "modelName": "Simulated GPU 1", "Hostname": "h1",
                            "simulated": "true"}
    assert used == g.mem_used_bytes // MIB  # whole MiB, as dcgm-exporter
    assert fams["DCGM_FI_DEV_FB_TOTAL"].samples[1][1] == 80 * 1024  # MiB
    assert fams["DCGM_FI_DEV_FB_FREE"].samples[1][1] == 80 * 1024 - used
    assert fams["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"].samples[1][1] == \
        round(g.energy_j * 1000)  # mJ
    assert fams["DCGM_FI_DEV_POWER_USAGE"].samples[1][1] == g.power_w
    assert fams["DCGM_FI_DEV_GPU_TEMP"].samples[1][1] == round(g.temperature_c)
    assert fams["DCGM_FI_DEV_SM_CLOCK"].samples[1][1] == round(g.sm_clock_mhz)
    # the fake GPUs' readings are fractional; dcgm-exporter's integer fields are not
    assert g.sm_clock_mhz != int(g.sm_clock_mhz) and g.mem_used_bytes % MIB
    for name in ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_TOTAL",
                 "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_GPU_TEMP",
                 "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL",
                 "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"):
        assert all(v == int(v) for _, v in fams[name].samples), name

    # A GPU that does not report a value (no temperature, no energy counter) leaves that
    # sample out rather than exporting a made-up 0.
    bare = replace(frame, gpus=(replace(frame.gpus[0], temperature_c=None, energy_j=None),))
    fams = {f.name: f for f in gpu_families(bare, "h1")}
    assert fams["DCGM_FI_DEV_GPU_TEMP"].samples == ()
    assert fams["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"].samples == ()
    assert len(fams["DCGM_FI_DEV_GPU_UTIL"].samples) == 1


def test_the_collector_writes_parseable_exposition(tmp_path: Path) -> None:
    source = MetricsSource(FakeGpuBackend(1), tmp_path / "none.db", host=fixed_host)
    registry = CollectorRegistry()
    registry.register(PrometheusCollector(source))
    text = generate_latest(registry).decode()
    samples = parse(text)
    # dcgm-exporter's exact name, not prometheus_client's counter spelling ..._total
    assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION untyped" in text
    assert samples["dltop_host_cpu_percent"][0].value == 50.0
    assert samples["dltop_host_cpu_user_percent"][0].value == 40.0
    assert samples["dltop_exporter_db_up"][0].value == 0  # no database there
    assert samples["dltop_runs_active"][0].value == 0
    assert not any(name.startswith("dltop_run_") for name in samples)


def test_a_failing_reading_drops_this_host_s_series_and_says_so(
        wait_until: Callable[..., None]) -> None:
    failing = threading.Event()

    def host() -> HostSample:
        if failing.is_set():
            raise OSError("/proc/stat: gone")
        return fixed_host()

    source = MetricsSource(FakeGpuBackend(1), None, device_hz=20, host=host, stale_s=0.3)
    registry = CollectorRegistry()
    registry.register(PrometheusCollector(source))
    source.start()
    try:
        fresh = parse(generate_latest(registry).decode())
        assert fresh["dltop_up"][0].value == 1 and fresh["DCGM_FI_DEV_GPU_UTIL"]
        assert fresh["dltop_telemetry_age_seconds"][0].value < 0.3
        assert fresh["dltop_exporter_poll_errors_total"][0].value == 0
        failing.set()
        wait_until(lambda: source.telemetry_age_s() > 0.3, 10, "the readings to go stale")
        stale = parse(generate_latest(registry).decode())
        # nothing frozen at its last value: this host's GPU and host series are gone
        assert "DCGM_FI_DEV_GPU_UTIL" not in stale and "dltop_host_cpu_percent" not in stale
        assert stale["dltop_up"][0].value == 0
        assert stale["dltop_telemetry_age_seconds"][0].value > 0.3
        assert stale["dltop_exporter_poll_errors_total"][0].value >= 1
        failing.clear()
        wait_until(lambda: (source.telemetry_age_s() or 1) < 0.3, 10, "a good reading")
        again = parse(generate_latest(registry).decode())
        assert again["dltop_up"][0].value == 1 and again["DCGM_FI_DEV_GPU_UTIL"]
    finally:
        source.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(port: int) -> dict[str, list[Any]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as resp:
        assert resp.status == 200
        return parse(resp.read().decode())


def serving(port: int) -> bool:
    try:
        return "DCGM_FI_DEV_COUNT" in scrape(port)
    except OSError:
        return False


def iterations_done(port: int) -> float:
    """The running run's ``dltop_run_iterations_done`` (-1: no run, or no exporter yet)."""
    try:
        samples = scrape(port).get("dltop_run_iterations_done")
    except OSError:
        return -1
    return float(samples[0].value) if samples else -1


@pytest.mark.slow
def test_exporter_reports_devices_host_and_a_running_campaign(
        tmp_path: Path, profile_text: Any, wait_until: Callable[..., None]) -> None:
    prof = tmp_path / "p.toml"
    prof.write_text(profile_text({
        "frameworks": ["command"], "models": ["my-net"], "batch_sizes": [32],
        "devices": ["cpu:1"], "warmup": 2, "iterations": 100000, "timeout_s": 300,
        "command": [sys.executable, str(PROGRAMS / "cmd_seconds.py"), "-1"],
        "iteration_regex": r"took (?P<seconds>[0-9.]+)s"}, name="prom-demo"))
    db = tmp_path / "d.db"
    port = free_port()
    # A monitoring daemon starts first (issue 30): no database yet, the devices served
    # meanwhile, the campaign's series picked up once 'dltop run' creates it.
    exporter = subprocess.Popen(
        [sys.executable, "-m", "dltop", "exporter", "--port", str(port), "--db", str(db),
         "--fake-gpus", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    run = None
    try:
        wait_until(lambda: serving(port) or exporter.poll() is not None, 60,
                   "the exporter to serve, before the database exists")
        assert exporter.poll() is None, exporter.communicate()
        before = scrape(port)
        assert before["dltop_exporter_db_up"][0].value == 0 and not db.exists()
        assert before["dltop_up"][0].value == 1 and len(before["DCGM_FI_DEV_GPU_UTIL"]) == 2
        assert before["dltop_runs_active"][0].value == 0
        run = subprocess.Popen([sys.executable, "-m", "dltop", "run", str(prof), "--db",
                                str(db), "--headless", "--no-telemetry"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        wait_until(lambda: iterations_done(port) >= 5, 120,
                   "the running run's metrics with 5 iterations")
        first = scrape(port)

        gpus = first["DCGM_FI_DEV_GPU_UTIL"]
        assert [s.labels["gpu"] for s in gpus] == ["0", "1"]
        for name in DCGM:
            assert len(first[name]) == 2, name
            for s in first[name]:
                assert s.labels["simulated"] == "true"
                assert s.labels["UUID"].startswith("GPU-") and s.labels["Hostname"]
        assert first["DCGM_FI_DEV_COUNT"][0].value == 2
        for name in HOST:
            assert len(first[name]) == 1, name
        assert 0 <= first["dltop_host_cpu_percent"][0].value <= 100
        assert first["dltop_exporter_db_up"][0].value == 1
        assert first["dltop_runs_active"][0].value == 1

        conn = sqlite3.connect(db)
        run_id, camp_id = conn.execute("select id, campaign_id from runs").fetchone()
        conn.close()
        (info,) = first["dltop_run_info"]
        where = {"campaign": "prom-demo", "campaign_id": str(camp_id),
                 "slot": info.labels["slot"], "Hostname": info.labels["Hostname"]}
        assert re.fullmatch(r"cpu \d+", where["slot"])  # the one core it is pinned to
        assert info.value == 1 and info.labels == {
            **where, "framework": "command", "model": "my-net", "batch": "32",
            "device": "cpu:1", "run_id": str(run_id)}
        for name in RUN:  # its values: where it runs, no run id (joined on these)
            (s,) = first[name]
            assert s.labels == where, name
        value = {name: first[name][0].value for name in RUN}
        assert value["dltop_run_iterations_planned"] == 100002
        assert value["dltop_run_in_warmup"] == 0
        # cmd_seconds.py steps take 20-40 ms; a loaded machine stretches them, never shrinks
        assert 0.015 < value["dltop_run_last_iteration_seconds"] < 5
        assert 0.2 < value["dltop_run_iterations_per_second"] < 55
        assert value["dltop_run_samples_per_second"] == \
            pytest.approx(32 * value["dltop_run_iterations_per_second"])
        done = value["dltop_run_iterations_done"]
        wait_until(lambda: iterations_done(port) > done, 60,
                   "the iteration count to grow between scrapes")
        energy = first["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"][0].value
        wait_until(lambda: scrape(port)["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"][0].value
                   > energy, 30, "the energy counter to grow (devices are read at 1 Hz)")

        run.send_signal(signal.SIGINT)  # the campaign is cancelled: no run in progress
        run.wait(timeout=120)
        after = scrape(port)
        assert not any(name.startswith("dltop_run_") for name in after)
        assert after["dltop_runs_active"][0].value == 0
    finally:
        if run is not None and run.poll() is None:
            run.send_signal(signal.SIGINT)
            run.wait(timeout=120)
        exporter.send_signal(signal.SIGTERM)
        out, err = exporter.communicate(timeout=30)
        assert exporter.returncode == 0, err
        assert f"http://127.0.0.1:{port}/metrics" in out and "waiting for it" in out


def test_a_slurm_run_s_gpus_on_other_nodes_are_exported_with_their_node(
        tmp_path: Path, stand_in_engine: int) -> None:
    """The agents' newest window of each remote GPU (gpu_samples.node) appears as a GPU
    of that Hostname; what an agent does not measure is left out, not made up."""
    from tests.tui.conftest import seed

    seeded = seed(tmp_path, engine_pid=stand_in_engine)
    conn = sqlite3.connect(seeded.db_path)
    with conn:
        conn.executemany(
            "insert into gpu_samples (run_id, t_start_mono_s, gpu_index, n, util_mean_pct, "
            "power_mean_w, mem_used_max_bytes, t_wall_s, simulated, node) "
            "values (?, ?, ?, 5, ?, ?, ?, ?, 0, ?)",
            [(seeded.run_id, t, gpu, 10.0 * t + gpu, 200.0 + gpu, 2 * 2**30, 1e9 + t, node)
             for t in (0.0, 0.5) for node in ("node-a", "node-b") for gpu in (0, 1)])
    conn.close()
    source = MetricsSource(FakeGpuBackend(1), seeded.db_path, host=fixed_host)
    registry = CollectorRegistry()
    registry.register(PrometheusCollector(source))
    got = parse(generate_latest(registry).decode())
    util = {(s.labels["Hostname"], s.labels["gpu"]): s.value
            for s in got["DCGM_FI_DEV_GPU_UTIL"]}
    host = source.hostname
    assert set(util) == {(host, "0"), ("node-a", "0"), ("node-a", "1"), ("node-b", "0"),
                         ("node-b", "1")}
    assert util[("node-b", "1")] == 6.0  # the newest window (t = 0.5 s)
    power = {(s.labels["Hostname"], s.labels["gpu"]): s.value
             for s in got["DCGM_FI_DEV_POWER_USAGE"]}
    assert power[("node-a", "1")] == 201.0
    assert {(s.labels["Hostname"], s.labels["gpu"]): s.value
            for s in got["DCGM_FI_DEV_FB_USED"]}[("node-a", "0")] == 2048.0  # MiB
    assert {s.labels["Hostname"]: s.value for s in got["DCGM_FI_DEV_COUNT"]} == {
        host: 1.0, "node-a": 2.0, "node-b": 2.0}
    # not measured by the agents: no made-up temperature for a remote GPU
    assert {s.labels["Hostname"] for s in got["DCGM_FI_DEV_GPU_TEMP"]} == {host}


@pytest.mark.parametrize("case", ["host", "under_a_file", "not_sqlite", "no_gpus_faked"])
def test_bad_input_is_exit_2_naming_it_nothing_started_or_changed(tmp_path: Path,
                                                                 case: str) -> None:
    """A --host that is not this host's (192.0.2.1: TEST-NET-1), a --db under a file (it
    could never be created) or a --db that is not SQLite: exit 2, one line naming the
    option and what is wrong, no traceback; the file is left as it was."""
    junk = tmp_path / "notes.db"
    junk.write_bytes(b"not a database\n")
    argv, said = {
        "host": (["--host", "192.0.2.1", "--db", str(tmp_path / "x.db")],
                 "--host 192.0.2.1: 192.0.2.1 is not an address of this host"),
        "under_a_file": (["--db", str(junk / "sub" / "x.db")],
                         f"{junk} is not a directory: no database can be created there"),
        "not_sqlite": (["--db", str(junk)], f"--db {junk}: not a SQLite database"),
        "no_gpus_faked": (["--no-gpu-metrics", "--db", str(tmp_path / "x.db")],
                          "--fake-gpus with --no-gpu-metrics"),
    }[case]
    res = subprocess.run([sys.executable, "-m", "dltop", "exporter", "--port",
                          str(free_port()), "--fake-gpus", "1", *argv],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2, res
    assert said in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert res.stdout == ""  # nothing served: no "Prometheus metrics on" line
    assert junk.read_bytes() == b"not a database\n" and not (tmp_path / "x.db").exists()


def test_beside_dcgm_exporter_the_gpu_series_are_left_to_it(tmp_path: Path,
                                                           wait_until: Callable[..., None]
                                                           ) -> None:
    """``--no-gpu-metrics``: no ``DCGM_FI_*`` series (dcgm-exporter serves them; the same
    names from two exporters would double every sum over GPUs), the rest served."""
    port = free_port()
    exporter = subprocess.Popen(
        [sys.executable, "-m", "dltop", "exporter", "--port", str(port), "--db",
         str(tmp_path / "d.db"), "--no-gpu-metrics"], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    try:
        def up() -> bool:
            try:
                return "dltop_up" in scrape(port) or exporter.poll() is not None
            except OSError:
                return exporter.poll() is not None

        wait_until(up, 60, "the exporter")
        got = scrape(port)
    finally:
        exporter.terminate()
        _out, err = exporter.communicate(timeout=30)
    assert exporter.returncode == 0 and "Traceback" not in err, err
    assert not [n for n in got if n.startswith("DCGM_")]
    assert got["dltop_up"][0].value == 1 and got["dltop_host_cpus"][0].value >= 1
    assert got["dltop_exporter_db_up"][0].value == 0  # no database yet: waited for
