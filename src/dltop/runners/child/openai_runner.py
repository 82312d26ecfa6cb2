"""Runner of ``frameworks = ["openai"]``: open-loop load against an OpenAI-compatible
endpoint that is already serving (``mode = "serve"``, issue 41; docs/serving.md).

Runs in dltop's own interpreter (aiohttp). It speaks the runner protocol of
``dltop_protocol.py``: ``warmup`` requests first (a phase of their own, sent at the
same rate and concurrency, never counted), then ``iterations`` measured ones. As each
request ends it sends a ``request`` event (everything the client saw of it:
:mod:`openai_load`), then, when it produced tokens, the ``generate`` and ``iter``
events of a generation request (TTFT, per-token ITL, e2e seconds, output tokens), so
that the generation metrics read a served request like one of dltop's own. At the
end, a ``load`` event: the measured window, the client's CPU over it, the source of
the output token counts (:mod:`openai_tokens`), whether the lengths were forced
(``force_length``'s fields sent) and how many ok requests came back shorter than
``new_tokens``, and the client processes (also in a
``setup`` event: the run's environment shows them). Events go in completion order,
under rising indexes; ``request`` says which request it was (``worker``: which client
process sent it, :mod:`openai_split`). On GPUs, an ``idle`` event comes first: the
runner waits :data:`IDLE_WINDOW_S` with nothing sent, and the sampler's readings of
that wait give the run's idle power.

An endpoint that refuses the connection, or whose TLS fails, ends the run at once
(an ``error`` of kind ``setup``: ``setup_failed``), with no retry. More failed
measured requests than ``max_error_rate`` allows fail the run (a crash whose message
quotes the first errors), after every request was stored.

With ``server = "NAME"`` the runner first starts the server (:mod:`openai_server`) on
a free port and waits for it to be ready; a server that exits first or is not ready
within its ``timeout_s`` is ``setup`` too, quoting its log's tail. The cold start goes
in the ``load`` event; the server is stopped (TERM, then KILL) however the run ends.
That is ``server_scope = "run"``; with ``"group"`` (the default) the engine starts the
server once for the run's group (:mod:`dltop.jobs.servergroup`) and gives its endpoint in
``DLTOP_SHARED_SERVER``.
"""

import asyncio
import json
import os
import signal
import sys
import time
import traceback

import dltop_protocol as proto
import openai_context as ctx
import openai_load as load
import openai_server as srv
import openai_split as split
import openai_stop as stops
import openai_tokens as tokens

IDLE_WINDOW_S = 2.0
"""On GPUs, the wait before the load with nothing sent: the GPUs' mean power over it is
the run's idle power (20 readings at the sampler's 10 Hz; it needs 10, docs/serving.md)."""


def _options(spec):
    opts = spec.get("options") or {}
    return dict(opts)


def _headers(opts):
    name = opts.get("api_key_env")
    if not name:
        return {}
    key = os.environ.get(name)
    if not key:
        raise load.SetupFailed("api_key_env names %s, which is not set (or empty)" % name)
    return {"Authorization": "Bearer " + key}


def run(spec, reporter):
    opts = _options(spec)
    shared = os.environ.get("DLTOP_SHARED_SERVER")
    if shared:
        return _shared(spec, reporter, opts, json.loads(shared))
    if not opts.get("server_command"):
        return _load(spec, reporter, opts, opts["endpoint"], None)
    log_path = os.path.join(os.path.dirname(os.path.abspath(sys.argv[1])), "server.log")
    server = srv.Server(opts, spec["model"], log_path)
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        sys.stdout.write("[dltop] starting server: %s (log %s)\n" % (
            " ".join(server.argv), log_path))
        sys.stdout.flush()
        try:
            server.start()
            cold_s = server.wait_ready()
        except srv.ServerFailed as exc:
            raise load.SetupFailed(str(exc)) from None
        sys.stdout.write("[dltop] server ready at %s after %.3f s: endpoint %s\n" % (
            server.ready_url, cold_s, server.endpoint))
        sys.stdout.flush()
        return _load(spec, reporter, opts, server.endpoint, cold_s)
    finally:
        code = server.stop()
        signal.signal(signal.SIGTERM, previous)
        sys.stdout.write("[dltop] server stopped (exit status %s)\n" % code)
        sys.stdout.flush()


