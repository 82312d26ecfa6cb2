"""The PyTorch runner's transformer pieces: spec defaults, token batches and generation.

Child side, valid Python 3.6. Training and inference reuse the runner's own
steps (:mod:`torch_gpu`, :mod:`torch_train`) with :mod:`torch_lm`'s decoder; this
module adds what only a language model has: the token batches, the defaults a
spec may leave as None, and :class:`Generator`, the ``prefill()`` / ``decode()``
pair that :func:`lm_loop.run_generate` times.
"""

import time

import dltop_protocol as proto
import lm_catalog
import lm_decode
import torch
import torch_gpu
import torch_lm

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def with_defaults(spec):
    """The spec with the transformer keys the profile loader fills in, where None:
    the model's ``seq_len``, ``attention = "fused"``, and for generate the default
    prompt and new tokens. Raises Unsupported when the lengths exceed the context."""
    s = lm_catalog.shape(spec["model"])
    out = dict(spec)
    out["seq_len"] = int(spec.get("seq_len") or s["seq_len"])
    out["attention"] = spec.get("attention") or "fused"
    generate = spec.get("mode") == "generate"
    if generate:
        out["prompt_tokens"] = int(spec.get("prompt_tokens")
                                   or lm_catalog.DEFAULT_PROMPT_TOKENS)
        out["new_tokens"] = int(spec.get("new_tokens") or lm_catalog.DEFAULT_NEW_TOKENS)
    why = lm_catalog.check_lengths(
        spec["model"], None if generate else out["seq_len"],
        out.get("prompt_tokens") if generate else None,
        out.get("new_tokens") if generate else None)
    if why is not None:
        raise proto.Unsupported(why)
    return out


def synthetic(name, batch, seq_len, device, host):
    """``next_batch()`` of uniform random token ids: made on the device once, or kept on
    the host and copied every step (``data_loader = "host"``)."""
    if not host or device.type == "cpu":
        fixed = torch_lm.token_batch(name, batch, seq_len, device)
        return lambda: fixed
    x, y = torch_lm.token_batch(name, batch, seq_len, torch.device("cpu"))
    x, y = x.contiguous().pin_memory(), y.contiguous().pin_memory()

    def next_batch():
        return x.to(device, non_blocking=True), y.to(device, non_blocking=True)

    return next_batch


