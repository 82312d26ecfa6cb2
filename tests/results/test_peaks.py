"""The peak-FLOPs table MFU divides by, looked up by the names NVML gives the GPUs."""

from __future__ import annotations

import pytest

from dltop.results.peaks import gpu_peak, peak_tflops

PRECISIONS = ("fp32", "tf32", "bf16", "fp16")


@pytest.mark.parametrize(("name", "entry", "tflops"), [
    # NVML device names as nvidia-smi prints them on these GPUs.
    ("NVIDIA H100 80GB HBM3", "H100 SXM", (66.9, 494.7, 989.4, 989.4)),
    ("NVIDIA H100 PCIe", "H100 PCIe", (51.2, 378.0, 756.0, 756.0)),
    ("NVIDIA H100 NVL", "H100 NVL", (60.0, 417.5, 835.5, 835.5)),
    ("NVIDIA H200", "H200 SXM", (66.9, 494.7, 989.4, 989.4)),
    ("NVIDIA H200 NVL", "H200 NVL", (60.0, 417.5, 835.5, 835.5)),
    ("NVIDIA GH200 480GB", "GH200", (66.9, 494.7, 989.4, 989.4)),
    ("NVIDIA A100-SXM4-80GB", "A100", (19.5, 156.0, 312.0, 312.0)),
    ("NVIDIA A100-SXM4-40GB", "A100", (19.5, 156.0, 312.0, 312.0)),
    ("NVIDIA A100-PCIE-40GB", "A100", (19.5, 156.0, 312.0, 312.0)),
    ("NVIDIA A100 80GB PCIe", "A100", (19.5, 156.0, 312.0, 312.0)),
])
def test_every_precision_of_the_data_centre_gpus(name: str, entry: str,
                                                 tflops: tuple[float, ...]) -> None:
    peak = gpu_peak(name)
    assert peak is not None and peak.name == entry
    assert tuple(peak_tflops(name, p) for p in PRECISIONS) == pytest.approx(tflops)


def test_the_lookup_ignores_case_and_unknown_gpus_have_no_peak() -> None:
    assert peak_tflops("nvidia h100 80gb hbm3", "bf16") == pytest.approx(989.4)
    assert gpu_peak("NVIDIA H800") is None  # not in the table: MFU says "unknown peak"
    assert peak_tflops("NVIDIA H100 80GB HBM3", "fp8") is None
    assert gpu_peak("") is None and gpu_peak(None) is None


def test_sparse_figures_are_not_used() -> None:
    # Datasheets print the 2:4-sparse rate (1979 for H100 SXM bf16) next to the dense one.
    for name in ("NVIDIA H100 80GB HBM3", "NVIDIA H200"):
        assert peak_tflops(name, "bf16") == pytest.approx(1978.9 / 2, rel=1e-3)
