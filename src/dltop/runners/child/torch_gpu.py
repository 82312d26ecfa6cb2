"""The PyTorch runner's GPU options (docs/profiles.md): ``channels_last``,
``compile``, ``cudnn_benchmark`` and ``cuda_graphs``.

Child side, valid Python 3.6. What happens once before the first iteration
(compiling, capturing a CUDA graph) is timed here and sent as one ``setup``
event (``compile_s``, ``capture_s``), never inside an ``iter``.
"""

import time

import dltop_protocol as proto
import torch
import torch_train

COMPILE_PRIMING_STEPS = {"default": 1, "max-autotune": 1, "reduce-overhead": 3}
"""Steps run before the first iteration so that compiling is over when timing starts
(``reduce-overhead`` records its own CUDA graphs on the calls after the first)."""
GRAPH_WARM_STEPS = 3
"""Steps on a side stream before capture, as PyTorch's CUDA graph notes ask
(lazy state such as optimizer buffers and cuDNN's choices is made outside the graph)."""


def configure(spec, device):
    """Backend switches read before anything runs (``cudnn_benchmark``)."""
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = bool(spec.get("cudnn_benchmark", True))


def check(spec, device, world):
    """Raise :class:`dltop_protocol.Unsupported` when this run cannot honour an option."""
    if not spec.get("cuda_graphs"):
        return
    if device.type != "cuda":
        raise proto.Unsupported("cuda_graphs needs a CUDA GPU; this run is on %s "
                                "(set cuda_graphs = false for CPU devices)" % device.type)
    if world > 1:
        raise proto.Unsupported("cuda_graphs is not supported with %d data-parallel GPUs "
                                "(DDP's gradient all-reduce is not captured); use gpu:1"
                                % world)
    if spec.get("precision") == "fp16" and spec.get("mode") != "generate":
        raise proto.Unsupported("cuda_graphs cannot capture fp16 training: the loss "
                                "scaler reads its overflow flag on the host every step "
                                "(use bf16)")
    if (spec.get("torch_compile") or "off") != "off":
        raise proto.Unsupported("cuda_graphs and compile exclude each other (compile = "
                                "\"reduce-overhead\" captures CUDA graphs itself)")


def prepare(model, spec):
    """The model in the requested memory format (in place: ``bare`` stays the same module)."""
    if spec.get("channels_last"):
        model.to(memory_format=torch.channels_last)
    return model


def compiled(model, spec):
    """``torch.compile(model, mode=...)``, or the model itself with ``compile = "off"``."""
    mode = spec.get("torch_compile") or "off"
    if mode == "off":
        return model
    if not hasattr(torch, "compile"):
        raise proto.Unsupported("compile needs PyTorch 2.0 or later (this is %s)"
                                % torch.__version__)
    return torch.compile(model, mode=mode)


def batches(next_batch, spec):
    """``next_batch`` with NHWC image inputs when ``channels_last`` is set.

    A batch made once on the device (synthetic data) is converted once; a batch
    copied from the host each step is converted each step, inside the timed step,
    as a channels-last input pipeline would.
    """
    if not spec.get("channels_last"):
        return next_batch
    last = {"x": None, "nhwc": None}

    def nhwc_batch():
        x, y = next_batch()
        if x.dim() != 4:
            return x, y
        if x is not last["x"]:
            last["x"], last["nhwc"] = x, x.contiguous(memory_format=torch.channels_last)
        return last["nhwc"], y

    return nhwc_batch


def _autocast(spec):
    """A graph-safe autocast factory (weight-cast cache off, as CUDA graphs need); fp8's
    unconverted layers run in bf16 too (torch_fp8.py)."""
    if spec.get("precision") not in ("bf16", "fp8"):
        return None
    return lambda: torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False)


def train_step(spec, model, opt, loss_fn, next_batch, autocast, scaler, device):
    """The training step: :func:`torch_train.train_step`, or replayed from a CUDA graph."""
    if not spec.get("cuda_graphs"):
        return torch_train.train_step(model, opt, loss_fn, next_batch, autocast, scaler)
    for group in opt.param_groups:
        if "capturable" in group:  # Adam/AdamW keep their step count on the GPU
            group["capturable"] = True
    cast = _autocast(spec)

    def body(x, y):
        if cast is not None:
            with cast():
                loss = loss_fn(model(x), y)
        else:
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    def warm(x, y):
        opt.zero_grad(set_to_none=True)
        body(x, y)

    def capture(x, y):
        # Grads allocated inside the graph are overwritten on each replay.
        opt.zero_grad(set_to_none=True)
        return body(x, y)

    return _graphed(next_batch, device, warm, capture, lambda out: out)


def inference_step(spec, model, next_batch, autocast, device):
    """The forward step: :func:`torch_train.inference_step`, or replayed from a CUDA graph."""
    if not spec.get("cuda_graphs"):
        return torch_train.inference_step(model, next_batch, autocast)
    cast = _autocast(spec)

    def forward(x, _y):
        with torch.inference_mode():
            if cast is not None:
                with cast():
                    return model(x)
            return model(x)

    return _graphed(next_batch, device, forward, forward, lambda out: None)


def _graphed(next_batch, device, warm, capture, result):
    """Capture ``capture(x, y)`` once on the first batch; the step copies each new
    batch into those static buffers and replays the graph, returning ``result(out)``
    (the loss tensor, or None) for measure.run's ``sync`` to wait for.

    Raises:
        dltop_protocol.Unsupported: the model cannot be captured (the reason given).
    """
    t0 = time.perf_counter()
    static_x, static_y = next_batch()
    try:
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for _ in range(GRAPH_WARM_STEPS):
                warm(static_x, static_y)
        torch.cuda.current_stream(device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = capture(static_x, static_y)
        torch.cuda.synchronize(device)
    except RuntimeError as exc:
        if "out of memory" in str(exc).lower():
            raise
        raise proto.Unsupported("cuda_graphs: this model could not be captured in a "
                                "CUDA graph: %s" % str(exc).splitlines()[0]) from None

    def step(_i=None):
        x, y = next_batch()
        if x is not static_x:  # a batch made once on the device needs no copy
            static_x.copy_(x, non_blocking=True)
            static_y.copy_(y, non_blocking=True)
        graph.replay()
        return result(out)

    step.capture_s = time.perf_counter() - t0
    return step


def prime(step, spec, reporter, sync=None):
    """Compile before the first iteration (priming steps, not reported as iterations,
    each waited for with ``sync``, measure.run's adapter) and send the ``setup`` event
    with the seconds compiling and capturing took."""
    mode = spec.get("torch_compile") or "off"
    compile_s = None
    if mode != "off":
        t0 = time.perf_counter()
        for _ in range(COMPILE_PRIMING_STEPS.get(mode, 1)):
            out = step()
            if sync is not None:
                sync(out)
        compile_s = time.perf_counter() - t0
    times = {"compile_s": compile_s, "capture_s": getattr(step, "capture_s", None)}
    times = {k: v for k, v in times.items() if v is not None}
    if times:
        reporter.emit("setup", **times)
