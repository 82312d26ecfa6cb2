"""Load TOML profiles (files or built-ins) and validate them into :class:`Profile`.

Every mistake raises :class:`~dltop.errors.UserError` naming the file, the key
and what was expected; nothing here touches the database. See
``docs/profiles.md`` for every key.
"""

from __future__ import annotations

import difflib
import itertools
import json
import os
import tomllib
from collections.abc import Callable, Mapping
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from dltop import catalog
from dltop.errors import UserError
from dltop.profiles import (
    command,
    fields,
    fp8,
    limits,
    lm,
    presets,
    references,
    serve,
    servers,
    slurm,
    strings,
    window,
)
from dltop.profiles.device import DeviceSpec, device_list, thread_ladder
from dltop.profiles.entry import SETTINGS, Where, check, entry_settings, job_checks
from dltop.profiles.joblist import JobList
from dltop.profiles.jobspec import JobSpec, Profile, declared, settings
from dltop.profiles.references import Rule
from dltop.profiles.slurm import SlurmSettings

if TYPE_CHECKING:
    from dltop.profiles.site import System

TOP_KEYS = ("name", "description", "pack", "defaults", "matrix", "slurm", "references",
            "servers")
LIST_KEYS = ("frameworks", "models", "batch_sizes", "devices")
SWEEP_KEYS = declared(fields.SWEEP)
"""Settings a profile may give as a list: each value is a configuration (a sweep); the
first varies slowest (``setting(sweep=N)``)."""
OPTIONS: dict[str, tuple[object, ...]] = {
    "xla": (True, False),
    "inject": ("nan", "hang", "crash", "oom", "crash-rank1"),
}
"""Switches passed through to the runner as ``options``, with their valid values.

``xla`` turns on XLA compilation in the TensorFlow runner. ``inject`` is a
fault-injection hook for testing dltop itself (non-finite loss, a hang, a crash
without a report, an allocation failure); it is recorded with the job.
"""
OPTION_KEYS = tuple(OPTIONS)
Options = Callable[[Callable[[str, str], UserError], Callable[[str], str], Mapping[str, Any],
                    Path], tuple[tuple[str, Any], ...]]
KEY_GROUPS: Final[dict[str, tuple[tuple[str, ...], Mapping[str, Any], Options]]] = {
    "command": (command.KEYS, {}, command.options),
    "serve": (serve.KEYS, serve.LISTS, serve.entry_options),
}
"""The keys a framework owns (``catalog.Framework.keys``), the list keys it defaults and
its options: your own program's (docs/profiles.md), an endpoint's (docs/serving.md)."""
ENTRY_KEYS = (*LIST_KEYS, *SETTINGS, *OPTION_KEYS,
              *(k for keys, _, _ in KEY_GROUPS.values() for k in keys))


def builtin_names() -> list[str]:
    """Names of the profiles shipped with dltop."""
    pkg = resources.files("dltop.profiles") / "builtin"
    return sorted(p.name.removesuffix(".toml") for p in pkg.iterdir()
                  if p.name.endswith(".toml"))


def load(ref: str, logical_cores: int | None = None, system: System | None = None) -> Profile:
    """Load a profile by built-in name or file path.

    Args:
        ref: a built-in name (``quick``) or a path to a ``.toml`` file.
        logical_cores: cores to expand ``cpu:1..max`` against (default: this host's).
        system: the site it runs on (``dltop run --system``): its ``[slurm]`` keys are the
            defaults of the profile's, its executor the jobs' default, its name stored.

    Raises:
        UserError: the file is missing or invalid.
    """
    path = Path(ref)
    if ref in builtin_names() and not path.exists():
        text = (resources.files("dltop.profiles") / "builtin" / f"{ref}.toml").read_text()
        return parse(text, f"<built-in {ref}>", ref, logical_cores, system=system)
    if path.is_dir():
        raise UserError(f"{ref}: a directory, not a profile file (give the .toml file)")
    if not path.is_file():
        hint = ""
        close = difflib.get_close_matches(ref, builtin_names(), n=1)
        if path.suffix != ".toml" and path.with_name(path.name + ".toml").is_file():
            hint = f" (did you mean {ref + '.toml'!r}?)"  # the file, written as a name
        elif close:
            hint = f" (did you mean the built-in {close[0]!r}?)"
        raise UserError(f"{ref}: no such profile file or built-in profile{hint}; "
                        f"built-ins: {', '.join(builtin_names())}")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read profile: {exc}") from None
    return parse(text, str(path), path.stem, logical_cores, path.resolve().parent, system)


