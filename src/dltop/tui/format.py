"""Small text renderers shared by the TUI widgets (pure functions, easy to test)."""

from __future__ import annotations

from collections.abc import Sequence

from dltop.catalog import SERVE_FRAMEWORKS
from dltop.catalog import CampaignStatus as C
from dltop.catalog import JobStatus as J
from dltop.catalog import RunStatus as R

BLOCKS = " ▁▂▃▄▅▆▇█"
NA = "N/A"

STATUS_STYLE: dict[str, str] = {
    J.QUEUED: "dim", J.RUNNING: "bold cyan", R.OK: "green", R.OOM: "magenta",
    R.UNSUPPORTED: "yellow", R.DIVERGED: "red", R.TIMEOUT: "red", R.CRASHED: "bold red",
    R.CANCELLED: "dim yellow", R.UNSATISFIABLE: "dim magenta",
    R.SHORT: "yellow", R.SETUP_FAILED: "bold red", J.REMOVED: "dim",
    C.PAUSED: "yellow", C.FINISHED: "green", C.FAILED: "bold red",
    C.WAITING: "bold yellow",
}
"""The one colour of each job, run and campaign status (Rich styles), for the TUI and
``dltop run``'s progress lines."""


def sparkline(values: Sequence[float | None], width: int, lo: float | None = 0.0,
              hi: float | None = None) -> str:
    """The last ``width`` values as block characters (missing values as spaces)."""
    vals = list(values)[-width:]
    known = [v for v in vals if v is not None]
    if not known:
        return " " * width
    low = min(known) if lo is None else lo
    high = max(known) if hi is None else hi
    span = high - low
    out = []
    for v in vals:
        if v is None:
            out.append(" ")
            continue
        frac = 1.0 if span <= 0 else (v - low) / span
        out.append(BLOCKS[1 + round(max(0.0, min(1.0, frac)) * (len(BLOCKS) - 2))])
    return "".join(out).rjust(width)


def gib(n: int | None) -> str:
    """Bytes as GiB with one decimal, or N/A."""
    return NA if n is None else f"{n / 2**30:.1f}"


def size(n: int | None) -> str:
    """Bytes as ``1.5 GiB`` from a GiB on, else ``512 MiB``; or N/A."""
    if n is None:
        return NA
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def num(value: float | None, fmt: str, unit: str = "") -> str:
    """A number in ``fmt`` with a unit, or N/A."""
    return NA if value is None else f"{value:{fmt}}{unit}"


def duration(seconds: float | None) -> str:
    """Seconds as ``h:mm:ss`` or ``m:ss``."""
    if seconds is None:
        return "--:--"
    s = round(seconds)
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


def per_iteration(seconds: float | None) -> str:
    """Seconds per iteration with a sensible number of digits."""
    if seconds is None:
        return NA
    if seconds >= 1:
        return f"{seconds:.2f} s/it"
    return f"{seconds * 1000:.1f} ms/it"


def serves(framework: str) -> bool:
    """Whether ``framework``'s runs are serve runs (:data:`~dltop.catalog.SERVE_FRAMEWORKS`)."""
    return framework in SERVE_FRAMEWORKS


def per_request(seconds: float | None) -> str:
    """A request's end-to-end seconds as :func:`per_iteration` says them (``508.0 ms/req``)."""
    return per_iteration(seconds).replace("/it", "/req")
