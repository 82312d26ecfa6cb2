"""Validated, frozen profile and job specifications.

These are the values that cross from ``profiles/`` into ``jobs/`` and onto the
runner's command line. Units are in the field names.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import Field, dataclass, field, fields
from typing import Any, Literal, cast, get_args, get_type_hints

from dltop import catalog
from dltop.profiles.fields import (
    CHECK,
    CODEC,
    COLUMN,
    integer,
    number,
    one_of,
    optional,
    path,
    setting,
)

DeviceKind = Literal["cpu", "cpus", "gpu"]

_DEVICE_RE = re.compile(r"^(cpu|cpus|gpu):([0-9]+)$")


@dataclass(frozen=True, order=True)
class DeviceSpec:
    """A device configuration.

    ``cpu:N``: one process, N threads. ``cpus:P``: P CPU worker processes (one
    thread each), data-parallel over gloo. ``gpu:N``: N GPUs, data-parallel.
    """

    kind: DeviceKind
    count: int

    @property
    def label(self) -> str:
        """The profile spelling, e.g. ``cpu:4``."""
        return f"{self.kind}:{self.count}"

    @classmethod
    def parse(cls, text: str) -> DeviceSpec:
        """Parse ``cpu:N``, ``cpus:P`` or ``gpu:N``.

        Raises:
            ValueError: the text is not of that form or N < 1.
        """
        m = _DEVICE_RE.match(text.strip())
        if not m or int(m.group(2)) < 1:
            raise ValueError(f"expected 'cpu:N', 'cpus:P' or 'gpu:N' with N >= 1, got {text!r}")
        kinds: dict[str, DeviceKind] = {"cpu": "cpu", "cpus": "cpus", "gpu": "gpu"}
        return cls(kinds[m.group(1)], int(m.group(2)))

    @property
    def workers(self) -> int:
        """Data-parallel workers: 1 for ``cpu:N`` (threads), N otherwise."""
        return 1 if self.kind == "cpu" else self.count


@dataclass(frozen=True)
class JobSpec:
    """One configuration to run once: the unit the queue holds and a runner executes.

    Adding a field is one edit here (see docs/architecture.md): ``setting(...)``
    makes it a profile key with its default and check, ``column`` stores it in
    the ``jobs`` table, and the runner's spec.json carries every field.
    """

    profile: str = field(metadata={COLUMN: True})
    framework: str = field(metadata={COLUMN: True})
    model: str = field(metadata={COLUMN: True})
    batch_size: int = field(metadata={COLUMN: True})
    device: DeviceSpec = field(metadata={
        COLUMN: lambda d: {"device": d.label, "device_kind": d.kind, "device_count": d.count},
        CODEC: (lambda d: {"kind": d.kind, "count": d.count},
                lambda j: DeviceSpec(j["kind"], int(j["count"]))),
    })
    repeat: int = field(metadata={COLUMN: True})
    """0-based repeat of the configuration (the profile key ``repeats`` counts them)."""
    iterations: int = setting(50, integer(1), column=True)
    """Measured iterations per run."""
    warmup: int = setting(10, integer(0), column=True)
    """Iterations run first and excluded from statistics."""
    timeout_s: float = setting(900.0, number(positive=True), column=True)
    """Wall-clock budget of one run, start-up included."""
    precision: str = setting("fp32", one_of(catalog.PRECISIONS), column=True)
    data: str = setting("synthetic", one_of(catalog.DATA_KINDS), column=True)
    data_dir: str | None = setting(None, optional(path))
    """Required with ``data = "real"`` (the loader checks and expands it)."""
    batch_scaling: str = setting("global", one_of(catalog.BATCH_SCALINGS), column=True)
    lr: float = setting(0.01, number(positive=True))
    momentum: float = setting(0.0, number(positive=False))
    seed: int = setting(0, integer(0))
    options: tuple[tuple[str, Any], ...] = field(default=(), metadata={
        CODEC: (dict, lambda j: tuple(sorted(
            (k, tuple(v) if isinstance(v, list) else v) for k, v in j.items()))),
    })
    """Runner switches (``xla``, ``inject``, a command's argv), sorted by name."""
    retries: int = setting(0, integer(0))
    """Extra attempts for a run that ends ``crashed`` (never for oom, timeout, ...)."""
    cooldown_s: float = setting(0.0, number(positive=False))
    """Longest pause before the run (fixed pause without ``cooldown_temp_c``)."""
    cooldown_temp_c: float | None = setting(None, optional(number(positive=True)))
    """GPU jobs: start once every GPU of the job is at or below this temperature."""
    cooldown_power_w: float | None = setting(None, optional(number(positive=True)))
    """GPU jobs: start once every GPU of the job draws at most this power."""

    @property
    def config_key(self) -> str:
        """Identity of the configuration, shared by its repeats."""
        return "|".join(
            [self.framework, self.model, str(self.batch_size), self.device.label,
             self.precision, self.data]
        )

    @property
    def per_device_batch(self) -> int:
        """Samples each device processes per step (global batch split over GPUs)."""
        if self.batch_scaling == "global":
            return self.batch_size // self.device.workers
        return self.batch_size

    @property
    def samples_per_iter(self) -> int:
        """Samples one training step consumes across all devices."""
        if self.batch_scaling == "per-device":
            return self.batch_size * self.device.workers
        return self.batch_size

    def describe(self) -> str:
        """A short human label, e.g. ``torch fcn-r b1024 cpu:2 #1``."""
        return (f"{self.framework} {self.model} b{self.batch_size} "
                f"{self.device.label} #{self.repeat + 1}")

    def columns(self) -> dict[str, Any]:
        """This job's columns of the ``jobs`` table (the store adds campaign, position, status)."""
        row: dict[str, Any] = {}
        for f in fields(self):
            column = f.metadata.get(COLUMN)
            if callable(column):
                row.update(column(getattr(self, f.name)))
            elif column:
                row[f.name] = getattr(self, f.name)
        row["config_key"] = self.config_key
        row["spec_json"] = json.dumps(self.to_json_dict())
        return row

    def to_json_dict(self) -> dict[str, Any]:
        """Plain-JSON form, the runner's job spec (protocol v1)."""
        d = {}
        for f in fields(self):
            value = getattr(self, f.name)
            codec = f.metadata.get(CODEC)
            d[f.name] = codec[0](value) if codec else value
        d["v"] = 1
        d["per_device_batch"] = self.per_device_batch
        d["samples_per_iter"] = self.samples_per_iter
        return d

    @classmethod
    def from_json_dict(cls, d: dict[str, Any]) -> JobSpec:
        """Inverse of :meth:`to_json_dict`; a key missing from an older spec takes its default.

        Raises:
            KeyError: a field without a default is missing.
        """
        kw = {name: decode(d[name]) for name, decode in _DECODERS.items() if name in d}
        return cls(**kw)


def _decoder(f: Field[Any], hint: Any) -> Callable[[Any], Any]:
    codec = f.metadata.get(CODEC)
    if codec:
        return cast(Callable[[Any], Any], codec[1])
    if hint in (int, float, str):
        return cast(Callable[[Any], Any], hint)
    args = get_args(hint)
    if len(args) == 2 and type(None) in args:
        inner = _decoder(f, next(a for a in args if a is not type(None)))
        return lambda v: None if v is None else inner(v)
    raise TypeError(f"JobSpec.{f.name}: no JSON decoder for {hint!r}; give it a codec")


_HINTS = get_type_hints(JobSpec)
_DECODERS = {f.name: _decoder(f, _HINTS[f.name]) for f in fields(JobSpec)}
"""How each field is read back from spec.json, derived from its type (or codec)."""


def settings() -> dict[str, Field[Any]]:
    """The JobSpec fields that are profile settings, by key, in declaration order."""
    return {f.name: f for f in fields(JobSpec) if CHECK in f.metadata}


@dataclass(frozen=True)
class Profile:
    """A validated profile: where it came from and the jobs it expands to."""

    name: str
    description: str
    source: str
    jobs: tuple[JobSpec, ...]
    pack: bool = False
    """Run jobs at once on disjoint devices (see :mod:`dltop.jobs.allocator`)."""
