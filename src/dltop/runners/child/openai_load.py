"""Open-loop load against an OpenAI-compatible endpoint (``mode = "serve"``, issue 41).

Child side, run by ``openai_runner.py`` in dltop's own interpreter (aiohttp; not
Python 3.6-bound like the framework runners). What it measures, and why so:

- **Arrivals** are offsets from the load's start, drawn before the first request
  (:func:`schedule`), and the dispatcher sleeps to each on the monotonic clock: a
  slow response never delays the next arrival (open loop). Poisson arrivals have
  exponential gaps; gamma arrivals gaps of shape ``burstiness`` (1 is Poisson, below
  1 burstier) and the same mean; constant arrivals equal gaps; ``"inf"`` none.
- **Dispatch lag** is how late a request's task started past its scheduled time (the
  event loop's own lateness: a busy client shows here); **slot wait** is the time it
  then waited for one of ``concurrency`` slots. Both are stored apart and neither is
  inside TTFT, which starts at the send.
- **Chunks**: each SSE event's arrival time from the send. A content chunk (non-empty
  ``delta.content`` / ``text``) counts; a role-only first chunk and a usage-only last
  chunk do not; a chunk whose text is there and empty is a token without text where the
  counted total leaves room for it (vLLM's EOS under ``ignore_eos``). Tokens come from the
  server's ``usage`` (``stream_options.include_usage``),
  else from a tokenizer (:mod:`openai_tokens`: the runner sets ``Result.counted``),
  else each content chunk counts one, and the row says "estimated". A chunk's own
  token count is never reported by the server: the total is shared over the chunks
  by their characters (:func:`apportion`). The SSE body is read by :mod:`openai_sse`.
"""

import asyncio
import errno
import math
import time
import types

from openai_sse import escaped, read_stream

try:
    import aiohttp
except ImportError:  # pragma: no cover - the registry probes for it before a run
    aiohttp = None

READ_BUFSIZE = 4 * 1024 * 1024
"""aiohttp's read buffer (its default 64 KiB splits a long SSE line over many reads and
costs 10x at long context, vllm #39963); a line may be twice this."""


STOP_POLL_S = 0.05
"""How often a phase asks whether it stops (:attr:`Client.stop`)."""
CUT = "cut in flight: the run stopped early (its message says why)"
"""The error of a request cut by a stop (sent, its answer not waited for)."""


class SetupFailed(Exception):
    """The endpoint cannot be reached at all (refused, no such host, TLS): the run is
    ``setup_failed`` and no further request is sent."""


def schedule(n, rate, arrival, burstiness, rng):
    """``n`` arrival offsets in seconds from the load's start (0 for ``rate = "inf"``)."""
    if rate == "inf" or n == 0:
        return [0.0] * n
    rate = float(rate)
    out, t = [], 0.0
    for _ in range(n):
        out.append(t)
        if arrival == "constant":
            t += 1.0 / rate
        elif arrival == "gamma":
            t += rng.gammavariate(burstiness, 1.0 / (rate * burstiness))
        else:
            t += rng.expovariate(rate)
    return out


def apportion(total, weights):
    """``total`` tokens shared over chunks in proportion to ``weights`` (their characters),
    largest remainders first, each chunk of text at least one while tokens last."""
    n = len(weights)
    if n == 0:
        return []
    if total == n:
        return [1] * n
    mass = float(sum(weights)) or float(n)
    shares = [total * (w if sum(weights) else 1) / mass for w in weights]
    counts = [int(math.floor(s)) for s in shares]
    rest = total - sum(counts)
    order = sorted(range(n), key=lambda i: (-(shares[i] - counts[i]), i))
    for i in order[:rest]:
        counts[i] += 1
    return counts


def per_token_itl(chunk_s, counts):
    """Inter-token latencies: a chunk of k tokens spreads its gap over its k tokens (the
    first chunk's extra tokens arrive with it: k - 1 zeros)."""
    out, prev = [], None
    for t, k in zip(chunk_s, counts, strict=True):
        if k <= 0:
            continue
        if prev is None:
            out.extend([0.0] * (k - 1))
        else:
            out.extend([(t - prev) / k] * k)
        prev = t
    return out


