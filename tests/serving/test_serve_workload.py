"""Serving workloads (shared prefixes, length spreads): the profile keys load, sweep, keep
the identity of a run without them, and refuse bad values naming the file and the key
(exit 2, nothing stored)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from dltop.errors import UserError
from dltop.profiles.jobspec import JobSpec
from tests.serving.test_serve_profile import ENTRY, jobs


def test_without_the_keys_a_serve_job_has_none() -> None:
    (plain,) = jobs()
    assert (plain.prefix_tokens, plain.prefix_groups, plain.prompt_tokens_spread,
            plain.new_tokens_spread) == (None, None, None, None)


def test_a_prefix_sweep_is_one_configuration_per_length() -> None:
    js = jobs("prefix_tokens = [16, 64]\nprefix_groups = [1, 4]\nprompt_tokens_spread = 0.5")
    assert [(j.prefix_tokens, j.prefix_groups) for j in js] == [
        (16, None), (16, 4), (64, None), (64, 4)]
    assert {j.prompt_tokens_spread for j in js} == {0.5}
    assert len({j.config_key for j in js}) == 4
    for j in js:
        assert JobSpec.from_json_dict(j.to_json_dict()) == j


def test_none_values_keep_the_identity_of_a_run_without_them() -> None:
    (plain,) = jobs()
    (zeros,) = jobs("prefix_tokens = 0\nprefix_groups = 1\nprompt_tokens_spread = 0\n"
                    "new_tokens_spread = 0.0")
    assert zeros.config_key == plain.config_key


@pytest.mark.parametrize(("extra", "key", "says"), [
    ("prefix_tokens = -1", "prefix_tokens", "an integer >= 0"),
    ("prefix_tokens = 8\nprefix_groups = 0", "prefix_groups", "an integer >= 1"),
    ("prefix_groups = 4", "prefix_groups", "give prefix_tokens > 0"),
    ("prompt_tokens_spread = 1", "prompt_tokens_spread", ">= 0 and < 1, got 1"),
    ("new_tokens_spread = -0.1", "new_tokens_spread", ">= 0 and < 1"),
    ('new_tokens_spread = "wide"', "new_tokens_spread", "got 'wide'"),
])
def test_bad_workload_values_name_file_and_key(extra: str, key: str, says: str) -> None:
    with pytest.raises(UserError) as err:
        jobs(extra)
    assert str(err.value).startswith(f"p.toml: matrix[0].{key}: "), str(err.value)
    assert says in str(err.value)


@pytest.mark.parametrize("key", ["prefix_tokens = 8", "prompt_tokens_spread = 0.5"])
def test_a_dataset_refuses_what_shapes_synthetic_prompts(tmp_path: Path, key: str) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text('"hello there"\n')
    text = ENTRY.format(extra=f'dataset = "{data}"\n{key}')
    profile = tmp_path / "p.toml"
    profile.write_text(text)
    db = tmp_path / "r.db"
    r = subprocess.run([sys.executable, "-m", "dltop", "--db", str(db), "run", str(profile)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    name = key.split()[0]
    assert f"{profile}: matrix[0].{name}: {name} shapes synthetic prompts" in r.stderr
    assert "Traceback" not in r.stderr
    assert not db.exists()


def test_workload_keys_elsewhere_are_refused() -> None:
    from dltop.profiles.loader import parse

    torch = ('[[matrix]]\nframeworks = ["torch"]\nmodels = ["fcn-r"]\nbatch_sizes = [8]\n'
             'devices = ["cpu:1"]\nprefix_tokens = 8\n')
    with pytest.raises(UserError, match=r"matrix\[0\].prefix_tokens: prefix_tokens applies"):
        parse(torch, "p.toml", "p")
