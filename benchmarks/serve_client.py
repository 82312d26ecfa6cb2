"""dltop's OpenAI client (``mode = "serve"``, issue 41) against a peer client, side by
side: the same fake server (``benchmarks/serve_fake.py``: first token after
``--ttft-ms``, a chunk every ``--itl-ms`` of ``--tokens-per-chunk`` tokens), the same
load (requests, warm-up, Poisson rate, concurrency, the same prompts from one JSONL,
new tokens), in one run.

- **dltop**: ``openai_runner.py`` run as the engine runs it (a process on a spec file).
- **peer**: NVIDIA AIPerf, pinned, installed on first use into a virtual environment
  of its own (``benchmarks/serve_peer.py``: why AIPerf and not guidellm, its
  tokenizer, its command line).

Client CPU per chunk: each client's whole process tree (psutil, sampled every 50 ms,
reaped children included) over the server's busy window (its first request to its last
stream's end, read from the server's ``/stats``), divided by the content chunks the
server sent in it; start-up and exit are outside the window for both. TTFT p50 and ITL
p50 as each tool reports them (ITL: per request (e2e - TTFT) / (tokens - 1), AIPerf's
definition, also computed from dltop's stored chunk times; dltop's per-token ITL p50 is
printed beside). Rounds alternate which client goes first; the CPU ratio (dltop / peer)
comes with a 95 % interval (rounds resampled in pairs, ``harness_overhead``'s).
Then dltop alone: the highest request rate it holds with dispatch lag p99 <= 2 ms, with
one client process and with ``client_processes = "auto"``. For each there is a rate
ladder from ``--sweep-from`` (``benchmarks/serve_ladder.py``): the rate doubles, then is
bisected, and each step sends at least 100 measured requests (for a p99). Beside each
step, a bare asyncio loop's lateness p99 at the same arrivals, with no requests: the
machine's floor. Goals (issue 41): dltop's CPU per chunk <= the peer's; its TTFT/ITL p50
within 2 % of the peer's.

    .venv/bin/python benchmarks/serve_client.py [--rounds 3] [--requests 200]
        [--rate 20] [--concurrency 32] [--new-tokens 64] [--prompt-tokens 32]
        [--ttft-ms 20] [--itl-ms 4] [--tokens-per-chunk 1] [--no-peer] [--no-sweep]
        [--sweep-from 5] [--sweep-seconds 4] [--bisections 3] [--ladder-min 1]
        [--ladder-max 2000]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from harness_overhead import ratio_interval  # noqa: E402
from serve_fake import chunk_schedule  # noqa: E402
from serve_ladder import ladder, percentile  # noqa: E402
from serve_peer import aiperf_command, parse_aiperf, peer_python, write_tokenizer  # noqa: E402

RUNNER = HERE.parent / "src" / "dltop" / "runners" / "child" / "openai_runner.py"
WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel")


@dataclass(frozen=True)
class Load:
    """What both clients are asked to do."""

    requests: int
    warmup: int
    rate_per_s: float
    concurrency: int
    prompt_tokens: int
    new_tokens: int
    seed: int


@dataclass(frozen=True)
class Side:
    """One client's run: window CPU, chunks, and its own latency figures."""

    name: str
    window_cpu_s: float
    chunks: int
    ttft_p50_ms: float
    itl_p50_ms: float
    token_itl_p50_ms: float | None = None
    lag_p99_ms: float | None = None
    achieved_rate_per_s: float | None = None
    processes: int = 1

    @property
    def cpu_per_chunk_us(self) -> float:
        return 1e6 * self.window_cpu_s / max(self.chunks, 1)


class TreeCPU:
    """A process tree's CPU seconds sampled on the monotonic clock in a thread."""

    def __init__(self, pid: int, interval_s: float = 0.05):
        self.root = psutil.Process(pid)
        self.samples: list[tuple[float, float]] = []
        self.interval_s = interval_s
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _tree_cpu(self) -> float:
        total = 0.0
        for p in [self.root, *self.root.children(recursive=True)]:
            try:
                t = p.cpu_times()
            except psutil.Error:
                continue
            total += t.user + t.system + t.children_user + t.children_system
        return total

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                self.samples.append((time.monotonic(), self._tree_cpu()))
            except psutil.Error:
                return
            self.stop.wait(self.interval_s)

    def between(self, t0: float, t1: float) -> float:
        """CPU seconds from ``t0`` to ``t1``, interpolated between samples."""
        self.stop.set()
        self.thread.join()

        def at(t: float) -> float:
            before = [s for s in self.samples if s[0] <= t] or self.samples[:1]
            after = [s for s in self.samples if s[0] >= t] or self.samples[-1:]
            (ta, ca), (tb, cb) = before[-1], after[0]
            return ca if tb <= ta else ca + (cb - ca) * (t - ta) / (tb - ta)

        return at(t1) - at(t0)