def parse(text: str, source: str, default_name: str,
          logical_cores: int | None = None, profile_dir: Path | None = None,
          system: System | None = None) -> Profile:
    """Validate profile TOML ``text``; ``source`` names it in errors.

    ``profile_dir`` is the directory command entries run in by default and
    ``{profile_dir}`` names: the profile file's; for text without a file (a
    built-in profile), the directory dltop was started from.
    """
    where = Where(source)
    base = profile_dir if profile_dir is not None else Path.cwd()
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{source}: TOML syntax error: {exc}") from None
    except RecursionError:  # tomllib recurses per level: ~500 nested arrays exhaust it
        raise UserError(f"{source}: arrays or tables nested too deeply to read") from None
    _check_keys(where, "", doc, TOP_KEYS)
    strings.check(where.err, doc)  # no line break can reach a script line or a row
    name = str(check(where, "name", doc.get("name", default_name), fields.label))
    description = str(check(where, "description", doc.get("description", ""), fields.string))
    pack = doc.get("pack", False)
    if not isinstance(pack, bool):
        raise where.err("pack", f"expected true or false, got {pack!r}")
    defaults = doc.get("defaults", {})
    if not isinstance(defaults, dict):
        raise where.err("defaults", "expected a table [defaults]")
    _check_keys(where, "defaults.", defaults, ENTRY_KEYS)
    matrix = doc.get("matrix")
    if matrix is None or (isinstance(matrix, list) and not matrix):
        raise where.err("matrix", "expected at least one [[matrix]] entry; the matrix is empty")
    if not isinstance(matrix, list) or not all(isinstance(m, dict) for m in matrix):
        raise where.err("matrix", "expected an array of tables ([[matrix]])")
    own_slurm = doc.get("slurm")
    table = own_slurm
    if system is not None and system.slurm and (own_slurm is None or isinstance(own_slurm, dict)):
        table = {**system.slurm, **(own_slurm or {})}  # the profile's own keys win
    # A system's value names the config file in errors (slurm.check_job), not the profile.
    inherited = ({k: system.source for k in system.slurm
                  if not isinstance(own_slurm, dict) or k not in own_slurm}
                 if system is not None else None)
    cluster = slurm.parse(where.err, table, inherited)
    rules = references.profile_rules(
        where.err, doc.get("references"), None if system is None else system.name,
        () if system is None else system.references)
    cores = logical_cores if logical_cores is not None else (os.cpu_count() or 1)
    find_server = servers.finder(where.err, doc)
    blocks: list[tuple[list[JobSpec], int]] = []
    # Read per profile, not at import: the default may come from the environment.
    base_settings = {**SETTINGS, "min_time_s": window.default_min_time_s()}
    if system is not None:
        base_settings["executor"] = system.executor
    site = None if system is None else system.name
    planned, most = 0, limits.max_jobs()
    for i, entry in enumerate(matrix):
        _check_keys(where, f"matrix[{i}].", entry, ENTRY_KEYS)
        # Errors name the table a value came from: the entry, or [defaults].
        origin = {k: f"matrix[{i}]" for k in entry}
        origin.update({k: "defaults" for k in defaults if k not in entry})
        own = {**defaults, **entry}
        preset = _preset(where, origin, f"matrix[{i}]", own)
        origin.update({k: f"preset {own['preset']!r} of matrix[{i}]" for k in preset
                       if k not in own})
        merged = {**base_settings, **preset, **own}
        # Counted before anything is expanded: a matrix of 10**9 is refused at once.
        planned += limits.entry_jobs(merged, (*LIST_KEYS, *SWEEP_KEYS),
                                     len(thread_ladder(cores)))
        if planned > most:
            upto = f" (entries 0 to {i})" if i else ""
            raise where.err(f"matrix[{i}]", f"the profile expands to "
                            f"{limits.too_many_jobs(planned, most)}{upto}")
        blocks.append(_expand(where, origin, f"matrix[{i}]", name, merged, cores, base,
                              cluster, site, rules, find_server))
    jobs = JobList(blocks)
    if own_slurm is not None and not any(j.executor == "slurm" for c, _ in blocks for j in c):
        raise where.err("slurm", 'a [slurm] table, but no job runs with executor = "slurm" '
                        "(set it in [defaults] or in an entry)")
    return Profile(name=name, description=description, source=source, jobs=jobs, pack=pack)


