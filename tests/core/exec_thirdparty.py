"""A third executor, for tests only: it reaches dltop through ``DLTOP_EXECUTORS`` alone.

``DLTOP_EXECUTORS=thirdparty=exec_thirdparty:ThirdPartyExecutor`` (this folder on
``PYTHONPATH``) and a job with ``executor = "thirdparty"`` run the job's runner by a
route of its own: a shell wrapper that writes its pid to the run folder's
:data:`ROUTE` file and then ``exec`` s the runner (so the runner keeps that pid, which
the run row stores). Everything else is the local executor's.
"""

from __future__ import annotations

from dataclasses import replace

from dltop.jobs.executors.base import Launch
from dltop.jobs.executors.local import LocalExecutor
from dltop.jobs.supervisor import ChildOutcome
from dltop.store.queue import RunProcess

NAME = "thirdparty"
ENTRY = f"{NAME}=exec_thirdparty:ThirdPartyExecutor"
"""The ``DLTOP_EXECUTORS`` entry that registers it."""
ROUTE = "thirdparty-route"
"""The file in the run folder the wrapper writes its pid (the runner's) to."""
WRAPPER = 'echo "$$" > "$0" && exec "$@"'


class ThirdPartyExecutor(LocalExecutor):
    """The runner on this host, started through :data:`WRAPPER`."""

    name = NAME

    @classmethod
    def of_stored_run(cls, run: RunProcess) -> ThirdPartyExecutor:
        return cls()

    async def supervise(self, launch: Launch) -> ChildOutcome:
        marker = launch.files.dir / ROUTE
        return await super().supervise(replace(
            launch, argv=["/bin/sh", "-c", WRAPPER, str(marker), *launch.argv]))