def payload(api, model, prompt, new_tokens, force):
    """The request body: streaming, usage asked for, at most ``new_tokens``; ``force``: the
    request fields beyond OpenAI's that make it exactly ``new_tokens`` (``ignore_eos``,
    ``min_tokens``), only those the server accepts (``transformers serve`` answers 422)."""
    body = {"model": model, "stream": True, "max_tokens": int(new_tokens),
            "stream_options": {"include_usage": True}, "temperature": 0.0}
    if api == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    if "ignore_eos" in force:
        body["ignore_eos"] = True
    if "min_tokens" in force:
        body["min_tokens"] = int(new_tokens)
    return body


def refused_fields(status, text, force):
    """The forced fields a 4xx answer names (a server refusing what it does not know)."""
    if not 400 <= status < 500:
        return []
    return [f for f in force if f in text]


class Result(object):
    """What one request saw (times in seconds; ``*_s`` from the send unless said)."""

    def __init__(self, request, warmup, scheduled_s):
        self.request = request
        self.warmup = warmup
        self.scheduled_s = scheduled_s
        """From the start of its phase's load."""
        self.dispatch_lag_s = 0.0
        self.slot_wait_s = 0.0
        self.first_byte_s = None
        self.end_s = None
        self.end_mono = None
        self.status = 0
        self.error = None
        self.chunk_s = []
        self.chunk_text = []
        self.usage = None
        self.finished = False
        self.textless_s = []
        """When chunks with an empty text came (tokens without text, :meth:`counts`)."""
        self.in_flight = 0
        """The client's other requests in flight when this one ended."""
        self.counted = None
        """(output tokens, source) a tokenizer counted in the text (``usage`` aside)."""
        self.worker = 0
        """The client process that sent it (0 when one process sends all)."""
        self.resent = 0
        """Times it was sent again: its pooled connection was closed before any byte came."""
        self.resend_s = 0.0
        """From its first send to the send answered (0 unless sent again): time the
        client lost, apart from dispatch lag and slot wait, never hidden in TTFT."""
        self.max_tokens = None
        """The ``max_tokens`` it asked (``new_tokens``, or its own drawn length)."""

    def has_usage(self):
        return count_of((self.usage or {}).get("completion_tokens")) is not None

    def counts(self):
        """(the chunks' times, each chunk's tokens, output tokens, their source: ``usage``,
        ``tokenize``, ``tokenizer`` or ``estimated``)."""
        weights = [len(t) for t in self.chunk_text]
        if self.has_usage():
            total, source = self.usage["completion_tokens"], "usage"
        elif self.counted is not None:
            total, source = self.counted
        else:
            return self.chunk_s, [1] * len(self.chunk_s), len(self.chunk_s), "estimated"
        blank = self.textless_s
        if blank and total >= len(self.chunk_s) + len(blank):
            # tokens without text, counted by the server's usage (vLLM's EOS under
            # ignore_eos, a special token: a chunk each, text ""): each one token where it
            # came, not shared into the words' chunks (zero or halved ITLs, a late TTFT)
            shared = iter(apportion(total - len(blank), weights))
            merged = sorted([(t, 0) for t in self.chunk_s] + [(t, 1) for t in blank])
            return ([t for t, _ in merged], [1 if b else next(shared) for _, b in merged],
                    total, source)
        return self.chunk_s, apportion(total, weights), total, source

    def prompt_tokens(self):
        return count_of((self.usage or {}).get("prompt_tokens"))

    def cached_tokens(self):
        """The prompt tokens the server served from its cache, where its usage says
        (OpenAI's ``usage.prompt_tokens_details.cached_tokens``: vLLM with
        ``--enable-prompt-tokens-details``, SGLang, llama-server), else None."""
        details = (self.usage or {}).get("prompt_tokens_details")
        return count_of(details.get("cached_tokens")) if isinstance(details, dict) else None


