"""What a transformer's work costs in FLOPs and bytes, for MBU, prefill TFLOP/s and the
two FLOPs conventions of MFU (docs/metrics.md, "MBU, prefill TFLOP/s and FLOPs
conventions").

The formulas are the runners' own (``runners/child/lm_catalog.py``: shapes, FLOPs per
token, bytes per decode step), so a value here is a pure function of the configuration's
shape, its lengths, its batch and its precision, and of a measured time.

- **MBU** (model bandwidth utilisation): the bytes a decode step must move (the weights
  at the run's precision, the keys and values of the filled cache read, the step's own
  written), averaged over a request's decode steps, ÷ TPOT (p50) ÷ the GPU's peak memory
  bandwidth (:data:`dltop.results.peaks.BANDWIDTHS`). A CPU has no such peak in dltop:
  ``n/a: no peak bandwidth for CPU``.
- **prefill TFLOP/s**: the prefill's forward FLOPs (the LM head at the last position
  only) ÷ TTFT (p50).
- **FLOPs conventions**: ``nanogpt`` (what the runners report) and ``no-embedding``
  (torchtitan's: the embedding, and with it the tied output projection, left out).
"""

from __future__ import annotations

from typing import Final

from dltop.profiles import lm
from dltop.results.aggregate import ConfigResult
from dltop.results.metricdefs import Value
from dltop.results.peaks import peak_bandwidth_tb_s
from dltop.results.tokens import is_lm
from dltop.telemetry.values import opt_float

NANOGPT: Final = "nanogpt"
NO_EMBEDDING: Final = "no-embedding"
CONVENTIONS: Final = (NANOGPT, NO_EMBEDDING)
"""``--flops`` choices; the first is the default (what the runners report)."""
CONVENTION_NOTE: Final = {
    NANOGPT: "FLOPs convention: nanoGPT's (6·N + 12·L·d·T per training token, N with the "
             "tied token embedding, causal attention not halved; --flops no-embedding "
             "gives torchtitan's)",
    NO_EMBEDDING: "FLOPs convention: no-embedding, torchtitan's (6·N + 12·L·d·T per "
                  "training token, N without the embedding and so without the tied output "
                  "projection; causal attention not halved, as in nanoGPT's)",
}
"""What a TFLOP/s or MFU table says of its FLOPs count (captions, notes)."""


def flops_scale(res: ConfigResult, convention: str) -> float:
    """Factor turning the runner's FLOPs per sample (nanoGPT's) into ``convention``'s:
    1 for ``nanogpt`` and for models without an embedding convention (every non-transformer,
    whose counts are of Linear, Conv2d and LSTM layers only)."""
    if convention == NANOGPT or not is_lm(res.model):
        return 1.0
    seq_len = res.identity.get("seq_len")
    mode = str(res.identity.get("mode", "train"))
    if seq_len is None or mode == "generate":
        return 1.0
    cat = lm.lm_catalog()
    base = cat.flops_per_token(res.model, int(seq_len), mode, NANOGPT)
    return float(cat.flops_per_token(res.model, int(seq_len), mode, convention)) / float(base)


def decode_bytes(model: str, prompt_tokens: int, new_tokens: int, batch: int,
                 precision: str) -> float | None:
    """Mean bytes per decode step of a request (``lm_catalog.mean_decode_bytes``); None
    with fewer than 2 new tokens or a precision without a storage size."""
    cat = lm.lm_catalog()
    size = cat.BYTES_PER_VALUE.get(precision)
    if size is None:
        return None
    return opt_float(cat.mean_decode_bytes(model, prompt_tokens, new_tokens, batch, size))


def prefill_flops(model: str, prompt_tokens: int, batch: int, convention: str = NANOGPT
                  ) -> float:
    """Forward FLOPs of one prefill (``lm_catalog.prefill_flops``)."""
    return float(lm.lm_catalog().prefill_flops(model, prompt_tokens, batch, convention))


def mbu(res: ConfigResult, tpot_s: float | None, prompt_tokens: int, new_tokens: int,
        batch: int) -> Value:
    """MBU in % of a generate configuration whose median TPOT is ``tpot_s``."""
    if res.device_kind != "gpu":
        return Value(None, "n/a: no peak bandwidth for CPU")
    names = [str(r.get("device_name")) for r in res.runs if r.get("device_name")]
    peak = peak_bandwidth_tb_s(names[0] if names else res.gpu_name)
    if peak is None:
        return Value(None, "n/a: unknown peak bandwidth")
    if tpot_s is None or tpot_s <= 0:
        return Value(None, "n/a: one token per request")
    moved = decode_bytes(res.model, prompt_tokens, new_tokens, batch, res.precision)
    if moved is None:
        return Value(None, f"n/a: no {res.precision} byte size")
    achieved = moved / tpot_s / 1e12
    pct = 100.0 * achieved / (peak * res.device_count)
    return Value(pct, suffix=f" ({achieved:.3g} of {peak:g} TB/s)",
                 extra=(("bytes_per_step", moved), ("achieved_tb_s", achieved),
                        ("peak_tb_s", peak)))


def prefill_tflops(res: ConfigResult, ttft_s: float, prompt_tokens: int, batch: int,
                   convention: str = NANOGPT) -> Value:
    """Achieved TFLOP/s of the prefill: its FLOPs ÷ the median TTFT."""
    if ttft_s <= 0:
        return Value(None, "n/a: no TTFT")
    flops = prefill_flops(res.model, prompt_tokens, batch, convention)
    return Value(flops / ttft_s / 1e12, extra=(("prefill_flops", flops),))
