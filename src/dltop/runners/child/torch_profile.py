"""Operator profile of a few extra steps with torch.profiler (child side, Python 3.6 valid).

The profiled steps run after the measured ones (and after any final evaluation),
so the profiler's overhead never reaches a measured time; they are not reported
as iterations. Times are summed over the profiled steps, in milliseconds.
"""

import time

import torch

PROFILE_STEPS = 5
MAX_OPS = 40
_SHAPES_CHARS = 200


def _self_device_us(avg):
    # PyTorch 2.4 renamed the CUDA fields to "device"; older releases have only "cuda".
    for attr in ("self_device_time_total", "self_cuda_time_total"):
        value = getattr(avg, attr, None)
        if value is not None:
            return float(value)
    return 0.0


def _shapes_by_name(prof):
    """For each op name, the input shapes of its most expensive variant (or None)."""
    best = {}
    for avg in prof.key_averages(group_by_input_shape=True):
        shapes = getattr(avg, "input_shapes", None)
        cost = float(avg.self_cpu_time_total) + _self_device_us(avg)
        if avg.key not in best or cost > best[avg.key][0]:
            text = str(shapes) if shapes and any(shapes) else None
            if text is not None and len(text) > _SHAPES_CHARS:
                text = text[:_SHAPES_CHARS - 3] + "..."
            best[avg.key] = (cost, text)
    return {k: v[1] for k, v in best.items()}


def summarize(prof, cuda):
    """The ``ops`` list of the ``profile`` event: at most MAX_OPS, by self time.

    On CUDA the order is by self device (kernel) time, then self CPU time;
    ``self_device_ms`` is null on a CPU run.
    """
    shapes = _shapes_by_name(prof)
    ops = []
    for avg in prof.key_averages():
        ops.append({
            "name": avg.key,
            "calls": int(avg.count),
            "self_cpu_ms": float(avg.self_cpu_time_total) / 1000.0,
            "self_device_ms": _self_device_us(avg) / 1000.0 if cuda else None,
            "total_ms": float(avg.cpu_time_total) / 1000.0,
            "shapes": shapes.get(avg.key),
        })
    if cuda:
        ops.sort(key=lambda o: (-o["self_device_ms"], -o["self_cpu_ms"], o["name"]))
    else:
        ops.sort(key=lambda o: (-o["self_cpu_ms"], o["name"]))
    return ops[:MAX_OPS]


def profile_steps(step, device, reporter, steps=PROFILE_STEPS):
    """Run ``step()`` ``steps`` times under torch.profiler and send the ``profile`` event.

    Every data-parallel rank runs the steps (their collectives must match); only
    rank 0's reporter sends. ``step_ms`` is the mean wall time of a profiled step,
    profiler overhead included.
    """
    from torch.profiler import ProfilerActivity, profile

    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU]
    if cuda:
        activities.append(ProfilerActivity.CUDA)
    walls = []
    with profile(activities=activities, record_shapes=True) as prof:
        for _ in range(steps):
            t0 = time.perf_counter()
            step()
            if cuda:
                torch.cuda.synchronize(device)
            walls.append(time.perf_counter() - t0)
    ops = summarize(prof, cuda)
    reporter.profile(steps=steps, step_ms=1000.0 * sum(walls) / len(walls),
                     device="cuda" if cuda else "cpu", ops=ops)
    return ops
