"""``extra_args``/``srun_args`` read as Slurm reads them (issue 38 item 3).

Pure: :mod:`dltop.profiles.slurmopts` resolves prefixes, bundles and values as
getopt_long does with Slurm 22.05's option tables, and the loader refuses every option
that changes a job's shape, placement, files or lifetime, in a profile and in a
system, naming the file and the key. (tests/slurm/test_slurm_help.py checks the tables
against the installed ``sbatch --help`` and ``srun --help``.)
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from dltop.errors import UserError
from dltop.jobs.executors.slurm_files import SlurmFiles
from dltop.jobs.executors.slurm_script import sbatch_argv, srun_argv
from dltop.profiles import slurmopts
from dltop.profiles.jobspec import JobSpec
from dltop.profiles.loader import parse
from dltop.profiles.slurm import check_args
from dltop.profiles.slurmopts import OptionError
from dltop.systems import load_system

PROFILE = """
name = "p"
[defaults]
iterations = 3
executor = "slurm"
[[matrix]]
frameworks = ["torch"]
models = ["fcn-r"]
batch_sizes = [8]
devices = ["{device}"]
{slurm}
"""


def load(slurm: str, device: str = "cpu:1") -> JobSpec:
    (job,) = parse(PROFILE.format(slurm=slurm, device=device), "p.toml", "p",
                   logical_cores=4).jobs
    return job


def refused(key: str, args: list[str]) -> str:
    with pytest.raises(UserError) as info:
        load(f"[slurm]\n{key} = {args!r}".replace("'", '"'))
    return str(info.value)


# Every case of the issue: each loaded and acted before.
ISSUE_CASES = [
    ("-vN2", "-N is --nodes", "the key nodes"),
    ("--partit=gpu", "--partit is --partition", "slurm.partition"),
    ("--cpus-per-t=2", "--cpus-per-t is --cpus-per-task", "slurm.cpus_per_task"),
    ("--mem-per-c=1G", "--mem-per-c is --mem-per-cpu", "slurm.mem"),
    ("--exclus", "--exclus is --exclusive", "slurm.exclusive"),
    ("--ntasks-per-n=2", "--ntasks-per-n is --ntasks-per-node", "the key nodes"),
    ("--outp=/x", "--outp is --output", "the job's files or folder"),
    ("--chd=/", "--chd is --chdir", "the job's files or folder"),
    ("--time-m=1", "--time-m is --time-min", "slurm.time"),
    ("--array=0-999", "--array would change the job's lifetime", "dltop controls"),
]


@pytest.mark.parametrize(("arg", "resolved", "why"), ISSUE_CASES)
def test_the_issue_s_abbreviated_and_bundled_options_are_refused_in_a_profile(
        arg: str, resolved: str, why: str) -> None:
    msg = refused("extra_args", [arg])
    assert msg.startswith(f"p.toml: slurm.extra_args: {arg!r}: "), msg
    assert resolved in msg and why in msg, msg


@pytest.mark.parametrize(("arg", "resolved", "why"), ISSUE_CASES)
def test_the_issue_s_cases_are_refused_in_a_system_naming_the_config(
        tmp_path: Path, arg: str, resolved: str, why: str) -> None:
    conf = tmp_path / "config.toml"
    conf.write_text(f"[systems.site]\nextra_args = [{arg!r}]\n".replace("'", '"'))
    with pytest.raises(UserError) as info:
        load_system("site", conf)
    msg = str(info.value)
    assert msg.startswith(f"{conf}: systems.site.extra_args: {arg!r}: "), msg
    assert resolved in msg and why in msg, msg


@pytest.mark.parametrize("arg", ["-vN2", "--partit=gpu", "--cpus-per-t=2", "--mem-per-c=1G",
                                 "--exclus", "--ntasks-per-n=2", "--outp=/x", "--chd=/",
                                 "--time-m=1", "--ntasks 2", "-n 2", "--exact", "-K1",
                                 "--overl", "--jobid=7"])
def test_srun_args_are_read_as_srun_reads_them(arg: str) -> None:
    msg = refused("srun_args", arg.split())
    assert msg.startswith("p.toml: slurm.srun_args: "), msg


@pytest.mark.parametrize(("args", "names", "values"), [
    (["--partit=gpu"], ["--partition"], ["gpu"]),
    (["--partit", "gpu"], ["--partition"], ["gpu"]),  # the value as the next argument
    (["-pgpu"], ["--partition"], ["gpu"]),
    (["-p", "gpu"], ["--partition"], ["gpu"]),
    (["-vvN2"], ["--verbose", "--verbose", "--nodes"], [None, None, "2"]),
    (["-vN", "2"], ["--verbose", "--nodes"], [None, "2"]),
    (["--mem=1G"], ["--mem"], ["1G"]),  # exact beats --mem-bind, --mem-per-cpu...
    (["--mem-b=local"], ["--mem-bind"], ["local"]),
    (["--exclusive=user"], ["--exclusive"], ["user"]),  # an optional value: after "=" only
    (["--exclusive"], ["--exclusive"], [None]),
    (["--comment", "-N2"], ["--comment"], ["-N2"]),  # a value, whatever it looks like
    (["--tasks-per=2"], ["--ntasks-per-node"], ["2"]),  # an alias is the option
    (["-H"], ["--hold"], [None]),
])
def test_options_resolve_as_getopt_long_resolves_them(
        args: list[str], names: list[str], values: list[str | None]) -> None:
    parsed = slurmopts.parse(args, "sbatch")
    assert [p.name for p in parsed] == names
    assert [p.value for p in parsed] == values


def test_srun_s_aliases_and_its_own_table() -> None:
    assert [p.name for p in slurmopts.parse(["--cpu_b=cores", "-l"], "srun")] == \
        ["--cpu-bind", "--label"]
    # -W is sbatch's --wait (no value) and srun's --wait=SECONDS
    assert [p.value for p in slurmopts.parse(["-W", "5"], "srun")] == ["5"]
    with pytest.raises(OptionError, match="'5' is not an option"):
        slurmopts.parse(["-W", "5"], "sbatch")


@pytest.mark.parametrize(("args", "command", "expected"), [
    (["--m=1"], "sbatch", "'--m=1': --m is ambiguous for sbatch (--mail-type"),
    (["--co=x"], "sbatch", "--co is ambiguous for sbatch (--comment, --constraint"),
    (["--cpu=x"], "srun", "--cpu is ambiguous for srun (--cpu-bind, --cpu-freq"),
    (["--partitio=a", "gpu"], "sbatch", "'gpu' is not an option: sbatch would stop reading"),
    (["--"], "sbatch", "'--' is not an option"),
    (["-"], "srun", "'-' is not an option"),
    (["--nope=1"], "sbatch", "'--nope=1': --nope is not an option of sbatch"),
    (["-y"], "sbatch", "'-y': -y is not an option of sbatch"),
    (["--hold=yes"], "sbatch", "'--hold=yes': --hold takes no value"),
    (["--array=1"], "srun", "--array is not an option of srun"),
])
def test_what_slurm_would_refuse_or_misread_is_an_error(
        args: list[str], command: str, expected: str) -> None:
    with pytest.raises(OptionError) as info:
        slurmopts.parse(args, command)
    assert expected in str(info.value)


def test_a_missing_value_at_the_end_is_marked_not_guessed() -> None:
    (p,) = slurmopts.parse(["--qos"], "sbatch")
    assert p.missing and p.value is None
    # sbatch would read batch.sh as the value: refused
    assert check_args(("--qos",), "sbatch") == "'--qos': --qos needs a value"
    assert "slurm.time" in str(check_args(("-t",), "sbatch"))


@pytest.mark.parametrize("args", [
    ["--qos=short"], ["--qos", "short"], ["-q", "short"], ["--constraint=a100"],
    ["-C", "a100"], ["--reservation=r1"], ["--comment=x y"], ["--mail-type=END,FAIL"],
    ["--mail-user=a@b.c"], ["--begin=now+1hour"], ["-v"], [],
    ["--qos=short", "--comment", "--nodes=2"],  # the last is --comment's value
])
def test_the_allow_list_passes(args: list[str]) -> None:
    assert check_args(tuple(args), "sbatch") is None


@pytest.mark.parametrize("args", [["--cpu-bind=cores"], ["--cpu_bind", "cores"], ["-l"],
                                  ["--gpu-bind=closest"], ["--mem-bind=local"], ["-u"]])
def test_the_srun_allow_list_passes(args: list[str]) -> None:
    assert check_args(tuple(args), "srun") is None


@pytest.mark.parametrize(("arg", "expected"), [
    ("--account=x", "use the key slurm.account instead"),
    ("--dependency=afterok:1", "--dependency would change the job's lifetime"),
    ("--requeue", "--requeue would change the job's lifetime"),
    ("--nodelist=n1", "--nodelist would change where the job runs"),
    ("--gres=gpu:1", "slurm.gpus_per_node"),
    ("--oversub", "--oversub is --oversubscribe: dltop sets --oversubscribe itself"),
    ("--err=/tmp/e", "--err is --error"),
    ("--wrap=true", "what the job runs"),
    ("--network=x", "the job's shape"),
    ("--power=x", "--power is not one dltop passes to sbatch (allowed: --begin,"),
])
def test_refusals_name_the_option_and_what_to_do(arg: str, expected: str) -> None:
    assert expected in str(check_args((arg,), "sbatch"))


def _files(tmp_path: Path) -> SlurmFiles:
    return SlurmFiles(tmp_path, tmp_path / "spec.json", tmp_path / "runner.log")


def test_dltop_s_own_options_come_last_so_they_win(tmp_path: Path) -> None:
    job = load('[slurm]\nextra_args = ["--qos=short", "--comment", "x"]\n'
               'srun_args = ["--cpu-bind=cores"]')
    argv = sbatch_argv(job, 7, _files(tmp_path))
    assert argv[:4] == ["sbatch", "--qos=short", "--comment", "x"]
    assert argv.index("--nodes=1") > 3 and argv[-1] == str(tmp_path / "batch.sh")
    srun = srun_argv(job, 7)
    assert srun[:2] == ["srun", "--cpu-bind=cores"]
    assert srun.index("--ntasks=1") > 1


def test_the_step_s_shape_is_explicit(tmp_path: Path) -> None:
    """No outer SLURM_* variable can change what srun is told (issue 38 item 2)."""
    cpu = srun_argv(load("", device="cpu:2"), 7)
    assert {"--nodes=1", "--ntasks=1", "--ntasks-per-node=1", "--cpus-per-task=2",
            "--gres=none", "--mem=0"} <= set(cpu)
    gpu = srun_argv(load("[slurm]\ngpus_per_node = 2", device="gpu:2"), 7, cpus_per_gpu=8)
    assert {"--ntasks=1", "--gpus-per-node=2", "--cpus-per-task=16"} <= set(gpu)
    assert "--gres=none" not in gpu
    # without a CPU count Slurm's default is asked for, not whatever the environment says
    assert "--cpus-per-task=1" in srun_argv(load("", device="gpu:1"), 7)
    two = sbatch_argv(dataclasses.replace(load(""), nodes=2), 7, _files(tmp_path))
    assert {"--nodes=2", "--ntasks=2", "--ntasks-per-node=1"} <= set(two)


def test_a_system_s_srun_args_are_checked_as_srun_reads_them(tmp_path: Path) -> None:
    conf = tmp_path / "config.toml"
    conf.write_text('[systems.site]\nsrun_args = ["--cpu-bind=cores", "-lN2"]\n')
    with pytest.raises(UserError) as info:
        load_system("site", conf)
    assert str(info.value) == (f"{conf}: systems.site.srun_args: '-lN2': -N is --nodes: "
                               "dltop sets --nodes itself (use the key nodes instead)")
    conf.write_text('[systems.site]\nsrun_args = ["--cpu-bind=cores", "-l"]\n'
                    'extra_args = ["--qos", "high", "-C", "a100"]\n')
    assert load_system("site", conf).slurm["extra_args"] == ["--qos", "high", "-C", "a100"]


def test_every_option_the_policy_names_is_one_slurm_has() -> None:
    from dltop.profiles import slurm

    for command, allowed in slurm.ALLOWED.items():
        assert allowed <= set(slurmopts.TABLES[command]), command
    known = set(slurmopts.TABLES["sbatch"]) | set(slurmopts.TABLES["srun"])
    assert set(slurm._SHAPE) | set(slurm._REFUSED) <= known
    # and every option is decided: allowed somewhere, or refused with its reason
    assert not set(slurm._SHAPE) & set(slurm._REFUSED)
    assert not (set(slurm._SHAPE) | set(slurm._REFUSED)) & (slurm.ALLOWED["sbatch"]
                                                              | slurm.ALLOWED["srun"])
