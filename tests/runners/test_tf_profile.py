"""tf_profile reads per-op self and device times out of an XSpace trace."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import LazyModule  # and the child modules on sys.path

tf_profile = LazyModule("tf_profile")
xplane_pb2 = LazyModule("tensorflow.tsl.profiler.protobuf.xplane_pb2")

pytestmark = [pytest.mark.tensorflow]

US = 1_000_000  # picoseconds per microsecond


def add_event(plane: object, line: object, name: str, display: str, start_us: int,
              dur_us: int, annotation: str | None = None) -> None:
    mid = len(plane.event_metadata) + 1
    plane.event_metadata[mid].id = mid
    plane.event_metadata[mid].name = name
    plane.event_metadata[mid].display_name = display
    e = line.events.add(metadata_id=mid, offset_ps=start_us * US, duration_ps=dur_us * US)
    if annotation is not None:
        e.stats.add(metadata_id=1, str_value=annotation)


def trace(tmp_path: Path) -> Path:
    space = xplane_pb2.XSpace()
    host = space.planes.add(id=0, name="/host:CPU")
    thread = host.lines.add(id=1, name="tf_Compute/1")
    # A function-call op containing two kernels; the executor's own event is no op.
    add_event(host, thread, "ExecutorState::Process", "", 0, 100)
    add_event(host, thread, "call:PartitionedCall", "PartitionedCall", 0, 90)
    add_event(host, thread, "dense/MatMul:MatMul", "MatMul", 10, 50)
    add_event(host, thread, "dense/Relu:Relu", "Relu", 70, 10)
    other = host.lines.add(id=2, name="tf_Compute/2")
    # As an AVX-512 CPU's oneDNN pass renames it: still a MatMul in the profile.
    add_event(host, other, "dense_1/MatMul:_MklFusedMatMul", "_MklFusedMatMul", 5, 20)
    gpu = space.planes.add(id=1, name="/device:GPU:0")
    gpu.stat_metadata[1].id = 1
    gpu.stat_metadata[1].name = "kernel_annotation"
    stream = gpu.lines.add(id=7, name="Stream #7(Compute)")
    add_event(gpu, stream, "volta_sgemm", "", 10, 30, "__inference_f::dense/MatMul:MatMul#id=1#")
    add_event(gpu, stream, "relu_kernel", "", 50, 4, "dense/Relu:Relu")
    add_event(gpu, stream, "memset", "", 60, 2)
    derived = gpu.lines.add(id=8, name="TensorFlow Ops")  # repeats the stream: not counted
    add_event(gpu, derived, "dense/MatMul:MatMul", "", 10, 30, "dense/MatMul:MatMul")
    path = tmp_path / "t.xplane.pb"
    path.write_bytes(space.SerializeToString())
    return path


def test_host_self_time_excludes_nested_ops(tmp_path: Path) -> None:
    ops = {op["name"]: op for op in tf_profile.parse([trace(tmp_path)], cuda=False)}
    assert set(ops) == {"MatMul", "Relu", "PartitionedCall"}
    assert ops["MatMul"]["calls"] == 2 and ops["MatMul"]["self_cpu_ms"] == pytest.approx(0.07)
    assert ops["PartitionedCall"]["self_cpu_ms"] == pytest.approx(0.03)
    assert ops["PartitionedCall"]["total_ms"] == pytest.approx(0.09)
    assert all(op["self_device_ms"] is None for op in ops.values())


def test_gpu_kernels_count_for_the_op_that_launched_them(tmp_path: Path) -> None:
    ops = tf_profile.parse([trace(tmp_path)], cuda=True)
    device = {op["name"]: op["self_device_ms"] for op in ops}
    assert device["MatMul"] == pytest.approx(0.03) and device["Relu"] == pytest.approx(0.004)
    assert device[tf_profile.UNATTRIBUTED] == pytest.approx(0.002)
    assert device["PartitionedCall"] == 0
    assert ops[0]["name"] == "MatMul"  # ordered by device time on CUDA
