"""Device allocation: which GPUs and CPU cores a run gets, never shared by two runs.

By default the engine runs one job at a time, because a benchmark number is
only clean when nothing else runs beside it; the allocator then hands every
job the first devices (GPUs ``0..N-1``, cores in :func:`core_order`), as a lone
run would get. With packing (opt-in: ``dltop run --pack`` or ``pack = true`` in
a profile) several runs go at once on disjoint device sets:

- a ``gpu:N`` job takes N free GPUs, lowest indices first, and is not pinned
  to CPU cores (its host threads float, as they would alone);
- a ``cpu:N`` or ``cpus:P`` job takes N (or P) free logical CPUs in
  :func:`core_order` order (one per physical core first) and is pinned there;
- a CPU job wider than the host is not pinned and so needs the whole host: it
  starts only when nothing else runs, and nothing starts beside it.

The devices named here are where a packed run is *meant* to go: it takes its
host-wide lease (:mod:`dltop.jobs.lease`) on any free devices of its kind, since
another engine may hold the named ones, and :meth:`DeviceAllocator.rebind` moves
it to those it got.

Packed runs still share memory bandwidth, caches and the PCIe root, so their
numbers are throughput numbers, not clean single-run latencies; each run row
records the GPUs and CPUs it got and how many runs were active when it started.

A run whose devices are not this host's (a Slurm job) holds none of them: it takes one
of the ``slurm.parallel`` slots instead (:meth:`DeviceAllocator.try_allocate_remote`),
so up to that many Slurm jobs of a campaign are in flight at once while no local run
goes on beside them (without packing).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dltop.profiles.device import DeviceSpec


@dataclass(frozen=True)
class Allocation:
    """The devices one run holds until it ends."""

    gpu_indices: tuple[int, ...]
    """GPUs the run sees (``CUDA_VISIBLE_DEVICES``); empty for CPU jobs."""
    cpu_affinity: tuple[int, ...] | None
    """Logical CPUs the run is pinned to; None when it is not pinned."""
    exclusive: bool = False
    """True when the run needs the whole host (a CPU job wider than it)."""


@dataclass(frozen=True)
class Room:
    """The widest job of each kind that :meth:`DeviceAllocator.try_allocate` would take now."""

    gpus: int | None
    """Most GPUs a ``gpu:N`` job may ask for; None: any number (the host is idle)."""
    cpus: int | None
    """Most CPUs a ``cpu:N`` or ``cpus:P`` job may ask for; None: any number."""


class DeviceAllocator:
    """Hands out disjoint device sets; not thread-safe (the engine's event loop owns it).

    Args:
        gpu_count: GPUs on this host that runs may use.
        cores: the host's usable logical CPUs, in pinning order (see
            :func:`dltop.jobs.environment.core_order`).
        pack: allow more than one run at a time on disjoint devices.
    """

    def __init__(self, gpu_count: int, cores: Sequence[int], *, pack: bool) -> None:
        self.gpu_count = gpu_count
        self.cores = tuple(cores)
        self.pack = pack
        self._held: dict[int, Allocation] = {}
        self._remote: set[int] = set()  # tokens of runs whose devices are not this host's
        self._overlap: dict[int, int] = {}
        self._next_token = 0

    @property
    def active(self) -> int:
        """Runs holding devices now."""
        return len(self._held)

    def room(self) -> Room | None:
        """What a job may ask for and still start now; None when no job can start.

        The queue's next-job query filters on it (:meth:`dltop.store.queue.Queue.next_startable`),
        so it says exactly what :meth:`try_allocate` accepts: an idle host takes any
        job, a busy one (packing, nothing exclusive held) a job within the free devices.
        """
        if not self._held:
            return Room(None, None)
        if not self.pack or any(a.exclusive for a in self._held.values()):
            return None
        gpus = {x for a in self._held.values() for x in a.gpu_indices}
        cpus = {x for a in self._held.values() for x in a.cpu_affinity or ()}
        # (a remote run holds no device: packing, local runs fit beside it as if it
        # were not there)
        return Room(sum(1 for x in range(self.gpu_count) if x not in gpus),
                    sum(1 for x in self.cores if x not in cpus))

    def try_allocate(self, device: DeviceSpec) -> tuple[int, Allocation] | None:
        """Reserve devices for a job on ``device``; return (token, allocation), or None if busy.

        A job that can never fit (``gpu:4`` on a 2-GPU host) gets an allocation
        of what exists when the host is idle, so that the runner itself reports
        why it cannot run instead of the queue stalling forever.
        """
        if self._held and (not self.pack or any(a.exclusive for a in self._held.values())):
            return None
        gpu = device.kind == "gpu"
        pool = tuple(range(self.gpu_count)) if gpu else self.cores
        if device.count > len(pool):
            if self._held:
                return None
            # GPUs: all there are; CPUs: not pinned (the run needs the whole host).
            alloc = Allocation(pool if gpu else (), None, exclusive=True)
        else:
            busy = {x for a in self._held.values()
                    for x in (a.gpu_indices if gpu else a.cpu_affinity or ())}
            free = [x for x in pool if x not in busy]
            if device.count > len(free):
                return None
            taken = tuple(free[:device.count])
            alloc = Allocation(taken, None) if gpu else Allocation((), taken)
        self._next_token += 1
        token = self._next_token
        self._held[token] = alloc
        others = sum(1 for t in self._held if t not in self._remote) - 1
        for t in self._held:
            if t not in self._remote:
                self._overlap[t] = max(self._overlap.get(t, 0), others)
        return token, alloc

    @property
    def remote_only(self) -> bool:
        """Runs are going on, and every one of them is remote (a Slurm job)."""
        return bool(self._held) and set(self._held) <= self._remote

    def try_allocate_remote(self, limit: int) -> tuple[int, Allocation] | None:
        """Reserve one of ``limit`` slots for a run whose devices are not this host's.

        It holds no device of this host. Without packing it starts only while every run
        going on is remote too (a local run still has the host to itself); with packing,
        beside anything. Returns None when ``limit`` remote runs are going on.
        """
        if self._held and not self.pack and not self.remote_only:
            return None
        if len(self._remote) >= limit:
            return None
        self._next_token += 1
        token = self._next_token
        self._held[token] = Allocation((), None)
        self._remote.add(token)
        # No overlap counted either way: a Slurm job shares no device of this host, and
        # its nodes are its own (exclusive) or said to be shared in its note.
        return token, self._held[token]

    def rebind(self, token: int, alloc: Allocation) -> Allocation:
        """Move ``token``'s run onto ``alloc`` (what its lease got) and return it.

        Another run of this engine still waiting for its lease that was meant for one
        of those devices is meant for the ones ``token`` gave up instead, so the room
        counted stays right. (A run already going on cannot hold one: its lease would.)
        """
        old = self._held.get(token)
        if old is None or old == alloc:
            return alloc
        self._held[token] = alloc
        gpus = _swap(old.gpu_indices, alloc.gpu_indices)
        cpus = _swap(old.cpu_affinity or (), alloc.cpu_affinity or ())
        for t, other in list(self._held.items()):
            if t != token and t not in self._remote:
                self._held[t] = Allocation(
                    tuple(gpus.get(x, x) for x in other.gpu_indices),
                    None if other.cpu_affinity is None else
                    tuple(cpus.get(x, x) for x in other.cpu_affinity), other.exclusive)
        return alloc

    def overlap(self, token: int) -> int:
        """The most other runs that held devices at once while ``token`` did."""
        return self._overlap.get(token, 0)

    def release(self, token: int) -> None:
        """Give back what ``try_allocate`` reserved under ``token`` (idempotent)."""
        self._held.pop(token, None)
        self._remote.discard(token)
        self._overlap.pop(token, None)


def _swap(old: Sequence[int], new: Sequence[int]) -> dict[int, int]:
    """Device -> replacement, for runs meant for a device in ``new`` but not ``old``:
    each gets one that ``old`` had and ``new`` has not."""
    given_up = [x for x in old if x not in set(new)]
    taken = [x for x in new if x not in set(old)]
    return dict(zip(taken, given_up, strict=False))
