"""``dltop devices | doctor | profiles | env setup | data synth``: the host, its frameworks,
the profiles, and a small learnable data set in the real format (docs/data.md)."""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    from dltop.profiles.jobspec import JobSpec
    from dltop.telemetry.report import DevicesReport


def cmd_devices(args: argparse.Namespace) -> int:
    from dltop.telemetry import open_gpu_backend
    from dltop.telemetry.report import render_devices, snapshot_devices

    report = snapshot_devices(open_gpu_backend(args.fake_gpus))
    if args.json:
        sys.stdout.write(devices_json(report))
    else:
        sys.stdout.write(render_devices(report))
    return 0


def devices_json(report: DevicesReport) -> str:
    """``dltop devices --json``: strict JSON (a reading that is not a finite number, a
    GPU's NaN, is null; nothing is stringified past what the report's fields are)."""
    from dltop.results.render import json_text

    return json_text(report.to_json())


def cmd_doctor(args: argparse.Namespace) -> int:
    from dltop.telemetry import open_gpu_backend
    from dltop.telemetry.report import doctor, render_doctor

    sys.stdout.write(render_doctor(doctor(open_gpu_backend(args.fake_gpus))))
    return 0


def cmd_profiles(args: argparse.Namespace) -> int:
    from dltop.catalog import capabilities
    from dltop.profiles.loader import builtin_names, load
    from dltop.textsafe import counted
    from dltop.textsafe import one_line as safe

    if args.profiles_command == "show":
        prof = load(args.profile)
        name = safe(prof.name)
        print(f"# {name}: {safe(prof.description)}" if prof.description else f"# {name}")
        packing = "packed on disjoint devices" if prof.pack else "one run at a time"
        print(f"# source: {safe(prof.source)}; {counted(len(prof.jobs), 'job')}; {packing}")
        print(f"{'#':>4}  {'framework':<10} {'model':<10} {'batch':>6} {'device':<7} "
              f"{'rep':>3} {'iters':>5} {'min_time_s':>10} {'warmup':>6} {'precision':<9} "
              f"{'data':<9} {'timeout_s':>9}  other settings")
        # A page of jobs, then a count: a 100 000-job profile is read by index, never
        # expanded whole (JobList makes a job only when asked).
        shown = len(prof.jobs) if args.all else SHOW_JOBS
        for i, j in enumerate(prof.jobs[:shown], 1):
            iters = f"{j.epochs}ep" if j.epochs is not None else str(j.iterations)
            print(f"{i:>4}  {j.framework:<10} {safe(j.model):<10} {j.batch_size:>6} "
                  f"{j.device.label:<7} {j.repeat + 1:>3} {iters:>5} {_min_time(j):>10} "
                  f"{j.warmup:>6} {j.precision:<9} {j.data:<9} {j.timeout_s:>9g}  "
                  f"{_other_settings(j)}")
            if capabilities(j.framework).program:
                _print_command(j)
        if len(prof.jobs) > shown:
            n = _configurations(prof.jobs)
            print(f"# ... and {len(prof.jobs) - shown} more jobs ({len(prof.jobs)} in all, "
                  f"{n} configuration{'' if n == 1 else 's'}; --all lists them)")
        if any(j.min_time_s or j.warmup_s for j in prof.jobs[:shown]):
            # own programs (always) and min_time_s = 0 run by count: no window to explain
            print("# measured window: iters iterations, then more until it has lasted "
                  "min_time_s seconds (warm-up likewise: warmup, then warmup_s)")
        return 0
    for name in builtin_names():
        prof = load(name)
        print(f"{name:<18} {len(prof.jobs):>4} jobs  {safe(prof.description)}")
    return 0


SHOW_JOBS = 50
"""Jobs ``profiles show`` lists; the rest are counted (``--all``: none are)."""


def _configurations(jobs: Sequence[JobSpec]) -> int:
    """Configurations of the jobs (repeats counted once), without making every job."""
    from dltop.profiles.joblist import JobList

    if isinstance(jobs, JobList):
        return sum(len(configs) for configs, _ in jobs.blocks)
    return len({j.config_key for j in jobs})


def _min_time(job: JobSpec) -> str:
    """``>= 6`` (seconds the measured window lasts at least), ``-`` for counts only."""
    return f">= {job.min_time_s:g}" if job.min_time_s else "-"


def _other_settings(job: JobSpec) -> str:
    """``key=value`` for every setting not at its default and not in a column."""
    from dltop.profiles.fields import SHOWN
    from dltop.profiles.jobspec import settings
    from dltop.textsafe import one_line

    out = []
    for key, f in settings().items():
        value = getattr(job, f.name)
        if f.metadata[SHOWN] or value == f.default or (key == "shuffle" and value is (
                job.data == "real")):
            continue
        out.append(f"{key}={value}")
    return one_line(" ".join(out))  # option values are the profile's own strings


def _print_command(job: JobSpec) -> None:
    """The command job's program as it would start here, or why it would not."""
    from dltop.errors import UserError
    from dltop.runners.command import launch
    from dltop.textsafe import one_line

    # Arguments, paths and env values are the profile's: a `\r\x1b[2K` in one would
    # redraw the line, so every one is escaped after quoting.
    try:
        go = launch(job)
    except UserError as exc:
        print(f"      not runnable here: {one_line(str(exc))}")
        return
    print(f"      $ {one_line(shlex.join(go.argv))}")
    print(f"      program {one_line(str(go.executable))}; cwd {one_line(str(go.cwd))}; "
          f"timing {one_line(str(dict(job.options).get('timing')))}")
    for name, value in go.env:
        print(f"      env {one_line(f'{name}={value}')}")
    for note in go.notes:
        print(f"      note: {one_line(note)}")


def cmd_env(args: argparse.Namespace) -> int:
    from dltop.envsetup import default_prefix, setup_cntk

    setup_cntk(args.prefix or default_prefix(), args.python)
    return 0


def cmd_data(args: argparse.Namespace) -> int:
    """Write the generated data set and list its files.

    Every refusal (a size or seed out of bounds, a symbolic link, existing files
    without ``--force``, a full or read-only directory) is one line, exit 2, and
    leaves the directory as it was.
    """
    from dltop import datagen
    from dltop.errors import UserError
    from dltop.textsafe import one_line

    for flag in ("train", "test"):
        value = getattr(args, flag)
        problem = None if value is None else datagen.size_problem(args.kind, flag, value)
        if problem:
            raise UserError(f"--{flag}: {problem}")
    if not 0 <= args.seed <= datagen.SEED_MAX:
        raise UserError(f"--seed: expected 0 to {datagen.SEED_MAX}, got {args.seed}")
    files = datagen.synth(args.kind, args.dir, train=args.train, test=args.test,
                          seed=args.seed, force=args.force)
    for path in files:
        print(f"{one_line(str(path))}  {path.stat().st_size} bytes")
    print(f"{args.kind}: {len(files)} files in {one_line(str(args.dir))} (use data = \"real\", "
          f"data_dir = \"{args.dir}\")")
    return 0
