"""Issue 38: every value checked at load. A NaN, an infinity or an absurd number in a
profile, a ``[slurm]`` table, a ``[systems.NAME]`` table or a reference is refused
with the file, the key and the range (exit 2, nothing stored); the job count is
counted before expansion; a stored spec is read back before the commit; ``profiles
show`` prints a page, not 100 000 rows."""

from __future__ import annotations

import dataclasses
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dltop.errors import UserError
from dltop.jobs import campaign
from dltop.profiles import fields
from dltop.profiles.joblist import JobList
from dltop.profiles.jobspec import settings
from dltop.profiles.loader import parse
from dltop.store import Store, connect
from dltop.systems import load_system

BASE = """{top}
[defaults]
frameworks = ["torch"]
models = ["fcn-r"]
batch_sizes = [8]
devices = ["cpu:1"]
[[matrix]]
{entry}
"""
WIDE = "[" + ", ".join(str(k) for k in range(1, 1001)) + "]"
"""A 1000-value list: three of them sweep 10**9 configurations."""


def load(entry: str = "", top: str = "") -> int:
    return len(parse(BASE.format(top=top, entry=entry), "p.toml", "p", logical_cores=2).jobs)


def refused(entry: str = "", top: str = "") -> str:
    with pytest.raises(UserError) as info:
        load(entry, top)
    return str(info.value)


# Every case of the list, with the error it gets: file, key, range, value.
CASES = [
    ("lr = nan", "matrix[0].lr: expected a finite number > 0 and <= 1000, got nan"),
    ("momentum = nan", "matrix[0].momentum: expected a finite number >= 0 and <= 1, got nan"),
    ("weight_decay = inf", "matrix[0].weight_decay: expected a finite number >= 0 and <= 1, "
     "got inf"),
    ("timeout_s = nan", "matrix[0].timeout_s: expected a finite number > 0 and <= 604800, "
     "got nan"),
    ("cooldown_s = nan", "matrix[0].cooldown_s: expected a finite number >= 0 and <= 86400, "
     "got nan"),
    ("cooldown_s = 1e308", "matrix[0].cooldown_s: expected a finite number >= 0 and <= 86400, "
     "got 1e+308"),
    (f"seed = {2**64}", f"matrix[0].seed: expected an integer >= 0 and <= {2**32 - 1}, "
     f"got {2**64}"),
    (f"seed = {2**32}", f"matrix[0].seed: expected an integer >= 0 and <= {2**32 - 1}"),
    (f"batch_sizes = [8, {2**63 - 1}]", "matrix[0].batch_sizes[1]: expected an integer >= 1 "
     f"and <= 1048576, got {2**63 - 1}"),
    ('devices = ["cpu:100000"]', "matrix[0].devices[0]: cpu:100000: expected at most 4096 "
     "CPUs"),
    ('devices = ["cpus:5000"]', "matrix[0].devices[0]: cpus:5000: expected at most 4096 CPUs"),
    ('devices = ["gpu:65"]', "matrix[0].devices[0]: gpu:65: expected at most 64 GPUs per node"),
    ("repeats = 1e9", "matrix[0].repeats: expected an integer >= 1 and <= 1000000, "
     "got 1000000000.0"),
    ("repeats = 1000001", "matrix[0].repeats: expected an integer >= 1 and <= 1000000"),
    ("repeats = 1000000000", "matrix[0].repeats: expected an integer >= 1 and <= 1000000"),
    ("repeats = 100001", "matrix[0]: the profile expands to 100001 jobs, over the limit of "
     "100000 (set $DLTOP_MAX_JOBS or [limits] max_jobs in config.toml"),
    (f"batch_sizes = {WIDE}\nlr = {WIDE}\nmomentum = {WIDE}", "matrix[0]: the profile expands to "
     "1000000000 jobs, over the limit of 100000"),
    ("eval_every = inf", 'matrix[0].eval_every: expected an integer >= 1 and <= 1000000000 '
     'or "epoch", got inf'),
    ('frameworks = ["command"]\ncommand = ["true"]\nmodels = ["' + "m" * 201 + '"]',
     "matrix[0].models[0]: expected at most 200 characters, got 201"),
    ('frameworks = ["command"]\ncommand = ["true"]\nsteps_per_match = 10000000\n'
     'iteration_regex = "took (?P<seconds>[0-9.]+)"',
     "matrix[0].steps_per_match: expected an integer >= 1 and <= 1000000, got 10000000"),
]
TOP_CASES = [
    ('name = "' + "n" * 201 + '"', "name: expected at most 200 characters, got 201"),
    ('[references]\n"fcn-r/torch/fp32" = { s_per_iter = [nan, -0.1, 0.1] }',
     'references."fcn-r/torch/fp32".s_per_iter: the reference must be a finite number > 0'),
    ('[references]\n"fcn-r/torch/fp32" = { s_per_iter = [inf, -0.1, 0.1] }',
     'references."fcn-r/torch/fp32".s_per_iter: the reference must be a finite number > 0 '
     "and <= 1e+15, got inf"),
    ('[references.site]\n"fcn-r/torch/fp32" = { s_per_iter = [1, nan, 0.1] }',
     'references.site."fcn-r/torch/fp32".s_per_iter: the lower tolerance is relative, from '
     "-1 to 0 (a finite number; -0.05: 5 % below), got nan"),
    ('[references]\n"fcn-r/torch/fp32" = { s_per_iter = [1, -0.1, nan] }',
     'references."fcn-r/torch/fp32".s_per_iter: the upper tolerance is relative, a finite '
     "number >= 0 and <= 100"),
    ('[references]\n"fcn-r/torch/fp32" = { s_per_iter = [1, -0.1, inf] }',
     'references."fcn-r/torch/fp32".s_per_iter: the upper tolerance is relative, a finite '
     "number >= 0 and <= 100 (0.10: 10 % above), got inf"),
]
SLURM = 'executor = "slurm"'


