"""A system from the config file, ``slurm.parallel = 2`` and ``dltop check`` on the real
test cluster (issue 33 items 6 and 7): two Slurm jobs of one campaign at once, each its
own run, judged against references from the config and the profile."""

from __future__ import annotations

import json
import os
import sqlite3
from datetime import datetime
from pathlib import Path

import pytest

from .cluster import NODE, NODE2, LocalSlurm
from .test_slurm_runs import dltop, runs

CONFIG = """
[systems.testsite]
partition = "two"
parallel = 2
setup = ["{meet}"]

[systems.testsite.references]
"fcn-r/torch/fp32/cpu:1/b8" = {{ s_per_iter = [1.0, -0.9999, 100] }}
"""

PROFILE = """
name = "sites"
[defaults]
iterations = 3
warmup = 1
timeout_s = 180
[[matrix]]
frameworks = ["torch"]
models = ["fcn-r"]
batch_sizes = [8, 16]
devices = ["cpu:1"]

[references.testsite]
"fcn-r/torch/fp32/*/b16" = { s_per_iter = [100.0, -0.01, 0.01] }
"""

MEET = ("touch {dir}/$SLURM_JOB_ID; n=0; while [ $(ls {dir} | wc -l) -lt 2 ] && "
        "[ $n -lt 300 ]; do sleep 0.2; n=$((n+1)); done")
"""A setup line where each job waits (60 s at most) until the other one has started too:
run one after the other, the first would go on alone and the jobs would not overlap."""


def slurm_times(cluster: LocalSlurm, job_id: str) -> tuple[datetime, datetime]:
    out = cluster.run("scontrol", "show", "job", "-o", job_id)
    fields = dict(f.split("=", 1) for f in out.split() if "=" in f)
    return (datetime.fromisoformat(fields["StartTime"]),
            datetime.fromisoformat(fields["EndTime"]))


@pytest.mark.slow
def test_a_system_runs_two_jobs_at_once_and_check_judges_them(
        slurm_env: LocalSlurm, tmp_path: Path) -> None:
    meet = tmp_path / "meet"
    meet.mkdir()
    conf = tmp_path / "xdg" / "dltop" / "config.toml"
    conf.parent.mkdir(parents=True)
    conf.write_text(CONFIG.format(meet=MEET.format(dir=meet)))
    (tmp_path / "p.toml").write_text(PROFILE)
    env = {k: v for k, v in os.environ.items() if k != "DLTOP_CONFIG"}
    env.update(DLTOP_DB=str(tmp_path / "d.db"), XDG_CONFIG_HOME=str(tmp_path / "xdg"))

    res = dltop(tmp_path, "run", "--system", "testsite", str(tmp_path / "p.toml"),
                "--headless", env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    first, second = runs(tmp_path)
    assert first["status"] == second["status"] == "ok", (first, second)
    # two runs in flight in dltop at once, and two jobs running in Slurm at once
    # (started_at is Slurm's StartTime, whole seconds: the two may be equal)
    assert first["started_at"] <= second["started_at"] < first["finished_at"]
    assert {first["slurm_nodes"], second["slurm_nodes"]} == {NODE, NODE2}  # exclusive
    (s1, e1), (s2, e2) = (slurm_times(slurm_env, r["slurm_job_id"]) for r in (first, second))
    assert s1 <= e2 and s2 <= e1, ((s1, e1), (s2, e2))
    assert sorted(p.name for p in meet.iterdir()) == sorted(
        [first["slurm_job_id"], second["slurm_job_id"]])
    # each still one run: its own job, folder and iterations; the system is stored
    assert first["slurm_job_id"] != second["slurm_job_id"]
    conn = sqlite3.connect(tmp_path / "d.db")
    specs = [json.loads(s) for (s,) in conn.execute(
        "select spec_json from job_specs order by job_id")]
    counts = conn.execute("select run_id, count(*) from iterations where not warmup "
                          "group by run_id order by run_id").fetchall()
    conn.close()
    assert [s["system"] for s in specs] == ["testsite", "testsite"]
    assert [s["slurm"]["partition"] for s in specs] == ["two", "two"]
    assert counts == [(first["id"], 3), (second["id"], 3)]

    check = dltop(tmp_path, "check", "--format", "json", env=env)
    assert check.returncode == 1, check.stdout + check.stderr
    rows = {r["batch"]: r for r in json.loads(check.stdout)["rows"]}
    assert rows[8]["result"] == "pass" and rows[8]["system"] == "testsite"
    assert rows[16]["result"] == "fail (below)"
    assert "1 of 2 reference check(s) failed" in check.stderr
    summary = dltop(tmp_path, "export", "--table", "summary", env=env)
    assert "| system |" not in summary.stdout  # one system: stated in the caption
    assert "system testsite" in summary.stdout
    assert "| pass |" in summary.stdout and "| fail (s_per_iter below) |" in summary.stdout
