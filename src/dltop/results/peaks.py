"""Peak dense TFLOP/s of common GPUs per precision, for model FLOPs utilisation (MFU).

Figures are the vendors' datasheet numbers *without* structured sparsity (the
datasheets print the 2:4-sparse figure, twice these, next to them), for one
GPU at boost clock. ``fp16``/``bf16`` are tensor-core rates with FP32
accumulation, which is what training uses (on GeForce cards this is half the
FP16-accumulate rate). ``tf32`` is the TF32 tensor-core rate; ``fp32`` the
plain CUDA-core rate; ``fp8`` the FP8 (E4M3/E5M2) tensor-core rate with FP32
accumulation, on compute capability 8.9 and later (Hopper, Ada data-centre parts). A
precision a GPU has no tensor-core path for is absent (and so is RTX 4090's fp8: its
whitepaper's FP32-accumulate figure was not checked against a datasheet).

Peak memory bandwidths (:data:`BANDWIDTHS`, for model bandwidth utilisation, MBU)
are the datasheets' HBM/GDDR figures in TB/s (10^12 bytes/s). They live in a table of
their own because they split GPUs the FLOPS table does not: an A100's compute is one
figure, its bandwidth depends on its memory (40 GB HBM2: 1.555; 80 GB HBM2e: 2.039
SXM, 1.935 PCIe).

Sources: NVIDIA A100 Tensor Core GPU architecture whitepaper (A100, SXM and
PCIe alike); NVIDIA H100 Tensor Core GPU architecture whitepaper (H100 SXM5 and
PCIe; H200 SXM has the same compute as H100 SXM5); H100 NVL, H200 NVL and GH200
datasheets (their sparse figures halved); L40S datasheet (2023); Ada Lovelace
architecture whitepaper v1.1 (RTX 4090); V100 datasheet.

CPU peaks are not derivable from what dltop stores (no vector width, FMA
units or sustained clock), so CPU runs show ``n/a``; nor is a CPU's memory
bandwidth (channels, DIMM speed), so MBU on a CPU says ``n/a: no peak bandwidth for
CPU``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar


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
            {"fp32": 51.2, "tf32": 378.0, "bf16": 756.0, "fp16": 756.0, "fp8": 1513.0}),
    # H100 NVL datasheet: 60 FP32, 835 TF32, 1671 BF16/FP16 and 3341 FP8 sparse, halved.
    GpuPeak("H100 NVL", (("H100", "NVL"),), (),
            {"fp32": 60.0, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5, "fp8": 1670.5}),
    # H100 whitepaper, "NVIDIA H100 SXM5" column: 66.9 FP32, 494.7 TF32, 989.4
    # BF16/FP16 and 1978.9 FP8 dense at the 1830 MHz boost clock. NVML: "NVIDIA H100
    # 80GB HBM3".
    GpuPeak("H100 SXM", (("H100",),), ("PCIE", "NVL"),
            {"fp32": 66.9, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1978.9}),
    # H200 NVL datasheet: 60 FP32, 835 TF32, 1671 BF16/FP16 and 3341 FP8 sparse, halved.
    GpuPeak("H200 NVL", (("H200", "NVL"),), (),
            {"fp32": 60.0, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5, "fp8": 1670.5}),
    # GH200 Grace Hopper datasheet: its GPU has the H100 SXM5's compute (67 FP32,
    # 494 TF32, 990 BF16/FP16 dense); listed before H200, whose name "GH200" contains.
    GpuPeak("GH200", (("GH200",),), (),
            {"fp32": 66.9, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1978.9}),
    # H200 SXM datasheet: the same compute as H100 SXM5 (67 FP32, 989 TF32, 1979
    # BF16/FP16 and 3958 FP8 sparse); more and faster memory only. NVML: "NVIDIA H200".
    GpuPeak("H200 SXM", (("H200",),), ("NVL",),
            {"fp32": 66.9, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1978.9}),
    # A100 whitepaper (SXM4 and PCIe, 40 and 80 GB alike): 19.5 FP32, 156
    # TF32, 312 BF16/FP16 dense. NVML: "NVIDIA A100-SXM4-80GB", "NVIDIA A100-PCIE-40GB".
    GpuPeak("A100", (("A100",),), (),
            {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0}),
    # L40S datasheet: 91.6 FP32, 183 TF32, 362.05 BF16/FP16 and 733 FP8 dense.
    GpuPeak("L40S", (("L40S",),), (),
            {"fp32": 91.6, "tf32": 183.0, "bf16": 362.05, "fp16": 362.05, "fp8": 733.0}),
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
    return _first(PEAKS, device_name)


def peak_tflops(device_name: str | None, precision: str) -> float | None:
    """Peak dense TFLOP/s of one such GPU at ``precision``; ``None`` when unknown."""
    peak = gpu_peak(device_name)
    return None if peak is None else peak.tflops.get(precision)


@dataclass(frozen=True)
class GpuBandwidth:
    """One GPU model's peak memory bandwidth."""

    name: str
    patterns: tuple[tuple[str, ...], ...]
    """Matches when every word of one tuple is in the upper-cased device name."""
    excludes: tuple[str, ...]
    tb_per_s: float
    """Peak memory bandwidth in TB/s (10^12 bytes per second)."""


