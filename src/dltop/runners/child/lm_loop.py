"""The generation loop of every framework's transformer runner (``mode = "generate"``).

Standard library only, valid Python 3.6 (child side). The one place where time to
first token and inter-token latencies are measured: each runner hands
:func:`run_generate` two closures that do the framework's work and return only
once the device is done (a host read of the sampled token ids), and this loop
times them.
"""

import time

import convergence
import dltop_protocol as proto


def distinct_tokens(steps):
    """Σ over the sequences of a request of the distinct ids among its generated tokens.

    ``steps``: one sequence of ``batch`` ids per generated token, in order (lists,
    tuples or 1-D arrays); a sequence's ids are column ``b`` of every step.
    """
    seqs = None
    for step in steps:
        ids = [int(x) for x in step]
        if seqs is None:
            seqs = [set() for _ in ids]
        for seen, x in zip(seqs, ids):  # noqa: B905 - Python 3.6
            seen.add(x)
    return sum(len(seen) for seen in seqs or ())


def run_generate(spec, reporter, prefill, decode, timer=time.perf_counter, clock_ns=None,
                 tokens=None):
    """Run ``warmup + iterations`` generation requests (more under the spec's time
    window, ``warmup_s`` and ``min_time_s``: see :meth:`convergence.Plan.timed`),
    reporting each.

    One request: ``prefill()`` runs the prompt through the model (filling a fresh
    key/value cache) and samples the first token; then ``new_tokens - 1`` calls
    of ``decode()`` each append one token per sequence. Both must synchronise the
    device before returning. A request is one ``iter`` (seconds end to end,
    samples = batch x new_tokens generated tokens) preceded by its ``generate``
    event (TTFT and every inter-token latency). ``tokens()``, where given, returns
    the request's generated ids (:func:`distinct_tokens`' ``steps``), read once the
    request's time is taken, for its ``distinct_tokens``.

    Returns:
        The measured (non-warm-up) request count.
    """
    clock_ns = clock_ns or (lambda: int(time.monotonic() * 1e9))
    plan = convergence.Plan(None, 1, None, spec["iterations"], spec["warmup"])
    plan.timed(spec, reporter=reporter)
    batch = int(spec["per_device_batch"])
    prompt, new = int(spec["prompt_tokens"]), int(spec["new_tokens"])
    inject = (spec.get("options") or {}).get("inject")
    for i in plan.steps():
        proto.fault_hook(inject, i)
        t0 = timer()
        prefill()
        prev = timer()
        ttft = prev - t0
        itl = []
        for _ in range(new - 1):
            decode()
            now = timer()
            itl.append(now - prev)
            prev = now
        end_ns = clock_ns()
        warm = plan.is_warmup(i)
        distinct = None if tokens is None else distinct_tokens(tokens())
        reporter.generation(i, warm, ttft, itl, prompt, new, batch, distinct)
        reporter.iteration(i, prev - t0, batch * new, warm, None, t_mono_ns=end_ns)
    return plan.measured_steps
