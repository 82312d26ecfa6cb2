"""A stand-in transformer runner for ``mode = "generate"`` (stdlib only, issue 29).

Run as ``python proto_generate.py ... SPEC.json``. It speaks protocol v1 through the
real child-side modules (``dltop_protocol.Reporter`` and the one generation loop,
``lm_loop.run_generate``) on ``$DLTOP_EVENT_FD``; only the model is missing: its
``prefill`` and ``decode`` advance a fake clock (the loop's ``timer``) by known
amounts, so every stored latency is a known function of the request and token index:

- request ``i``'s TTFT is :func:`ttft_s` ``(i)``;
- its ``j``-th inter-token latency (0-based) is :func:`itl_s` ``(i, j)``;
- sequence ``b``'s ``j``-th generated id (0-based, the prefill's first) is
  :func:`token_id` ``(i, b, j)``.

Before the loop it sends two bad ``generate`` events (an ITL list one short, a
negative TTFT): dltop must count both as protocol errors and store neither.
"""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "src", "dltop", "runners", "child"))
import dltop_protocol as proto
import lm_loop


def ttft_s(i):
    return 0.050 + 0.010 * (i % 4)


def itl_s(i, j):
    return 0.002 * (1 + j % 3) + 0.0005 * i


def token_id(i, b, j):
    """A sequence cycling through 2..6 ids: ``min(new_tokens, 2 + (b + i) % 5)`` distinct."""
    return 1000 * b + j % (2 + (b + i) % 5)


class FakeModel(object):
    """prefill/decode that only move the clock the loop reads (and name their tokens)."""

    def __init__(self, batch):
        self.now = 100.0
        self.request = -1
        self.token = 0
        self.batch = batch
        self.steps = []

    def timer(self):
        return self.now

    def _ids(self):
        return [token_id(self.request, b, len(self.steps)) for b in range(self.batch)]

    def prefill(self):
        self.request += 1
        self.token = 0
        self.now += ttft_s(self.request)
        self.steps = []
        self.steps.append(self._ids())

    def decode(self):
        self.now += itl_s(self.request, self.token)
        self.token += 1
        self.steps.append(self._ids())


def main():
    spec = json.load(open(sys.argv[-1]))
    reporter = proto.Reporter()
    reporter.hello("torch", "0-fake", "cpu", 1)
    reporter.model(1000, None)
    if spec.get("mode") != "generate":  # an inference run: batches of 10 ms, no requests
        total = int(spec["warmup"]) + int(spec["iterations"])
        for i in range(total):
            reporter.iteration(i, 0.01, int(spec["per_device_batch"]), i < spec["warmup"], None)
        reporter.done(total - int(spec["warmup"]))
        return
    new, batch = int(spec["new_tokens"]), int(spec["per_device_batch"])
    prompt = int(spec["prompt_tokens"])
    reporter.emit("generate", index=0, warmup=True, ttft_s=0.1, itl_s=[0.01] * (new - 2),
                  prompt_tokens=prompt, new_tokens=new, batch=batch)
    reporter.emit("generate", index=0, warmup=True, ttft_s=-0.1, itl_s=[0.01] * (new - 1),
                  prompt_tokens=prompt, new_tokens=new, batch=batch)
    model = FakeModel(batch)
    measured = lm_loop.run_generate(spec, reporter, model.prefill, model.decode,
                                    timer=model.timer, tokens=lambda: model.steps)
    reporter.done(measured)


if __name__ == "__main__":
    main()