def http_json(url: str) -> dict[str, object]:
    with urllib.request.urlopen(url, timeout=10) as resp:
        out: dict[str, object] = json.loads(resp.read())
    return out


def start_fake(args: argparse.Namespace) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, str(HERE / "serve_fake.py"), "--ttft-ms",
                             str(args.ttft_ms), "--itl-ms", str(args.itl_ms),
                             "--tokens-per-chunk", str(args.tokens_per_chunk)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("PORT "):
        proc.kill()
        raise SystemExit(f"the fake server did not start: {line!r}")
    return proc, f"http://127.0.0.1:{int(line.split()[1])}"


def measured(cmd: list[str], base: str, cwd: Path, env: dict[str, str] | None = None,
             timeout_s: float = 900) -> tuple[int, float, int, str]:
    """Run a client (``env`` its whole environment, else this one's); (exit status, its
    tree's CPU over the server's window, chunks, its output's tail)."""
    http_json(base + "/reset")
    err = cwd / "stderr.txt"
    with open(err, "w") as fh, open(cwd / "stdout.txt", "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=fh, cwd=cwd, env=env)
        cpu = TreeCPU(proc.pid)
        code = proc.wait(timeout=timeout_s)
    stats = http_json(base + "/stats")
    first, last = stats["first_mono"], stats["last_mono"]
    window = cpu.between(float(first), float(last)) if isinstance(first, float) \
        and isinstance(last, float) else 0.0
    tail = (cwd / "stdout.txt").read_text()[-1500:] + err.read_text()[-1500:]
    return code, window, int(stats["chunks"]), tail  # type: ignore[call-overload]


def run_dltop(base: str, load: Load, prompts: Path, work: Path, rate: float | None = None,
              concurrency: int | None = None, requests: int | None = None,
              processes: int | str = 1) -> Side:
    work.mkdir(parents=True, exist_ok=True)
    spec = {"v": 1, "run_id": 1, "framework": "openai", "model": "fake", "batch_size": 1,
            "device": {"kind": "cpu", "count": 1}, "iterations": requests or load.requests,
            "warmup": load.warmup, "seed": load.seed, "prompt_tokens": load.prompt_tokens,
            "new_tokens": load.new_tokens, "request_rate": rate or load.rate_per_s,
            "concurrency": concurrency or load.concurrency, "timeout_s": 900.0,
            "mode": "serve", "options": {"endpoint": base + "/v1", "api": "chat",
                                         "arrival": "poisson", "burstiness": 1.0,
                                         "max_error_rate": 0.0, "dataset": str(prompts),
                                         "client_processes": processes}}
    (work / "spec.json").write_text(json.dumps(spec))
    env = {k: v for k, v in os.environ.items() if k != "DLTOP_EVENT_FD"}
    code, cpu_s, chunks, err = measured([sys.executable, str(RUNNER), "spec.json"], base,
                                        work, env)
    events = [json.loads(x) for x in (work / "stderr.txt").read_text().splitlines()
              if x.startswith('{"')]
    reqs = [e for e in events if e["event"] == "request" and not e["warmup"]]
    if code != 0 or not reqs:
        raise SystemExit(f"dltop's runner failed (exit {code}): {err[-1500:]}")
    ok = [r for r in reqs if r["error"] is None]
    tokens = [x for e in events if e["event"] == "generate" and not e["warmup"]
              for x in e["itl_s"]]
    (summary,) = [e for e in events if e["event"] == "load"]
    return Side("dltop", cpu_s, chunks, 1e3 * statistics.median(r["ttft_s"] for r in ok),
                1e3 * statistics.median((r["e2e_s"] - r["ttft_s"]) / (r["output_tokens"] - 1)
                                        for r in ok),
                token_itl_p50_ms=1e3 * statistics.median(tokens),
                lag_p99_ms=1e3 * percentile([r["dispatch_lag_s"] for r in reqs], 99),
                achieved_rate_per_s=len(reqs) / summary["window_s"],
                processes=int(summary["client_processes"]))


def run_peer(python: Path, base: str, load: Load, prompts: Path, tok: Path,
             work: Path) -> Side:
    work.mkdir(parents=True, exist_ok=True)
    cmd = aiperf_command(python, base, tok, prompts, work, rate_per_s=load.rate_per_s,
                         concurrency=load.concurrency, requests=load.requests,
                         warmup=load.warmup, new_tokens=load.new_tokens, seed=load.seed)
    code, cpu_s, chunks, err = measured(cmd, base, work)
    export = work / "profile_export_aiperf.json"
    if code != 0 or not export.exists():
        raise RuntimeError(f"aiperf failed (exit {code}): {err[-1500:]}")
    ttft, itl, n = parse_aiperf(json.loads(export.read_text()))
    if n != load.requests:
        raise RuntimeError(f"aiperf reported {n} requests, {load.requests} were asked")
    return Side("aiperf", cpu_s, chunks, ttft, itl)


def pct_diff(a: float, b: float) -> str:
    return f"{100.0 * (a - b) / b:+.1f} %"


def held_rates(base: str, load: Load, prompts: Path, work: Path,
               args: argparse.Namespace, e2e_s: float) -> dict[str, float | None]:
    """The highest rate held with dispatch lag p99 <= 2 ms, one client process and
    ``"auto"`` (dltop alone; concurrency enough for every stream in flight)."""
    out: dict[str, float | None] = {}
    for processes in (1, "auto"):
        def run(rate: float, n: int, processes: int | str = processes
                ) -> tuple[float, float, int, float]:
            conc = max(load.concurrency, math.ceil(rate * e2e_s * 2) + 4)
            side = run_dltop(base, load, prompts, work / f"p{processes}-rate{rate:g}",
                             rate=rate, concurrency=conc, requests=n, processes=processes)
            assert side.lag_p99_ms is not None and side.achieved_rate_per_s is not None
            return (side.lag_p99_ms, side.achieved_rate_per_s, side.processes,
                    side.cpu_per_chunk_us)
        name = f"client_processes = {processes!r}".replace("'", '"')
        _, out[name] = ladder(name, run, args.sweep_from, args.sweep_seconds,
                              args.bisections, args.ladder_min, args.ladder_max)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for flag, kind, default in (("--rounds", int, 3), ("--requests", int, 200),
                                ("--warmup", int, 10), ("--rate", float, 20.0),
                                ("--concurrency", int, 32), ("--prompt-tokens", int, 32),
                                ("--new-tokens", int, 64), ("--ttft-ms", float, 20.0),
                                ("--itl-ms", float, 4.0), ("--tokens-per-chunk", int, 1),
                                ("--seed", int, 0), ("--sweep-from", float, 5.0),
                                ("--sweep-seconds", float, 4.0), ("--bisections", int, 3),
                                ("--ladder-min", float, 1.0), ("--ladder-max", float, 2000.0)):
        ap.add_argument(flag, type=kind, default=default)
    ap.add_argument("--no-peer", action="store_true", help="dltop's figures only")
    ap.add_argument("--no-sweep", action="store_true")
    args = ap.parse_args()
    load = Load(args.requests, args.warmup, args.rate, args.concurrency, args.prompt_tokens,
                args.new_tokens, args.seed)
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="dltop-serve-bench-"))
    prompts = work / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"text": " ".join(
        rng.choice(WORDS) for _ in range(load.prompt_tokens))}) + "\n" for _ in range(64)))
    itl_sched = args.itl_ms / args.tokens_per_chunk
    gaps = len(chunk_schedule(args.ttft_ms, args.itl_ms, load.new_tokens,
                              args.tokens_per_chunk)) - 1
    tpot_sched = gaps * args.itl_ms / max(load.new_tokens - 1, 1)
    print(f"load: {load.requests} requests (+{load.warmup} warm-up), Poisson "
          f"{load.rate_per_s:g}/s, concurrency {load.concurrency}, prompts of "
          f"{load.prompt_tokens} words, {load.new_tokens} new tokens; schedule: first token "
          f"{args.ttft_ms:g} ms, a chunk every {args.itl_ms:g} ms of {args.tokens_per_chunk}"
          f" token(s) (ITL {itl_sched:g} ms); machine: {os.cpu_count()} CPUs, load "
          f"average {os.getloadavg()[0]:.1f}", flush=True)
    server, base = start_fake(args)
    try:
        python, why = None, "--no-peer" if args.no_peer else None
        if not args.no_peer:
            try:
                python = peer_python()
                tok = write_tokenizer(python, work / "tokenizer", WORDS)
            except (RuntimeError, subprocess.CalledProcessError) as exc:
                python, why = None, str(exc)
                print(f"peer: not run: {why}", flush=True)
        rows: list[tuple[Side, Side | None]] = []
        print(f"\n{'round':>5} {'first':>6} {'dltop us/chunk':>14} {'peer us/chunk':>13} "
              f"{'ratio':>6} {'TTFT ms d/p':>13} {'ITL ms d/p':>13} {'chunks d/p':>11}", flush=True)
        for r in range(args.rounds):
            order = ["dltop", "peer"] if r % 2 == 0 else ["peer", "dltop"]
            got: dict[str, Side | None] = {"peer": None}
            for name in order:
                if name == "dltop":
                    got[name] = run_dltop(base, load, prompts, work / f"r{r}-dltop")
                elif python is not None:
                    try:
                        got[name] = run_peer(python, base, load, prompts, tok,
                                             work / f"r{r}-peer")
                    except RuntimeError as exc:
                        python, why = None, str(exc)
                        print(f"peer: failed: {why}", flush=True)
            d, p = got["dltop"], got["peer"]
            assert d is not None
            rows.append((d, p))
            print(f"{r + 1:5d} {order[0]:>6} {d.cpu_per_chunk_us:14.1f} "
                  + (f"{p.cpu_per_chunk_us:13.1f} {d.cpu_per_chunk_us / p.cpu_per_chunk_us:6.3f}"
                     f" {d.ttft_p50_ms:6.2f}/{p.ttft_p50_ms:6.2f} "
                     f"{d.itl_p50_ms:6.3f}/{p.itl_p50_ms:6.3f} {d.chunks:5d}/{p.chunks:5d}"
                     if p else f"{'-':>13} {'-':>6} {d.ttft_p50_ms:6.2f}/{'-':>6} "
                     f"{d.itl_p50_ms:6.3f}/{'-':>6} {d.chunks:5d}/{'-':>5}"), flush=True)
        summarize(rows, args.ttft_ms, tpot_sched, itl_sched, why)
        if not args.no_sweep:
            e2e_s = (args.ttft_ms + args.itl_ms * math.ceil(load.new_tokens /
                                                            args.tokens_per_chunk)) / 1e3
            held = held_rates(base, load, prompts, work / "ladder", args, e2e_s)
            print("\nhighest rate held with dispatch lag p99 <= 2 ms: " + "; ".join(
                f"{name}: " + (f"{rate:.4g}/s" if rate else f"none from {args.ladder_min:g}/s")
                for name, rate in held.items()))
    finally:
        server.kill()
        server.wait()
    print(f"(work files in {work})")
    return 0


