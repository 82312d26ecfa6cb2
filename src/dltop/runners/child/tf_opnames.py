"""TensorFlow op types as the model wrote them, whatever CPU rewrote them (stdlib only).

Valid Python 3.6 (child side). On x86 CPUs TensorFlow's oneDNN pass and grappler's
remapper replace ops by fused or oneDNN kernels, and which ones depends on the CPU
(AVX-512 machines get ``_MklNativeFusedConv2D``, ``_MklFusedMatMul``,
``_MklNativeConv2DBackpropFilterWithBias``, ``_MklNativeMaxPool``...; others keep
``Conv2D`` or ``_FusedConv2D``). The profile stores the base op so that one model's
table reads the same on every machine and compares across them; a fused kernel's
time (a convolution with its bias add and activation) is counted under its base op.
"""

import re

_PREFIX = re.compile(r"^_(?:MklNative|Mkl)")
# Only these "Fused" ops are rewrites: FusedBatchNormV3 is an op of its own.
_FUSED = re.compile(r"^_?Fused(?=Conv|MatMul|BatchMatMul|DepthwiseConv)")
_SUFFIX = re.compile(r"WithBias$")


def base_op(name):
    """``_MklNativeFusedConv2D`` -> ``Conv2D``; ``_FusedMatMul`` -> ``MatMul``; others unchanged."""
    base = _PREFIX.sub("", name)
    base = _FUSED.sub("", base)
    base = _SUFFIX.sub("", base)
    return base or name