def _preset(where: Where, origin: dict[str, str], at: str,
            own: dict[str, Any]) -> dict[str, Any]:
    """The defaults of the entry's ``preset`` (under everything the user wrote)."""
    name = own.get("preset")
    if name is None:
        return {}
    if not isinstance(name, str):
        raise where.err(f"{origin.get('preset', at)}.preset", f"expected a string, got {name!r}")
    try:
        return dict(presets.PRESETS[name])
    except KeyError:
        raise where.err(f"{origin.get('preset', at)}.preset", f"unknown preset {name!r} "
                        f"(known: {', '.join(sorted(presets.PRESETS)) or 'none'})") from None


def _expand(where: Where, origin: dict[str, str], at: str, profile: str,
            merged: dict[str, Any], cores: int, profile_dir: Path,
            cluster: SlurmSettings | None, system: str | None = None,
            rules: tuple[Rule, ...] = (),
            find_server: Callable[[str, Any], servers.Server] | None = None,
            ) -> tuple[list[JobSpec], int]:
    def loc(key: str) -> str:
        return f"{origin.get(key, at)}.{key}"

    lists = {}
    alone = merged.get("frameworks")  # an owner's list defaults (an endpoint's batch of 1)
    if isinstance(alone, list) and len(alone) == 1 \
            and (group := catalog.capabilities(str(alone[0])).keys):
        merged = {**KEY_GROUPS[group][1], **merged}
    for key in LIST_KEYS:
        value = merged.get(key)
        if value is None:
            raise where.err(loc(key), "missing (set it in the entry or in [defaults])")
        if not isinstance(value, list) or not value:
            raise where.err(loc(key), f"expected a non-empty list, got {fields.given(value)}")
        lists[key] = value
    frameworks = [str(check(where, f"{loc('frameworks')}[{j}]", v,
                            fields.one_of(catalog.FRAMEWORKS)))
                  for j, v in enumerate(lists["frameworks"])]
    byo = _own_options(where, loc, frameworks, merged, profile_dir)
    if byo:  # a command's (an endpoint's) "models" are the user's own labels
        models = [str(check(where, f"{loc('models')}[{j}]", v, fields.label))
                  for j, v in enumerate(lists["models"])]
    else:
        models = [str(check(where, f"{loc('models')}[{j}]", v, fields.one_of(catalog.MODELS)))
                  for j, v in enumerate(lists["models"])]
    batches = [int(check(where, f"{loc('batch_sizes')}[{j}]", v,
                          fields.integer(1, limits.MAX_BATCH)))
               for j, v in enumerate(lists["batch_sizes"])]
    devices: list[DeviceSpec] = []
    for j, v in enumerate(lists["devices"]):
        try:
            devices.extend(device_list(v, cores, max_gpus=limits.MAX_GPUS,
                                       max_cpus=limits.MAX_CPUS))
        except ValueError as exc:
            raise where.err(f"{loc('devices')}[{j}]", str(exc)) from None
    sweeps = _sweeps(where, loc, merged)
    if sweeps[0]["epochs"] is not None and "iterations" in origin:
        raise where.err(loc("epochs"), "give epochs or iterations, not both (epochs sets the "
                        f"number of iterations from the training set; iterations is set in "
                        f"{origin['iterations']})")
    s = sweeps[0]
    options = tuple(sorted((k, merged[k]) for k in OPTION_KEYS if k in merged))
    for k, v in options:
        if v not in OPTIONS[k] or type(v) is not type(OPTIONS[k][0]):
            valid = ", ".join(json.dumps(x) for x in OPTIONS[k])
            if isinstance(v, list):
                raise where.err(loc(k), f"expected one of {valid}, got {fields.given(v)}: "
                                f"{fields.ONE_VALUE}")
            raise where.err(loc(k), f"unknown value {fields.given(v)} (valid: {valid})")
    options = tuple(sorted(options + byo))
    for sw, batch, dev in itertools.product(sweeps, batches, devices):
        workers = dev.workers * sw["nodes"]
        # a serve job's GPUs are its server's (tensor parallel), not workers of a batch
        if sw["batch_scaling"] == "global" and batch % workers and sw["mode"] != "serve":
            on = f"{dev.label} x {sw['nodes']} nodes" if sw["nodes"] > 1 else dev.label
            raise where.err(loc("batch_sizes"), f"global batch {batch} does not divide over "
                            f"{workers} workers ({on}); use a multiple of "
                            f"{workers} or batch_scaling = \"per-device\"")
    configs = []
    for sw, fw, model, batch, dev in itertools.product(sweeps, frameworks, models, batches,
                                                        devices):
        # A transformer's defaults (seq_len, AdamW...) differ per model, not per entry.
        js = serve.check_job(where.err, loc, sw, fw)
        js = lm.job_settings(where.err, loc, js, fw, model, dev, origin)
        js = fp8.job_settings(where.err, loc, js, fw, model, dev)
        job_checks(where, loc, js, fw, model)
        js = window.resolve(where.err, loc, js, fw, dev.workers * js["nodes"],
                            origin.__contains__)
        slurm.check_job(where.err, loc, fw, dev, js["nodes"], js["executor"], cluster,
                        js["timeout_s"])
        job_options = options
        if js["server"] is not None and find_server is not None:
            job_options = serve.server_options(where.err, loc, options,
                                               find_server(loc("server"), js["server"]))
        configs.append(JobSpec(
            profile=profile, framework=fw, model=model, batch_size=batch, device=dev,
            repeat=0, options=job_options,
            slurm=cluster if js["executor"] == "slurm" else None, system=system,
            references=references.resolve(where.err, rules, model, fw, js["precision"],
                                          dev.label, batch) if rules else (),
            **{f.name: js[k] for k, f in settings().items()}))
    # Repeats are passes over every configuration (JobList: the outer loop), made
    # as they are read: a repeat is its configuration with another repeat index.
    return configs, s["repeats"]