def summarize(rows: list[tuple[Side, Side | None]], ttft_ms: float, tpot_ms: float,
              itl_ms: float, why: str | None) -> None:
    """The medians over rounds, dltop against the peer and the schedule (``tpot_ms``:
    a request's (e2e - TTFT) / (tokens - 1); ``itl_ms``: a chunk's gap over its tokens)."""
    med = statistics.median
    d_cpu = [d.cpu_per_chunk_us for d, _ in rows]
    d_ttft, d_itl = med(d.ttft_p50_ms for d, _ in rows), med(d.itl_p50_ms for d, _ in rows)
    d_tok = med(d.token_itl_p50_ms or 0.0 for d, _ in rows)
    print(f"\n{'median of rounds':<30} {'dltop':>9} {'aiperf':>9} {'dltop vs peer':>14} "
          f"{'schedule':>9}")
    peers = [p for _, p in rows if p is not None]
    if len(peers) == len(rows):
        p_cpu = [p.cpu_per_chunk_us for p in peers]
        lo, hi = ratio_interval(p_cpu, d_cpu)
        p_ttft, p_itl = med(p.ttft_p50_ms for p in peers), med(p.itl_p50_ms for p in peers)
        print(f"{'client CPU per chunk (us)':<30} {med(d_cpu):9.1f} {med(p_cpu):9.1f} "
              f"{'x%.3f' % (med(d_cpu) / med(p_cpu)):>14} {'':>9}  95 % [{lo:.3f}, {hi:.3f}]")
        print(f"{'TTFT p50 (ms)':<30} {d_ttft:9.3f} {p_ttft:9.3f} "
              f"{pct_diff(d_ttft, p_ttft):>14} {ttft_ms:9.3f}")
        print(f"{'ITL p50 (ms, (e2e-TTFT)/(n-1))':<30} {d_itl:9.3f} {p_itl:9.3f} "
              f"{pct_diff(d_itl, p_itl):>14} {tpot_ms:9.3f}")
    else:
        print(f"{'client CPU per chunk (us)':<30} {med(d_cpu):9.1f} {'-':>9}")
        print(f"{'TTFT p50 (ms)':<30} {d_ttft:9.3f} {'-':>9} {'':>14} {ttft_ms:9.3f}")
        print(f"{'ITL p50 (ms, (e2e-TTFT)/(n-1))':<30} {d_itl:9.3f} {'-':>9} {'':>14} "
              f"{tpot_ms:9.3f}")
        print(f"peer not compared: {why}")
    print(f"{'ITL p50 (ms, per token)':<30} {d_tok:9.3f} {'-':>9} {'':>14} {itl_ms:9.3f}")


if __name__ == "__main__":
    sys.exit(main())
