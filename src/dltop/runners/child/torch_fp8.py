"""``precision = "fp8"`` in the PyTorch runner: torchao's float8 training.

Valid Python 3.6; imports only the standard library and torch at import time. torchao
is imported when a run asks for fp8, never before, so a PyTorch without it runs every
other precision as before and an fp8 run ends ``unsupported: torchao not installed``.

The decoder blocks' linear layers become torchao ``Float8Linear`` (their matrix
products in float8 E4M3 forward, E5M2 gradients, scaled per ``fp8_recipe``); the rest
of the model (embeddings, norms, attention's score and value products, the output
projection tied to the token embedding) runs under bf16 autocast. torchao needs both
dimensions of a converted layer to be multiples of 16: the output projection (vocab
50 257) is left in bf16 for that reason as well as for the tie.

NOT PROVEN: written without a GPU of compute capability 8.9 at hand; the suite proves
the refusals only (docs/profiles.md). Transformer Engine is not wired in.
"""

import dltop_protocol as proto
import torch

MIN_CAPABILITY = (8, 9)
LEFT_IN_BF16 = ("lm_head",)
"""Linear layers left out of the conversion, by name (the tied output projection)."""


def check_device(device):
    """Raise ``Unsupported`` when ``device`` cannot run fp8 matrix products."""
    if device.type != "cuda":
        raise proto.Unsupported("precision fp8 needs a GPU of compute capability 8.9 or "
                                "later (H100, H200, L40S); this run is on %s" % device.type)
    cap = tuple(torch.cuda.get_device_capability(device))
    if cap < MIN_CAPABILITY:
        raise proto.Unsupported("precision fp8 needs a GPU of compute capability 8.9 or "
                                "later (H100, H200, L40S); %s is compute capability %d.%d"
                                % (torch.cuda.get_device_name(device), cap[0], cap[1]))


def _convertible(module, fqn):
    if fqn.split(".")[-1] in LEFT_IN_BF16:
        return False
    if not isinstance(module, torch.nn.Linear):
        return True  # torchao walks containers through this filter too
    return module.in_features % 16 == 0 and module.out_features % 16 == 0


def convert(model, spec, device):
    """The model with its decoder linears converted to torchao float8 training, in place.

    Raises:
        dltop_protocol.Unsupported: not a CUDA GPU of compute capability 8.9 or later,
            torchao missing or too old for the recipe, or no layer to convert.
    """
    check_device(device)
    recipe = spec.get("fp8_recipe") or "tensorwise"
    try:
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    except ImportError as exc:
        raise proto.Unsupported(
            "torchao not installed (precision fp8 trains through torchao's float8 "
            "training: pip install torchao; %s)" % exc) from None
    try:
        config = Float8LinearConfig.from_recipe_name(recipe)
    except (AssertionError, AttributeError, ValueError, KeyError) as exc:  # 0.18: assert
        why = "this torchao has no float8 recipe %r (%s)" % (recipe, exc)
        raise proto.Unsupported(why) from None
    before = sum(1 for m in model.modules() if isinstance(m, torch.nn.Linear))
    convert_to_float8_training(model, config=config, module_filter_fn=_convertible)
    converted = sum(1 for m in model.modules() if type(m).__name__ == "Float8Linear")
    if converted == 0:
        raise proto.Unsupported("precision fp8: none of the model's %d linear layers could "
                                "be converted to float8" % before)
    return model
