"""``slurm.parallel``: the allocator's slots for runs whose devices are not this host's
(issue 33 item 6); the real two-jobs-at-once run is tests/slurm/test_slurm_parallel.py."""

from __future__ import annotations

from dltop.jobs.allocator import DeviceAllocator
from dltop.profiles.device import DeviceSpec


def test_up_to_parallel_remote_runs_and_no_local_run_beside_them() -> None:
    alloc = DeviceAllocator(0, (0, 1), pack=False)
    a = alloc.try_allocate_remote(2)
    b = alloc.try_allocate_remote(2)
    assert a is not None and b is not None and alloc.remote_only
    assert a[1].gpu_indices == () and a[1].cpu_affinity is None  # no device of this host
    assert alloc.try_allocate_remote(2) is None  # both slots taken
    assert alloc.room() is None and alloc.try_allocate(DeviceSpec("cpu", 1)) is None
    # Slurm jobs beside each other are not "packed" or "shared": their nodes are theirs
    assert alloc.overlap(a[0]) == alloc.overlap(b[0]) == 0
    alloc.release(a[0])
    assert alloc.try_allocate_remote(2) is not None
    alloc.release(b[0])


def test_a_local_run_keeps_the_host_to_itself_unless_packing() -> None:
    alone = DeviceAllocator(0, (0, 1), pack=False)
    local = alone.try_allocate(DeviceSpec("cpu", 1))
    assert local is not None and not alone.remote_only
    assert alone.try_allocate_remote(4) is None
    alone.release(local[0])
    assert alone.try_allocate_remote(1) is not None
    packing = DeviceAllocator(0, (0, 1), pack=True)
    assert packing.try_allocate(DeviceSpec("cpu", 1)) is not None
    assert packing.try_allocate_remote(1) is not None
    # the remote run holds no core: a second local run still fits the free one
    room = packing.room()
    assert room is not None and room.cpus == 1
