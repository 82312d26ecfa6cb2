"""Data and plain-text rendering for ``dltop devices`` and ``dltop doctor``."""

from __future__ import annotations

import platform
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

import psutil

from dltop.errors import UserError
from dltop.pyexec import ask_python
from dltop.telemetry.host import HostSampler, cpu_model
from dltop.telemetry.values import GpuBackend, GpuSample, GpuStatic, HostSample
from dltop.textsafe import multiline

GIB = 2**30
HOST_WINDOW_S = 0.25
"""The host CPU figures of ``dltop devices`` are the mean over this window."""


@dataclass(frozen=True)
class DevicesReport:
    """One snapshot of every GPU and the host."""

    gpus: tuple[tuple[GpuStatic, GpuSample], ...]
    host: HostSample
    cpu_model: str
    physical_cores: int | None
    gpu_reason: str | None
    simulated: bool

    def to_json(self) -> dict[str, Any]:
        """JSON-able form (``dltop devices --json``)."""
        return {
            "simulated": self.simulated, "gpu_unavailable_reason": self.gpu_reason,
            "gpus": [{**asdict(st), "sample": asdict(s)} for st, s in self.gpus],
            "host": {**asdict(self.host), "cpu_model": self.cpu_model,
                     "physical_cores": self.physical_cores},
        }


def snapshot_devices(backend: GpuBackend) -> DevicesReport:
    """Read every GPU (slow fields included) and the host once."""
    host = HostSampler()  # primes psutil's per-core counters: they measure from now
    t0 = time.monotonic()
    gpus = tuple((backend.static(i), backend.sample(i, slow=True))
                 for i in range(backend.device_count()))
    # The host is read once HOST_WINDOW_S has passed since the priming. (A reading taken
    # with psutil's own interval was thrown away here, and the sampler's came a few
    # microseconds after it: every core read 0 %.)
    time.sleep(max(0.0, HOST_WINDOW_S - (time.monotonic() - t0)))
    return DevicesReport(gpus, host.sample(), cpu_model(), psutil.cpu_count(logical=False),
                         backend.unavailable_reason(), backend.simulated)


def _na(value: float | int | None, fmt: str) -> str:
    return "N/A" if value is None else format(value, fmt)


def render_devices(r: DevicesReport) -> str:
    """Human-readable ``dltop devices`` output."""
    lines = []
    if r.simulated:
        lines.append("SIMULATED GPUs (fake backend, --fake-gpus / $DLTOP_FAKE_GPUS): "
                     "not real hardware")
    if not r.gpus:
        lines.append(f"GPUs: none ({r.gpu_reason or 'NVML reports no devices'})")
    for st, s in r.gpus:
        mem = (f"{_na(s.mem_used_bytes and s.mem_used_bytes / GIB, '.1f')}/"
               f"{_na(s.mem_total_bytes and s.mem_total_bytes / GIB, '.1f')} GiB")
        tag = " [simulated]" if st.simulated else ""
        lines.append(
            f"GPU {st.index}: {st.name}{tag}  util {_na(s.gpu_util_pct, '.0f')}%  mem {mem}  "
            f"power {_na(s.power_w, '.0f')}/{_na(st.power_limit_w, '.0f')} W  "
            f"temp {_na(s.temperature_c, '.0f')} C  "
            f"clocks {_na(s.sm_clock_mhz, '.0f')}/{_na(s.mem_clock_mhz, '.0f')} MHz  "
            f"driver {st.driver_version or 'N/A'}  CUDA {st.cuda_version or 'N/A'}")
    h = r.host
    cores = " ".join(f"{c:.0f}" for c in h.cpu_pct_per_core)
    lines.append(f"Host: {r.cpu_model}, {r.physical_cores or 'N/A'} physical / "
                 f"{len(h.cpu_pct_per_core)} logical cores, load {_na(h.load_1m, '.2f')}")
    lines.append(f"  CPU % per core: {cores}")
    lines.append(f"  memory {h.mem_used_bytes / GIB:.1f}/{h.mem_total_bytes / GIB:.1f} GiB, "
                 f"swap used {h.swap_used_bytes / GIB:.1f} GiB")
    return multiline("\n".join(lines)) + "\n"  # GPU names, interpreter errors


