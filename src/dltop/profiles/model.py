"""Validated, frozen profile and job specifications.

These are the values that cross from ``profiles/`` into ``jobs/`` and onto the
runner's command line. Units are in the field names.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

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
    """One configuration to run once: the unit the queue holds and a runner executes."""

    profile: str
    framework: str
    model: str
    batch_size: int
    device: DeviceSpec
    repeat: int
    iterations: int
    warmup: int
    timeout_s: float
    precision: str
    data: str
    data_dir: str | None
    batch_scaling: str
    lr: float
    momentum: float
    seed: int
    options: tuple[tuple[str, Any], ...] = field(default=())
    retries: int = 0
    """Extra attempts for a run that ends ``crashed`` (never for oom, timeout, ...)."""
    cooldown_s: float = 0.0
    """Longest pause before the run (fixed pause without ``cooldown_temp_c``)."""
    cooldown_temp_c: float | None = None
    """GPU jobs: start once every GPU of the job is at or below this temperature."""
    cooldown_power_w: float | None = None
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

    def to_json_dict(self) -> dict[str, Any]:
        """Plain-JSON form, the runner's job spec (protocol v1)."""
        d = asdict(self)
        d["device"] = {"kind": self.device.kind, "count": self.device.count}
        d["options"] = dict(self.options)
        d["v"] = 1
        d["per_device_batch"] = self.per_device_batch
        d["samples_per_iter"] = self.samples_per_iter
        return d

    @classmethod
    def from_json_dict(cls, d: dict[str, Any]) -> JobSpec:
        """Inverse of :meth:`to_json_dict`."""
        dev = d["device"]
        return cls(
            profile=d["profile"], framework=d["framework"], model=d["model"],
            batch_size=int(d["batch_size"]), device=DeviceSpec(dev["kind"], int(dev["count"])),
            repeat=int(d["repeat"]), iterations=int(d["iterations"]), warmup=int(d["warmup"]),
            timeout_s=float(d["timeout_s"]), precision=d["precision"], data=d["data"],
            data_dir=d.get("data_dir"), batch_scaling=d["batch_scaling"], lr=float(d["lr"]),
            momentum=float(d["momentum"]), seed=int(d["seed"]),
            options=tuple(sorted(d.get("options", {}).items())),
            retries=int(d.get("retries", 0)),
            cooldown_s=float(d.get("cooldown_s", 0.0)),
            cooldown_temp_c=(None if d.get("cooldown_temp_c") is None
                             else float(d["cooldown_temp_c"])),
            cooldown_power_w=(None if d.get("cooldown_power_w") is None
                              else float(d["cooldown_power_w"])),
        )


@dataclass(frozen=True)
class Profile:
    """A validated profile: where it came from and the jobs it expands to."""

    name: str
    description: str
    source: str
    jobs: tuple[JobSpec, ...]
    pack: bool = False
    """Run jobs at once on disjoint devices (see :mod:`dltop.jobs.allocator`)."""
