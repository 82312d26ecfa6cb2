"""Issue 17 end to end: a real child process sends plan, eval and profile events, a real
``dltop run`` checks and stores them, ``dltop export`` shows accuracy, time-to-accuracy,
epoch time, latency and the operator profile.

The child is tests/programs/proto_evals.py behind ``$DLTOP_PYTHON_TORCH`` (a shell
script running the real Python for the interpreter probe, the program otherwise): the
engine cannot tell it from the PyTorch runner, and every number it reports is a known
function of the job spec, so the expected values are computed here.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.dltop_env import DltopEnv

from dltop.results.profile import short_op_name
from dltop.textsafe import markdown_text

PROGRAMS = Path(__file__).resolve().parents[1] / "programs"
sys.path.insert(0, str(PROGRAMS))
import proto_evals as child  # noqa: E402

# The module runs a real engine once, on one worker: under `make test`'s --dist loadgroup
# the module fixture would otherwise run once on each worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("convergence_e2e")]

PROFILE = """\
name = "conv"
[[matrix]]
frameworks = ["torch"]
models = ["fcn-r"]
batch_sizes = [16]
devices = ["cpu:1"]
data = "real"
data_dir = "{data}"
epochs = 3
warmup = 1
target_accuracy = {target}
profile = true
timeout_s = 120

