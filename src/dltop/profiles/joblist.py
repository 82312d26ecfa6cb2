"""A profile's jobs as configurations times repeat passes, each job made only when asked.

A study of 100 000 queued jobs is a few hundred configurations repeated: as one
:class:`~dltop.profiles.jobspec.JobSpec` per job it held ~2 KB a job (about 200 MB)
and every check and row was made again for each repeat. :class:`JobList` keeps one
JobSpec per configuration and says, by index, which job is where; checks, warnings
and the ``jobs`` rows are made per configuration (:attr:`JobList.blocks`).
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Iterable, Iterator, Sequence
from typing import overload

from dltop.profiles.jobspec import JobSpec


class JobList(Sequence[JobSpec]):
    """Jobs in queue order, block after block: every configuration once per repeat pass.

    Job ``k`` of a block of configurations ``c`` (``n`` of them) is ``c[k % n]`` with
    ``repeat`` raised by the pass ``k // n``; the first pass is the configurations
    themselves. Passes form the outer loop, so a noisy stretch of time spreads over
    configurations instead of hitting every repeat of one.
    """

    __slots__ = ("_blocks", "_len", "_starts")

    def __init__(self, blocks: Iterable[tuple[Sequence[JobSpec], int]] = ()) -> None:
        self._blocks = tuple((tuple(c), int(r)) for c, r in blocks if c and r > 0)
        starts, n = [], 0
        for configs, passes in self._blocks:
            starts.append(n)
            n += len(configs) * passes
        self._starts = tuple(starts)
        self._len = n

    @classmethod
    def of(cls, jobs: Iterable[JobSpec]) -> JobList:
        """The given jobs, in order, each as it is (one pass of them)."""
        return cls([(tuple(jobs), 1)])

    @classmethod
    def concat(cls, lists: Iterable[Sequence[JobSpec]]) -> JobList:
        """The jobs of each list, one list after the other (blocks kept)."""
        blocks: list[tuple[Sequence[JobSpec], int]] = []
        for jobs in lists:
            blocks.extend(jobs.blocks if isinstance(jobs, JobList) else [(tuple(jobs), 1)])
        return cls(blocks)

    @property
    def blocks(self) -> tuple[tuple[tuple[JobSpec, ...], int], ...]:
        """(configurations, repeat passes) in queue order: what bulk work iterates."""
        return self._blocks

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, index: int) -> JobSpec: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[JobSpec, ...]: ...

    def __getitem__(self, index: int | slice) -> JobSpec | tuple[JobSpec, ...]:
        if isinstance(index, slice):
            return tuple(self[i] for i in range(*index.indices(self._len)))
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexError("job index out of range")
        b = bisect.bisect_right(self._starts, index) - 1
        configs, _ = self._blocks[b]
        passed, k = divmod(index - self._starts[b], len(configs))
        return repeat_of(configs[k], passed)

    def __iter__(self) -> Iterator[JobSpec]:
        for configs, passes in self._blocks:
            for passed in range(passes):
                for job in configs:
                    yield repeat_of(job, passed)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, JobList) and other._blocks == self._blocks:
            return True
        if not isinstance(other, Sequence) or isinstance(other, str):
            return NotImplemented
        return len(other) == self._len and all(a == b for a, b in zip(self, other, strict=True))

    def __hash__(self) -> int:
        # Equal sequences may be blocked differently: hash what any blocking shares.
        return hash((self._len, self[0], self[-1]) if self._len else 0)

    def __repr__(self) -> str:
        return f"JobList({self._len} jobs, {len(self._blocks)} blocks)"


def repeat_of(job: JobSpec, passed: int) -> JobSpec:
    """``job`` in repeat pass ``passed`` (0: the job itself)."""
    return job if passed == 0 else dataclasses.replace(job, repeat=job.repeat + passed)
