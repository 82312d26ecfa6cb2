"""The run detail readers (headless): live/rundetail.py and live/logfile.py."""

from __future__ import annotations

import re
from pathlib import Path

from dltop.live.logfile import LogIndex, open_log, scan_log, tail_lines
from dltop.live.rundetail import extend_trace, read_run_detail
from dltop.results.runtrace import read_trace
from dltop.store import Store, connect
from dltop.store.read.rundetail import job_attempts
from dltop.store.reader import open_reader
from dltop.telemetry.windows import Batch, GpuWindow, HostWindow

from .detail_data import T0, seed_detail


def test_detail_reads_every_section(tmp_path: Path) -> None:
    d = seed_detail(tmp_path)
    db = open_reader(d.seeded.db_path)
    ok = read_run_detail(db, d.ok_run)
    assert ok is not None and ok.label == "torch fcn-r b64 gpu:1 #1"
    assert ok.stats.median_s == 0.5 and ok.stats.noisy is False
    assert ok.telemetry.energy_source == "counter" and ok.telemetry.telemetry_simulated is True
    assert dict(ok.environment)["driver_version"] == "550.54"
    assert ok.attempts == (d.ok_run,) and ok.uses_gpu and not ok.pruned
    crashed = read_run_detail(db, d.crashed_run)
    assert crashed is not None and crashed.why_missing("gpu") == "CPU job: no GPU"
    assert crashed.why_missing("log") == "the file is gone"
    assert crashed.environment == ()
    assert read_run_detail(db, 999) is None
    assert job_attempts(db, d.seeded.job_ids[4]) == ()


def test_extend_trace_reads_only_new_rows_and_matches_a_full_read(tmp_path: Path) -> None:
    d = seed_detail(tmp_path)
    store = Store(connect(d.seeded.db_path))
    db = open_reader(d.seeded.db_path)
    before = read_trace(db, d.ok_run)
    store.add_iterations(d.ok_run, [{"idx": i, "seconds": 0.5, "samples": 64, "warmup": 0,
                                     "loss": 1.0, "t_mono_ns": int((T0 + 0.5 * (i + 1)) * 1e9)}
                                    for i in range(25, 31)])
    store.telemetry.write_batch(Batch(
        tuple(GpuWindow(d.ok_run, T0 + 0.5 * t, 0, 5, 70.0, 50.0, 100.0, 9 * 2**30, 210.0,
                        150.0, 260.0, 100.0, 60.0, 1500.0, True) for t in range(26, 30)),
        tuple(HostWindow(d.ok_run, T0 + 0.5 * t, 5, 11.0, 50.0, 8 * 2**30, 0, 99.0, 2**31)
              for t in range(26, 30))))
    statements: list[str] = []
    db.conn.set_trace_callback(statements.append)
    grown = extend_trace(db, before, d.ok_run)
    db.conn.set_trace_callback(None)
    full = read_trace(db, d.ok_run)
    assert grown == full
    assert not any("count(" in s for s in statements)  # no full re-read
    # every query of the refresh is an index search
    for sql in statements:
        plan = [r[3] for r in db.conn.execute(f"explain query plan {sql}")]
        assert not [p for p in plan if re.match(r"SCAN (iterations|gpu_samples|host_samples"
                                                r"|runs|jobs)\b", p)], (sql, plan)


def test_extend_trace_reads_again_when_it_grew_past_twice_the_points(tmp_path: Path) -> None:
    d = seed_detail(tmp_path)
    store = Store(connect(d.seeded.db_path))
    db = open_reader(d.seeded.db_path)
    before = read_trace(db, d.ok_run, max_points=10)
    store.add_iterations(d.ok_run, [{"idx": i, "seconds": 0.5, "samples": 64, "warmup": 0,
                                     "loss": 1.0, "t_mono_ns": int((T0 + 0.5 * (i + 1)) * 1e9)}
                                    for i in range(25, 60)])
    grown = extend_trace(db, before, d.ok_run, max_points=10)
    assert grown.n_iterations == 60 and grown.thinned_every == 6
    assert grown.iterations[-1].idx == 59


def test_log_index_by_chunks_with_an_unfinished_last_line(tmp_path: Path) -> None:
    log = tmp_path / "runner.log"
    log.write_bytes(b"alpha\nbeta\r\n\xff\xfegamma\npartial")
    ix = LogIndex(str(log))
    while not (ix.complete and ix.end):
        ix.add(ix.scan(max_bytes=4))  # tiny chunks: lines cross them
    assert ix.line_count == 4 and ix.longest == 7
    fd = open_log(log)
    try:
        assert ix.read_lines(fd, 0, 10) == ["alpha", "beta", "\ufffd\ufffdgamma", "partial"]
        with log.open("ab") as fh:
            fh.write(b" line\nnext\n")
        ix.add(scan_log(log, ix.end))
        assert ix.line_count == 5
        assert ix.read_lines(fd, 3, 2) == ["partial line", "next"]
    finally:
        import os

        os.close(fd)