def _sweeps(where: Where, loc: Callable[[str], str],
            m: dict[str, Any]) -> list[dict[str, Any]]:
    """The entry's settings, one dict per combination of the swept (list) values."""
    axes: list[list[tuple[str, Any]]] = []
    for key in SWEEP_KEYS:
        if isinstance(m[key], list):
            if not m[key]:
                raise where.err(loc(key), "expected a value or a non-empty list of values")
            axes.append([(key, v) for v in m[key]])
    return [entry_settings(where, loc, {**m, **dict(combo)}) for combo in itertools.product(*axes)]


def _own_options(where: Where, loc: Callable[[str], str], frameworks: list[str],
                 merged: dict[str, Any], profile_dir: Path) -> tuple[tuple[str, Any], ...]:
    """The options of the keys a framework owns (:data:`KEY_GROUPS`), in an entry of that
    framework alone; an entry without it must not set them."""
    out: tuple[tuple[str, Any], ...] = ()
    for group, (keys, _, options) in KEY_GROUPS.items():
        owners = [n for n, can in catalog.CAPABILITIES.items() if can.keys == group]
        if not set(owners) & set(frameworks):
            for key in keys:
                if key in merged:
                    valid = " or ".join(f'["{n}"]' for n in owners)
                    raise where.err(loc(key), f"only valid with frameworks = {valid}")
            continue
        if len(frameworks) > 1:
            name = next(n for n in frameworks if n in owners)
            raise where.err(loc("frameworks"), f'"{name}" cannot share an entry with other '
                            "frameworks (give it its own [[matrix]] entry)")
        out += options(where.err, loc, merged, profile_dir)
    return out


REPLACED: Final = {"ignore_eos": 'force_length = ["ignore_eos"]'}
"""Keys an earlier dltop took, and what says the same now (the refusal names it)."""


def _top_level(key: str) -> str:
    """Where a top-level key goes, for one written inside a table."""
    if key in ("name", "description", "pack"):
        return "write it at the top of the file, before any [table]"
    # as TOML writes each: matrix is an array of tables, servers a table per server
    spelt = {"matrix": "[[matrix]]", "servers": "[servers.NAME]"}.get(key, f"[{key}]")
    return f"a table of its own ({spelt}), not a key of this one"


def _check_keys(where: Where, prefix: str, table: dict[str, Any],
                allowed: tuple[str, ...]) -> None:
    for key in table:
        if key not in allowed:
            close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
            hint = (f"; it is now {REPLACED[key]}" if key in REPLACED
                    else f"; {key} is a top-level key: {_top_level(key)}"
                    if prefix and key in TOP_KEYS
                    else f"; did you mean {close[0]!r}?" if close else "")
            raise where.err(f"{prefix}{key}", f"unknown key{hint} "
                            f"(valid here: {', '.join(allowed)})")
