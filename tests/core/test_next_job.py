"""The engine's next job: one indexed query picks what scanning the whole queue picked.

Before, the engine read every queued job (``Queue.queued_devices``) and took the
first one ``DeviceAllocator.try_allocate`` accepted. Now the allocator's
:meth:`~dltop.jobs.allocator.DeviceAllocator.room` is the filter of
:meth:`~dltop.store.queue.Queue.next_startable`. Random queues and random busy
hosts (packing or not, exclusive runs, jobs wider than the host) check both agree.
"""

from __future__ import annotations

import copy
import random

from dltop.jobs.allocator import DeviceAllocator
from dltop.profiles.device import DeviceSpec
from dltop.profiles.loader import parse
from dltop.store import Store, memory_db

DEVICES = ("cpu:1", "cpu:2", "cpus:2", "cpu:3", "cpu:64", "gpu:1", "gpu:2", "gpu:3", "gpu:9")


def _campaign(store: Store, devices: list[str]) -> int:
    text = "".join(f'[[matrix]]\nframeworks = ["torch"]\nmodels = ["fcn-r"]\n'
                   f'batch_sizes = [{k + 1}]\nbatch_scaling = "per-device"\ndevices = ["{d}"]\n'
                   for k, d in enumerate(devices))
    cid = store.create_campaign("c", ["p.toml"], ["dltop"], "h", 1, None, pack=True)
    store.add_jobs(cid, parse(text, "p.toml", "p").jobs)
    return cid


def _scan(store: Store, cid: int, alloc: DeviceAllocator, skip: set[int]) -> int | None:
    """The engine's former choice: the first queued job the allocator accepts."""
    if alloc.active and not alloc.pack:
        return None
    for job_id, _, device in store.queue.queued_devices(cid):
        if job_id not in skip and copy.deepcopy(alloc).try_allocate(device) is not None:
            return job_id
    return None


def _query(store: Store, cid: int, alloc: DeviceAllocator, skip: set[int]) -> int | None:
    room = alloc.room()
    if room is None:
        return None
    found = store.queue.next_startable(cid, room.gpus, room.cpus, skip)
    if found is not None:  # what the query returns, the allocator takes
        assert copy.deepcopy(alloc).try_allocate(found[2]) is not None
    return None if found is None else found[0]


def test_the_query_picks_the_job_the_scan_picked() -> None:
    rng = random.Random(20)
    store = Store(memory_db())
    checked = 0
    for _ in range(300):
        cid = _campaign(store, [rng.choice(DEVICES) for _ in range(rng.randint(1, 12))])
        alloc = DeviceAllocator(rng.choice((0, 1, 2, 4)), tuple(range(rng.choice((1, 2, 4, 8)))),
                                pack=rng.random() < 0.8)
        for _ in range(rng.randint(0, 3)):  # runs already going on
            alloc.try_allocate(DeviceSpec.parse(rng.choice(DEVICES)))
        queued = [j for j, _, _ in store.queue.queued_devices(cid)]
        skip = set(rng.sample(queued, rng.randint(0, min(2, len(queued)))))
        for job_id in rng.sample(queued, rng.randint(0, len(queued) // 3)):
            store.set_job_status(job_id, "ok")  # started and finished: out of the queue
        expected = _scan(store, cid, alloc, skip)
        assert _query(store, cid, alloc, skip) == expected
        checked += expected is not None
    assert checked > 100  # most cases had a job to start, not only empty answers


def test_room_is_none_while_a_lone_or_exclusive_run_holds_the_host() -> None:
    lone = DeviceAllocator(2, (0, 1), pack=False)
    assert lone.room() is not None and (lone.room().gpus, lone.room().cpus) == (None, None)
    lone.try_allocate(DeviceSpec.parse("cpu:1"))
    assert lone.room() is None
    packed = DeviceAllocator(2, (0, 1, 2, 3), pack=True)
    packed.try_allocate(DeviceSpec.parse("gpu:1"))
    room = packed.room()
    assert room is not None and (room.gpus, room.cpus) == (1, 4)
    packed.try_allocate(DeviceSpec.parse("cpu:9"))  # wider than the host: never beside others
    wide = DeviceAllocator(2, (0, 1), pack=True)
    wide.try_allocate(DeviceSpec.parse("cpu:9"))
    assert wide.room() is None
