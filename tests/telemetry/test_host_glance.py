"""The live view's cheap host reading (``HostSampler.glance``) against psutil's."""

from __future__ import annotations

from pathlib import Path

import psutil

from dltop.telemetry.host import HostSampler, meminfo_bytes

MEMINFO = """MemTotal:       24683656 kB
MemFree:         1000000 kB
MemAvailable:   20000000 kB
Buffers:           12345 kB
SwapCached:            0 kB
SwapTotal:       2097148 kB
SwapFree:        1048576 kB
"""


def test_meminfo_counts_as_psutil_does(tmp_path: Path) -> None:
    f = tmp_path / "meminfo"
    f.write_text(MEMINFO)
    assert meminfo_bytes(str(f)) == ((24683656 - 20000000) * 1024, 24683656 * 1024,
                                     (2097148 - 1048576) * 1024)


def test_meminfo_without_a_field_or_file_leaves_it_to_psutil(tmp_path: Path) -> None:
    f = tmp_path / "meminfo"
    f.write_text(MEMINFO.replace("MemAvailable", "MemAvail"))  # a kernel before 3.14
    assert meminfo_bytes(str(f)) is None
    assert meminfo_bytes(str(tmp_path / "absent")) is None


def test_glance_reads_what_psutil_reads() -> None:
    sampler = HostSampler()
    g = sampler.glance()
    vm = psutil.virtual_memory()
    assert g.mem_total_bytes == vm.total
    # memory moves between the two reads; 5 % of the total is far more than it does
    assert abs(g.mem_used_bytes - (vm.total - vm.available)) < 0.05 * vm.total
    assert abs(g.swap_used_bytes - psutil.swap_memory().used) < 0.05 * vm.total + 1
    assert len(g.cpu_pct_per_core) == psutil.cpu_count()
    assert all(0.0 <= p <= 100.0 for p in g.cpu_pct_per_core)
    # what stored windows need is not read here
    assert g.cpu_busy_s == () and g.self_cpu_s is None and g.cpu_user_pct is None
