"""Issue 41 item 5: ``server = "NAME"`` resolves a ``[servers.NAME]`` table of the profile,
of the config file, or a preset into the job's options; bad tables and keys exit with
the file and the key named."""

from __future__ import annotations

from pathlib import Path

import pytest

from dltop.errors import UserError
from dltop.profiles.jobspec import JobSpec
from dltop.profiles.loader import parse
from dltop.profiles.servers import PRESETS

ENTRY = """{tables}
[[matrix]]
frameworks = ["openai"]
models = ["m"]
mode = "serve"
{extra}
"""


def jobs(extra: str, tables: str = "") -> list[JobSpec]:
    text = ENTRY.format(tables=tables, extra=extra)
    return list(parse(text, "p.toml", "p", logical_cores=2).jobs)


def refused(extra: str, tables: str = "") -> str:
    with pytest.raises(UserError) as info:
        jobs(extra, tables)
    return str(info.value)


@pytest.fixture(autouse=True)
def no_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "config.toml"
    monkeypatch.setenv("DLTOP_CONFIG", str(path))
    return path


def test_a_profile_table_and_a_preset_sweep_as_server() -> None:
    table = '[servers.fake]\ncommand = "python f.py --port {port} --m {model}"\ntimeout_s = 5'
    fake, vllm = jobs('server = ["fake", "vllm"]', table)
    assert (fake.server, vllm.server) == ("fake", "vllm")
    opts = dict(fake.options)
    assert opts["server_command"] == "python f.py --port {port} --m {model}"
    assert opts["server_timeout_s"] == 5.0
    assert opts["server_ready_url"] == "http://{host}:{port}/v1/models"
    assert opts["endpoint"] == "http://{host}:{port}/v1"  # filled in at the start
    assert dict(vllm.options)["server_command"] == PRESETS["vllm"].command
    assert fake.config_key != vllm.config_key  # two configurations
    assert JobSpec.from_json_dict(fake.to_json_dict()) == fake  # carried through --resume


def test_the_config_file_defines_servers(no_config: Path) -> None:
    no_config.write_text('[servers.mine]\ncommand = "srv -p {port}"\n'
                         'ready_url = "http://{host}:{port}/health"\n')
    (job,) = jobs('server = "mine"')
    assert dict(job.options)["server_ready_url"] == "http://{host}:{port}/health"
    no_config.write_text('[servers.bad]\ncommand = "srv"\n')
    assert refused('server = "bad"') == \
        f"{no_config}: servers.bad.command: the command must take {{port}} (dltop picks a " \
        "free port)"


def test_bad_servers_exit_naming_the_key() -> None:
    assert "matrix[0].server: unknown server 'nope'" in refused('server = "nope"')
    assert "p.toml: servers.x.timeout_s: expected seconds" in refused(
        'server = "x"', '[servers.x]\ncommand = "a {port}"\ntimeout_s = 0')
    assert "p.toml: servers.x.command: 'a{': unknown placeholder" in refused(
        'server = "x"', '[servers.x]\ncommand = "a{ {port}"')
    assert "p.toml: servers.x.speed: unknown key" in refused(
        'server = "x"', '[servers.x]\ncommand = "a {port}"\nspeed = 1')
    # request extensions are per server (test_serve_lengths.py): force_length, not a switch
    assert "matrix[0].ignore_eos: unknown key" in refused('server = "vllm"\nignore_eos = true')
    assert "p.toml: servers.x.extensions: expected a list of ignore_eos, min_tokens" in \
        refused('server = "x"', '[servers.x]\ncommand = "a {port}"\nextensions = ["n"]')
    assert "matrix[0].endpoint: frameworks = [\"openai\"] needs endpoint" in refused("")


def test_the_runner_fills_the_template_word_by_word() -> None:
    import sys

    from dltop.runners.registry import CHILD_DIR

    sys.path.insert(0, str(CHILD_DIR))
    try:
        import openai_server  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(CHILD_DIR))
    argv = openai_server.fill("srv --port {port} --gpus '{devices}' -m {model} "
                              "--url http://{host}:{port}", "my model", 8123, "2,3")
    # a model name with a space stays one word: no shell reads it
    assert argv == ["srv", "--port", "8123", "--gpus", "2,3", "-m", "my model",
                    "--url", "http://127.0.0.1:8123"]


def test_server_scope_run_is_stored_and_group_is_the_default() -> None:
    (group,) = jobs('server = "vllm"')
    (run,) = jobs('server = "vllm"\nserver_scope = "run"')
    assert "server_scope" not in dict(group.options)  # the default: identities unchanged
    assert dict(run.options)["server_scope"] == "run"


def test_an_unknown_server_scope_names_file_and_key() -> None:
    msg = refused('server = "vllm"\nserver_scope = "sometimes"')
    assert msg.startswith("p.toml") and "server_scope" in msg and "sometimes" in msg, msg
