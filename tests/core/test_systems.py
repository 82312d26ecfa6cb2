"""Sites: ``[systems.NAME]`` of the config file, ``dltop run --system``, and references
resolved at load (issue 33 items 6 and 7)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dltop import cli
from dltop.errors import UserError
from dltop.profiles.loader import parse
from dltop.results.idread import identity_of
from dltop.systems import load_system

CONFIG = """
[systems.jureca]
partition = "dc-gpu"
account = "proj123"
gpus_per_node = 4
cpus_per_gpu = 32
setup = ["module load CUDA/12"]
container = "nvcr.io#nvidia/pytorch:24.01-py3"
parallel = 3

[systems.jureca.references]
"gpt-tiny/torch/fp32" = { tokens_per_s = [510000, -0.05, 0.10] }
"fcn-r/*/*" = { s_per_iter = [0.5, -0.1, 0.1] }

[systems.desk]
executor = "local"
"""

PROFILE = """
name = "p"
[defaults]
iterations = 2
warmup = 1
{executor}
[[matrix]]
frameworks = ["torch"]
models = ["fcn-r", "gpt-tiny"]
batch_sizes = [8]
devices = ["gpu:1"]
{extra}
"""


@pytest.fixture
def conf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A config file where dltop reads it ($XDG_CONFIG_HOME/dltop/config.toml)."""
    monkeypatch.delenv("DLTOP_CONFIG", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    path = tmp_path / "xdg" / "dltop" / "config.toml"
    path.parent.mkdir(parents=True)
    path.write_text(CONFIG)
    return path


def jobs(text: str, system: str | None) -> dict[str, Any]:
    sys_ = None if system is None else load_system(system)
    return {j.model: j for j in parse(text, "p.toml", "p", system=sys_).jobs}


def test_a_system_fills_the_slurm_table_and_is_identity(conf: Path) -> None:
    text = PROFILE.format(executor="", extra='[slurm]\naccount = "mine"\n')
    on = jobs(text, "jureca")
    job = on["fcn-r"]
    # the system's executor is the jobs' default; its keys the [slurm] table's defaults,
    # the profile's own keys win
    assert job.executor == "slurm" and job.system == "jureca"
    assert job.slurm.partition == "dc-gpu" and job.slurm.account == "mine"
    assert job.slurm.cpus_per_gpu == 32 and job.slurm.parallel == 3
    assert job.slurm.setup == ("module load CUDA/12",)
    # the system's references, resolved per configuration and stored in the spec
    assert [(r.metric, r.value, r.lower, r.upper) for r in job.references] == \
        [("s_per_iter", 0.5, -0.1, 0.1)]
    assert [r.pattern for r in on["gpt-tiny"].references] == ["gpt-tiny/torch/fp32"]
    # identity: two systems' runs never pool; a run without a system reads as before
    off = jobs(PROFILE.format(executor='executor = "slurm"',
                              extra='[slurm]\naccount = "mine"\n'), None)["fcn-r"]
    assert job.config_key != off.config_key
    assert identity_of(json.dumps(job.to_json_dict()), None)["system"] == "jureca"
    assert "system" not in identity_of(json.dumps(off.to_json_dict()), None)


def test_a_local_system_names_the_runs_only(conf: Path) -> None:
    job = jobs(PROFILE.format(executor="", extra=""), "desk")["fcn-r"]
    assert job.executor == "local" and job.system == "desk" and job.slurm is None


@pytest.mark.parametrize(("text", "expected"), [
    ("[systems.jureca]\npartiton = 'x'\n", r"systems\.jureca\.partiton: unknown key"),
    ("[systems.jureca]\nparallel = 0\n", r"systems\.jureca\.parallel: expected an integer"),
    ("[systems.jureca]\nextra_args = ['-N2']\n", r"systems\.jureca\.extra_args: '-N2'"),
    ("[systems.jureca]\nexecutor = 'local'\npartition = 'x'\n",
     r"systems\.jureca\.partition: a Slurm key on a system with executor = \"local\""),
    ("[systems.jureca.references]\n\"fcn-r/torch/fp32\" = { flops = [1, 0, 0] }\n",
     r"systems\.jureca\.references\.\"fcn-r/torch/fp32\"\.flops: unknown metric"),
    ("[systems.jureca.references]\n\"fcn-r/torch/fp32\" = { s_per_iter = [1, 0.1, 0] }\n",
     r"lower tolerance is relative, from -1 to 0"),
    ("[systems.other]\n", r"systems\.jureca: no such system \(defined: other\)"),
])
def test_bad_system_names_the_file_and_the_key(conf: Path, text: str, expected: str) -> None:
    conf.write_text(text)
    with pytest.raises(UserError, match=expected) as err:
        load_system("jureca")
    assert str(conf) in str(err.value)


def test_profile_references_per_system_win_over_the_config(conf: Path) -> None:
    extra = """
[references]
"fcn-r/torch/fp32/gpu:1/b8" = { s_per_iter = [0.2, -0.5, 0.5] }
[references.jureca]
"fcn-r/torch/*" = { s_per_iter = [0.3, -0.5, 0.5] }
[references.elsewhere]
"fcn-r/torch/*" = { s_per_iter = [9, -0.5, 0.5] }
"""
    text = PROFILE.format(executor="", extra=extra)
    assert [r.value for r in jobs(text, "jureca")["fcn-r"].references] == [0.3]
    assert [r.value for r in jobs(text, None)["fcn-r"].references] == [0.2]
    with pytest.raises(UserError, match=r"p\.toml: references\.\"fcn-r/torch/fp32\"\."
                       r"tokens_per_s: fcn-r's throughput is counted in samples/s"):
        parse(PROFILE.format(executor="", extra='[references]\n"fcn-r/torch/fp32" = '
                             '{ tokens_per_s = [1, -0.1, 0.1] }\n'), "p.toml", "p")
    with pytest.raises(UserError, match=r"p\.toml: references\.\"fcn-r/caffe/fp32\": unknown "
                       "framework"):
        parse(PROFILE.format(executor="", extra='[references]\n"fcn-r/caffe/fp32" = '
                             '{ s_per_iter = [1, -0.1, 0.1] }\n'), "p.toml", "p")


def test_run_with_an_unknown_system_exits_2_and_stores_nothing(
        conf: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profile = tmp_path / "p.toml"
    profile.write_text(PROFILE.format(executor="", extra=""))
    db = tmp_path / "d.db"
    assert cli.main(["run", "--db", str(db), "--system", "nope", str(profile)]) == 2
    err = capsys.readouterr().err
    assert f"{conf}: systems.nope: no such system (defined: desk, jureca)" in err
    assert "Traceback" not in err and not db.exists()
    conf.write_text("[systems.nope]\nmem = 'lots'\n")
    assert cli.main(["run", "--db", str(db), "--system", "nope", str(profile)]) == 2
    assert f"{conf}: systems.nope.mem: expected Slurm memory" in capsys.readouterr().err
    assert not db.exists()


def test_a_systems_cpus_per_gpu_shapes_the_job_without_asking_sinfo(
        conf: Path, tmp_path: Path) -> None:
    import asyncio

    from dltop.jobs.executors.slurm_files import SlurmFiles
    from dltop.jobs.executors.slurm_query import cores_per_gpu
    from dltop.jobs.executors.slurm_script import sbatch_argv

    job = jobs(PROFILE.format(executor="", extra=""), "jureca")["fcn-r"]
    # an empty PATH: sinfo cannot be what answers
    per_gpu = asyncio.run(cores_per_gpu(job, {"PATH": str(tmp_path / "empty")}))
    assert per_gpu == 32
    argv = sbatch_argv(job, 1, SlurmFiles(tmp_path, tmp_path / "spec.json",
                                          tmp_path / "runner.log"), per_gpu)
    assert {"--partition=dc-gpu", "--account=proj123", "--gpus-per-node=4",
            "--cpus-per-task=128"} <= set(argv)


def test_a_system_s_short_time_names_the_config_not_the_profile(conf: Path) -> None:
    conf.write_text("[systems.short]\ntime = 5\n[systems.few]\ngpus_per_node = 1\n")
    text = PROFILE.format(executor="", extra="").replace("warmup = 1",
                                                         "warmup = 1\ntimeout_s = 600")
    with pytest.raises(UserError) as err:
        jobs(text, "short")
    msg = str(err.value)
    assert msg.startswith(f"{conf}: systems.short.time: '5' (300 s) is shorter than "
                          "the job's timeout_s = 600"), msg
    with pytest.raises(UserError) as err:
        jobs(text.replace('devices = ["gpu:1"]', 'devices = ["gpu:2"]'), "few")
    assert str(err.value).startswith(f"{conf}: systems.few.gpus_per_node: 1 is fewer"), err
    # the profile's own value is the profile's to name
    with pytest.raises(UserError) as err:
        jobs(text + '[slurm]\ntime = "6"\n', "short")
    assert str(err.value).startswith("p.toml: slurm.time: '6' (360 s)"), err