def short(case: object) -> str:
    return str(case)[:24]


@pytest.mark.parametrize(("entry", "message"), CASES, ids=short)
def test_each_absurd_value_is_refused_naming_file_key_and_range(entry: str,
                                                                message: str) -> None:
    assert refused(entry).startswith(f"p.toml: {message}")


@pytest.mark.parametrize(("top", "message"), TOP_CASES, ids=short)
def test_labels_references_and_tolerances_are_checked_too(top: str, message: str) -> None:
    assert refused(top=top).startswith(f"p.toml: {message}")


@pytest.mark.parametrize("key", ["gpus_per_node", "cpus_per_task", "cpus_per_gpu",
                                 "parallel"])
def test_slurm_counts_are_bounded_in_a_profile_and_a_system(key: str,
                                                            tmp_path: Path) -> None:
    most = {"gpus_per_node": 64, "parallel": 1000}.get(key, 4096)
    assert refused(SLURM, top=f"[slurm]\n{key} = {most + 1}").startswith(
        f"p.toml: slurm.{key}: expected an integer >= 1 and <= {most}, got {most + 1}")
    config = tmp_path / "config.toml"
    config.write_text(f"[systems.site]\n{key} = 100000\n")
    with pytest.raises(UserError, match=rf"config.toml: systems.site.{key}: expected an "
                       rf"integer >= 1 and <= {most}, got 100000"):
        load_system("site", config)
    config.write_text('[systems.site]\n[systems.site.references]\n'
                      '"*/*/*" = { s_per_iter = [nan, -0.1, 0.1] }\n')
    with pytest.raises(UserError, match=r"systems.site.references.\"\*/\*/\*\".s_per_iter: "
                       "the reference must be a finite number"):
        load_system("site", config)


def _numeric_settings() -> list[tuple[str, fields.Integer | fields.Number]]:
    out = []
    for key, f in settings().items():
        b = fields.bounds(f.metadata[fields.CHECK])
        if b is not None:
            out.append((key, b))
    return out


@pytest.mark.parametrize(("key", "bound"), _numeric_settings(), ids=short)
def test_every_numeric_setting_refuses_nan_infinities_and_its_bound_exceeded(
        key: str, bound: fields.Integer | fields.Number) -> None:
    """Read off the declarations: a setting added later gets this test with its range."""
    over = bound.maximum + 1 if isinstance(bound, fields.Integer) else bound.high * 2
    for value in ("nan", "inf", "-inf", str(over)):
        msg = refused(f"{key} = {value}")
        assert msg.startswith(f"p.toml: matrix[0].{key}: expected "), (value, msg)
        assert bound.expected in msg, (value, msg)


