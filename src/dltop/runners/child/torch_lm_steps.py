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
    ``compile`` compiles the decode step; ``cuda_graphs`` captures it (and the
    token and position update) in one CUDA graph replayed per token.
    """

    def __init__(self, spec, model, device):
        self.model = model
        self.device = device
        self.batch = int(spec["per_device_batch"])
        self.prompt_len = int(spec["prompt_tokens"])
        self.new = int(spec["new_tokens"])
        dtype = _DTYPES.get(spec.get("precision"), torch.float32)
        model.to(dtype).eval()
        model.new_cache(self.batch, self.prompt_len + self.new, dtype, device)
        gen = torch.Generator(device=device)
        gen.manual_seed(int(spec["seed"]))
        self.prompt = torch.randint(0, model.shape["vocab"], (self.batch, self.prompt_len),
                                    device=device, generator=gen)
        self.tok = torch.zeros((self.batch, 1), dtype=torch.long, device=device)
        self.pos = torch.zeros((1,), dtype=torch.long, device=device)
        self.tokens = []
        self._left = 0
        self._step = self._decode_eager
        self._mode = spec.get("torch_compile") or "off"
        self._graphs = bool(spec.get("cuda_graphs"))
        self.setup_s = {}

    def _decode_eager(self, tok, pos):
        return self.model.decode(tok, pos).argmax(-1)

    def prepare(self, reporter):
        """Compile or capture the decode step before the first request; send the
        ``setup`` event with the seconds it took."""
        if self._mode != "off":
            if not hasattr(torch, "compile"):
                raise proto.Unsupported("compile needs PyTorch 2.0 or later (this is %s)"
                                        % torch.__version__)
            self._step = torch.compile(self._decode_eager, mode=self._mode)
            t0 = time.perf_counter()
            for _ in range(torch_gpu.COMPILE_PRIMING_STEPS.get(self._mode, 1)):
                self.prefill()
                if self.new > 1:
                    self.decode()
            self.setup_s["compile_s"] = time.perf_counter() - t0
        if self._graphs:
            t0 = time.perf_counter()
            self._capture()
            self.setup_s["capture_s"] = time.perf_counter() - t0
        if self.setup_s:
            reporter.emit("setup", **self.setup_s)

    def _advance(self):
        nxt = self._step(self.tok, self.pos)
        self.tok.copy_(nxt.view(-1, 1))
        self.pos.add_(1)
        return nxt

    def _capture(self):
        """Record ``_advance`` in a CUDA graph (warmed on a side stream first, as
        :func:`torch_gpu._graphed` does for training steps)."""
        dev = self.device
        try:
            with torch.no_grad():
                side = torch.cuda.Stream(dev)
                side.wait_stream(torch.cuda.current_stream(dev))
                with torch.cuda.stream(side):
                    for _ in range(torch_gpu.GRAPH_WARM_STEPS):
                        self._prefill_ids()  # positions start at the prompt again
                        self._advance()
                torch.cuda.current_stream(dev).wait_stream(side)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    out = self._advance()
            torch.cuda.synchronize(dev)
        except RuntimeError as exc:
            if "out of memory" in str(exc).lower():
                raise
            raise proto.Unsupported("cuda_graphs: the decode step could not be captured "
                                    "in a CUDA graph: %s" % str(exc).splitlines()[0]) from None

        def replay():
            graph.replay()
            return out

        self._replay = replay

    def _prefill_ids(self):
        nxt = self.model.prefill(self.prompt).argmax(-1)
        self.tok.copy_(nxt.view(-1, 1))
        self.pos.fill_(self.prompt_len)
        return nxt

    def prefill(self):
        """Run the prompt (overwriting the cache's prefix; later positions are masked
        until written) and sample the first token of each sequence."""
        with torch.no_grad():
            nxt = self._prefill_ids()
        self.tokens = [nxt.tolist()]
        self._left = self.new - 1
        return self.tokens[0]

    def decode(self):
        """Append one greedy token to each sequence."""
        if self._graphs and hasattr(self, "_replay"):
            nxt = self._replay()
        else:
            with torch.no_grad():
                nxt = self._advance()
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
