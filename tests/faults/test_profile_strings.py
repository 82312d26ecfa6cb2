"""Issue 27: no profile string can become an ``#SBATCH`` line or a command.

The known injection is a model label ``lab\\n#SBATCH --dependency=...\\ntouch ...``:
written into the comment line of ``batch.sh``, its second line was a directive
and its third a command. Every profile string holding a line break is now refused
at load (exit 2 naming the key, nothing stored); the one script line a label
reaches escapes it as well, for a spec that never went through the loader.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from dltop.errors import UserError
from dltop.jobs.executors.slurm_files import SlurmFiles
from dltop.jobs.executors.slurm_script import batch_script
from dltop.profiles.loader import parse

INJECTION = "lab\n#SBATCH --dependency=afterok:1\ntouch {marker}"
PROFILE = """
name = {name}
[defaults]
iterations = 2
warmup = 0
timeout_s = 60
[[matrix]]
frameworks = ["command"]
models = [{label}]
batch_sizes = [1]
devices = ["cpu:1"]
command = ["/bin/true"]
{extra}
"""


def toml(text: str) -> str:
    """A TOML basic string holding ``text``, control characters as ``\\uXXXX`` escapes."""
    return '"' + "".join(f"\\u{ord(c):04x}" if c in '"\\' or ord(c) < 0x20
                         or 0x7f <= ord(c) <= 0x9f or c in "\u2028\u2029" else c
                         for c in text) + '"'


def profile(name: str = "p", label: str = "lab", extra: str = "") -> str:
    return PROFILE.format(name=toml(name), label=toml(label), extra=extra)


@pytest.mark.parametrize("where", ["label", "slurm.setup"])
def test_dltop_run_refuses_the_sbatch_injection_naming_the_key(tmp_path: Path,
                                                              where: str) -> None:
    marker = tmp_path / "pwned"
    evil = INJECTION.format(marker=marker)
    text = (profile(label=evil) if where == "label" else
            profile(extra=f'executor = "slurm"\n[slurm]\nsetup = ["module load x", {toml(evil)}]'))
    (tmp_path / "p.toml").write_text(text)
    res = subprocess.run([sys.executable, "-m", "dltop", "run", "--headless",
                          str(tmp_path / "p.toml")], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "DLTOP_DB": str(tmp_path / "d.db")})
    assert res.returncode == 2, res.stdout + res.stderr
    key = "matrix[0].models[0]" if where == "label" else "slurm.setup[1]"
    assert f"p.toml: {key}: a newline in 'lab\\n#SBATCH" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "d.db").exists() and not marker.exists()


@pytest.mark.parametrize(("extra", "key"), [
    ("", "name"),
    ('iteration_regex = "took (?P<seconds>[0-9.]+)@"', "matrix[0].iteration_regex"),
    ('cwd = "/tmp@"', "matrix[0].cwd"),
    ('data = "real"\ndata_dir = "/d@"', "matrix[0].data_dir"),
    ('executor = "slurm"\n[slurm]\npartition = "gpu@"', "slurm.partition"),
    ('executor = "slurm"\n[slurm]\nextra_args = ["--qos=x@"]', "slurm.extra_args[0]"),
    ('executor = "slurm"\n[slurm]\ntime = "10@"', "slurm.time"),
])
def test_every_other_string_key_refuses_a_line_break(extra: str, key: str) -> None:
    for brk in ("\n", "\r", "\u2028", "\x0b", "\x00"):
        evil = "x" + brk + "#SBATCH --dependency=afterok:1"
        text = (profile(name=evil) if key == "name" else
                profile(extra=extra.replace("@", toml(evil)[1:-1])))
        with pytest.raises(UserError) as info:
            parse(text, "p.toml", "p", logical_cores=2)
        assert str(info.value).startswith(f"p.toml: {key}: "), (repr(brk), str(info.value))
        assert "one line" in str(info.value)


def test_defaults_and_key_names_are_checked_too() -> None:
    text = profile().replace("[defaults]\n", '[defaults]\nmodels = ["a\\nb"]\n')
    with pytest.raises(UserError, match=r"p.toml: defaults.models\[0\]: a newline"):
        parse(text, "p.toml", "p", logical_cores=2)
    text = profile(extra='env = { "A\\nB" = "1" }')
    with pytest.raises(UserError, match="a newline in a key name"):
        parse(text, "p.toml", "p", logical_cores=2)


def test_multiline_description_command_and_env_values_still_load() -> None:
    text = profile(extra='env = { SCRIPT = "a\\nb" }').replace(
        'command = ["/bin/true"]', 'command = ["python3", "-c", "import sys\\nprint(1)"]')
    text = 'description = """two\nlines"""\n' + text
    (job,) = parse(text, "p.toml", "p", logical_cores=2).jobs
    assert job.model == "lab"


def test_a_label_in_batch_sh_cannot_become_a_directive_or_a_command(tmp_path: Path) -> None:
    text = profile(label="lab\x1b[2J", extra='executor = "slurm"')
    (job,) = parse(text, "p.toml", "p", logical_cores=2).jobs  # ESC loads; it is escaped
    files = SlurmFiles(tmp_path, tmp_path / "spec.json", tmp_path / "runner.log")
    script = batch_script(job, 7, files)
    assert "# dltop run 7: command lab\\x1b[2J b1 cpu:1 #1 (generated" in script
    assert "\x1b" not in script
    # a spec that never went through the loader (a stored spec edited by hand)
    marker = tmp_path / "pwned"
    forged = replace(job, model=INJECTION.format(marker=marker))
    script = batch_script(forged, 7, files)
    lines = script.splitlines()
    assert not [ln for ln in lines if ln.startswith("#SBATCH") or ln.startswith("touch")]
    assert lines[1].startswith("# dltop run 7: command lab\\n#SBATCH --dependency=afterok:1"
                               f"\\ntouch {marker} b1")
    # and run: bash with a stand-in srun (exits 0) runs no line the label carried
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "srun").write_text("#!/bin/sh\nexit 0\n")
    (tmp_path / "bin" / "srun").chmod(0o755)
    (tmp_path / "batch.sh").write_text(script)
    res = subprocess.run(["bash", str(tmp_path / "batch.sh")], capture_output=True, text=True,
                         timeout=30, env={**os.environ, "PATH": f"{tmp_path / 'bin'}:"
                                                                f"{os.environ['PATH']}"})
    assert res.returncode == 0, res.stderr
    assert not marker.exists()