def test_the_ranges_cover_every_numeric_setting() -> None:
    numeric = {k for k, f in settings().items()
               if f.type in ("int", "float") or "int" in str(f.type) or "float" in str(f.type)}
    assert numeric == {k for k, _ in _numeric_settings()}
    assert {"lr", "seed", "timeout_s", "cooldown_s", "min_time_s", "eval_every"} <= numeric


def test_the_bounds_themselves_load() -> None:
    assert load(f"seed = {2**32 - 1}\ncooldown_s = 86400\ntimeout_s = 604800\n"
                f'batch_sizes = [{2**20}]\ndevices = ["cpus:4096", "gpu:64"]\nmomentum = 1') == 2


def test_the_job_limit_is_settable_and_allows_100000_by_default(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DLTOP_CONFIG", str(tmp_path / "config.toml"))
    assert load("repeats = 50000\n[[matrix]]\nrepeats = 50000") == 100_000
    assert refused("repeats = 50000\n[[matrix]]\nrepeats = 50001").startswith(
        "p.toml: matrix[1]: the profile expands to 100001 jobs, over the limit of 100000")
    (tmp_path / "config.toml").write_text("[limits]\nmax_jobs = 3\n")
    assert refused("repeats = 4").startswith("p.toml: matrix[0]: the profile expands to 4 "
                                             "jobs, over the limit of 3")
    monkeypatch.setenv("DLTOP_MAX_JOBS", "4")  # the variable wins over the config
    assert load("repeats = 4") == 4
    monkeypatch.setenv("DLTOP_MAX_JOBS", "many")
    with pytest.raises(UserError, match=r"\$DLTOP_MAX_JOBS='many': expected an integer >= 1"):
        load()
    monkeypatch.delenv("DLTOP_MAX_JOBS")
    (tmp_path / "config.toml").write_text("[limits]\nmax_jobs = 0\n")
    with pytest.raises(UserError, match=r"config.toml: limits.max_jobs: expected an integer"):
        load()


def test_profiles_that_fit_alone_are_refused_together(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DLTOP_MAX_JOBS", "5")
    one = parse(BASE.format(top="", entry="repeats = 3"), "a.toml", "a")
    two = parse(BASE.format(top="", entry="repeats = 3"), "b.toml", "b")
    with pytest.raises(UserError, match=r"a.toml \+ b.toml: the campaign holds 6 jobs, over "
                       "the limit of 5"):
        campaign.preflight([one, two], 0, skip_unavailable=True)


def test_a_spec_that_does_not_read_back_is_never_stored(tmp_path: Path) -> None:
    """A NaN past the loader (a spec built in code): the campaign is rolled back, where
    it used to be stored and then fail every run and --resume with "malformed JSON"."""
    (job,) = parse(BASE.format(top="", entry=""), "p.toml", "p").jobs
    store = Store(connect(tmp_path / "d.db"))
    good = campaign.Plan("ok", ("p",), JobList([((job,), 2)]), (None, None))
    assert campaign.store_plan(store, good, ["dltop"]) == 1
    bad = dataclasses.replace(job, lr=math.nan)
    plan = campaign.Plan("p", ("p",), JobList([((job, bad), 3)]), (None,) * 6)
    with pytest.raises(UserError, match="a job spec does not read back as it was stored"):
        campaign.store_plan(store, plan, ["dltop"])
    assert store.db.execute("select count(*) from campaigns").fetchone()[0] == 1
    assert store.db.execute("select count(*) from jobs").fetchone()[0] == 2
    assert store.db.execute("select count(*) from job_templates").fetchone()[0] == 1
    assert [j.lr for _, _, j in store.queue.queued_jobs(1)] == [job.lr, job.lr]


def dltop(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dltop", *args], capture_output=True,
                          text=True, timeout=60, cwd=tmp_path,
                          env={**os.environ, "DLTOP_DB": str(tmp_path / "d.db"),
                               "DLTOP_CONFIG": str(tmp_path / "config.toml"), **env})


@pytest.mark.parametrize(("entry", "key"), [
    ("lr = nan", "matrix[0].lr: expected a finite number > 0 and <= 1000, got nan"),
    (f"batch_sizes = {WIDE}\nlr = {WIDE}\nmomentum = {WIDE}",
     "matrix[0]: the profile expands to 1000000000 jobs"),
], ids=short)
def test_run_and_show_exit_2_before_anything_is_stored(tmp_path: Path, entry: str,
                                                       key: str) -> None:
    (tmp_path / "p.toml").write_text(BASE.format(top="", entry=entry))
    for args in (("run", "--headless", "p.toml"), ("profiles", "show", "p.toml")):
        res = dltop(tmp_path, *args)
        assert res.returncode == 2, res.stdout + res.stderr
        assert res.stderr.startswith(f"dltop: error: p.toml: {key}"), res.stderr
        assert len(res.stderr.splitlines()) == 1 and "Traceback" not in res.stderr
        assert not (tmp_path / "d.db").exists()


def test_profiles_show_prints_a_page_and_counts_the_rest(tmp_path: Path) -> None:
    (tmp_path / "p.toml").write_text(BASE.format(
        top="", entry='batch_sizes = [1, 2, 3, 4]\nrepeats = 25000'))
    res = dltop(tmp_path, "profiles", "show", "p.toml")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert "p.toml; 100000 jobs;" in lines[1]
    rows = [line for line in lines if line.split()[0].isdigit()]
    assert len(rows) == 50 and rows[-1].split()[:4] == ["50", "torch", "fcn-r", "2"]
    assert "# ... and 99950 more jobs (100000 in all, 4 configurations; --all lists them)" \
        in lines
    (tmp_path / "p.toml").write_text(BASE.format(top="", entry="repeats = 60"))
    res = dltop(tmp_path, "profiles", "show", "--all", "p.toml")
    rows = [line for line in res.stdout.splitlines() if line.split()[0].isdigit()]
    assert len(rows) == 60 and "more jobs" not in res.stdout


def test_docs_range_table_matches_the_declarations() -> None:
    doc = (Path(__file__).parents[2] / "docs" / "profiles.md").read_text()
    table = doc.split("## Value ranges")[1].split("\n## ")[0]
    for key, bound in _numeric_settings():
        accepts = f"a finite {bound.noun} {bound.expected}" \
            if isinstance(bound, fields.Number) else bound.expected
        assert f"| `{key}` | {accepts} |" in table, key


@pytest.mark.parametrize("entry,key", [
    ('data_loader = ["device", "host"]', "data_loader"),   # one_of
    ("channels_last = [true, false]", "channels_last"),     # boolean
    ("seed = [0, 1]", "seed"),                              # an integer
    ("timeout_s = [60, 120]", "timeout_s"),                 # a number
    ('compile = ["off", "default"]', "compile"),            # an option key
])
def test_a_list_for_a_key_that_does_not_sweep_says_so(entry: str, key: str) -> None:
    # A user sweeping a key that takes one value was told "unknown value ['device',
    # 'host'] (valid: device, host)": both values valid, the list was the problem.
    msg = refused(entry)
    assert msg.startswith(f"p.toml: matrix[0].{key}: expected ")
    assert msg.endswith(": " + fields.ONE_VALUE), msg
    assert "lr" not in refused('lr = [0.1, 0.2]\nseed = [0, 1]').split(":")[1]  # lr sweeps


@pytest.mark.parametrize(("entry", "error"), [
    ("repeats = true", "matrix[0].repeats: expected an integer >= 1 and <= 1000000, got true"),
    ("lr = false", "matrix[0].lr: expected a number > 0 and <= 1000, got false"),
    ("precision = true", "matrix[0].precision: unknown value true (valid: fp32"),
    ("cuda_graphs = [true, false]", "matrix[0].cuda_graphs: expected true or false, got "
     "[true, false]: this key takes one value"),
    ("devices = [true]", "matrix[0].devices[0]: expected a string like 'cpu:2', 'cpus:2' or "
     "'gpu:1', got true"),
    ("models = true", "matrix[0].models: expected a non-empty list, got true"),
    ("inject = true", "matrix[0].inject: unknown value true (valid:"),
    ("xla = [true]", "matrix[0].xla: expected one of true, false, got [true]"),
])
def test_a_toml_boolean_is_quoted_as_toml_writes_it(entry: str, error: str) -> None:
    """A user who wrote `true` reads `got true` in the error, not Python's `True`."""
    message = refused(entry)
    assert error in message
    assert "True" not in message and "False" not in message