class Generator(object):
    """Greedy generation with a static key/value cache, for :func:`lm_loop.run_generate`.

    The weights are cast to the run's precision (bf16/fp16; fp32 otherwise) rather
    than autocast, since autocast would re-cast every weight on every decode step.
    ``prefill()`` and ``decode()`` end with a host read of the sampled ids (that
    read synchronises the device); :attr:`tokens` holds the current request's ids.

    Eager decoding attends over exactly the positions written so far. ``compile``
    compiles the prefill (at the run's one prompt length: no padding) and the
    decode step at each :func:`lm_decode.bucket` length a request visits;
    ``cuda_graphs`` captures the prefill in one CUDA graph and the decode step (with
    the token and position update) in one graph per bucket. Both are made and
    primed before the first request, and the ``setup`` event says what they cover.
    """

    def __init__(self, spec, model, device):
        self.model = model
        self.device = device
        self.batch = int(spec["per_device_batch"])
        self.prompt_len = int(spec["prompt_tokens"])
        self.new = int(spec["new_tokens"])
        dtype = _DTYPES.get(spec.get("precision"), torch.float32)
        model.to(dtype).eval()
        self.cache_len = self.prompt_len + self.new
        model.new_cache(self.batch, self.cache_len, dtype, device)
        gen = torch.Generator(device=device)
        gen.manual_seed(int(spec["seed"]))
        self.prompt = torch.randint(0, model.shape["vocab"], (self.batch, self.prompt_len),
                                    device=device, generator=gen)
        self.tok = torch.zeros((self.batch, 1), dtype=torch.long, device=device)
        self.pos = torch.zeros((1,), dtype=torch.long, device=device)
        self.tokens = []
        self._left = 0
        self._at = 0  # the next decode position, on the host (the attended length's source)
        self._mode = spec.get("torch_compile") or "off"
        self._graphs = bool(spec.get("cuda_graphs"))
        # Static shapes (compile, CUDA graphs): bucketed attended lengths under a mask.
        self.static = self._mode != "off" or self._graphs
        self._step = self._decode_eager
        self._first = self._prefill_eager
        self._replay_prefill = None
        self._replays = {}
        self.setup_s = {}

    def length(self, pos):
        """The cache positions the decode step at ``pos`` attends: ``pos + 1``, or its
        bucket under static shapes."""
        if self.static:
            return lm_decode.bucket(pos + 1, self.cache_len)
        return pos + 1

    def _decode_eager(self, tok, pos, length):
        return self.model.decode(tok, pos, length, self.static).argmax(-1)

    def _prefill_eager(self, prompt):
        return self.model.prefill(prompt).argmax(-1)

    def coverage(self):
        """What compile or CUDA graphs cover (the ``setup`` event's text), or None."""
        if not self.static:
            return None
        how = "CUDA graphs" if self._graphs else "compile %s" % self._mode
        lengths = lm_decode.buckets(self.prompt_len, self.new)
        prefill = "%s: prefill at its %d prompt tokens (one shape)" % (how, self.prompt_len)
        if not lengths:
            return prefill + "; no decode step (one new token)"
        return ("%s; decode at %d attended length%s (%s; buckets of %d, positions past the "
                "token masked)" % (prefill, len(lengths), "" if len(lengths) == 1 else "s",
                                   ", ".join(str(n) for n in lengths), lm_decode.BUCKET))

    def prepare(self, reporter):
        """Compile or capture prefill and decode before the first request; send the
        ``setup`` event with the seconds it took and what it covers."""
        if self._mode != "off":
            if not hasattr(torch, "compile"):
                raise proto.Unsupported("compile needs PyTorch 2.0 or later (this is %s)"
                                        % torch.__version__)
            _allow_recompiles(len(lm_decode.buckets(self.prompt_len, self.new)) + 2)
            # dynamic=False: one specialised graph per bucket (and the one prompt length)
            # rather than a symbolic length that reduce-overhead would record per value.
            self._first = torch.compile(self._prefill_eager, mode=self._mode, dynamic=False)
            self._step = torch.compile(self._decode_eager, mode=self._mode, dynamic=False)
            t0 = time.perf_counter()
            for _ in range(torch_gpu.COMPILE_PRIMING_STEPS.get(self._mode, 1)):
                self.prefill()  # a whole request: every bucket's step is compiled
                for _ in range(self.new - 1):
                    self.decode()
            self.setup_s["compile_s"] = time.perf_counter() - t0
        if self._graphs:
            t0 = time.perf_counter()
            self._capture()
            self.setup_s["capture_s"] = time.perf_counter() - t0
        if self.setup_s:
            reporter.emit("setup", generate_static=self.coverage(), **self.setup_s)

    def _advance(self, length):
        nxt = self._step(self.tok, self.pos, length)
        self.tok.copy_(nxt.view(-1, 1))
        self.pos.add_(1)
        return nxt

    def _prefill_ids(self):
        nxt = self._first(self.prompt)
        self.tok.copy_(nxt.view(-1, 1))
        self.pos.fill_(self.prompt_len)
        return nxt

    def _capture(self):
        """Record the prefill, and ``_advance`` at each bucket, in CUDA graphs (each
        warmed on a side stream first, as :func:`torch_gpu._graphed` does for training
        steps)."""
        try:
            with torch.no_grad():
                self._replay_prefill = _graphed(self.device, self._prefill_ids)
                for length in lm_decode.buckets(self.prompt_len, self.new):
                    # Positions stay inside the cache: each warm step (and the capture,
                    # which runs nothing) starts at the bucket's last position.
                    self._replays[length] = _graphed(
                        self.device, lambda n=length: self._advance(n),
                        lambda n=length: self.pos.fill_(n - 1))
            torch.cuda.synchronize(self.device)
        except RuntimeError as exc:
            if "out of memory" in str(exc).lower():
                raise
            raise proto.Unsupported("cuda_graphs: generation could not be captured in a "
                                    "CUDA graph: %s" % str(exc).splitlines()[0]) from None

    def prefill(self):
        """Run the prompt (overwriting the cache's prefix; later positions are never
        read before they are written) and sample the first token of each sequence."""
        if self._replay_prefill is not None:
            nxt = self._replay_prefill()
        else:
            with torch.no_grad():
                nxt = self._prefill_ids()
        self._at = self.prompt_len
        self.tokens = [nxt.tolist()]
        self._left = self.new - 1
        return self.tokens[0]

    def decode(self):
        """Append one greedy token to each sequence."""
        length = self.length(self._at)
        replay = self._replays.get(length)
        if replay is not None:
            nxt = replay()
        else:
            with torch.no_grad():
                nxt = self._advance(length)
        self._at += 1
        ids = nxt.tolist()
        self.tokens.append(ids)
        self._left -= 1
        return ids

    def profile_step(self):
        """A step for the op profile: the next decode, or a new prefill when the
        request's tokens are all out (the cache holds prompt + new positions)."""
        if self._left <= 0:
            self.prefill()
        else:
            self.decode()


def _graphed(device, fn, reset=None):
    """``replay()`` of ``fn`` captured in a CUDA graph after warm-up steps on a side
    stream (``reset()``, outside the graph, before each); ``replay()`` gives ``fn``'s
    output tensor, rewritten by each replay."""
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(torch_gpu.GRAPH_WARM_STEPS):
            if reset is not None:
                reset()
            fn()
    torch.cuda.current_stream(device).wait_stream(side)
    if reset is not None:
        reset()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()

    def replay():
        graph.replay()
        return out

    return replay


def _allow_recompiles(n):
    """Let TorchDynamo keep ``n`` specialisations of one function (a graph per bucket)
    before it falls back to eager; the setting's name changed in PyTorch 2.7."""
    config = torch._dynamo.config
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(config, name):
            setattr(config, name, max(int(getattr(config, name)), int(n)))
            return