@dataclass(frozen=True)
class Check:
    """One ``dltop doctor`` line."""

    name: str
    ok: bool
    detail: str
    fix: str | None = None


_VERSION_CODE = {
    # JAX picks its backend at run time (a CUDA jaxlib without a GPU falls back to the
    # CPU): the devices it sees say which build a run would measure.
    "jax": ("import collections, jax\n"
            "kinds = collections.Counter(\n"
            "    d.platform if d.device_kind.lower() == d.platform\n"
            "    else d.platform + ' ' + d.device_kind for d in jax.devices())\n"
            "print(jax.__version__ + ', devices: '"
            " + ', '.join(f'{n} x {k}' for k, n in kinds.items()))"),
    # As tf_runner imports it: without TFLite's optional JAX import (~1 s of CPU).
    "tensorflow": ("import sys\nsys.modules.setdefault('jax', None)\n"
                   "import tensorflow\nprint(tensorflow.__version__)"),
}
"""What prints a framework's version where ``import M; print(M.__version__)`` says too little."""


def _framework_version(python: str, module: str, env: dict[str, str]) -> tuple[bool, str]:
    code = _VERSION_CODE.get(module, f"import {module}; print({module}.__version__)")
    answer = ask_python(python, code, env=env, timeout_s=180)
    if answer.ok:
        return True, answer.out
    return False, answer.err or "import failed"


def doctor(backend: GpuBackend) -> list[Check]:
    """What works on this host and what to do about what does not."""
    from dltop.runners import registry

    checks = [Check("python", True, f"{platform.python_version()} at {sys.executable}")]
    reason = backend.unavailable_reason()
    if reason is None and backend.device_count():
        st = backend.static(0)
        checks.append(Check("nvml", True, f"{backend.device_count()} GPU(s), driver "
                            f"{st.driver_version}, CUDA {st.cuda_version}"
                            + (" [simulated]" if backend.simulated else "")))
    else:
        checks.append(Check("nvml", False, reason or "no GPUs", "install the NVIDIA driver "
                            "(libnvidia-ml.so.1); CPU benchmarks work without it"))
    # Each framework answers from its own interpreter; asked at once, the doctor waits for
    # the slowest import (TensorFlow's, seconds) instead of the sum of all four.
    with ThreadPoolExecutor(max_workers=len(registry.MODULES)) as pool:
        futures = {fw: pool.submit(_framework_check, fw, module)
                   for fw, module in registry.MODULES.items()}
        checks.extend(futures[fw].result() for fw in registry.MODULES)
    return checks


def _framework_check(fw: str, module: str) -> Check:
    from dltop.runners import registry

    hint = registry.INSTALL_HINT[fw]
    try:
        python, source, env = registry.interpreter(fw)
    except UserError as exc:
        return Check(fw, False, str(exc), hint)
    ok, detail = _framework_version(python, module, dict(env))
    if ok and module != fw:
        # openai's version is aiohttp's: unnamed it read as the openai package's version
        detail = f"{module} {detail}"
    return Check(fw, ok, f"{detail} via {python} ({source})",
                 None if ok else f"{hint}, in {python}")


def render_doctor(checks: list[Check]) -> str:
    """Plain text, one line per check plus its fix."""
    lines = []
    for c in checks:
        lines.append(f"[{'ok' if c.ok else '!!'}] {c.name}: {c.detail}")
        if c.fix and not c.ok:
            lines.append(f"     fix: {c.fix}")
    return multiline("\n".join(lines)) + "\n"  # GPU names, interpreter errors
