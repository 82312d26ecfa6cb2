"""CPU check of the fp8 training path's numbers (not its speed): gpt-tiny converted by
``torch_fp8``'s filter to torchao ``Float8Linear`` trains under bf16 autocast like bf16.

torchao's float8 matrix products run on the CPU through ``torch._scaled_mm`` (emulated),
so this shows the conversion, the tied output projection left out and the losses of a
few AdamW steps against bf16's, without a GPU of compute capability 8.9. It needs
torchao importable (``pip install --target /tmp/ao --no-deps torchao``, then
``PYTHONPATH=/tmp/ao``); the test suite does not install it.

    PYTHONPATH=/tmp/ao python3 benchmarks/fp8_cpu_smoke.py

Result (2026-11-29, torch 2.13.0+cpu, torchao 0.18.0; losses of 6 steps, batch 4 x 63):
bf16 9.2453 .. 7.6140; tensorwise (16 layers converted) 9.2443 .. 7.6146; rowwise
9.2451 .. 7.6107: within 0.01 of bf16 at every step (docs/profiles.md).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src" / "dltop" / "runners"
                       / "child"))

import torch
import torch_fp8
import torch_lm

STEPS = 6


def losses(recipe: str | None) -> tuple[int, list[float]]:
    """(layers converted, the loss of each step) of gpt-tiny in bf16 or fp8 ``recipe``."""
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    torch.manual_seed(0)
    model = torch_lm.build("gpt-tiny")
    if recipe:
        convert_to_float8_training(model, config=Float8LinearConfig.from_recipe_name(recipe),
                                   module_filter_fn=torch_fp8._convertible)
    converted = sum(type(m).__name__ == "Float8Linear" for m in model.modules())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randint(0, 10000, (4, 64), generator=torch.Generator().manual_seed(1))
    out = []
    for _ in range(STEPS):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(x[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, 10000),
                                                     x[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        out.append(round(loss.item(), 4))
    return converted, out


def main() -> int:
    import torchao

    print("torch", torch.__version__, "torchao", torchao.__version__)
    base = losses(None)[1]
    worst = 0.0
    for recipe in (None, "tensorwise", "rowwise"):
        n, got = losses(recipe)
        worst = max(worst, max(abs(a - b) for a, b in zip(got, base, strict=True)))
        print(recipe or "bf16", n, got)
    print(f"largest difference from bf16: {worst:.4f}")
    return 0 if worst < 0.05 else 1


if __name__ == "__main__":
    sys.exit(main())
