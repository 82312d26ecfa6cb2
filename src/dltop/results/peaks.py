"""Peak dense TFLOP/s of common GPUs per precision, for model FLOPs utilisation (MFU).

Figures are the vendors' datasheet numbers *without* structured sparsity (the
datasheets print the 2:4-sparse figure, twice these, next to them), for one
GPU at boost clock. ``fp16``/``bf16`` are tensor-core rates with FP32
accumulation, which is what training uses (on GeForce cards this is half the
FP16-accumulate rate). ``tf32`` is the TF32 tensor-core rate; ``fp32`` the
plain CUDA-core rate. A precision a GPU has no tensor-core path for is absent.

Sources: NVIDIA A100 Tensor Core GPU architecture whitepaper (A100, SXM and
PCIe alike); NVIDIA H100 Tensor Core GPU architecture whitepaper (H100 SXM5 and
PCIe; H200 SXM has the same compute as H100 SXM5); H100 NVL, H200 NVL and GH200
datasheets (their sparse figures halved); L40S datasheet (2023); Ada Lovelace
architecture whitepaper v1.1 (RTX 4090); V100 datasheet.

CPU peaks are not derivable from what dltop stores (no vector width, FMA
units or sustained clock), so CPU runs show ``n/a``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuPeak:
    """One GPU model's peak dense TFLOP/s per precision."""

    name: str
    """The model as the table names it."""
    patterns: tuple[tuple[str, ...], ...]
    """Matches when every word of one tuple is in the upper-cased device name."""
    excludes: tuple[str, ...]
    """Words that rule the match out (``PCIE`` for the SXM entry)."""
    tflops: dict[str, float]
    """Precision → peak dense TFLOP/s."""


PEAKS: tuple[GpuPeak, ...] = (
    # H100 whitepaper, "NVIDIA H100 PCIe" column: 51.2 FP32, 378 TF32, 756 BF16/FP16
    # dense (756/1513 with sparsity). NVML: "NVIDIA H100 PCIe".
    GpuPeak("H100 PCIe", (("H100", "PCIE"),), (),
            {"fp32": 51.2, "tf32": 378.0, "bf16": 756.0, "fp16": 756.0}),
    # H100 NVL datasheet: 60 FP32, 835 TF32 and 1671 BF16/FP16 sparse, halved here.
    GpuPeak("H100 NVL", (("H100", "NVL"),), (),
            {"fp32": 60.0, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5}),
    # H100 whitepaper, "NVIDIA H100 SXM5" column: 66.9 FP32, 494.7 TF32, 989.4
    # BF16/FP16 dense at the 1830 MHz boost clock. NVML: "NVIDIA H100 80GB HBM3".
    GpuPeak("H100 SXM", (("H100",),), ("PCIE", "NVL"),
            {"fp32": 66.9, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4}),
    # H200 NVL datasheet: 60 FP32, 835 TF32 and 1671 BF16/FP16 sparse, halved here.
    GpuPeak("H200 NVL", (("H200", "NVL"),), (),
            {"fp32": 60.0, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5}),
    # GH200 Grace Hopper datasheet: its GPU has the H100 SXM5's compute (67 FP32,
    # 494 TF32, 990 BF16/FP16 dense); listed before H200, whose name "GH200" contains.
    GpuPeak("GH200", (("GH200",),), (),
            {"fp32": 66.9, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4}),
    # H200 SXM datasheet: the same compute as H100 SXM5 (67 FP32, 989 TF32 and 1979
    # BF16/FP16 sparse); more and faster memory only. NVML: "NVIDIA H200".
    GpuPeak("H200 SXM", (("H200",),), ("NVL",),
            {"fp32": 66.9, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4}),
    # A100 whitepaper (SXM4 and PCIe, 40 and 80 GB alike): 19.5 FP32, 156
    # TF32, 312 BF16/FP16 dense. NVML: "NVIDIA A100-SXM4-80GB", "NVIDIA A100-PCIE-40GB".
    GpuPeak("A100", (("A100",),), (),
            {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0}),
    GpuPeak("L40S", (("L40S",),), (),
            {"fp32": 91.6, "tf32": 183.0, "bf16": 362.05, "fp16": 362.05}),
    GpuPeak("RTX 4090", (("4090",),), (),
            {"fp32": 82.6, "tf32": 82.6, "bf16": 165.2, "fp16": 165.2}),
    GpuPeak("V100 PCIe", (("V100", "PCIE"),), (), {"fp32": 14.0, "fp16": 112.0}),
    GpuPeak("V100 SXM2", (("V100",),), ("PCIE",), {"fp32": 15.7, "fp16": 125.0}),
)
"""Most specific entries first: the first match wins."""


def gpu_peak(device_name: str | None) -> GpuPeak | None:
    """The peak table entry a device name (as NVML or the framework reports it) matches.

    >>> gpu_peak("NVIDIA H100 80GB HBM3").name
    'H100 SXM'
    """
    if not device_name:
        return None
    name = device_name.upper()
    for peak in PEAKS:
        if any(w in name for w in peak.excludes):
            continue
        if any(all(w in name for w in words) for words in peak.patterns):
            return peak
    return None


def peak_tflops(device_name: str | None, precision: str) -> float | None:
    """Peak dense TFLOP/s of one such GPU at ``precision``; ``None`` when unknown."""
    peak = gpu_peak(device_name)
    return None if peak is None else peak.tflops.get(precision)


def peak_table_markdown() -> str:
    """The peak table as Markdown (docs and ``--help`` read the same numbers)."""
    precisions = ("fp32", "tf32", "bf16", "fp16")
    lines = ["| GPU | " + " | ".join(precisions) + " |",
             "|---|" + "---:|" * len(precisions)]
    for p in PEAKS:
        cells = [f"{p.tflops[k]:g}" if k in p.tflops else "n/a" for k in precisions]
        lines.append(f"| {p.name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
