"""A setting is declared once (issue 39 item 3): the loader's sweeps, the window and LM
keys, the identity's display order, the labels' short forms and order, and ``profiles
show``'s "other settings" are read off ``setting(...)``.

The test adds two settings to a copy of the source, as a developer would (one line each
in ``JobSpec``), and asks every derived place in a fresh interpreter.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import dltop

SRC = Path(dltop.__file__).parent

ADDED = '''
    knob_s: float = setting(0.0, number(positive=False, maximum=60.0), identity=True,
                            quiet=True, sweep=15, group="window", order=0,
                            short="{} knob s", last=True)
    knob_len: int | None = setting(None, optional(integer(1, 64)), identity=True,
                                   quiet=True, group="lm", order=99, shown=True,
                                   modes=("generate",))
'''

PROBE = '''
import dataclasses, json
from dltop.cli.info import _other_settings
from dltop.profiles import lm, loader, window
from dltop.results import identity, idread, labels

prof = loader.parse(
    'name = "p"\\n[[matrix]]\\nframeworks = ["torch"]\\nmodels = ["fcn-s"]\\n'
    'batch_sizes = [8]\\ndevices = ["cpu:1"]\\nknob_s = [1, 2, 3]\\nlr = [0.1, 0.2]\\n',
    "p.toml", "p")
job = dataclasses.replace(prof.jobs[0], knob_len=7)
try:
    loader.parse('[[matrix]]\\nframeworks = ["torch"]\\nmodels = ["gpt-tiny"]\\n'
                 'batch_sizes = [8]\\ndevices = ["cpu:1"]\\nknob_len = 4\\n', "q.toml", "q")
    refused = None
except Exception as exc:
    refused = str(exc)
print(json.dumps({
    "sweep": loader.SWEEP_KEYS, "window": window.KEYS, "lm": lm.LM_KEYS,
    "generate": lm.GENERATE_KEYS, "refused": refused,
    "idread_window": idread.WINDOW_FIELDS, "idread_lm": idread.LM_FIELDS,
    "preferred": identity.PREFERRED, "short": labels.SHORT, "last": labels.LAST,
    "jobs": [(j.lr, j.knob_s) for j in prof.jobs],
    "other": _other_settings(dataclasses.replace(job, seed=3, knob_s=2.0)),
}))
'''


def _with_added_settings(tmp_path: Path) -> Path:
    root = tmp_path / "src"
    shutil.copytree(SRC, root / "dltop", ignore=shutil.ignore_patterns("__pycache__"))
    model = root / "dltop" / "profiles" / "jobspec.py"
    text = model.read_text()
    anchor = '    """Hosts the job spans;'
    assert text.count(anchor) == 1
    model.write_text(text.replace(anchor, ADDED.lstrip("\n") + anchor))
    return root


def test_a_setting_added_to_the_declaration_appears_in_every_derived_list(
        tmp_path: Path) -> None:
    root = _with_added_settings(tmp_path)
    res = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                         env={"PYTHONPATH": str(root), "DLTOP_DEFAULT_MIN_TIME_S": "0",
                              "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
                         cwd=tmp_path, timeout=120)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["sweep"][-1] == "knob_s"  # sweep=15: after new_tokens_spread (14)
    assert out["window"] == out["idread_window"] == ["min_time_s", "warmup_s", "knob_s"]
    assert out["lm"] == out["idread_lm"] == ["seq_len", "attention", "prompt_tokens",
                                             "new_tokens", "knob_len"]
    assert out["generate"] == ["prompt_tokens", "new_tokens", "knob_len"]
    assert out["refused"] == ('q.toml: matrix[0].knob_len: knob_len applies to mode = '
                              "\"generate\" only (mode is 'train')")
    assert out["preferred"][0] == "knob_s" and out["preferred"][-1] == "knob_len"
    assert out["short"]["knob_s"] == "{} knob s"
    assert out["last"][-2:] == ["knob_s", "interpreter"]
    # a sweep: lr's axis (2) outside knob_s's (15), each value a configuration
    assert out["jobs"] == [[0.1, 1.0], [0.1, 2.0], [0.1, 3.0],
                           [0.2, 1.0], [0.2, 2.0], [0.2, 3.0]]
    # shown=True keeps knob_len out of "other settings"; knob_s is listed there
    assert out["other"] == "lr=0.1 seed=3 knob_s=2.0"


def test_the_lists_today() -> None:
    """The derived lists read as the hand-kept ones did (behaviour unchanged)."""
    from dltop.profiles import entry, lm, loader, window
    from dltop.profiles.fields import GROUP
    from dltop.profiles.jobspec import declared
    from dltop.results import identity, labels

    assert loader.SWEEP_KEYS == ("optimizer", "lr", "momentum", "weight_decay", "nodes",
                                 "min_time_s", "warmup_s", "request_rate", "concurrency",
                                 "server", "prefix_tokens", "prefix_groups",
                                 "prompt_tokens_spread", "new_tokens_spread")
    assert window.KEYS == ("min_time_s", "warmup_s")
    assert entry.TORCH_ONLY == ("channels_last", "compile", "cudnn_benchmark", "cuda_graphs")
    assert declared(GROUP, "serve") == ("request_rate", "concurrency", "server",
                                        "prefix_tokens", "prefix_groups",
                                        "prompt_tokens_spread", "new_tokens_spread", "shape")
    assert lm.LM_KEYS == ("seq_len", "attention", "prompt_tokens", "new_tokens")
    assert lm.GENERATE_KEYS == ("prompt_tokens", "new_tokens")
    assert identity.PREFERRED == ("precision", "seq_len", "prompt_tokens", "new_tokens",
                                  "attention", "data", "batch_scaling", "lr", "momentum",
                                  "seed", "iterations", "min_time_s", "warmup", "warmup_s")
    assert labels.LAST == ("iterations", "warmup", "min_time_s", "warmup_s", "seed",
                           "interpreter")