[[matrix]]
frameworks = ["torch"]
models = ["fcn-r"]
batch_sizes = [1]
devices = ["cpu:1"]
mode = "inference"
iterations = 20
warmup = 2
timeout_s = 120
"""


class Env(DltopEnv):
    def __init__(self, tmp: Path, target: float) -> None:
        data = tmp / "data"
        data.mkdir()
        super().__init__(tmp, PROGRAMS / "proto_evals.py",
                         PROFILE.format(data=data, target=target))
        self.events: list[dict[str, Any]] = []

    def cells(self, *args: str) -> list[dict[str, Any]]:
        return list(self.export(*args)["rows"])


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> Env:
    e = Env(tmp_path_factory.mktemp("conv"), target=0.7)
    res = e.dltop("run", str(e.profile), "--headless", "--no-telemetry", "--json")
    assert res.returncode == 0, res.stderr + res.stdout
    e.events = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
    return e


def _steps(per_epoch: int, epochs: float) -> float:
    return float(sum(child.step_s(i) for i in range(int(per_epoch * epochs))))


def test_events_are_stored_through_the_real_engine(ran: Env) -> None:
    conv, infer = ran.rows("select * from runs order by id")
    assert (conv["status"], infer["status"]) == ("ok", "ok")
    per_epoch = child.N_TRAIN // 16
    # the plan: 12 steps, 1 of them warm-up; all 11 others measured (not 'short' of 50)
    assert conv["plan_iterations"] == 3 * per_epoch and conv["n_iterations"] == 11
    # progress counts to the plan's total, not to the spec's iterations (ignored by epochs)
    totals = {(e["run_id"], e["total"]) for e in ran.events if e["event"] == "iteration"}
    assert totals == {(1, 3 * per_epoch), (2, 22)}
    # the bad eval (accuracy 1.5) is a protocol error, stored nowhere
    assert conv["protocol_errors"] == 1 and "accuracy 1.5" in conv["note"]
    evals = ran.rows("select * from evals where run_id = 1 order by idx")
    assert [e["idx"] for e in evals] == [3, 7, 11]
    assert [e["epoch"] for e in evals] == [1.0, 2.0, 3.0]
    assert [e["accuracy"] for e in evals] == pytest.approx([0.55, 0.8, 0.99])
    assert evals[1]["train_s"] == pytest.approx(_steps(per_epoch, 2))
    assert evals[0]["samples"] == child.N_TEST and evals[0]["t_mono_ns"] > 0
    ops = ran.rows("select * from profile_ops where run_id = 1 order by rank")
    # the 2 000-character kernel name (over the 500 an H200 run tripped on) is kept whole
    assert [o["name"] for o in ops] == ["aten::addmm", "aten::relu", child.LONG_KERNEL]
    assert ops[0]["share_pct"] == pytest.approx(100 * 30.0 / (10.0 * 5))
    assert (conv["profile_steps"], conv["profile_device"]) == (5, "cpu")
    # inference: latency percentiles of the measured batches, loss null
    measured = sorted(child.step_s(i) for i in range(2, 22))
    assert infer["latency_p50_s"] == pytest.approx((measured[9] + measured[10]) / 2)
    assert infer["latency_p99_s"] <= measured[-1]
    assert ran.rows("select count(*) as n from iterations where run_id = 2 and loss is "
                    "not null") == [{"n": 0}]


def _cell(rows: list[dict[str, Any]], batch: int) -> dict[str, Any]:
    row = next(r for r in rows if r["batch"] == batch)
    return dict(row["cells"]["cpu:1"])


def test_exports_show_the_new_metrics(ran: Env) -> None:
    per_epoch = child.N_TRAIN // 16
    assert _cell(ran.cells("--metric", "accuracy"), 16)["value"] == pytest.approx(0.99)
    tta = _cell(ran.cells("--metric", "time-to-accuracy"), 16)
    # first eval at or above 0.7 is after epoch 2; evaluation seconds apart (2 evals)
    assert tta["value"] == pytest.approx(_steps(per_epoch, 2))
    assert tta["eval_s"] == pytest.approx(2 * child.EVAL_S)
    epoch = _cell(ran.cells("--metric", "epoch-time"), 16)["value"]
    per = sorted(_steps(per_epoch, e + 1) - _steps(per_epoch, e) for e in range(3))
    assert epoch == pytest.approx(per[1])
    lat = _cell(ran.cells("--metric", "latency"), 1)
    assert lat["value"] == pytest.approx(lat["p50_s"]) and lat["p50_s"] <= lat["p90_s"]
    # 20 measured batches: a p90 (n >= 10), no p99 (n >= 100; docs/metrics.md)
    assert lat["p99_s"] is None and lat["n"] == 20
    assert "n/a: n=20" in ran.dltop("export", "--metric", "latency").stdout
    assert _cell(ran.cells("--metric", "latency"), 16)["label"] == "n/a: training run"
    md = ran.dltop("export", "--metric", "time-to-accuracy").stdout
    assert "(eval 0.1)" in md
    # mode varies between the two configurations: a row key of every table
    summary = ran.dltop("export", "--table", "summary").stdout
    assert "| mode |" in summary.replace("  ", " ") or " mode " in summary.splitlines()[2]
    # sub-second latencies: in ms in Markdown (docs/exports.md)
    assert "accuracy" in summary and "p50/p90/p99 (ms)" in summary


def test_the_profile_table_of_a_run(ran: Env) -> None:
    res = ran.dltop("export", "--table", "profile", "--run", "1", "--format", "json")
    assert res.returncode == 0, res.stderr
    table = json.loads(res.stdout)
    first = table["rows"][0]
    assert (first["op"], first["calls"]) == ("aten::addmm", 3)
    assert first["self_cpu_ms"] == pytest.approx(6.0) and first["self_device_ms"] is None
    assert first["shapes"] == "[[8, 784], [784, 10]]"
    long = table["rows"][2]
    assert long["op_full_name"] == child.LONG_KERNEL
    assert len(long["op"]) == 80 and long["op"] == short_op_name(child.LONG_KERNEL)
    md = ran.dltop("export", "--table", "profile", "--run", "1").stdout
    assert "aten::relu" in md and "5 steps of 10.000 ms on cpu" in md and "N/A" in md
    # Markdown escapes HTML (issue 38): the kernel's template brackets read as text.
    assert markdown_text(long["op"]) in md and child.LONG_KERNEL not in md
    csv = ran.dltop("export", "--table", "profile", "--run", "1", "--format", "csv").stdout
    assert child.LONG_KERNEL in csv  # the "op full_name" column
    for args, says in ((("--table", "profile"), "needs --run N"),
                       (("--table", "profile", "--run", "2"), "no operator profile"),
                       (("--table", "profile", "--run", "99"), "no such run"),
                       (("--run", "1"), "--run picks the run of --table profile")):
        bad = ran.dltop("export", *args)
        assert bad.returncode == 2 and says in bad.stderr, bad.stderr


def test_a_target_never_reached_says_so(tmp_path: Path) -> None:
    e = Env(tmp_path, target=1.0)
    res = e.dltop("run", str(e.profile), "--headless", "--no-telemetry")
    assert res.returncode == 0, res.stderr
    assert _cell(e.cells("--metric", "time-to-accuracy"), 16)["label"] == "not reached"


def test_the_run_trace_and_the_reports_run_figure_show_the_evaluations(ran: Env) -> None:
    from dltop.report.runs import trace_figure
    from dltop.results.runtrace import read_trace
    from dltop.store.reader import open_reader

    db = open_reader(ran.db)
    try:
        trace = read_trace(db, 1)
        row = next(db.query("select r.id as run_id, r.status, r.median_s, r.cv, r.noisy, "
                            "r.concurrent_runs, r.contaminated, j.framework, j.model, "
                            "j.batch_size, j.device, j.repeat from runs r join jobs j "
                            "on j.id = r.job_id where r.id = 1"))
    finally:
        db.close()
    assert [e.accuracy for e in trace.evals] == pytest.approx([0.55, 0.8, 0.99])
    ends = [p.t_end_s for p in trace.iterations]
    # each evaluation sits on the axis after the step it followed
    assert all(e.t_s is not None and e.t_s >= ends[e.idx] for e in trace.evals)  # type: ignore[operator]
    fig = trace_figure(trace, row)
    assert "test accuracy" in fig.panels and "test perplexity" not in fig.panels
    assert [r["value"] for r in fig.rows if r["panel"] == "test accuracy"] == pytest.approx(
        [0.55, 0.8, 0.99])
    assert {r["series"] for r in fig.rows if r["panel"] == "loss"} == {"loss", "test loss"}


def test_the_report_draws_the_profile_and_the_accuracy(ran: Env, tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    res = ran.dltop("report", "-o", str(out))
    assert res.returncode == 0, res.stderr
    html = out.read_text()
    assert "Operator profiles" in html and 'id="profile-run-1"' in html
    assert "aten::addmm" in html and "ms per step" in html
    assert "test accuracy" in html  # the run figure's panel
    assert 'id="profile-run-2"' not in html  # the inference run was not profiled