def _shared(spec, reporter, opts, server):
    """Load against the server the engine started for the run's group (``server_scope =
    "group"``): its cold start is the first run's; the others name that run."""
    if "failed" in server:
        raise load.SetupFailed(server["failed"])
    own_log = os.path.join(os.path.dirname(os.path.abspath(sys.argv[1])), "server.log")
    if server["cold_start_s"] is not None:
        said = "started for this run's group: ready after %.3f s" % server["cold_start_s"]
    else:
        said = "server shared with run %d, started before it" % server["first_run"]
        # this run's part of the group's log: from this offset on
        fd = os.open(own_log, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            os.write(fd, ("%s; its log is %s, from byte %d on\n" % (
                said, server["log"], server["log_offset"])).encode())
        finally:
            os.close(fd)
    sys.stdout.write("[dltop] %s (pid %d) at %s\n" % (said, server["pid"],
                                                       server["endpoint"]))
    sys.stdout.flush()
    return _load(spec, reporter, opts, server["endpoint"], server["cold_start_s"],
                 shared={"server_pid": server["pid"], "server_first_run": server["first_run"]})


def _terminated(signum, frame):
    # The supervisor's TERM (cancel, timeout): unwind, so the server is stopped cleanly.
    raise SystemExit(128 + signum)


def _load(spec, reporter, opts, endpoint, cold_s, shared=None):
    api = opts.get("api", "chat")
    warmup, measured = int(spec["warmup"]), int(spec["iterations"])
    drawn = tokens.draw_seed(spec)
    rng = tokens.new_rng(drawn)
    sys.stdout.write("[dltop] prompts and arrivals drawn with seed %d (prompt_draw = %s%s)\n" % (
        drawn, opts.get("prompt_draw", "point"), "" if opts.get("prompt_draw") == "seed"
        else ": sha256 of " + tokens.point(spec)))
    data = tokens.read_dataset(opts["dataset"]) if opts.get("dataset") else None
    if opts.get("dataset") and not data:
        raise proto.Failed("dataset %s holds no prompts" % opts["dataset"])
    headers = _headers(opts)
    stall_s = max(1.0, min(60.0, float(spec.get("timeout_s", 900.0)) / 10.0))
    try:
        # /tokenize is asked no longer than a request may stall: a hung server would
        # otherwise hold the run before its first request
        counter = tokens.counter(opts, endpoint, spec["model"], headers,
                                 timeout_s=min(stall_s, 10.0))
    except Exception as exc:  # noqa: BLE001 - tokenizers raises a bare Exception
        raise proto.Failed("tokenizer %s cannot be read: %s" % (opts.get("tokenizer"),
                                                                exc)) from None
    context = ctx.read(endpoint, spec["model"], headers, timeout_s=min(stall_s, 10.0))
    dropped = ctx.within(opts, data, counter, *ctx.fit(opts, spec, data, context))
    data = dropped.pop("kept", data)
    sizes = []  # each synthetic prompt's length as sent: a request without usage says it
    try:
        prompts = tokens.prompts_for(spec, warmup + measured, rng, data, counter, sizes)
    except ValueError as exc:
        raise proto.Failed("%s (%s): give prompts with dataset = PATH" % (
            exc, counter.source)) from None
    if spec.get("new_tokens_spread"):  # each request its own max_tokens, forced alike
        prompts = list(zip(prompts, tokens.spread(int(spec["new_tokens"]),
                                                  spec["new_tokens_spread"], len(prompts),
                                                  rng), strict=True))
    rate = spec.get("request_rate") or "inf"
    arrival = opts.get("arrival", "poisson")
    burstiness = float(opts.get("burstiness", 1.0))
    concurrency = int(spec.get("concurrency") or 1)
    # the client is aiohttp (no openai SDK): its version, named, is the framework's
    reporter.hello("openai", "aiohttp " + getattr(load.aiohttp, "__version__", "?"), "cpu", 1,
                   endpoint=endpoint, api=api, served_model=spec["model"], prompt_seed=drawn,
                   prompts="dataset" if data else (
                       "synthetic (exactly prompt_tokens tokens by the %s)" % counter.source
                       if counter else "synthetic (~prompt_tokens words)") + _shape(spec),
                   server=spec.get("server"),
                   server_context_tokens=context.tokens if context else None,
                   server_context=("%d (%s)" % (context.tokens, context.source) if context
                                   else ctx.NOT_STATED),
                   telemetry=("the server's processes are the run's own (started by dltop)"
                              if cold_s is not None or shared else "attributed by time (the "
                              "endpoint was already serving: its processes are not known)"),
                   **(shared or {}))
    reporter.plan(warmup + measured)

    force = tuple(opts.get("force_length") or ())
    limit = float(opts.get("max_error_rate", 0.05))
    stop = stops.Stop(warmup, measured, limit, opts.get("api_key_env"))

    def client(slots):
        return load.Client(endpoint, api, spec["model"], headers, int(spec["new_tokens"]),
                           force, slots, stall_s, stop)

    state = {"key": headers.get("Authorization", "")[len("Bearer "):],
             "index": 0, "ok": 0, "failed": 0, "errors": [], "sources": set(),
             "later": [], "lags": [], "short": 0, "resent": 0, "prompts": set(),
             "stop": stop, "cut": 0, "measured_ended": 0,
             "sent": tokens.sent_sizes(prompts, sizes, counter), "guessed": 0}

    def on_result(res):
        if not res.has_usage() and counter is not None and res.chunk_text:
            if counter.source == "tokenize":  # an HTTP call: after the load, not inside it
                state["later"].append(res)
                return
            res.counted = (counter.count("".join(res.chunk_text)), counter.source)
        _report(reporter, spec, res, state)

    # The measured schedule is drawn first: a warm-up count never changes it.
    measured_phase = (prompts[warmup:], load.schedule(measured, rate, arrival, burstiness,
                                                      rng), False,
                      list(range(warmup, warmup + measured)))
    phases = [measured_phase]
    if warmup:
        phases.insert(0, (prompts[:warmup], load.schedule(warmup, rate, arrival, burstiness,
                                                          rng), True, list(range(warmup))))
    if (spec.get("device") or {}).get("kind") == "gpu":
        # The server is ready and nothing is in flight: the GPUs draw their idle power.
        start = time.monotonic_ns()
        time.sleep(IDLE_WINDOW_S)
        end = time.monotonic_ns()
        reporter.emit("idle", start_mono_ns=start, end_mono_ns=end)
        sys.stdout.write("[dltop] idle before the load (the GPUs' idle power): monotonic "
                         "%d to %d ns\n" % (start, end))
        sys.stdout.flush()
    asked = opts.get("client_processes", 1)
    n = 1 if asked == "auto" else min(int(asked), concurrency, max(measured, 1))
    loop = asyncio.new_event_loop()
    try:
        if asked != "auto" and n == 1:  # one session for both phases
            start, end, cpu_s = loop.run_until_complete(client(concurrency).run(
                phases, on_result))[-1]
        else:
            if warmup:  # in the runner: it warms the server and judges "auto"
                (w_start, w_end, w_cpu), = loop.run_until_complete(client(concurrency).run(
                    phases[:1], on_result))
                if asked == "auto":
                    n = split.auto_count(state["lags"], w_cpu, w_end - w_start,
                                         len(os.sched_getaffinity(0)), concurrency)
                if stop(False):  # a refused key: no measured request is sent
                    raise load.SetupFailed(stop.setup)
            sys.stdout.write("[dltop] measured requests over %d client process(es) "
                             "(client_processes = %s)\n" % (n, asked))
            sys.stdout.flush()
            if n == 1:
                (start, end, cpu_s), = loop.run_until_complete(client(concurrency).run(
                    [measured_phase], on_result))
            else:
                start, end, cpu_s = split.run(client, n, concurrency, *measured_phase[:2],
                                              measured_phase[3], on_result)
    finally:
        loop.close()
    for res in state["later"]:
        try:
            res.counted = (counter.count("".join(res.chunk_text)), counter.source)
        except (OSError, ValueError):
            pass  # counted chunks, "estimated"
        _report(reporter, spec, res, state)
    if stop.setup:
        raise load.SetupFailed(stop.setup)
    window = max(end - start, 1e-9)
    source = "+".join(sorted(state["sources"])) or None
    reporter.emit("load", window_s=window, client_cpu_s=cpu_s, requests=measured,
                  ok=state["ok"], failed=state["failed"],
                  asked_rate=None if rate == "inf" else float(rate),
                  server_cold_start_s=cold_s, token_source=source, client_processes=n,
                  length_forced=bool(force), short_requests=state["short"],
                  max_tokens_spread=bool(spec.get("new_tokens_spread")),
                  prompt_tokens_estimated=state["guessed"],
                  prefix_tokens=int(spec.get("prefix_tokens") or 0),
                  resent_requests=state["resent"], **dropped)
    reporter.emit("setup", token_source=source, client_processes=n)
    sys.stdout.write("[dltop] output tokens counted by: %s; lengths %s: %d of %d ok "
                     "requests shorter than %s\n" % (
                         source or "nothing (no request produced a token)",
                         "forced by " + "+".join(force) if force else "not forced",
                         state["short"], state["ok"],
                         "their own max_tokens (new_tokens_spread)"
                         if spec.get("new_tokens_spread") else "new_tokens"))
    said = sorted(state["prompts"])
    if counter is not None and not data and said and said != [int(spec["prompt_tokens"])] \
            and not spec.get("prefix_tokens") and not spec.get("prompt_tokens_spread"):
        # vLLM's usage counts the BOS and the chat template's tokens: stored as it counted
        sys.stdout.write("[dltop] prompt tokens by the server's usage: %s, for prompts of "
                         "exactly %d tokens of text (prompt_tokens): the server adds its "
                         "own (a BOS, a chat template); stored as the server counted\n" % (
                             "/".join(str(n) for n in said), int(spec["prompt_tokens"])))
    sys.stdout.flush()
    never_sent = measured - state["measured_ended"]
    if stop.spent and (state["cut"] or never_sent):
        raise proto.Failed(stop.spent_message(
            {"cut": state["cut"], "never_sent": never_sent}, state["errors"]))
    if state["failed"] > limit * measured:
        raise proto.Failed("%d of %d measured requests failed (%.1f %% > max_error_rate "
                           "%.1f %%); first errors: %s" % (
                               state["failed"], measured, 100.0 * state["failed"] / measured,
                               100.0 * limit, "; ".join(state["errors"])))
    return state["ok"]


def _shape(spec):
    """What a workload adds to the prompts' description: its prefixes and spreads."""
    out = ""
    if spec.get("prefix_tokens"):
        out += ", after one of %d shared prefix(es) of prefix_tokens %d" % (
            int(spec.get("prefix_groups") or 1), int(spec["prefix_tokens"]))
    for key in ("prompt_tokens_spread", "new_tokens_spread"):
        if spec.get(key):
            out += ", %s %g" % (key, spec[key])
    return out


def _report(reporter, spec, res, state):
    chunk_s, counts, tokens_out, source = res.counts()
    ok = res.error is None and tokens_out >= 1 and chunk_s
    if res.error is None and not ok:
        res.error = "no content tokens in the response"
    if res.error and state["key"]:  # a 401 may quote the key it got: never stored
        res.error = res.error.replace(state["key"], "<the api_key_env key>")
    if not res.warmup:
        state["resent"] += res.resent
        state["measured_ended"] += 1
    if res.error == load.CUT:
        state["cut"] += not res.warmup
    else:
        state["stop"].judge(res, ok)
    if res.warmup:
        state["lags"].append(res.dispatch_lag_s)
    elif ok:
        state["ok"] += 1
        state["sources"].add(source)
        state["short"] += tokens_out < (res.max_tokens or int(spec["new_tokens"]))
        if res.prompt_tokens() is not None:
            state["prompts"].add(res.prompt_tokens())
    elif res.error != load.CUT:
        state["failed"] += 1
        if len(state["errors"]) < 3:
            state["errors"].append("request %d: %s" % (res.request, res.error))
    i = state["index"]
    state["index"] += 1
    sent, exact = state["sent"][res.request]
    reporter.emit("request", index=i, request=res.request, warmup=res.warmup,
                  scheduled_s=res.scheduled_s, dispatch_lag_s=res.dispatch_lag_s,
                  slot_wait_s=res.slot_wait_s, first_byte_s=res.first_byte_s,
                  ttft_s=chunk_s[0] if chunk_s else None, e2e_s=res.end_s,
                  status=res.status, error=res.error, prompt_tokens=res.prompt_tokens(),
                  cached_tokens=res.cached_tokens(), max_tokens=res.max_tokens,
                  sent_tokens=sent if exact else None, output_tokens=tokens_out,
                  tokens_estimated=source == "estimated",
                  chunk_s=chunk_s, chunk_tokens=counts, worker=res.worker,
                  in_flight=res.in_flight, resent=res.resent, resend_s=res.resend_s)
    if not ok:
        return
    itl = load.per_token_itl(chunk_s, counts)
    ttft = max(chunk_s[0], 1e-9)
    prompt = res.prompt_tokens()
    if prompt is None:  # no usage: the length the client sent, exact where it counted it
        prompt = sent
        state["guessed"] += not exact and not res.warmup
    reporter.generation(i, res.warmup, ttft, itl, prompt, tokens_out, 1)
    reporter.iteration(i, max(res.end_s, 1e-9), tokens_out, res.warmup, None,
                       t_mono_ns=int(res.end_mono * 1e9))


def _where(spec):
    """The endpoint the log's first line names: a started server's URL where it is known
    (the group's server: started before the run), never its template."""
    shared = os.environ.get("DLTOP_SHARED_SERVER")
    if shared:
        return json.loads(shared).get("endpoint") or "its group's server %s (not started)" % (
            spec.get("server"))
    if _options(spec).get("server_command"):
        return "the server %s that it starts (its URL once ready, below)" % spec.get("server")
    return _options(spec).get("endpoint")


def main():
    """proto.main, with an unreachable endpoint reported as kind ``setup``."""
    spec = proto.load_spec()
    reporter = proto.Reporter()
    sys.stdout.write("[dltop] run %s: openai %s at %s (pid %d)\n" % (
        spec.get("run_id"), spec.get("model"), _where(spec), os.getpid()))
    sys.stdout.flush()
    try:
        n = run(spec, reporter)
    except load.SetupFailed as exc:
        sys.stderr.write("setup failed: %s\n" % exc)
        reporter.error("setup", str(exc))
        proto._exit(proto.EXIT_ERROR)
    except BaseException as exc:  # noqa: B036 - every failure must reach the parent
        if isinstance(exc, SystemExit) and reporter.gone:
            # The engine is gone (its pipe closed; said in one line). Leave now: the
            # interpreter's teardown would collect the load's tasks, the one that raised
            # this among them, and log each with a traceback.
            proto._exit(proto.EXIT_ERROR)
        kind = proto.classify(exc)
        message = str(exc) if isinstance(exc, proto.Failed) else "".join(
            traceback.format_exception(type(exc), exc, exc.__traceback__))
        sys.stderr.write(message + "\n")
        reporter.error(kind, message)
        proto._exit(proto.EXIT_ERROR)
    reporter.done(n)
    proto._exit(proto.EXIT_OK)


if __name__ == "__main__":
    main()
