"""How much of the key/value cache a decode step reads, in every framework.

Standard library only, valid Python 3.6 (child side). A decode step at position
``pos`` needs the cache's first ``pos + 1`` keys and values, so its attention grows
with the position, as real decoding does. Eager PyTorch reads exactly those. A step
compiled for static shapes (JAX's ``jit``, TensorFlow's ``tf.function``, PyTorch's
``compile`` and CUDA graphs) cannot take a length that changes every token: it reads
the first :func:`bucket` positions instead, ``pos + 1`` rounded up to a multiple of
:data:`BUCKET` (at most the cache), with a mask, within that bucket only, over the
positions past ``pos``. Each bucket a request visits is one compiled step (or one
CUDA graph), made before the timed requests.
"""

BUCKET = 64
"""Granularity of the attended length of a static-shape decode step (positions)."""


def bucket(length, cache_len, size=BUCKET):
    """``length`` (the positions a step attends, ``pos + 1``) rounded up to a multiple of
    ``size``, capped at ``cache_len``."""
    return min(int(cache_len), -(-int(length) // size) * size)


def buckets(prompt, new, size=BUCKET):
    """The attended lengths, ascending, that a request of ``prompt`` tokens then ``new``
    generated ones visits (its decode steps write positions ``prompt`` to
    ``prompt + new - 2`` into a cache of ``prompt + new`` positions)."""
    cache_len = int(prompt) + int(new)
    return sorted(set(bucket(pos + 1, cache_len, size)
                      for pos in range(int(prompt), int(prompt) + int(new) - 1)))