def count_of(value):
    """``value`` if it is a count a server's usage may give (an int >= 0, not a bool),
    else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 \
        else None


class Client(object):
    """One phase's requests (warm-up, or measured) on an aiohttp session."""

    def __init__(self, endpoint, api, model, headers, new_tokens, force, concurrency,
                 stall_s, stop=None):
        self.url = endpoint + ("/chat/completions" if api == "chat" else "/completions")
        self.endpoint = endpoint
        self.api = api
        self.model = model
        self.headers = headers
        self.new_tokens = new_tokens
        self.force = tuple(force)
        self.concurrency = concurrency
        self.stall_s = stall_s
        self.fatal = None
        self.stop = stop or (lambda warmup: None)
        """``stop(warmup)``: why the phase stops now (its requests in flight cut, no more
        sent), or None; ``stop(False)`` after a phase: no later phase is sent either."""
        self.in_flight = 0
        """Requests sent and not yet ended (each result carries the count at its end)."""

    async def run(self, phases, on_result, start=None):
        """Each phase ``(prompts, offsets, warmup, requests)`` in turn on one session (the
        warm-up's connections serve the measured requests): request ``requests[i]`` with
        ``prompts[i]`` at ``offsets[i]`` from the phase's start, ``on_result(Result)`` as
        each ends. Returns, per phase, (start, end) on the monotonic clock and the
        process's CPU seconds over it. ``start``: the first phase's start (one shared by
        the processes of a split load, :mod:`openai_split`), else now.

        Raises:
            SetupFailed: the endpoint refused the connection, or TLS failed.
        """
        connector = aiohttp.TCPConnector(limit=max(self.concurrency, 1), limit_per_host=0)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=self.stall_s)
        out = []
        async with aiohttp.ClientSession(connector=connector, timeout=timeout,
                                         read_bufsize=READ_BUFSIZE,
                                         trace_configs=[_reuse_trace()]) as session:
            for prompts, offsets, warmup, requests in phases:
                cpu0 = time.process_time()
                start, end = await self._phase(session, prompts, offsets, warmup, requests,
                                               on_result, start)
                out.append((start, end, time.process_time() - cpu0))
                start = None
                if self.fatal or self.stop(False):
                    break
        if self.fatal:
            raise SetupFailed(self.fatal)
        return out

    async def _phase(self, session, prompts, offsets, warmup, requests, on_result, start):
        sem = asyncio.Semaphore(self.concurrency)
        loop_start = time.monotonic() if start is None else start
        tasks = []
        watch = asyncio.ensure_future(self._watch(tasks, warmup))
        for request, prompt, off in zip(requests, prompts, offsets, strict=True):
            # the stop is polled: a split load's is another process's (openai_split)
            while not self.fatal and not self.stop(warmup) and \
                    loop_start + off > time.monotonic():  # noqa: ASYNC110
                await asyncio.sleep(min(STOP_POLL_S, loop_start + off - time.monotonic()))
            if self.fatal or self.stop(warmup):
                break
            res = Result(request, warmup, off)
            tasks.append(asyncio.ensure_future(
                self._one(session, sem, prompt, res, loop_start + off, on_result)))
        if tasks:
            await asyncio.gather(*tasks)
        watch.cancel()
        return loop_start, time.monotonic()

    async def _watch(self, tasks, warmup):
        # A stop cuts what is in flight: its outcome is decided, and a hung server would
        # hold each request its whole stall time for nothing.
        while not self.stop(warmup):  # noqa: ASYNC110 - polled, as above
            await asyncio.sleep(STOP_POLL_S)
        for task in tasks:
            task.cancel()

    async def _one(self, session, sem, prompt, res, scheduled_mono, on_result):
        res.dispatch_lag_s = max(0.0, time.monotonic() - scheduled_mono)
        t_disp = time.monotonic()
        sent = [False]
        try:
            if not await self._send(session, sem, prompt, res, t_disp, sent):
                return
        except asyncio.CancelledError:
            if not sent[0]:  # cut before its slot: never sent, nothing to store
                return
            res.error = CUT
            res.end_mono = time.monotonic()
            res.end_s = res.end_mono - (t_disp + res.slot_wait_s + res.resend_s)
            self.in_flight -= 1
            res.in_flight = self.in_flight
        on_result(res)

    async def _send(self, session, sem, prompt, res, t_disp, sent_flag):
        async with sem:
            if self.fatal or self.stop(res.warmup):
                return False
            sent_flag[0] = True
            # a pair: its own max_tokens (new_tokens_spread), forced alike
            text, res.max_tokens = prompt if isinstance(prompt, tuple) else (
                prompt, self.new_tokens)
            body = payload(self.api, self.model, text, res.max_tokens, self.force)
            self.in_flight += 1
            # A kept-alive connection the server closed as it was taken from the pool fails
            # before any byte: sent again on another (llama-server closes each connection
            # after its stream, its headers saying keep-alive). The pool holds at most
            # ``concurrency`` such connections; TTFT counts from the send answered.
            t_first = t_send = time.monotonic()
            res.slot_wait_s = t_send - t_disp
            for attempt in range(self.concurrency + 1):
                if attempt:
                    t_send = time.monotonic()
                    res.resend_s = t_send - t_first
                sent = types.SimpleNamespace(reused=False)
                try:
                    async with session.post(self.url, json=body, headers=self.headers,
                                            trace_request_ctx=sent) as resp:
                        res.status = resp.status
                        if resp.status != 200:
                            text = await resp.text(errors="replace")
                            res.first_byte_s = time.monotonic() - t_send
                            res.error = "HTTP %d: %s" % (resp.status, escaped(text.strip()))
                            if resp.status == 404:  # which URL: a route, or the model
                                res.error += " (POST %s: no such route, or no such model; " \
                                    "endpoint is the API's base, http://HOST:PORT/v1)" % (
                                        self.url)
                            named = refused_fields(resp.status, text, self.force)
                            if named:
                                res.error = "HTTP %d: the server refused the request " \
                                    "field(s) %s (sent to force the length: leave them out " \
                                    "of force_length for this server); its answer: %s" % (
                                        resp.status, ", ".join(named), escaped(text.strip()))
                        else:
                            await read_stream(resp, res, self.api, t_send)
                except aiohttp.ClientConnectorError as exc:
                    self.in_flight -= 1
                    self._connect_failed(exc)
                    return False
                except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
                    # a pooled connection the server had closed; a fresh one closed
                    # before answering is the server's failure: never sent again
                    if res.first_byte_s is None and sent.reused and \
                            attempt < self.concurrency:
                        res.resent += 1
                        continue
                    res.error = "%s: %s" % (type(exc).__name__, escaped(str(exc)))
                except asyncio.TimeoutError:
                    res.error = "stalled: no data for %g s (the read timeout)" % self.stall_s
                except aiohttp.ClientPayloadError as exc:
                    res.error = "stream cut: %s" % escaped(str(exc))
                except aiohttp.ClientError as exc:
                    res.error = "%s: %s" % (type(exc).__name__, escaped(str(exc)))
                except ValueError as exc:  # a line longer than the read buffer
                    res.error = "unreadable stream: %s" % escaped(str(exc))
                break
            res.end_mono = time.monotonic()
            res.end_s = res.end_mono - t_send
            self.in_flight -= 1
            res.in_flight = self.in_flight
        return True

    def _connect_failed(self, exc):
        if self.fatal:
            return
        os_error = getattr(exc, "os_error", None)
        if isinstance(exc, aiohttp.ClientSSLError):
            host = getattr(exc, "host", None) or self.endpoint
            self.fatal = "TLS failed for host %s: %s%s" % (host, exc, tls_hint(exc))
        elif isinstance(os_error, ConnectionRefusedError) \
                or getattr(os_error, "errno", None) == errno.ECONNREFUSED:
            self.fatal = "connection refused at %s" % self.endpoint
        else:
            self.fatal = "cannot connect to %s: %s" % (self.endpoint, exc)


def tls_hint(exc):
    """What a user does about a TLS failure: the two met in practice named."""
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return (" (a certificate this host does not trust, such as a self-signed one: TLS "
                "is always verified; trust its CA with SSL_CERT_FILE=CA.pem in dltop's "
                "environment)")
    if "WRONG_VERSION_NUMBER" in str(exc) or "record layer failure" in str(exc):
        return " (the port answered without TLS: a plain-HTTP server wants http://)"
    return ""


def _reuse_trace():
    # Which requests went on a pooled connection (kept alive from an earlier request).
    async def reused(session, ctx, params):
        ctx.trace_request_ctx.reused = True

    trace = aiohttp.TraceConfig()
    trace.on_connection_reuseconn.append(reused)
    return trace
