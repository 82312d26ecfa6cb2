"""Per-operator profile of a few extra steps with TensorFlow's profiler (``profile = true``).

Valid Python 3.6 (child side). After the measured iterations the runner calls
:func:`profile`: ``PROFILE_STEPS`` more steps run under
``tf.profiler.experimental`` and the trace it writes (an XSpace protobuf,
``*.xplane.pb``) is read back with the protobuf classes TensorFlow ships.

What the trace holds, and what is taken from it:

- The host plane (``/host:CPU``) has one line per thread; every kernel the
  executor runs is an event named ``scope/name:OpType``. An op's self time is
  its duration less the op events nested inside it on the same thread (a
  function call op contains its body's ops). Ops are grouped by type
  (``MatMul``, ``Conv2D``, ``AddV2``...), the level torch's ``aten::`` names
  are at; the profile's ``total_ms`` includes the nested ops. Names are the
  base ops (:mod:`tf_opnames`): a oneDNN or fused rewrite, which depends on
  the CPU, is counted under the op it replaced.
- GPU planes (``/device:GPU:N``) hold the kernels, each tagged with the
  annotation of the op that launched it; their durations summed per op type
  are ``self_device_ms`` (null on a CPU run). Not yet run on a real GPU.
  Input shapes are not in a TF trace without the much slower Python tracer:
  ``shapes`` is null.
"""

import glob
import os
import shutil
import tempfile
import time

import tensorflow as tf
from tf_opnames import base_op

PROFILE_STEPS = 5
MAX_OPS = 40


def profile(reporter, step, first, kind):
    """Profile ``step(i)`` for ``i`` in ``first .. first + PROFILE_STEPS - 1``; send ``profile``.

    Nothing is sent when the trace has no op events (e.g. a build without the
    profiler): no event rather than an empty or made-up one.
    """
    logdir = tempfile.mkdtemp(prefix="dltop-tfprof-")
    try:
        options = tf.profiler.experimental.ProfilerOptions(
            host_tracer_level=2, python_tracer_level=0,
            device_tracer_level=1 if kind == "gpu" else 0)
        tf.profiler.experimental.start(logdir, options=options)
        seconds = []
        try:
            for i in range(first, first + PROFILE_STEPS):
                t0 = time.perf_counter()
                step(i)
                seconds.append(time.perf_counter() - t0)
        finally:
            tf.profiler.experimental.stop()
        ops = parse(_trace_files(logdir), kind == "gpu")
    finally:
        shutil.rmtree(logdir, ignore_errors=True)
    if not ops:
        return
    reporter.profile(steps=PROFILE_STEPS,
         step_ms=1000.0 * sum(seconds) / len(seconds),
         device="cuda" if kind == "gpu" else "cpu", ops=ops)


def _trace_files(logdir):
    return sorted(glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True))


def _host_ops(plane, table):
    """Add the plane's op events to ``table``: per type [calls, self ps, total ps, device ps]."""
    for line in plane.lines:
        events = []
        for e in line.events:
            md = plane.event_metadata[e.metadata_id]
            # Kernels carry their op type as display name; the executor's and eager
            # runtime's own events ("ExecutorState::Process", ...) have none.
            op = md.display_name if ":" in md.name and "::" not in md.name else None
            if op and e.duration_ps > 0:
                events.append((e.offset_ps, e.offset_ps + e.duration_ps, base_op(op)))
        events.sort(key=lambda ev: (ev[0], -ev[1]))
        stack = []  # [end, op, child ps]
        for start, end, op in events:
            while stack and stack[-1][0] <= start:
                _close(stack.pop(), table)
            if stack:
                stack[-1][2] += end - start
            row = table.setdefault(op, [0, 0, 0, 0])
            row[0] += 1
            row[2] += end - start
            stack.append([end, op, 0, end - start])
        while stack:
            _close(stack.pop(), table)


def _close(frame, table):
    end, op, children, duration = frame
    table[op][1] += max(duration - children, 0)


ANNOTATION_STATS = ("tf_op", "kernel_annotation")
UNATTRIBUTED = "(kernels without a TF op)"


def _stat_text(plane, stat):
    if stat.str_value:
        return stat.str_value
    if stat.ref_value and stat.ref_value in plane.stat_metadata:
        return plane.stat_metadata[stat.ref_value].name
    return None


def _annotated_type(text):
    """``"__inference_f::scope/x/MatMul:MatMul#id=3#"`` -> ``"MatMul"``."""
    text = text.split("::")[-1].split("#")[0]
    return text.rsplit(":", 1)[-1] if ":" in text else None


def _device_ops(plane, table):
    """Kernel and copy time on a GPU plane's streams, per op type of the launching TF op.

    The GPU tracer tags each kernel with the annotation of the op that launched
    it (``tf_op`` or ``kernel_annotation``, "scope/name:OpType"). Only the
    ``Stream`` lines are read: derived lines ("TensorFlow Ops", "XLA Ops", ...)
    repeat the same time.
    """
    names = {k: v.name for k, v in plane.stat_metadata.items()}
    for line in plane.lines:
        if not line.name.startswith("Stream"):
            continue
        for e in line.events:
            op = None
            md = plane.event_metadata[e.metadata_id]
            for stat in list(e.stats) + list(md.stats):
                if names.get(stat.metadata_id) in ANNOTATION_STATS:
                    text = _stat_text(plane, stat)
                    op = _annotated_type(text) if text else None
                    if op:
                        break
            table.setdefault(base_op(op) if op else UNATTRIBUTED, [0, 0, 0, 0])[3] += e.duration_ps


def parse(paths, cuda):
    """The top ``MAX_OPS`` op types of XSpace trace files, as the ``profile`` event's ops."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    table = {}
    for path in paths:
        space = xplane_pb2.XSpace()
        with open(path, "rb") as fh:
            space.ParseFromString(fh.read())
        for plane in space.planes:
            if plane.name.startswith("/host:"):
                _host_ops(plane, table)
            elif cuda and plane.name.startswith("/device:GPU:"):
                _device_ops(plane, table)
    ps = 1e-9  # picoseconds to milliseconds
    ops = [{"name": op, "calls": row[0], "self_cpu_ms": row[1] * ps,
            "self_device_ms": row[3] * ps if cuda else None, "total_ms": row[2] * ps,
            "shapes": None} for op, row in table.items() if row[0] or row[3]]
    key = "self_device_ms" if cuda else "self_cpu_ms"
    ops.sort(key=lambda o: (-(o[key] or 0.0), -o["self_cpu_ms"], o["name"]))
    return ops[:MAX_OPS]
