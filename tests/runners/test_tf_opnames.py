"""TensorFlow op names read the same on CPUs with and without oneDNN's rewrites."""

from __future__ import annotations

import pytest
from tf_opnames import base_op  # a child module (tests/runners/conftest.py puts it on the path)


@pytest.mark.parametrize(("seen", "base"), [
    ("_MklNativeFusedConv2D", "Conv2D"),          # AVX-512, oneDNN
    ("_MklFusedMatMul", "MatMul"),
    ("_FusedConv2D", "Conv2D"),                   # grappler's remapper
    ("_FusedMatMul", "MatMul"),
    ("_MklNativeConv2DBackpropFilterWithBias", "Conv2DBackpropFilter"),
    ("_MklNativeConv2DBackpropInput", "Conv2DBackpropInput"),
    ("_MklNativeMaxPool", "MaxPool"),
    ("_MklFusedBatchMatMulV2", "BatchMatMulV2"),
    ("_MklNativeFusedDepthwiseConv2dNative", "DepthwiseConv2dNative"),
    ("_MklNativeFusedBatchNormV3", "FusedBatchNormV3"),  # a real op: Fused stays
    ("FusedBatchNormGradV3", "FusedBatchNormGradV3"),
    ("Conv2D", "Conv2D"),
    ("AddV2", "AddV2"),
    ("_Mkl", "_Mkl"),  # nothing left: the name as it was
])
def test_rewritten_ops_are_counted_under_their_base_op(seen: str, base: str) -> None:
    assert base_op(seen) == base
