"""The profile keys of Slurm runs: ``nodes``, ``executor`` and the ``[slurm]`` table.

Pure loader checks (no Slurm needed): every mistake exits 2 naming the file and key.
"""

from __future__ import annotations

import pytest

from dltop.errors import UserError
from dltop.profiles.jobspec import JobSpec
from dltop.profiles.loader import parse
from dltop.profiles.slurm import SlurmSettings

BASE = """
name = "c"
[defaults]
iterations = 3
{defaults}
[[matrix]]
frameworks = ["{fw}"]
models = ["fcn-r"]
batch_sizes = [8]
devices = ["{device}"]
{entry}
{slurm}
"""


def load(defaults: str = "", entry: str = "", slurm: str = "", fw: str = "torch",
         device: str = "cpu:1") -> list[JobSpec]:
    text = BASE.format(defaults=defaults, entry=entry, slurm=slurm, fw=fw, device=device)
    return list(parse(text, "c.toml", "c", logical_cores=4).jobs)


def err(**kw: str) -> str:
    with pytest.raises(UserError) as info:
        load(**kw)
    msg = str(info.value)
    assert msg.startswith("c.toml: "), msg
    return msg


def test_nodes_sweep_with_the_slurm_executor() -> None:
    jobs = load(defaults='executor = "slurm"', entry="nodes = [1, 2, 4]",
                slurm='[slurm]\npartition = "gpu"\ntime = "00:30:00"\n'
                      'extra_args = ["--qos=short"]\nsetup = ["module load cuda"]')
    assert [j.nodes for j in jobs] == [1, 2, 4]
    assert {j.executor for j in jobs} == {"slurm"}
    assert jobs[0].slurm == SlurmSettings(partition="gpu", time="00:30:00",
                                          extra_args=("--qos=short",),
                                          setup=("module load cuda",))
    # nodes is identity: the three are different configurations
    assert len({j.config_key for j in jobs}) == 3
    assert jobs[2].describe() == "torch fcn-r b8 cpu:1 x4 nodes #1"
    # a global batch is split over every worker of every node
    assert [j.per_device_batch for j in jobs] == [8, 4, 2]
    assert JobSpec.from_json_dict(jobs[2].to_json_dict()) == jobs[2]


def test_local_jobs_default_to_one_node_and_no_slurm() -> None:
    job = load()[0]
    assert (job.nodes, job.executor, job.slurm) == (1, "local", None)
    assert '"nodes":1' in job.config_key


def test_nodes_beyond_one_need_slurm() -> None:
    msg = err(entry="nodes = 2")
    assert "matrix[0].nodes" in msg and 'executor = "slurm"' in msg


def test_a_command_job_spans_one_node() -> None:
    msg = err(defaults='executor = "slurm"', entry='nodes = 2\ncommand = ["true"]',
              fw="command")
    assert "matrix[0].nodes" in msg and "command" in msg


def test_tensorflow_spans_nodes_with_one_worker_per_node() -> None:
    jobs = load(defaults='executor = "slurm"', entry="nodes = [1, 2]", fw="tensorflow",
                device="gpu:2")
    assert [(j.nodes, j.world_size, j.per_device_batch) for j in jobs] == [(1, 2, 4),
                                                                          (2, 4, 2)]
    msg = err(defaults='executor = "slurm"', entry="nodes = 2", fw="tensorflow",
              device="cpus:2")
    assert "matrix[0].nodes" in msg and "cpus:2 runs on one node" in msg and "cpu:N" in msg
    msg = err(defaults='executor = "slurm"', entry="nodes = 2", fw="cntk")
    assert "matrix[0].nodes" in msg and "cntk runs on one node" in msg


def test_unknown_slurm_key() -> None:
    msg = err(defaults='executor = "slurm"', slurm='[slurm]\npartiton = "gpu"')
    assert "slurm.partiton: unknown key" in msg


def test_gpus_per_node_below_the_device() -> None:
    msg = err(defaults='executor = "slurm"', device="gpu:4",
              slurm="[slurm]\ngpus_per_node = 2")
    assert "slurm.gpus_per_node" in msg and "gpu:4" in msg


@pytest.mark.parametrize(("slurm", "key"), [
    ('[slurm]\ntime = "half an hour"', "slurm.time"),
    ("[slurm]\ncpus_per_task = 0", "slurm.cpus_per_task"),
    ('[slurm]\nextra_args = ["--nodes=3"]', "slurm.extra_args"),
    ('[slurm]\nsetup = "module load x"', "slurm.setup"),
    ('[slurm]\npartition = ""', "slurm.partition"),
])
def test_bad_slurm_values(slurm: str, key: str) -> None:
    assert key in err(defaults='executor = "slurm"', slurm=slurm)


