"""Where configurations ran, as tables order and label them: catalogue ranks, device
labels, the host and GPU model a configuration's column names where a set spans several.

Its functions take anything placed (:class:`Placed`: a
:class:`~dltop.results.aggregate.ConfigResult`, a report row), so this module needs
nothing of :mod:`dltop.results.aggregate`, which imports it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from dltop.results import identity


class Placed(Protocol):
    """What these functions read of a configuration: where it ran and what it is."""

    @property
    def host(self) -> str: ...
    @property
    def device(self) -> str: ...
    @property
    def gpu_name(self) -> str | None: ...
    @property
    def identity(self) -> Mapping[str, Any]: ...


def rank(value: str, order: tuple[str, ...]) -> int:
    """Position of ``value`` in a catalogue order (``catalog.MODELS``...); unknowns last."""
    return order.index(value) if value in order else len(order)


def device_key(label: str) -> tuple[int, int, str]:
    """Sort key of a device label: ``cpu:1 < cpu:2 < cpus:2 < gpu:1 < gpu:2``."""
    kind, _, count = label.partition(":")
    order = {"cpu": 0, "cpus": 1, "gpu": 2}.get(kind, 3)
    return (order, int(count) if count.isdigit() else 0, label)


def short_gpu(name: str) -> str:
    """``H100 80GB HBM3`` for ``NVIDIA H100 80GB HBM3``: the vendor says nothing in a header."""
    for prefix in ("NVIDIA ", "Tesla "):
        name = name.removeprefix(prefix)
    return name


def place_labeller(results: Sequence[Placed]) -> Callable[[Placed], str]:
    """The column label of a configuration's device in ``results``: ``cpu:16``, or with
    the host when the set spans hosts and the GPU model when it spans GPU models
    (``hostA cpu:16``, ``hostB gpu:1 (H100 80GB HBM3)``)."""
    hosts = {r.host for r in results}
    gpus = {r.gpu_name for r in results if r.gpu_name}

    def label(r: Placed) -> str:
        text = f"{r.host} {r.device}" if len(hosts) > 1 else r.device
        if len(gpus) > 1 and r.gpu_name:
            text += f" ({short_gpu(r.gpu_name)})"
        return text
    return label


def placed_identities(results: Sequence[Placed | Any]) -> list[dict[str, Any]]:
    """The identities of ``results`` (anything with ``identity`` and ``host``), each with
    its host under :data:`dltop.results.identity.PLACE` when they span hosts, so that
    :func:`dltop.results.identity.variation` states interpreters per framework and host
    instead of making them row keys."""
    if len({r.host for r in results}) < 2:
        return [dict(r.identity) for r in results]
    return [{**r.identity, identity.PLACE: r.host} for r in results]


def place_key(r: Placed) -> tuple[str, tuple[int, int, str], str]:
    """Orders configurations by host, then device (:func:`device_key`), then GPU model."""
    return (r.host, device_key(r.device), r.gpu_name or "")