BANDWIDTHS: tuple[GpuBandwidth, ...] = (
    # H100 whitepaper / datasheet: SXM5 80 GB HBM3 3.35 TB/s; PCIe 80 GB HBM2e 2.0 TB/s;
    # NVL 94 GB HBM3 3.9 TB/s.
    GpuBandwidth("H100 PCIe", (("H100", "PCIE"),), (), 2.0),
    GpuBandwidth("H100 NVL", (("H100", "NVL"),), (), 3.9),
    GpuBandwidth("H100 SXM", (("H100",),), ("PCIE", "NVL"), 3.35),
    # H200 datasheet: 141 GB HBM3e, 4.8 TB/s, SXM and NVL alike. GH200 is left out:
    # its bandwidth depends on its memory (96 GB HBM3 4.0, 144 GB HBM3e 4.9 TB/s) and
    # NVML's name does not always say which.
    GpuBandwidth("H200", (("H200",),), ("GH200",), 4.8),
    # A100 datasheet: 80 GB HBM2e 2.039 TB/s SXM, 1.935 PCIe; 40 GB HBM2 1.555 TB/s.
    # NVML: "NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe", "NVIDIA A100-PCIE-40GB".
    GpuBandwidth("A100 80GB PCIe", (("A100", "80GB", "PCIE"),), (), 1.935),
    GpuBandwidth("A100 80GB SXM", (("A100", "80GB"),), ("PCIE",), 2.039),
    GpuBandwidth("A100 40GB", (("A100", "40GB"),), (), 1.555),
    # L40S datasheet: 48 GB GDDR6, 864 GB/s; L4 datasheet: 24 GB GDDR6, 300 GB/s.
    GpuBandwidth("L40S", (("L40S",),), (), 0.864),
    GpuBandwidth("L4", (("L4",),), ("L40",), 0.3),
    # A10 datasheet: 24 GB GDDR6, 600 GB/s ("NVIDIA A10", "NVIDIA A10G"; not A100).
    GpuBandwidth("A10", (("A10",),), ("A100",), 0.6),
    # V100 datasheet: HBM2 900 GB/s (SXM2 and PCIe, 16 and 32 GB).
    GpuBandwidth("V100", (("V100",),), (), 0.9),
    # Ada whitepaper: RTX 4090 24 GB GDDR6X at 21 Gbps on 384 bits, 1008 GB/s.
    GpuBandwidth("RTX 4090", (("4090",),), (), 1.008),
)
"""Most specific entries first: the first match wins."""

Entry = TypeVar("Entry", GpuPeak, GpuBandwidth)


def _first(table: tuple[Entry, ...], device_name: str | None) -> Entry | None:
    """The first entry of ``table`` that the upper-cased device name matches, or None."""
    name = (device_name or "").upper()
    return next((e for e in table if name and not any(w in name for w in e.excludes)
                 and any(all(w in name for w in words) for words in e.patterns)), None)


def gpu_bandwidth(device_name: str | None) -> GpuBandwidth | None:
    """The bandwidth table entry a device name matches, or None.

    >>> gpu_bandwidth("NVIDIA H200").tb_per_s
    4.8
    """
    return _first(BANDWIDTHS, device_name)


def peak_bandwidth_tb_s(device_name: str | None) -> float | None:
    """Peak memory bandwidth of one such GPU in TB/s; ``None`` when unknown."""
    entry = gpu_bandwidth(device_name)
    return None if entry is None else entry.tb_per_s
