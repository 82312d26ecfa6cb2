"""One owner per campaign: every write of an engine's connection is fenced by its generation.

An engine that was frozen (``kill -STOP``, Ctrl-Z, a VM paused) for longer than the
heartbeat's limit looks dead from another host, and ``dltop run --resume`` there takes
its campaign over. When the first engine wakes it must not go on writing (issue 38:
both finished the campaign, and one rewrote a run the other had kept).

So ownership carries a number, ``campaigns.owner_generation`` (migration 24): a new
campaign is generation 1 (:data:`FIRST_GENERATION`) and each takeover
(:meth:`dltop.store.queue.Queue.claim`) adds one. The owning engine puts a
:class:`Fence` on its connection (:func:`set_fence`); from then on every write
transaction of that connection (:func:`dltop.store.tx.transaction`, the one way the
store writes) first reads the campaign's generation, inside ``BEGIN IMMEDIATE`` so no
takeover can slip in between, and refuses with :class:`OwnershipLost` (rolling back,
nothing written) when it is not the fence's. Repositories, executors and the Slurm
watches all write through that one transaction, so none can bypass the check.

A connection without a fence (a viewer's, a test's, ``dltop prune``) is not checked.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dltop.store.guard import StorageError
from dltop.store.read.schema import columns

if TYPE_CHECKING:
    import sqlite_utils

FIRST_GENERATION = 1
"""A new campaign's generation (campaigns stored before migration 24 have 0)."""
COLUMN = "owner_generation"
"""``campaigns`` column: the generation of the engine that owns the campaign."""
EXIT_OWNERSHIP_LOST = 3
"""``dltop run``'s exit status when another engine took its campaign over."""


class OwnershipLost(StorageError):
    """Another engine took the campaign over: this one must write nothing more.

    A :class:`~dltop.store.guard.StorageError`, so every path that stops the engine on
    a database it can no longer use stops it here too; the engine tells it apart to
    skip the writes a failure would make (the campaign's ``failed``) and to exit 3.
    """

    exit_code = EXIT_OWNERSHIP_LOST

    def __init__(self, campaign_id: int, mine: int, now: int | None, host: str | None,
                 pid: int | None) -> None:
        self.campaign_id = campaign_id
        self.mine = mine
        self.now = now
        self.host = host
        self.pid = pid
        super().__init__(self.describe())

    def describe(self) -> str:
        """One line naming the new owner (host and pid as it recorded them)."""
        if self.now is None:
            return (f"campaign {self.campaign_id} is no longer in the database; this engine "
                    "stopped its runs and stored nothing more")
        who = f"host {self.host or '?'}" + ("" if self.pid is None else f" (pid {self.pid})")
        if self.now == self.mine:  # the row names another engine at this generation
            return (f"campaign {self.campaign_id} is run by the engine on {who}, not this one; "
                    "this engine stopped its runs and stored nothing more")
        return (f"campaign {self.campaign_id} was taken over by the engine on {who}, owner "
                f"generation {self.now} (this engine had {self.mine}); this engine stopped "
                "its runs and stored nothing more after the takeover")


@dataclass(frozen=True)
class Fence:
    """The campaign a connection's writes are fenced on, and the generation it owns."""

    campaign_id: int
    generation: int


_FENCES: weakref.WeakKeyDictionary[Any, Fence] = weakref.WeakKeyDictionary()
"""Database object -> its fence (weak: a closed, dropped connection leaves nothing)."""


def set_fence(db: sqlite_utils.Database, fence: Fence | None) -> None:
    """Fence every later write transaction of ``db`` on ``fence`` (None: no fence)."""
    if fence is None:
        _FENCES.pop(db, None)
    else:
        _FENCES[db] = fence


def fence_of(db: sqlite_utils.Database) -> Fence | None:
    """The fence on ``db``'s writes (None: they are not checked)."""
    return _FENCES.get(db)


def check(db: sqlite_utils.Database) -> None:
    """Refuse the open write transaction unless ``db``'s fence still owns its campaign.

    Called inside ``BEGIN IMMEDIATE``: the write lock is held, so no claim can change
    the generation between this read and the transaction's commit.

    Raises:
        OwnershipLost: the campaign's generation is not the fence's (or the campaign
            is gone); the caller rolls the transaction back.
    """
    fence = _FENCES.get(db)
    if fence is None:
        return
    row = db.conn.execute(f"select {COLUMN}, engine_host, engine_pid from campaigns "
                          "where id = ?", [fence.campaign_id]).fetchone()
    if row is None:
        raise OwnershipLost(fence.campaign_id, fence.generation, None, None, None)
    if row[0] != fence.generation:
        raise OwnershipLost(fence.campaign_id, fence.generation, row[0], row[1], row[2])


def has_generation(db: sqlite_utils.Database) -> bool:
    """Whether ``campaigns`` has :data:`COLUMN` (a database opened without migrating,
    as the read-only commands open it, may lack it; ``run --resume`` migrates first)."""
    return COLUMN in columns(db, "campaigns")


def v24(db: Any) -> None:
    """Migration 24: ``campaigns.owner_generation`` (0 for the campaigns stored before)."""
    db["campaigns"].add_column(COLUMN, int, not_null_default=0)
