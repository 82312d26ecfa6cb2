"""A serve run's ``request`` and ``load`` events (issue 41) into its rows and columns.

:class:`~dltop.jobs.evals.RunExtras` hands them here. Each checked ``request`` event
becomes one ``serve_requests`` row (:mod:`dltop.store.serving`), buffered and written
with the iteration rows; the ``load`` event and the measured requests' dispatch lags
give the run's serve columns at its end, ``client_bound`` among them: a client that
could not keep its schedule measured itself as much as the server.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dltop.childfiles import child_module
from dltop.jobs.writes import join_notes
from dltop.results.convergence import percentile_or_none
from dltop.store.generations import pack_seconds
from dltop.store.serving import pack_counts
from dltop.store.writer import Store
from dltop.telemetry.values import opt_float

LAG_BOUND_S = 0.010
"""A measured dispatch lag p99 above this flags the run ``client-bound`` (a p99 needs 100
measured requests: :func:`dltop.results.convergence.min_samples`; with fewer, only the
CPU says so)."""
CPU_BOUND_PCT = 90.0
"""So does a client that used more than this share of one core over the measured load..."""
CPU_WINDOW_S = 1.0
"""...of at least this long (a shorter window is mostly the session's start-up: the same
bound as the telemetry figures' window, docs/metrics.md)."""
BUNCHED_MIN_CHUNKS = 4
BUNCHED_GAP_S = 100e-6
BUNCHED_SHARE = 0.02
"""A measured request of at least BUNCHED_MIN_CHUNKS chunks of text whose chunks came less
than BUNCHED_GAP_S apart on average, all of them within this share of its wait for the
first, arrived in one piece: the whole answer after a long wait (vLLM 0.32 on a loaded
2-core machine: 8 chunks within 0.1 ms, 37 to 83 ms after the send, its own TTFT 19 ms and
ITL 5 ms; docs/serving.md), the client reading what the server had sent token by token while
its process did not run, or a server or proxy holding them. The gap alone is not enough: a
toy model on a fast server streams 7 to 60 us apart, its chunks' spread then a good part of
its time to first token, not 2 % of it."""


def request_row(event: dict[str, Any]) -> dict[str, Any]:
    """The ``serve_requests`` row of a checked ``request`` event."""
    return {"idx": int(event["index"]), "request": int(event["request"]),
            "warmup": int(bool(event["warmup"])),
            "scheduled_s": float(event["scheduled_s"]),
            "dispatch_lag_s": float(event["dispatch_lag_s"]),
            "slot_wait_s": float(event["slot_wait_s"]),
            "first_byte_s": opt_float(event.get("first_byte_s")),
            "ttft_s": opt_float(event.get("ttft_s")), "e2e_s": opt_float(event.get("e2e_s")),
            "status": int(event["status"]),
            "error": event.get("error"), "prompt_tokens": event.get("prompt_tokens"),
            "output_tokens": int(event["output_tokens"]),
            "tokens_estimated": int(bool(event["tokens_estimated"])),
            "chunk_s": pack_seconds([float(x) for x in event["chunk_s"]]),
            "chunk_tokens": pack_counts([int(x) for x in event["chunk_tokens"]]),
            "in_flight": event.get("in_flight"), "resent": event.get("resent"),
            "resend_s": opt_float(event.get("resend_s")),
            "cached_tokens": event.get("cached_tokens"), "max_tokens": event.get("max_tokens")}


COUNTED_BY: dict[str, str] = child_module("openai_tokens").COUNTED_BY
"""What counted the prompts ``max_prompt_tokens`` dropped, as the run's note says it (the
runner's own words, runners/child/openai_tokens.py)."""

REPEATED_SHARE = 0.1
"""The share of measured requests finding their own prompt cached that the note names: a
few chance hits of short random prompts are not a replay."""


def _own_cached(prompt: int, cached: int, sent: int | None, prefix: int) -> bool:
    """Whether most of a request's own part (past the shared prefix) came from the cache.
    A chat template's tokens (a default system prompt: in the usage, not in what the
    client sent, the same in every request and so cached) are the head, not the prompt's
    own part: ``sent`` (the client's count, where a tokenizer counted it) tells them
    apart; without it the whole usage count less the prefix is the own part."""
    head = max(0, prompt - sent) if sent is not None else 0
    own = (sent if sent is not None else prompt) - prefix
    return cached - head - prefix > own / 2


class ServeExtras:
    """One serve run's request rows and load summary."""

    def __init__(self, run_id: int, store: Store, write_later: Callable[..., None]) -> None:
        self.run_id = run_id
        self._rows: list[dict[str, Any]] = []
        self._lags: list[float] = []
        self._bunched = [0, 0]
        """Measured requests of BUNCHED_MIN_CHUNKS chunks on: [in one piece, all]."""
        self._prompts: list[tuple[int, int, int | None]] = []
        """Measured requests' (prompt tokens, cached tokens, tokens the client counted in
        what it sent or None), where the usage gave the first two."""
        self._load: dict[str, Any] | None = None
        self._store = store
        self._write_later = write_later

    def on_event(self, event: dict[str, Any]) -> None:
        """Take a checked ``request`` or ``load`` event."""
        if event["event"] == "request":
            row = request_row(event)
            self._rows.append(row)
            if not row["warmup"]:
                self._lags.append(row["dispatch_lag_s"])
                if row["prompt_tokens"] is not None and row["cached_tokens"] is not None:
                    sent = event.get("sent_tokens")
                    self._prompts.append((int(row["prompt_tokens"]),
                                          int(row["cached_tokens"]),
                                          None if sent is None else int(sent)))
                times = event["chunk_s"]
                if len(times) >= BUNCHED_MIN_CHUNKS:
                    self._bunched[1] += 1
                    spread = times[-1] - times[0]
                    self._bunched[0] += spread / (len(times) - 1) < BUNCHED_GAP_S \
                        and spread < BUNCHED_SHARE * times[0]
        else:
            self._load = event

    def flush(self) -> None:
        """Write the request rows received so far."""
        if self._rows:
            self._write_later(self._store.add_serve_requests, self.run_id, self._rows,
                              what="serve request rows", count=len(self._rows))
            self._rows = []

    def _processes(self) -> int:
        return int((self._load or {}).get("client_processes") or 1)

    def _length_note(self) -> str | None:
        """``lengths not forced: 3 of 50 shorter than new_tokens`` (or forced, and some
        shorter all the same: a server that took the fields and did not honour them).
        With ``new_tokens_spread`` each request is judged by its own ``max_tokens``."""
        load = self._load or {}
        short, ok = load.get("short_requests"), int(load.get("ok") or 0)
        if short is None or load.get("length_forced") is None:
            return None
        than = ("their own max_tokens (new_tokens_spread)" if load.get("max_tokens_spread")
                else "new_tokens")
        if not load["length_forced"]:
            return f"lengths not forced: {short} of {ok} shorter than {than}"
        return f"lengths forced, yet {short} of {ok} shorter than {than}" if short else None

    def _resent_note(self) -> str | None:
        """``2 measured requests sent again ...``: their pooled connection was closed
        before any byte (llama-server closes each after its stream), so each was sent on
        another connection and its times count from that send."""
        n = int((self._load or {}).get("resent_requests") or 0)
        return None if not n else (
            f"{n} measured request{'s' if n > 1 else ''} sent again: the server closed a "
            "kept-alive connection before answering (times from the answered send)")

    def _prompt_note(self) -> str | None:
        """``prompt lengths estimated: ...``: requests without the server's usage whose
        generation rows hold the words the client sent, no tokenizer having counted them."""
        n = int((self._load or {}).get("prompt_tokens_estimated") or 0)
        return None if not n else (
            f"prompt lengths estimated: {n} measured request{'s' if n > 1 else ''} without "
            "the server's usage: their prompts counted in words, not tokens")

    def _repeated_note(self) -> str | None:
        """``prompts repeated: ...`` where at least :data:`REPEATED_SHARE` of the measured
        requests found most of their own part (past ``prefix_tokens``) in the server's
        cache: a group's server keeps an earlier run's prompts, and the same draw sends
        the same ones (``prompt_draw = "seed"``: llama-server had 97 % cached at the second
        rate of a sweep without a prefix), so their TTFT times cache hits, not prefills."""
        prefix = int((self._load or {}).get("prefix_tokens") or 0)
        hits = sum(_own_cached(p, c, sent, prefix) for p, c, sent in self._prompts)
        if not hits or hits < REPEATED_SHARE * len(self._prompts):
            return None
        return (f"prompts repeated: {hits} of {len(self._prompts)} measured requests found "
                "most of their own part (past prefix_tokens) in the server's cache (sent "
                "before on this server: an earlier run of the same sweep point or of "
                "prompt_draw = \"seed\", or a dataset's repeats): their TTFT times cache "
                "hits; server_scope = \"run\" or another seed sends fresh ones")

    def _dropped_note(self) -> str | None:
        """``3 of 40 dataset prompts over max_prompt_tokens dropped (by the tokenizer)``, or
        over what the server's stated context leaves (the load event's ``dropped_over``)."""
        load = self._load or {}
        if load.get("dataset_prompts") is None:
            return None
        by = COUNTED_BY.get(load.get("prompt_count_by") or "words", "words")
        over = load.get("dropped_over") or "max_prompt_tokens"
        return (f"{load.get('dropped_prompts') or 0} of {load['dataset_prompts']} dataset "
                f"prompts over {over} dropped (counted by {by})")

    def _bunched_note(self) -> str | None:
        """``chunks bunched: ...`` where most measured requests arrived in one piece
        (:data:`BUNCHED_SHARE`): their TTFT is the whole answer's time, their TPOT about 0."""
        bunched, of = self._bunched
        if not of or 2 * bunched < of:
            return None
        return (f"chunks bunched: {bunched} of {of} measured requests arrived in one piece "
                "(the client did not run while the server streamed, or the server or a "
                "proxy held them): TTFT, TPOT and ITL do not time tokens")

    def fields(self) -> dict[str, Any]:
        """The run's serve columns (empty for a run that sent no request), and its
        ``note`` on output lengths (:meth:`_length_note`)."""
        out: dict[str, Any] = {}
        lag = percentile_or_none(sorted(self._lags), 99) if self._lags else None
        if lag is not None:  # from 100 measured requests on (the percentile rule)
            out["dispatch_lag_p99_s"] = lag
        if self._load is not None:
            window = float(self._load["window_s"])
            out["serve_window_s"] = window
            out["client_cpu_pct"] = 100.0 * float(self._load["client_cpu_s"]) / window
            for key in ("server_cold_start_s", "token_source", "short_requests"):
                if self._load.get(key) is not None:
                    out[key] = self._load[key]
            if self._load.get("length_forced") is not None:
                out["length_forced"] = int(bool(self._load["length_forced"]))
            # what makes the times mean something else first: `dltop runs` cuts the note
            note = join_notes(self._bunched_note(), self._repeated_note(),
                              self._length_note(), self._resent_note(),
                              self._dropped_note(), self._prompt_note())
            if note:
                out["note"] = note
        if out:  # judged per client process: a split load's CPU is its processes' sum
            busy = out.get("serve_window_s", 0.0) >= CPU_WINDOW_S and out.get(
                "client_cpu_pct", 0.0) / self._processes() > CPU_BOUND_PCT
            out["client_bound"] = int(out.get("dispatch_lag_p99_s", 0.0) > LAG_BOUND_S or busy)
        return out
