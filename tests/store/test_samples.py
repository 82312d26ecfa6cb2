"""The sample tables' one reader: whole, thinned and incremental reads of a run's windows."""

from __future__ import annotations

from tests.store.conftest import campaign

from dltop.store import Store, samples
from dltop.telemetry.windows import Batch, GpuWindow, HostWindow


def _windows(run_id: int, times: range, gpus: int = 2) -> Batch:
    return Batch(tuple(GpuWindow(run_id, float(t), g, 5, 10.0 * t, 0.0, 0.0, 2**30, 100.0 + t,
                                 90.0, 110.0, float(t), 60.0, 1500.0, False, 1e9 + t)
                       for t in times for g in range(gpus)),
                 tuple(HostWindow(run_id, float(t), 4, 20.0 + t, 90.0, 2**32, 0, 50.0 + t,
                                  2**28, 1e9 + t) for t in times))


def _run(store: Store) -> int:
    cid, jobs = campaign(store, 1)
    return store.start_run(jobs[0], cid, 1, "", 1)


def test_series_whole_thinned_per_gpu_and_since_a_time(store: Store) -> None:
    run = _run(store)
    store.telemetry.write_batch(_windows(run, range(10)))
    db = store.db
    assert samples.count(db, samples.HOST, run) == 10
    assert samples.gpu_count(db, run) == (20, 2)
    whole = samples.gpu_series(db, run)
    assert [(r["gpu_index"], r["t_start_mono_s"]) for r in whole] == \
        [(g, float(t)) for g in range(2) for t in range(10)]
    assert whole[0]["node"] is None and whole[3]["util_mean_pct"] == 30.0
    # every 4th window of each GPU, its first kept
    assert [(r["gpu_index"], r["t_start_mono_s"]) for r in samples.gpu_series(db, run, every=4)] \
        == [(g, float(t)) for g in range(2) for t in (0, 4, 8)]
    assert [r["t_start_mono_s"] for r in samples.host_series(db, run, every=3)] == [0, 3, 6, 9]
    # a refresh reads what came after the time it has
    store.telemetry.write_batch(_windows(run, range(10, 12)))
    assert [r["t_start_mono_s"] for r in samples.host_series(db, run, since_s=9.0)] == [10, 11]
    assert [(r["gpu_index"], r["t_start_mono_s"]) for r in
            samples.gpu_series(db, run, since_s=10.5)] == [(0, 11.0), (1, 11.0)]
    assert samples.newest_host(db, run) == {"tree_cpu_pct": 61.0, "tree_rss_bytes": 2**28}


def test_rows_after_a_rowid_and_the_tree_means(store: Store) -> None:
    run = _run(store)
    store.telemetry.write_batch(_windows(run, range(3), gpus=1))
    first = samples.gpu_rows_after(store.db, run, 0)
    assert [r[2] for r in first] == [0, 0, 0] and first[-1][6] == 1e9 + 2
    store.telemetry.write_batch(_windows(run, range(3, 5), gpus=1))
    later = samples.gpu_rows_after(store.db, run, first[-1][0])
    assert [r[6] for r in later] == [1e9 + 3, 1e9 + 4]
    # the tree's CPU, weighted by readings: 50..54 % in equal windows
    assert samples.tree_cpu_means(store.db, [run, run + 99]) == {run: 52.0}
    assert samples.tree_cpu_means(store.db, []) == {}