def test_a_slurm_table_nobody_uses_is_an_error() -> None:
    msg = err(slurm='[slurm]\npartition = "gpu"')
    assert "c.toml: slurm:" in msg and 'executor = "slurm"' in msg


def test_unknown_executor() -> None:
    assert "executor" in err(defaults='executor = "k8s"')


def test_global_batch_must_divide_over_all_nodes() -> None:
    msg = err(defaults='executor = "slurm"', entry="nodes = [3]")
    assert "does not divide over 3 workers (cpu:1 x 3 nodes)" in msg


@pytest.mark.parametrize(("arg", "instead"), [
    ("-N2", "the key nodes"), ("--nodes=2", "the key nodes"), ("-n", "the key nodes"),
    ("--ntasks=4", "the key nodes"), ("--ntasks-per-node=2", "the key nodes"),
    ("-t10", "slurm.time"), ("--time=1", "slurm.time"), ("--gpus=2", "slurm.gpus_per_node"),
    ("--gpus-per-task=1", "slurm.gpus_per_node"), ("--gres=gpu:2", "slurm.gpus_per_node"),
    ("-c4", "slurm.cpus_per_task"), ("--mem=4G", "slurm.mem"),
    ("--exclusive", "slurm.exclusive"), ("--oversubscribe", "slurm.exclusive"),
    ("-pgpu", "slurm.partition"), ("--export=NONE", "which dltop controls"),
])
def test_extra_args_that_change_the_job_shape_are_refused_naming_the_key(
        arg: str, instead: str) -> None:
    for key in ("extra_args", "srun_args"):
        msg = err(defaults='executor = "slurm"', slurm=f'[slurm]\n{key} = ["{arg}"]')
        assert f"slurm.{key}:" in msg and repr(arg) in msg, msg
        assert instead in msg, msg


def test_a_slurm_time_shorter_than_timeout_s_is_a_load_error() -> None:
    msg = err(defaults='executor = "slurm"\ntimeout_s = 600', slurm='[slurm]\ntime = "9"')
    assert "slurm.time" in msg and "540 s" in msg and "timeout_s = 600" in msg
    # D-H:M:S and M:S forms count too; as long as timeout_s is fine
    assert load(defaults='executor = "slurm"\ntimeout_s = 600',
                slurm='[slurm]\ntime = "10:00"')[0].slurm.time == "10:00"  # type: ignore[union-attr]
    assert "slurm.time" in err(defaults='executor = "slurm"\ntimeout_s = 90000',
                               slurm='[slurm]\ntime = "1-00:59:59"')


def test_a_bare_number_is_slurm_s_minutes_or_megabytes() -> None:
    (j,) = load(defaults='executor = "slurm"\ntimeout_s = 600', slurm="[slurm]\ntime = 30\nmem = 0")
    assert j.slurm is not None and (j.slurm.time, j.slurm.mem) == ("30", "0")
    assert "slurm.time" in err(defaults='executor = "slurm"', slurm="[slurm]\ntime = 0")
    msg = err(defaults='executor = "slurm"', slurm="[slurm]\nmem = true")
    assert "slurm.mem" in msg and 'expected Slurm memory per node ("64G"' in msg


def test_job_shape_keys_and_their_defaults() -> None:
    (j,) = load(defaults='executor = "slurm"', slurm="[slurm]\npartition = \"gpu\"")
    assert j.slurm is not None
    assert j.slurm.exclusive and j.slurm.mem is None and j.slurm.container is None
    (j,) = load(defaults='executor = "slurm"',
                slurm='[slurm]\nexclusive = false\nmem = "64G"\nsrun_args = ["--cpu-bind=cores"]\n'
                      'container = "/img/torch.sif"\ncontainer_runtime = "apptainer"')
    assert j.slurm == SlurmSettings(exclusive=False, mem="64G", srun_args=("--cpu-bind=cores",),
                                    container="/img/torch.sif", container_runtime="apptainer")
    assert JobSpec.from_json_dict(j.to_json_dict()) == j
    assert "slurm.mem" in err(defaults='executor = "slurm"', slurm='[slurm]\nmem = "lots"')
    assert "slurm.exclusive" in err(defaults='executor = "slurm"',
                                    slurm='[slurm]\nexclusive = "yes"')
    assert "pyxis, apptainer" in err(defaults='executor = "slurm"',
                                     slurm='[slurm]\ncontainer = "x"\ncontainer_runtime = "docker"')
