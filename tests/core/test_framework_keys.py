"""The keys a framework owns, that it stands alone in its entry, and the mode it takes are
read off its declaration (``catalog.Framework.keys``, ``modes``; issue 39 item 4), not
off its name: the refusals read as they did, and a framework declared so gets them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import dltop
from dltop.errors import UserError
from dltop.profiles.loader import parse

SRC = Path(dltop.__file__).parent
EP = 'endpoint = "http://127.0.0.1:9/v1"'
SERVE = f'{EP}\nmode = "serve"'
CMD = 'command = ["true"]'
NEEDS = ('executor = "slurm" with frameworks = ["openai"] needs server = "NAME": the job '
         "starts its server and client in one allocation (docs/cluster.md#serve-jobs); an "
         "endpoint that already serves is not the allocation's, so run the client against "
         'it with executor = "local"')
ALONE = "cannot share an entry with other frameworks (give it its own [[matrix]] entry)"
TRANSFORMERS = "the transformer models (gpt-tiny, gpt2-small, gpt2-medium, llama-1b)"
REFUSALS = [
    ('["torch"]', 'cwd = "."', 'cwd: only valid with frameworks = ["command"]'),
    ('["torch"]', EP, 'endpoint: only valid with frameworks = ["openai"]'),
    ('["openai"]', f'cwd = "."\n{SERVE}', 'cwd: only valid with frameworks = ["command"]'),
    ('["command"]', f"{CMD}\n{EP}", 'endpoint: only valid with frameworks = ["openai"]'),
    ('["torch", "command"]', CMD, f'frameworks: "command" {ALONE}'),
    ('["command", "openai"]', CMD, f'frameworks: "command" {ALONE}'),
    ('["openai", "torch"]', SERVE, f'frameworks: "openai" {ALONE}'),
    ('["torch"]', 'mode = "serve"',
     'mode: mode = "serve" needs frameworks = ["openai"] (an OpenAI-compatible endpoint)'),
    ('["torch"]', "concurrency = 2",
     'concurrency: concurrency applies to frameworks = ["openai"] (mode = "serve") only'),
    ('["openai"]', EP, 'mode: frameworks = ["openai"] takes mode = "serve" (set it in the '
                       "entry or in [defaults])"),
    ('["openai"]', f'{SERVE}\noptimizer = "adam"', 'optimizer: optimizer does not apply to '
                                                   'frameworks = ["openai"] (the server '
                                                   "decides how it runs)"),
    ('["openai"]', f'{SERVE}\nexecutor = "slurm"', f"executor: {NEEDS}"),
    ('["openai"]', f"{SERVE}\nbatch_sizes = [2]", "batch_sizes: a request to an endpoint is "
                                                  "one sequence: leave batch_sizes out (or "
                                                  "[1]); concurrency sets the requests in "
                                                  "flight"),
    ('["openai"]', f"{SERVE}\nmin_time_s = 5", 'min_time_s: min_time_s does not apply here: '
                                               'frameworks = ["openai"] sends iterations '
                                               "requests on a schedule; a window in seconds "
                                               "would change the load (leave it at 0)"),
    ('["command"]', f'{CMD}\nmode = "inference"', 'mode: mode does not apply to frameworks '
                                                  '= ["command"] (the program decides what '
                                                  "it runs)"),
    ('["command"]', f"{CMD}\nmin_time_s = 5", "min_time_s: min_time_s does not apply here: "
                                              'frameworks = ["command"] runs the program\'s '
                                              "own steps; dltop cannot add any (leave it at 0)"),
    ('["command"]', f"{CMD}\nseq_len = 8", f"seq_len: seq_len applies to {TRANSFORMERS}, "
                                           'not frameworks = ["command"]'),
    ('["command"]', f'{CMD}\nnodes = 2\nexecutor = "slurm"\nbatch_scaling = "per-device"',
     'nodes: nodes > 1 does not apply to frameworks = ["command"] (the program decides how '
     "it spans hosts; run it with nodes = 1)"),
    ('["torch"]', "prompt_tokens = 8", 'prompt_tokens: prompt_tokens applies to mode = '
                                       "\"generate\" or \"serve\" only (mode is 'train')"),
]


def profile(frameworks: str, extra: str) -> str:
    lists = "".join(f"{k} = {v}\n" for k, v in (("batch_sizes", "[1]"),
                                                ("devices", '["cpu:1"]')) if k not in extra)
    return f'[[matrix]]\nframeworks = {frameworks}\nmodels = ["fcn-r"]\n{lists}{extra}\n'


@pytest.mark.parametrize(("frameworks", "extra", "message"), REFUSALS)
def test_each_refusal_reads_as_before(frameworks: str, extra: str, message: str) -> None:
    with pytest.raises(UserError) as got:
        parse(profile(frameworks, extra), "p.toml", "p")
    assert str(got.value) == f"p.toml: matrix[0].{message}"


PROBE = '''
import json, sys
from dltop.errors import UserError
from dltop.profiles.loader import parse
out = []
for frameworks, extra in json.loads(sys.argv[1]):
    model = "m" if "endpoint" in extra else "fcn-r"  # an endpoint's model is a label
    text = f'[[matrix]]\\nframeworks = {frameworks}\\nmodels = ["{model}"]\\n{extra}'
    try:
        job = parse(text, "p.toml", "p").jobs[0]
        out.append([job.framework, job.batch_size, job.device.label, job.mode])
    except UserError as exc:
        out.append(str(exc).removeprefix("p.toml: matrix[0]."))
print(json.dumps(out))
'''


def test_a_framework_declared_to_serve_gets_the_serve_keys_and_refusals(
        tmp_path: Path) -> None:
    root = tmp_path / "src"
    shutil.copytree(SRC, root / "dltop", ignore=shutil.ignore_patterns("__pycache__"))
    cat = root / "dltop" / "catalog.py"
    text = cat.read_text()
    anchor = 'no_fp8="JAX\'s fp8'
    assert text.count(anchor) == 1
    cat.write_text(text.replace(anchor, 'keys="serve", modes=("serve",), ' + anchor))
    lists = 'batch_sizes = [1]\ndevices = ["cpu:1"]\n'
    cases = [('["jax"]', f"{SERVE}\n"), ('["jax", "torch"]', f"{SERVE}\n{lists}"),
             ('["torch"]', f"{EP}\n{lists}"), ('["torch"]', f'mode = "serve"\n{lists}'),
             ('["jax"]', f"{EP}\n")]
    res = subprocess.run([sys.executable, "-c", PROBE, json.dumps(cases)],
                         capture_output=True, text=True, cwd=tmp_path, timeout=120,
                         env={"PYTHONPATH": str(root), "HOME": str(tmp_path),
                              "PATH": "/usr/bin:/bin"})
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == [
        ["jax", 1, "cpu:1", "serve"],  # the serve key group's batch and devices defaults
        f'frameworks: "jax" {ALONE}',
        'endpoint: only valid with frameworks = ["jax"] or ["openai"]',
        'mode: mode = "serve" needs frameworks = ["jax"] or ["openai"] (an OpenAI-compatible '
        "endpoint)",
        'mode: frameworks = ["jax"] takes mode = "serve" (set it in the entry or in '
        "[defaults])"]
