"""Issue 41: the keys of an ``openai`` entry (``mode = "serve"``) load, sweep and refuse
bad values naming the file and the key (exit 2, nothing stored)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from dltop.errors import UserError
from dltop.profiles.jobspec import JobSpec
from dltop.profiles.loader import parse

ENTRY = """[[matrix]]
frameworks = ["openai"]
models = ["served/model-1"]
mode = "serve"
endpoint = "http://127.0.0.1:8000/v1/"
{extra}
"""


def jobs(extra: str = "") -> list[JobSpec]:
    return list(parse(ENTRY.format(extra=extra), "p.toml", "p", logical_cores=2).jobs)


def test_defaults_and_options_of_a_serve_entry() -> None:
    (job,) = jobs()
    assert (job.framework, job.model, job.mode, job.batch_size) == \
        ("openai", "served/model-1", "serve", 1)
    assert job.device.label == "cpu:1"
    assert (job.request_rate, job.concurrency) == ("inf", 1)
    assert (job.prompt_tokens, job.new_tokens) == (128, 128)
    opts = dict(job.options)
    assert opts["endpoint"] == "http://127.0.0.1:8000/v1"  # trailing slash dropped
    assert (opts["api"], opts["arrival"], opts["max_error_rate"]) == ("chat", "poisson", 0.05)
    assert job.min_time_s == 0.0  # a fixed number of requests: no time window
    back = JobSpec.from_json_dict(job.to_json_dict())
    assert back == job


def test_request_rate_and_concurrency_sweep_as_configurations() -> None:
    js = jobs('request_rate = [1, 2.5, "inf"]\nconcurrency = [1, 8]\n'
              'api_key_env = "MY_KEY"\narrival = "gamma"\nburstiness = 0.5')
    assert [(j.request_rate, j.concurrency) for j in js] == [
        (1.0, 1), (1.0, 8), (2.5, 1), (2.5, 8), ("inf", 1), ("inf", 8)]
    assert len({j.config_key for j in js}) == 6
    assert dict(js[0].options)["api_key_env"] == "MY_KEY"
    assert dict(js[0].options)["burstiness"] == 0.5


@pytest.mark.parametrize(("extra", "key", "says"), [
    ("request_rate = 0", "request_rate", '> 0 and <= 1000000 or "inf", got 0'),
    ("request_rate = -1", "request_rate", "got -1"),
    ('request_rate = "fast"', "request_rate", "got 'fast'"),
    ("concurrency = 0", "concurrency", "an integer >= 1"),
    ("new_tokens = 0", "new_tokens", "an integer >= 1"),
    ('api = "embeddings"', "api", "valid: chat, completions"),
    ('arrival = "burst"', "arrival", "valid: poisson, constant, gamma"),
    ("burstiness = 2", "burstiness", 'arrival = "gamma" only'),
    ("max_error_rate = 1.5", "max_error_rate", ">= 0 and <= 1"),
    ("slo_ttft_ms = 0", "slo_ttft_ms", "> 0"),
    ('api_key_env = "sk-123"', "api_key_env", "environment variable's name"),
    ('dataset = "no-such.jsonl"', "dataset", "no such file"),
    ("batch_sizes = [4]", "batch_sizes", "one sequence"),
    ('seq_len = 64', "seq_len", 'does not apply to mode = "serve"'),
    # not "epochs needs data = \"real\"", whose fix a serve entry refuses next
    ("epochs = 2", "epochs", 'does not apply to mode = "serve"'),
    ("eval_every = 5", "eval_every", 'does not apply to mode = "serve"'),
    ("target_accuracy = 0.5", "target_accuracy", 'does not apply to mode = "serve"'),
    ('devices = ["cpus:2"]', "devices", "one client process"),
])
def test_bad_values_name_file_and_key(extra: str, key: str, says: str) -> None:
    with pytest.raises(UserError) as err:
        jobs(extra)
    assert str(err.value).startswith(f"p.toml: matrix[0].{key}: "), str(err.value)
    assert says in str(err.value)


def test_openai_takes_mode_serve() -> None:
    with pytest.raises(UserError, match=r'^p.toml: matrix\[0\].mode: .*takes mode = "serve"'):
        parse(ENTRY.format(extra="").replace('mode = "serve"', 'mode = "train"'), "p.toml", "p")


@pytest.mark.parametrize("url", ["ftp://host/v1", "127.0.0.1:8000/v1", "http:///v1",
                                 "http://user:secret@host/v1", "http://host:port/v1"])
def test_an_endpoint_must_be_http_or_https_with_a_host(url: str) -> None:
    with pytest.raises(UserError, match=r"^p.toml: matrix\[0\].endpoint: "):
        parse(ENTRY.format(extra="").replace("http://127.0.0.1:8000/v1/", url), "p.toml", "p")


@pytest.mark.parametrize("url", ["http://h:8000/v1/chat/completions",
                                 "https://h/v1/completions/"])
def test_an_endpoint_pasted_with_its_route_says_to_give_the_base(url: str) -> None:
    with pytest.raises(UserError, match=r"^p.toml: matrix\[0\].endpoint: '.*' names a "
                       r"route: endpoint is the API's base \(\"http://HOST:PORT/v1\"\)"):
        parse(ENTRY.format(extra="").replace("http://127.0.0.1:8000/v1/", url), "p.toml", "p")


def test_serve_keys_elsewhere_are_refused() -> None:
    torch = ('[[matrix]]\nframeworks = ["torch"]\nmodels = ["fcn-r"]\nbatch_sizes = [8]\n'
             'devices = ["cpu:1"]\n')
    with pytest.raises(UserError, match=r"matrix\[0\].endpoint: only valid with"):
        parse(torch + 'endpoint = "http://h/v1"', "p.toml", "p")
    with pytest.raises(UserError, match=r"matrix\[0\].concurrency: concurrency applies"):
        parse(torch + "concurrency = 2", "p.toml", "p")
    with pytest.raises(UserError, match=r'matrix\[0\].mode: mode = "serve" needs'):
        parse(torch + 'mode = "serve"', "p.toml", "p")


def test_a_bad_endpoint_exits_2_before_anything_is_stored(tmp_path: Path) -> None:
    profile = tmp_path / "p.toml"
    profile.write_text(ENTRY.format(extra="").replace("http://127.0.0.1:8000/v1/",
                                                      "file:///etc/passwd"))
    db = tmp_path / "r.db"
    r = subprocess.run([sys.executable, "-m", "dltop", "--db", str(db), "run", str(profile)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert f"{profile}: matrix[0].endpoint: expected an http:// or https:// URL" in r.stderr
    assert "Traceback" not in r.stderr
    assert not db.exists()


def test_a_serve_jobs_label_names_its_rate_and_concurrency() -> None:
    js = jobs('request_rate = [2.5, "inf"]\nconcurrency = [1, 8]')
    assert [j.describe() for j in js] == [
        f"openai served/model-1 b1 gen128+128 {rate} req/s c{c} cpu:1 #1"
        for rate in ("2.5", "inf") for c in (1, 8)]