def test_a_line_across_chunks_is_measured_whole(tmp_path: Path) -> None:
    log = tmp_path / "runner.log"
    log.write_bytes(b"a" * 10 + b"\nb\n")
    ix = LogIndex(str(log))
    while not (ix.complete and ix.end):
        ix.add(ix.scan(max_bytes=4))
    assert ix.longest == 10 and ix.line_count == 2


def test_tail_lines_reads_backwards(tmp_path: Path) -> None:
    log = tmp_path / "runner.log"
    log.write_text("".join(f"{i}\n" for i in range(100_000)))
    lines, size = tail_lines(log, 3, block=64)
    assert lines == ["99997", "99998", "99999"] and size == log.stat().st_size
    assert tail_lines(log, 0)[0] == []
    short = tmp_path / "short.log"
    short.write_text("only\nno newline")
    assert tail_lines(short, 5)[0] == ["only", "no newline"]


def test_a_pruned_run_says_so(tmp_path: Path) -> None:
    import subprocess
    import sys

    from dltop.store.retention import Retention

    d = seed_detail(tmp_path)
    store = Store(connect(d.seeded.db_path))
    with store.db.conn:
        store.db.execute("update campaigns set status = 'finished'")
    Retention(store.db).prune_run(d.ok_run)
    d.log.unlink()  # prune deletes the run's folder
    db = open_reader(d.seeded.db_path)
    detail = read_run_detail(db, d.ok_run)
    assert detail is not None and detail.pruned
    assert detail.why_missing("log") == "deleted by dltop prune"
    trace = extend_trace(db, None, d.ok_run)
    assert trace.pruned and trace.n_iterations == 20 and trace.gpus == ()
    out = subprocess.run([sys.executable, "-m", "dltop", "log", str(d.ok_run), "--db",
                          str(d.seeded.db_path)], capture_output=True, text=True, timeout=120,
                         check=False)
    assert out.returncode == 2 and "(deleted by dltop prune)" in out.stderr


def test_detail_shows_energy_bounds_cpu_energy_and_kernel_memory(tmp_path: Path) -> None:
    from dltop.tui.rundetail_rows import telemetry_rows

    d = seed_detail(tmp_path)
    store = Store(connect(d.seeded.db_path))
    store.update_run(d.ok_run, {
        "energy_bound_j": 12.0, "cpu_energy_j": 380.0, "dram_energy_j": 32.0,
        "cpu_energy_bound_j": 4.1, "cpu_joules_per_sample": 0.3219,
        "rss_peak_kernel_bytes": 4 * 2**30, "gpu_mem_framework_peak_bytes": 9 * 2**30})
    store.update_run(d.crashed_run, {"cpu_energy_note": "n/a: no RAPL package zone under /x"})
    db = open_reader(d.seeded.db_path)
    ok = read_run_detail(db, d.ok_run)
    assert ok is not None
    rows = {label: text for label, text, _ in telemetry_rows(ok)}
    assert rows["energy"] == "2315.0 ±12 J (counter)"
    assert rows["cpu energy"] == "412.0 ±4.1 J, 0.3219 J/sample (package 380.0 + DRAM 32.0)"
    assert rows["rss peak"] == "3.0 GiB (kernel 4.0 GiB)"
    assert rows["gpu mem peak"] == "12.0 GiB (run 11.0, framework 9.0)"
    crashed = read_run_detail(db, d.crashed_run)
    assert crashed is not None
    crows = {label: text for label, text, _ in telemetry_rows(crashed)}
    assert crows["cpu energy"] == "n/a: no RAPL package zone under /x"


def test_a_small_tree_s_rss_is_in_mib_and_a_long_key_keeps_its_space(tmp_path: Path) -> None:
    """A serve client's 36 MiB tree read ``rss peak 0.0 GiB``; ``within-run p10 / p90``
    is longer than the key column and ran into its value (``p90N/A``)."""
    from dltop.live.rundetail import RunStats
    from dltop.tui.rundetail import section
    from dltop.tui.rundetail_rows import stats_rows, telemetry_rows

    d = seed_detail(tmp_path)
    store = Store(connect(d.seeded.db_path))
    store.update_run(d.ok_run, {"rss_peak_bytes": 36 * 2**20, "rss_peak_kernel_bytes": None})
    ok = read_run_detail(open_reader(d.seeded.db_path), d.ok_run)
    assert ok is not None
    assert {k: v for k, v, _ in telemetry_rows(ok)}["rss peak"] == "36 MiB"
    store.update_run(d.ok_run, {"rss_peak_bytes": None, "rss_peak_kernel_bytes": 40 * 2**20})
    ok = read_run_detail(open_reader(d.seeded.db_path), d.ok_run)
    assert ok is not None  # the sampler saw nothing, the kernel did: no "N/A GiB"
    assert {k: v for k, v, _ in telemetry_rows(ok)}["rss peak"] == "N/A (kernel 40 MiB)"
    lines = section("Statistics", stats_rows(RunStats(0, None, None, None, None, None, None,
                                                      None, None)), ok).plain.split("\n")
    assert "within-run p10 / p90 N/A" in lines
    assert "n            0" in lines  # short keys keep their column


