"""The readings rule (:mod:`dltop.telemetry.readings`) over a configuration's runs.

A telemetry figure of a configuration stands on all its ok runs: when one of them has
too few readings or too short a window, the figure is ``n/a`` with that run's window
and count, rather than a mean that hides it among longer runs.

Every telemetry cell of a configuration asks the same question (a summary row asks it
nine times): a :class:`~dltop.results.aggregate.ConfigResult` answers it once per kind
of readings (:attr:`~dltop.results.aggregate.ConfigResult.host_readings`,
:attr:`~dltop.results.aggregate.ConfigResult.gpu_readings`), by :func:`check_runs`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from dltop.telemetry.readings import HINT, SERVE_HINT, gpu_shortfall, host_shortfall

Detail = tuple[tuple[str, float | None], ...]


class StoredRun(Protocol):
    """A run as the rule reads it: its stored columns (a ``RunRecord``)."""

    def get(self, name: str) -> Any: ...


class Checked(Protocol):
    """A configuration that keeps its runs' check (a ``ConfigResult``): computed once."""

    @property
    def host_readings(self) -> tuple[str, Detail]: ...
    @property
    def gpu_readings(self) -> tuple[str, Detail]: ...


def readings_check(res: Checked, gpu: bool) -> tuple[str, Detail]:
    """Whether the configuration's runs stand on enough readings for a telemetry figure.

    Returns:
        The shortfall of its weakest run (``n/a: window 0.04 s, 0 readings (set
        min_time_s)``; empty when every run has enough: :mod:`dltop.telemetry.readings`)
        and the cell's detail: the fewest ``readings`` and the shortest ``window_s`` over
        its runs (None where no run recorded them). Computed once per configuration
        (:func:`check_runs`).
    """
    return res.gpu_readings if gpu else res.host_readings


def check_runs(runs: Sequence[StoredRun], gpu: bool, serve: bool = False
               ) -> tuple[str, Detail]:
    """:func:`readings_check` of these runs (GPU readings, else host readings); ``serve``:
    serve runs, whose window is their requests' (``min_time_s`` does not apply to them)."""
    count = "gpu_readings" if gpu else "host_readings"
    judge = gpu_shortfall if gpu else host_shortfall
    # (window, count) of each run: its only two numbers the rule reads
    pairs = [(r.get("window_s"), r.get(count)) for r in runs]
    windows = [float(w) for w, _ in pairs if w is not None]
    counts = [int(n) for _, n in pairs if n is not None]
    worst = ""
    for window, n in sorted(pairs, key=lambda p: (p[1] is None, p[1] or 0, p[0] or 0.0)):
        why = judge(window, n, SERVE_HINT if serve else HINT)
        if why is not None:
            worst = why
            break
    return worst, (("readings", min(counts) if counts else None),
                   ("window_s", min(windows) if windows else None))
