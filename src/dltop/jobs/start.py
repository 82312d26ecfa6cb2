"""The one door to a campaign: ``dltop run`` (here, ``--detach``, ``--resume``), the
viewer's add-profile and its resume of a campaign whose engine died (``dltop tui``, and
the browser's viewers of ``dltop serve``) all start one through :func:`start_campaign`.

Light on purpose: a viewer imports it, so nothing here imports the engine, the
supervisor or the sampler (the import contract). A campaign run in this process gets
its engine from :func:`dltop.jobs.foreground.run_here`, given the handle made here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dltop.errors import UserError
from dltop.jobs import campaign
from dltop.jobs.launch import Launch, start_engine
from dltop.jobs.rundir import runs_dir_of
from dltop.jobs.writes import check_runs_dir
from dltop.profiles.loader import load
from dltop.store import Store, connect
from dltop.store.db import database_file
from dltop.systems import load_system
from dltop.telemetry import gpu_count, open_gpu_backend

if TYPE_CHECKING:
    from dltop.telemetry.model import GpuBackend


@dataclass(frozen=True)
class StartOptions:
    """How to start: what ``dltop run`` was given, or what the viewer asks."""

    argv: tuple[str, ...]
    """The command line (``dltop run ...``), stored with the campaign; a detached engine
    is given its arguments, less ``--detach`` and ``--db``."""
    system: str | None = None
    """``--system NAME``: the config file's ``[systems.NAME]`` applied to the profiles."""
    pack: bool = False
    skip_unavailable: bool = False
    detach: bool = False
    resume: bool = False
    campaign_id: int | None = None
    """The campaign ``resume`` takes over; None: the latest unfinished one."""
    telemetry: bool = True
    gpu_hz: float = 10.0
    host_hz: float = 2.0
    """The sampling rates (checked by the caller: :func:`dltop.telemetry.sampler.check_rate`)."""
    fake_gpus: int | None = None
    logs_dir: Path | None = None
    """Where a detached engine's own log goes; None: the database's runs folder."""


@dataclass(frozen=True)
class CampaignHandle:
    """A started campaign: an engine in the background (``launch``), or, to be run here
    (:func:`dltop.jobs.foreground.run_here`), its fenced store and campaign."""

    db_path: Path
    options: StartOptions
    launch: Launch | None = None
    """The detached engine: its pid and log (``exit_code`` set if it exited at once)."""
    store: Store | None = None
    campaign_id: int | None = None
    """The stored campaign; None before ``--resume`` took one over (``run_here`` does)."""
    name: str = ""
    pack: bool = False
    gpus: int = 0
    backend: GpuBackend | None = None
    warnings: tuple[str, ...] = ()
    """Preflight's warnings about the jobs (a thread count above the physical cores...)."""

    @property
    def logs_dir(self) -> Path:
        """The runs' folders and a detached engine's log, beside the database."""
        return runs_dir_of(self.db_path)


def check(refs: Sequence[str], options: StartOptions) -> campaign.Plan:
    """Load profiles and preflight them on this host: what a start runs once, and what
    the viewer's dialog asks before it queues.

    Raises:
        UserError: a profile does not load, or some job cannot run here and
            ``options.skip_unavailable`` is false.
    """
    system = load_system(options.system) if options.system else None
    return campaign.preflight([load(ref, system=system) for ref in refs], gpu_count(),
                              options.skip_unavailable, options.pack)


def start_campaign(refs: Sequence[str], db_path: Path, options: StartOptions
                   ) -> CampaignHandle:
    """Start a campaign of profiles ``refs`` (or take one over: ``options.resume``).

    Detached, the engine runs in a process of its own (``dltop run ... --headless``),
    after the profiles passed preflight here. Otherwise a new campaign is stored with
    every job, and its store fenced on it, before anything runs; a resumed one is
    taken over by :func:`dltop.jobs.foreground.run_here`.

    Raises:
        UserError: bad input (the database path, the profiles, options that do not
            go together, the runs folder); nothing was stored.
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
    if options.resume:
        check_runs_dir(runs_dir_of(db_path))  # before anything is stored
        return CampaignHandle(db_path, options, store=Store(connect(db_path, create=False,
                                                                    migrate=True)),
                              gpus=gpu_count(), backend=backend)
    plan = check(refs, options)
    # after the profiles passed (bad input creates nothing), before anything is stored
    check_runs_dir(runs_dir_of(db_path))
    store = Store(connect(db_path))
    campaign_id = campaign.store_plan(store, plan, options.argv)
    store.fence(campaign_id)  # its first owner: a takeover's writes are refused here
    return CampaignHandle(db_path, options, store=store, campaign_id=campaign_id,
                          name=plan.name, pack=plan.pack, gpus=gpu_count(), backend=backend,
                          warnings=plan.warnings)


def _engine_args(argv: Sequence[str]) -> list[str]:
    """``dltop run``'s arguments in ``argv`` less ``--detach`` and ``--db PATH`` /
    ``--db=PATH``: the engine is given the resolved database once (a second ``--db`` is
    refused, issue 40)."""
    out: list[str] = []
    skip = False
    for a in argv[2:]:
        if skip:
            skip = False
        elif a == "--db":
            skip = True
        elif a != "--detach" and not a.startswith("--db="):
            out.append(a)
    return out
