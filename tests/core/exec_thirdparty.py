"""A third executor, for tests only: it reaches dltop through ``DLTOP_EXECUTORS`` alone.

``DLTOP_EXECUTORS=thirdparty=exec_thirdparty:ThirdPartyExecutor`` (this folder on
``PYTHONPATH``) and a job with ``executor = "thirdparty"`` run the job's runner by a
route of its own: a shell wrapper that writes its pid to the run folder's
:data:`ROUTE` file and then ``exec`` s the runner (so the runner keeps that pid, which
the run row stores). Resume's reap notes each run it reaps in ``$THIRDPARTY_REAPED``.
Everything else is the local executor's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from dltop.jobs.executors.base import Launch, Reaped
from dltop.jobs.executors.local import LocalExecutor
from dltop.jobs.supervisor import ChildOutcome
from dltop.store.queue import RunProcess
from dltop.store.writer import Store

NAME = "thirdparty"
ENTRY = f"{NAME}=exec_thirdparty:ThirdPartyExecutor"
"""The ``DLTOP_EXECUTORS`` entry that registers it."""
ROUTE = "thirdparty-route"
"""The file in the run folder the wrapper writes its pid (the runner's) to."""
WRAPPER = 'echo "$$" > "$0" && exec "$@"'
REAPED_ENV = "THIRDPARTY_REAPED"
"""A file resume's environment names: the executor appends each run id it reaps."""


class ThirdPartyExecutor(LocalExecutor):
    """The runner on this host, started through :data:`WRAPPER`."""

    name = NAME
    devices_here = True  # what the registry reads: its runs hold this host's devices
    queues = False

    @classmethod
    def of_stored_run(cls, run: RunProcess) -> ThirdPartyExecutor:
        return cls()

    async def supervise(self, launch: Launch) -> ChildOutcome:
        marker = launch.files.dir / ROUTE
        return await super().supervise(replace(
            launch, argv=["/bin/sh", "-c", WRAPPER, str(marker), *launch.argv]))

    def reap(self, store: Store, run: RunProcess, env: Mapping[str, str]) -> Reaped:
        if REAPED_ENV in env:
            with open(env[REAPED_ENV], "a") as f:
                f.write(f"{run.run_id}\n")
        return super().reap(store, run, env)
