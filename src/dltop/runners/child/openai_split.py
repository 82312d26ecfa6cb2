"""The measured load split over several client processes (``client_processes``, issue 41
item 2): one process cannot keep a schedule its CPU cannot dispatch.

Each worker is a fork of the runner (no second start-up: the spec, prompts and
schedule are in its memory). Measured request ``i`` goes to worker ``i % n``
(round-robin: every worker's share spans the whole schedule, evenly), at its own
offset from one start shared by all (``CLOCK_MONOTONIC`` is one clock for every
process of the machine), and ``concurrency`` is shared out (worker ``w`` gets
``concurrency // n``, one more for the first ``concurrency % n``: a request may wait
for a slot of its own worker while another worker has one free). Each worker runs
its share on its own event loop and connection pool, measures its requests'
dispatch lag against its own loop, and sends each :class:`openai_load.Result`
through a pipe as it ends; the runner reports them as they come, into the one run.
The runner's stop rules (:mod:`openai_stop`) are judged there: once they stop the load,
an event shared with the workers stops theirs (nothing more sent, in flight cut).
"""

import asyncio
import math
import multiprocessing
import multiprocessing.connection
import time

import openai_load as load

START_MARGIN_S = 0.5
"""The shared start is this far after the forks: every worker is ready before it."""
LAG_BOUND_S = 0.010
"""``"auto"`` splits when the warm-up's dispatch lag p99 is above this (the engine's
``client-bound`` bound)..."""
CPU_BOUND = 0.9
"""...or when its client used more than this share of one core."""


def auto_count(lags, cpu_s, window_s, cpus, concurrency):
    """The workers ``client_processes = "auto"`` asks for, judged on the warm-up (1 when
    one process kept its schedule, or there is nothing to split over): two per core
    the warm-up used, at most ``cpus`` and ``concurrency``."""
    lags = sorted(lags)
    lag_p99 = lags[min(len(lags) - 1, int(math.ceil(0.99 * len(lags))) - 1)] if lags else 0.0
    busy = cpu_s / window_s if window_s > 0 else 0.0
    if lag_p99 <= LAG_BOUND_S and busy <= CPU_BOUND:
        return 1
    n = min(max(2, int(math.ceil(2 * busy))), cpus, concurrency)
    return n if n >= 2 else 1


def run(make_client, n, concurrency, prompts, offsets, requests, on_result):
    """The measured phase over ``n`` worker processes; ``make_client(concurrency)`` builds
    a worker's :class:`openai_load.Client`. Returns (start, end, CPU seconds of all).

    Raises:
        SetupFailed: a worker could not reach the endpoint.
        RuntimeError: a worker died before its share ended.
    """
    ctx = multiprocessing.get_context("fork")
    start = time.monotonic() + START_MARGIN_S
    procs, conns, stopped = [], [], ctx.Event()
    judge = None
    for w in range(n):
        share = concurrency // n + (1 if w < concurrency % n else 0)
        recv, send = ctx.Pipe(duplex=False)
        client = make_client(share)
        judge = client.stop  # the runner's rules, judged here on the results
        client.stop = lambda warmup: stopped.is_set()
        proc = ctx.Process(target=_worker, daemon=True, args=(
            client, w, prompts[w::n], offsets[w::n], requests[w::n], start, send))
        proc.start()
        send.close()
        procs.append(proc)
        conns.append(recv)
    ends, fatal, waiting = [], None, list(conns)
    flight = [0] * n  # each worker's requests in flight as of its newest result
    while waiting:
        for conn in multiprocessing.connection.wait(waiting):
            try:
                kind, body = conn.recv()
            except EOFError:
                waiting.remove(conn)
                continue
            if kind == "result":
                flight[body.worker] = body.in_flight
                body.in_flight = sum(flight)  # the whole client's, not one worker's
                on_result(body)
                if judge(False):
                    stopped.set()
            else:
                waiting.remove(conn)
                if kind == "end":
                    ends.append(body)
                else:
                    fatal = fatal or body
    for proc in procs:
        proc.join()
    if fatal:
        raise load.SetupFailed(fatal)
    if len(ends) < n:
        raise RuntimeError("%d of %d client processes died before their share ended (exit "
                           "statuses %s)" % (n - len(ends), n, [p.exitcode for p in procs]))
    return (min(e[0] for e in ends), max(e[1] for e in ends), sum(e[2] for e in ends))


def _worker(client, w, prompts, offsets, requests, start, conn):
    def send(res):
        res.worker = w
        conn.send(("result", res))

    loop = asyncio.new_event_loop()
    try:
        (out,) = loop.run_until_complete(client.run([(prompts, offsets, False, requests)],
                                                    send, start))
        conn.send(("end", out))
    except load.SetupFailed as exc:
        conn.send(("fatal", str(exc)))
    finally:
        loop.close()
        conn.close()