def test_a_slurm_run_s_queue_time_and_accounting_are_shown_apart(tmp_path: Path) -> None:
    from dltop.tui.rundetail import status_text

    d = seed_detail(tmp_path)
    store = Store(connect(d.seeded.db_path))
    store.update_run(d.ok_run, {"queue_s": 125.0, "submitted_at": "2026-01-01T00:00:00Z",
                                "slurm_acct_note": "no accounting (Slurm accounting storage "
                                                   "is disabled)"})
    store.update_run(d.crashed_run, {"slurm_max_rss_bytes": 3 * 2**29,
                                     "slurm_elapsed_s": 95.0, "slurm_acct_note":
                                     "no energy (no acct_gather_energy plugin)"})
    db = open_reader(d.seeded.db_path)
    ok, crashed = read_run_detail(db, d.ok_run), read_run_detail(db, d.crashed_run)
    assert ok is not None and crashed is not None
    assert ok.queue_s == 125.0 and ok.wall_s != 125.0
    lines = status_text(ok, True).plain.splitlines()
    wall = next(i for i, line in enumerate(lines) if line.startswith("wall"))
    assert lines[wall + 1] == "queued       2:05 in Slurm's queue"  # under the run's wall
    assert lines[wall + 2] == ("accounting   no accounting (Slurm accounting storage is "
                               "disabled)")
    assert crashed.slurm_acct == ("sacct: MaxRSS 1.50 GiB, elapsed 95 s "
                                  "(no energy (no acct_gather_energy plugin))")
    assert "queued" not in status_text(crashed, True).plain  # no queue time: no line


def test_the_memory_chart_is_in_mib_under_a_gib(tmp_path: Path) -> None:
    """A CPU run's 36 MiB process tree was charted as 0.0059 to 0.0352 GiB; the seeded
    GPU run's 8-11 GiB stay in GiB."""
    from dltop.tui.charts import chart_spec

    d = seed_detail(tmp_path)
    store = Store(connect(d.seeded.db_path))
    store.add_iterations(d.crashed_run, [{"idx": i, "seconds": 0.1, "samples": 8,
                                          "warmup": 0, "t_mono_ns": int((T0 + i) * 1e9)}
                                         for i in range(4)])
    store.telemetry.write_batch(Batch((), tuple(
        HostWindow(d.crashed_run, T0 + t, 5, 50.0, 60.0, 8 * 2**30, 0, 90.0,
                   (30 + t) * 2**20) for t in range(4))))
    db = open_reader(d.seeded.db_path)
    small = read_trace(db, d.crashed_run)
    assert small is not None
    spec = chart_spec(small, "memory")
    assert spec.title == "memory MiB" and spec.series[0][0] == "tree RSS MiB"
    assert spec.series[0][2] == [30.0, 31.0, 32.0, 33.0]
    big = read_trace(db, d.ok_run)
    assert big is not None and chart_spec(big, "memory").title == "memory GiB"


def test_a_serve_runs_short_window_gives_the_serve_hint(tmp_path: Path) -> None:
    """A serve run's window is its requests' (min_time_s does not apply): its shortfall
    says what lengthens it (telemetry.readings.SERVE_HINT), as the results tables do."""
    from dataclasses import replace

    from dltop.telemetry.readings import HINT, SERVE_HINT
    from dltop.tui.rundetail_rows import telemetry_rows

    d = seed_detail(tmp_path)
    Store(connect(d.seeded.db_path)).update_run(d.ok_run, {
        "window_s": 0.04, "gpu_readings": 0, "host_readings": 0, "cpu_energy_j": 1.0})
    trained = read_run_detail(open_reader(d.seeded.db_path), d.ok_run)
    assert trained is not None and not trained.serve
    assert trained.why_missing("gpu").endswith(f"({HINT})")
    served = replace(trained, framework="openai")  # the same row as a serve run's
    assert served.serve
    for group in ("gpu", "telemetry"):
        assert served.why_missing(group) == f"window 0.04 s, 0 readings ({SERVE_HINT})"
    rows = {label: text for label, text, _ in telemetry_rows(served)}
    assert rows["cpu energy"] == f"n/a: window 0.04 s, 0 readings ({SERVE_HINT})"
