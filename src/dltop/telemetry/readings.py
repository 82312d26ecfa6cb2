"""When a telemetry figure stands on enough readings to be shown (docs/metrics.md).

A run's telemetry figures (power, energy, J/sample, GPU utilisation and memory, host
and process-tree CPU, RSS) come from the sampler's readings inside its measured
window. A window shorter than a sampler tick holds no reading, or one: the mean of
it is the GPU's idle power, not the run's (the 2026-11-26 H200 run read ~124 W over
30-95 ms windows). So every figure carries the count of readings behind it, and below
the thresholds here the figure is not shown: its cell reads
``n/a: window 0.04 s, 0 readings (set min_time_s)``.

The counts are per group: ``runs.gpu_readings`` (GPU ticks inside the window, the
fewest of the run's GPUs) behind the GPU figures, ``runs.host_readings`` (host ticks
inside the window) behind the host and process-tree ones. A run stored before the
counts existed (NULL) is judged by its window alone. Pure: no I/O, no imports beyond
the standard library, so results, the viewer and the report share it.
"""

from __future__ import annotations

MIN_WINDOW_S = 1.0
"""A measured window shorter than this gives no telemetry figure (the GPU's own power
average and utilisation period are of this order: a shorter window is their edge)."""
MIN_GPU_READINGS = 10
"""GPU readings (per GPU) a GPU figure needs: instantaneous power and utilisation, so
the mean of fewer is one moment of the window, not the window (1 s at 10 Hz)."""
MIN_HOST_READINGS = 2
"""Host readings a host figure needs. Each host reading is already a mean over its own
tick (CPU time since the previous reading), so two readings cover the window end to end
at the default 2 Hz of a 1 s window; one reading half lies outside the window."""
NOTE = (f"Telemetry figures (power, J/sample, GPU memory, CPU, RSS) stand on the readings "
        f"inside each run's measured window: a run with fewer than {MIN_GPU_READINGS} GPU "
        f"readings (per GPU) or {MIN_HOST_READINGS} host readings, or a window under "
        f"{MIN_WINDOW_S:g} s, gives n/a with its window and count; CSV and JSON cells give "
        "the fewest readings of the configuration's runs (readings).")
"""The tables' note on the rule (exports, summary)."""
HINT = "set min_time_s"
"""What lengthens the window (the runner measures until it has lasted that long)."""
SERVE_HINT = "raise iterations or lower request_rate"
"""What lengthens a serve run's window: a fixed number of requests on a schedule
(``min_time_s`` does not apply to it)."""


def shortfall(window_s: float | None, readings: int | None, minimum: int,
              hint: str = HINT) -> str | None:
    """Why a figure over this window and count is not shown, or None when it may be.

    Args:
        window_s: the run's measured window in seconds (None: no window at all; the
            run's telemetry note says why, so no shortfall is claimed here).
        readings: readings inside the window (None: a run stored before they were
            counted; only its window is judged).
        minimum: the readings the figure needs (:data:`MIN_GPU_READINGS`,
            :data:`MIN_HOST_READINGS`).
        hint: what lengthens the run's window (:data:`SERVE_HINT` for a serve run).

    Returns:
        ``n/a: window 0.04 s, 0 readings (set min_time_s)``, or None.
    """
    if window_s is None:
        return None
    few = readings is not None and readings < minimum
    if window_s >= MIN_WINDOW_S and not few:
        return None
    count = "readings not counted" if readings is None else \
        f"{readings} reading{'' if readings == 1 else 's'}"
    # a long window without a single reading is a sampler that delivered nothing
    # (it failed, or was stalled): a longer window would not help
    why = hint if window_s < MIN_WINDOW_S or readings else "no reading arrived"
    return f"n/a: window {window_s:.2g} s, {count} ({why})"


def gpu_shortfall(window_s: float | None, readings: int | None,
                  hint: str = HINT) -> str | None:
    """:func:`shortfall` of a GPU figure (power, energy, J/sample, utilisation, memory)."""
    return shortfall(window_s, readings, MIN_GPU_READINGS, hint)


def host_shortfall(window_s: float | None, readings: int | None,
                   hint: str = HINT) -> str | None:
    """:func:`shortfall` of a host figure (host and process-tree CPU, RSS)."""
    return shortfall(window_s, readings, MIN_HOST_READINGS, hint)


IDLE_HINT = "raise --gpu-hz"
"""What puts more readings in a serve run's idle wait (its length is the runner's)."""


def idle_shortfall(window_s: float | None, readings: int | None) -> str | None:
    """Why a serve run's idle power (the GPUs' mean over the runner's wait just before its
    load) is not shown, or None when it stands on :data:`MIN_GPU_READINGS` per GPU.

    Returns:
        ``n/a: no idle wait before the load`` (none recorded: a CPU run, or one stored
        before), ``n/a: idle 2 s, 4 readings (raise --gpu-hz)``, or None.
    """
    if window_s is None or readings is None:
        return "n/a: no idle wait before the load"
    if readings >= MIN_GPU_READINGS:
        return None
    return f"n/a: idle {window_s:.2g} s, {readings} reading{'' if readings == 1 else 's'} " \
           f"({IDLE_HINT})"
