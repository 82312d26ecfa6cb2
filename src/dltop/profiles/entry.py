"""One matrix entry's settings checked: each against its declaration, then together, then
against the framework and model of each job (the loader's per-entry rules)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dltop import catalog
from dltop.errors import UserError
from dltop.profiles import fields, limits, lm, window
from dltop.profiles.jobspec import declared, settings

REPEATS_DEFAULT = 1
"""``repeats`` is the one setting that is not a JobSpec field: it expands into ``repeat``."""
SETTINGS: dict[str, Any] = {"repeats": REPEATS_DEFAULT,
                            **{k: f.default for k, f in settings().items()},
                            "min_time_s": window.DEFAULT_MIN_TIME_S}
"""Every setting key with its default, read off the JobSpec fields (see ``setting``); a
profile's ``min_time_s`` defaults to the product's, not to 0 (a stored job without it)."""
TORCH_ONLY = declared(fields.GROUP, "pytorch")
"""Settings only the PyTorch runner reads (``Framework.pytorch_settings``): another
framework refuses a non-default value."""
NOT_IMAGE_MODELS = ("fcn-s", "fcn-r", "lstm", *catalog.TRANSFORMER_MODELS)
"""Models without image input (``channels_last`` does not apply)."""


@dataclass(frozen=True)
class Where:
    """The file a profile came from: each error names it, then the key."""

    source: str

    def err(self, key: str, msg: str) -> UserError:
        """``FILE: KEY: msg``."""
        return UserError(f"{self.source}: {key}: {msg}")


def check(where: Where, key: str, v: Any, check: fields.Check[Any]) -> Any:
    """``check(v)``, its ValueError as the file and key's UserError."""
    try:
        return check(v)
    except ValueError as exc:
        raise where.err(key, str(exc)) from None


def entry_settings(where: Where, loc: Callable[[str], str], m: dict[str, Any]) -> dict[str, Any]:
    """One combination of an entry's settings, each checked, then checked together."""
    s = {k: check(where, loc(k), m[k], f.metadata[fields.CHECK])
         for k, f in settings().items()}
    s["repeats"] = check(where, loc("repeats"), m["repeats"],
                          fields.integer(1, limits.MAX_REPEATS))
    # Checks across fields. Generation's keys and limits (transformers):
    lm.mode_checks(where.err, loc, s)
    # Real data needs a directory:
    if s["data"] == "real":
        if not s["data_dir"]:
            raise where.err(loc("data_dir"), 'data = "real" needs data_dir = "PATH"')
        # Absolute (against the directory dltop was started in, as before): the job
        # is stored, and a --resume from another directory must read the same data.
        s["data_dir"] = str(Path(s["data_dir"]).expanduser().absolute())
    if s["mode"] == "serve":
        # before the checks below, whose fixes (data = "real", evaluations) a serve
        # entry then refuses in turn
        for key in ("epochs", "eval_every", "target_accuracy", "target_perplexity"):
            if s[key] is not None:
                raise where.err(loc(key), f'{key} does not apply to mode = "serve" (the '
                                "server decides how it runs)")
    if s["epochs"] is not None:
        if s["mode"] == "inference":
            raise where.err(loc("epochs"), 'epochs is for training; mode = "inference" '
                            "times forward passes over iterations")
        if s["data"] != "real":
            raise where.err(loc("epochs"), 'epochs needs data = "real" (an epoch is a pass '
                            "over the training set)")
        if s["eval_every"] is None:
            s["eval_every"] = "epoch"
    if s["eval_every"] is not None and s["data"] != "real":
        raise where.err(loc("eval_every"), 'eval_every needs data = "real" (it evaluates on '
                        "the data set's test files)")
    for key in ("target_accuracy", "target_perplexity"):
        if s[key] is not None and s["eval_every"] is None:
            raise where.err(loc(key), f"{key} needs evaluations "
                            '(epochs, or eval_every = N | "epoch")')
    if s["eval_every"] == "epoch" and s["epochs"] is None:
        raise where.err(loc("eval_every"), 'eval_every = "epoch" needs epochs = N')
    if s["loader_workers"] and (s["data_loader"] != "host" or s["data"] != "real"):
        raise where.err(loc("loader_workers"), 'loader_workers needs data_loader = "host" '
                        'and data = "real"')
    if s["cuda_graphs"] and s["compile"] != "off":
        raise where.err(loc("cuda_graphs"), 'cuda_graphs and compile exclude each other '
                        '(compile = "reduce-overhead" captures CUDA graphs itself)')
    if s["shuffle"] is None:
        s["shuffle"] = s["data"] == "real"
    return s


def job_checks(where: Where, loc: Callable[[str], str], s: dict[str, Any],
                    framework: str, model: str) -> None:
    """Checks of a setting against the framework and model of one job."""
    if s["input_size"] is not None and model not in catalog.INPUT_SIZE_MODELS:
        raise where.err(loc("input_size"), f"input_size applies to "
                        f"{', '.join(catalog.INPUT_SIZE_MODELS)}, not {model}")
    can = catalog.capabilities(framework)
    for key in TORCH_ONLY:
        if not can.pytorch_settings and s[key] != SETTINGS[key]:
            raise where.err(loc(key), f"{key} applies to the PyTorch runner only, not "
                            f"{framework} (leave it at {json.dumps(SETTINGS[key])} there)")
    if s["channels_last"] and model in NOT_IMAGE_MODELS:
        raise where.err(loc("channels_last"), f"channels_last applies to image models, "
                        f"not {model}")
    if s["optimizer"] not in can.optimizers:
        raise where.err(loc("optimizer"), f"{framework} has no {s['optimizer']} optimizer "
                        "(docs/profiles.md lists each framework's optimizers)")
    if can.program:
        for key, default in (("mode", "train"), ("epochs", None), ("optimizer", "sgd"),
                             ("profile", False), ("data_loader", "device")):
            if s[key] != default:
                raise where.err(loc(key), f'{key} does not apply to frameworks = ["{framework}"] '
                                "(the program decides what it runs)")


