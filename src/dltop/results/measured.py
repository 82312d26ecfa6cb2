"""A run's measured iterations as two arrays, read as ``(seconds, samples)`` pairs.

A report of 10 000 configurations holds 400 000 measured iterations: as a tuple, a
float and an int each they were 37 MB of small objects (and a heap too fragmented
to give back), as two arrays 6 MB. Everything that reads iterations iterates,
indexes or measures them, which this sequence does as a tuple of pairs would.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Sequence
from typing import overload


class Measured(Sequence[tuple[float, int]]):
    """Measured iterations: ``seconds`` (``array('d')``) and ``samples`` (``array('q')``)."""

    __slots__ = ("samples", "seconds")

    def __init__(self, seconds: array[float], samples: array[int]) -> None:
        if len(seconds) != len(samples):
            raise ValueError("seconds and samples differ in length")
        self.seconds = seconds
        self.samples = samples

    @classmethod
    def of(cls, pairs: Iterable[tuple[float, int]]) -> Measured:
        """From ``(seconds, samples)`` pairs."""
        seconds, samples = array("d"), array("q")
        for s, n in pairs:
            seconds.append(float(s))
            samples.append(int(n))
        return cls(seconds, samples)

    def __len__(self) -> int:
        return len(self.seconds)

    @overload
    def __getitem__(self, index: int) -> tuple[float, int]: ...

    @overload
    def __getitem__(self, index: slice) -> Measured: ...

    def __getitem__(self, index: int | slice) -> tuple[float, int] | Measured:
        if isinstance(index, slice):
            return Measured(self.seconds[index], self.samples[index])
        return self.seconds[index], self.samples[index]

    def __iter__(self) -> Iterator[tuple[float, int]]:
        return zip(self.seconds, self.samples, strict=True)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Measured):
            return self.seconds == other.seconds and self.samples == other.samples
        if isinstance(other, Sequence):
            return list(self) == list(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.seconds.tobytes(), self.samples.tobytes()))

    def __repr__(self) -> str:
        return f"Measured({list(self)!r})"


NONE = Measured(array("d"), array("q"))
"""No measured iteration (a run without rows)."""


def seconds_of(iterations: Sequence[tuple[float, int]]) -> Sequence[float]:
    """The seconds of measured iterations: a :class:`Measured`'s array itself, else
    each pair's first."""
    if isinstance(iterations, Measured):
        return iterations.seconds
    return [s for s, _ in iterations]
