"""The one door to a campaign: ``dltop run`` (here, ``--detach``, ``--resume``) and the
viewer's add-profile and resume of orphans (``dltop tui``, and ``dltop serve``'s viewers)
all start one through :func:`start_campaign`; a detached engine (``dltop run ...
--headless`` in a session of its own) outlives its terminal or viewer.

Light on purpose, as a viewer imports it: nothing here imports the engine, the
supervisor or the sampler. :mod:`dltop.jobs.foreground` runs a handle's campaign here.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dltop.errors import SetupError, UserError
from dltop.jobs import campaign
from dltop.jobs.rundir import UnsafeRunDir, ensure_private_dir, runs_dir_of
from dltop.jobs.writes import check_runs_dir
from dltop.procs import read_log_tail
from dltop.profiles.loader import load
from dltop.store import Store, connect
from dltop.store.db import database_file
from dltop.systems import load_system
from dltop.telemetry import gpu_count, open_gpu_backend

if TYPE_CHECKING:
    from dltop.telemetry.values import GpuBackend

STARTUP_CHECK_S = 2.0
"""An engine that exits this soon failed to start; its log says why."""


class EngineDidNotStart(SetupError):
    """A background engine exited at once (exit 1, not 2: the input was fine)."""


@dataclass(frozen=True)
class StartOptions:
    """What ``dltop run`` was given, or what the viewer asks; ``argv`` is stored with the
    campaign, and a detached engine gets its arguments less ``--detach`` and ``--db``."""

    argv: tuple[str, ...]
    system: str | None = None
    pack: bool = False
    skip_unavailable: bool = False
    detach: bool = False
    resume: bool = False
    campaign_id: int | None = None
    """The campaign ``resume`` takes over; None: the latest unfinished one."""
    telemetry: bool = True
    gpu_hz: float = 10.0
    host_hz: float = 2.0
    """Sampling rates, checked by the caller (:func:`dltop.telemetry.sampler.check_rate`)."""
    fake_gpus: int | None = None
    logs_dir: Path | None = None
    """Where a detached engine's log goes; None: the database's runs folder."""


@dataclass(frozen=True)
class Launch:
    """A started engine, or one that exited at once."""

    pid: int
    log_path: Path
    exit_code: int | None
    """None while the engine runs (the normal case)."""
    log_tail: str


@dataclass(frozen=True)
class CampaignHandle:
    """A started campaign: its detached engine (``launch``), or its store, fenced on the
    stored campaign (``campaign_id``; None until :func:`~dltop.jobs.foreground.take_over`
    took one over for ``--resume``), to run here."""

    db_path: Path
    options: StartOptions
    launch: Launch | None = None
    store: Store | None = None
    campaign_id: int | None = None
    name: str = ""
    pack: bool = False
    backend: GpuBackend | None = None
    warnings: tuple[str, ...] = ()
    """Preflight's, or the takeover's (a Slurm job it could not cancel), to be said."""


def check(refs: Sequence[str], options: StartOptions) -> campaign.Plan:
    """Load profiles ``refs`` and preflight them on this host (the viewer's dialog asks too).

    Raises:
        UserError: a profile does not load, or a job cannot run here (and
            ``options.skip_unavailable`` is false).
    """
    system = load_system(options.system) if options.system else None
    try:
        return campaign.preflight([load(ref, system=system) for ref in refs], gpu_count(),
                                  options.skip_unavailable, options.pack)
    except UserError as exc:
        if not options.fake_gpus or "GPU(s); this host has" not in str(exc):
            raise
        # --fake-gpus N and "this host has 0": say what the flag is, not only the count
        raise UserError(f"{exc}\n--fake-gpus simulates GPUs for the telemetry only (the "
                        "viewer, the exporter, tests): a gpu:N job needs real GPUs") from None


def start_campaign(refs: Sequence[str], db_path: Path, options: StartOptions
                   ) -> CampaignHandle:
    """Start a campaign of profiles ``refs``, or one to take over (``options.resume``).

    Detached, the engine starts once the profiles passed preflight here. Otherwise a new
    campaign is stored with every job before anything runs.

    Raises:
        UserError: bad input (the database path, profiles, options that do not go
            together, the runs folder); nothing was stored.
    """
    database_file(db_path)  # a link or a directory is refused before anything is made
    if options.resume and (refs or options.pack or options.system):
        raise UserError("--resume takes no profiles, no --pack and no --system: it "
                        "continues a stored campaign as it was queued")
    if not options.resume and not refs:
        raise UserError("dltop run needs at least one PROFILE (or --resume)")
    if options.detach:
        if not options.resume:  # refuse bad input here, where the user sees it
            check(refs, options)
        return CampaignHandle(db_path, options, launch=start_engine(
            _engine_args(options.argv), db_path, options.logs_dir or runs_dir_of(db_path)))
    backend = open_gpu_backend(options.fake_gpus) if options.telemetry else None
    plan = None if options.resume else check(refs, options)
    # after the profiles passed (bad input creates nothing), before anything is stored
    check_runs_dir(runs_dir_of(db_path))
    store = Store(connect(db_path, create=plan is not None, migrate=True))
    if plan is None:  # foreground.take_over claims the campaign
        return CampaignHandle(db_path, options, store=store, backend=backend)
    campaign_id = campaign.store_plan(store, plan, options.argv)
    store.fence(campaign_id)  # its first owner: a takeover's writes are refused here
    return CampaignHandle(db_path, options, store=store, campaign_id=campaign_id,
                          name=plan.name, pack=plan.pack, backend=backend, warnings=plan.warnings)


def _engine_args(argv: Sequence[str]) -> list[str]:
    """``dltop run``'s arguments less ``--detach`` and ``--db PATH``/``--db=PATH``: the
    engine is given the resolved database once (a second ``--db`` is refused, issue 40)."""
    args = list(argv[2:])
    while "--db" in args:
        del args[args.index("--db"):args.index("--db") + 2]
    return [a for a in args if a != "--detach" and not a.startswith("--db=")]


def start_engine(run_args: Sequence[str], db_path: Path, logs_dir: Path,
                 wait_s: float = STARTUP_CHECK_S) -> Launch:
    """Start ``dltop run <run_args> --headless --db DB`` in its own session.

    Args:
        run_args: arguments after ``dltop run`` (profiles, or ``--resume``...).
        db_path: the database the engine writes.
        logs_dir: where the engine's own log goes (runner logs go beside the DB).
        wait_s: how long to watch for an immediate failure.

    Returns:
        The engine's pid and log; ``exit_code`` is set if it already exited.
    """
    argv = [sys.executable, "-m", "dltop", "run", *run_args, "--headless", "--db",
            str(db_path)]
    log = logs_dir / f"engine-{time.strftime('%Y%m%d-%H%M%S')}-{time.monotonic_ns()}.log"
    proc = spawn_detached(argv, log)
    try:
        code: int | None = proc.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        code = None
    return Launch(proc.pid, log, code, read_log_tail(log) if code is not None else "")


def spawn_detached(argv: Sequence[str], log_path: Path) -> subprocess.Popen[bytes]:
    """Start a dltop engine that outlives this terminal: own session, output to a log.

    A closed SSH connection (SIGHUP) or Ctrl-C in the terminal never reaches it;
    ``dltop status``/``pause``/``cancel`` steer it through the database.
    """
    try:
        ensure_private_dir(log_path.parent)
    except UnsafeRunDir as exc:
        raise EngineDidNotStart(str(exc)) from None
    # user-only, and never through a planted link (the name is new: O_EXCL)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_NOFOLLOW
                 | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "ab") as log:
        return subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
