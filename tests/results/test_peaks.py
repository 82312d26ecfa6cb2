"""The peak-FLOPs table MFU divides by, looked up by the names NVML gives the GPUs."""

from __future__ import annotations

import pytest

from dltop.results.peaks import (
    BANDWIDTHS,
    gpu_bandwidth,
    gpu_peak,
    peak_bandwidth_tb_s,
    peak_tflops,
)

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
    assert peak_tflops("NVIDIA A100-SXM4-80GB", "fp8") is None  # no fp8 tensor cores
    assert gpu_peak("") is None and gpu_peak(None) is None


def test_sparse_figures_are_not_used() -> None:
    # Datasheets print the 2:4-sparse rate (1979 for H100 SXM bf16) next to the dense one.
    for name in ("NVIDIA H100 80GB HBM3", "NVIDIA H200"):
        assert peak_tflops(name, "bf16") == pytest.approx(1978.9 / 2, rel=1e-3)


@pytest.mark.parametrize(("name", "fp8"), [
    # the dense FP8 rates (datasheets print twice these, with 2:4 sparsity)
    ("NVIDIA H100 80GB HBM3", 1978.9), ("NVIDIA H200", 1978.9), ("NVIDIA H100 PCIe", 1513.0),
    ("NVIDIA H100 NVL", 1670.5), ("NVIDIA H200 NVL", 1670.5), ("NVIDIA L40S", 733.0),
])
def test_fp8_dense_peaks(name: str, fp8: float) -> None:
    assert peak_tflops(name, "fp8") == pytest.approx(fp8)
    assert peak_tflops(name, "fp8") == pytest.approx(2 * peak_tflops(name, "bf16"), rel=0.02)


@pytest.mark.parametrize(("name", "entry", "tb_s"), [
    ("NVIDIA H100 80GB HBM3", "H100 SXM", 3.35),
    ("NVIDIA H100 PCIe", "H100 PCIe", 2.0),
    ("NVIDIA H100 NVL", "H100 NVL", 3.9),
    ("NVIDIA H200", "H200", 4.8),
    ("NVIDIA H200 NVL", "H200", 4.8),
    ("NVIDIA A100-SXM4-80GB", "A100 80GB SXM", 2.039),
    ("NVIDIA A100 80GB PCIe", "A100 80GB PCIe", 1.935),
    ("NVIDIA A100-SXM4-40GB", "A100 40GB", 1.555),
    ("NVIDIA A100-PCIE-40GB", "A100 40GB", 1.555),
    ("NVIDIA L40S", "L40S", 0.864),
    ("NVIDIA L4", "L4", 0.3),
    ("NVIDIA A10", "A10", 0.6),
    ("NVIDIA A10G", "A10", 0.6),
    ("Tesla V100-SXM2-32GB", "V100", 0.9),
    ("NVIDIA GeForce RTX 4090", "RTX 4090", 1.008),
])
def test_peak_bandwidths_by_nvml_name(name: str, entry: str, tb_s: float) -> None:
    found = gpu_bandwidth(name)
    assert found is not None and found.name == entry
    assert peak_bandwidth_tb_s(name) == pytest.approx(tb_s)


def test_no_bandwidth_guessed() -> None:
    # GH200's depends on its memory (HBM3 or HBM3e); an unknown GPU or a CPU has none.
    for name in ("NVIDIA GH200 480GB", "NVIDIA H800", "AMD EPYC 7B13", "", None):
        assert peak_bandwidth_tb_s(name) is None
    assert len({b.name for b in BANDWIDTHS}) == len(BANDWIDTHS)


def test_docs_show_the_bandwidth_table_the_code_uses() -> None:
    from pathlib import Path

    lines = ["| GPU | peak memory bandwidth TB/s |", "|---|---:|"]
    lines += [f"| {b.name} | {b.tb_per_s:g} |" for b in BANDWIDTHS]
    docs = Path(__file__).parents[2] / "docs" / "metrics.md"
    assert "\n".join(lines) + "\n" in docs.read_text()
