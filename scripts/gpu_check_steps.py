"""The measuring steps of scripts/gpu_check.py, each run in its own process.

    python scripts/gpu_check_steps.py STEP RESULT.json [ARGS...]

Each step writes one JSON object to RESULT.json; the orchestrator runs it under a
time limit, so a wedged NVML call or a hung viewer costs that step only. Steps:

- ``nvml``: per-call latency of every NVML query the sampler makes
  (:func:`dltop.telemetry.nvml_latency.query_latencies`).
- ``sampler FAKE_GPUS SECONDS``: the real Sampler at 10, 25, 50 and 100 Hz: achieved
  rate, missed ticks and CPU cost (process CPU time while the main thread sleeps).
- ``profile TEMPLATE OUT``: load the GPU profile with dltop's loader, dropping runner
  options this dltop does not know (``channels_last`` before the GPU options landed).
- ``readout DB``: every run of the campaign with its figures, MFU from dltop's peak
  table and the energy counter against mean power × window.
- ``tui-tmux DB FAKE_GPUS TXT``: the viewer in a private tmux server, one
  ``capture-pane`` as text.
- ``tui-pilot DB FAKE_GPUS SVG``: the viewer driven headless by Textual's pilot, one
  SVG screenshot (where tmux is missing).
- ``tensorflow``: whether TensorFlow with GPU support is importable by the interpreter
  dltop would run TensorFlow jobs with.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
import shlex
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

OPTIONAL_KEYS = ("channels_last", "compile", "cudnn_benchmark", "cuda_graphs")
SHOWN_KEYS = (*OPTIONAL_KEYS, "mode", "seq_len", "prompt_tokens", "new_tokens", "attention")
"""The spec's settings a run's row shows (profile keys)."""
SPEC_FIELDS = {"compile": "torch_compile"}
"""Profile keys whose spec.json field has another name."""
"""Runner options a profile may name before this dltop knows them (dropped, reported)."""
SAMPLER_RATES_HZ = (10.0, 25.0, 50.0, 100.0)


def step_nvml(args: list[str]) -> dict[str, Any]:
    from dataclasses import asdict

    from dltop.telemetry import nvml, nvml_latency

    calls = int(args[0]) if args else 1000
    reason = nvml.unavailable_reason()
    if reason is not None:
        return {"skipped": reason}
    t0 = time.monotonic()
    rows = nvml_latency.query_latencies(0, calls=calls, budget_s=60.0)
    return {"gpu": 0, "calls_asked": calls, "seconds": time.monotonic() - t0,
            "queries": [asdict(r) for r in rows]}


def step_sampler(args: list[str]) -> dict[str, Any]:
    from dltop.store import Store, connect
    from dltop.telemetry import open_gpu_backend
    from dltop.telemetry.sampler import Sampler

    fake, seconds = int(args[0]), float(args[1])
    backend = open_gpu_backend(fake or None)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for rate in SAMPLER_RATES_HZ:
            store = Store(connect(Path(tmp) / f"s{rate:g}.db"))
            sampler = Sampler(backend, store.telemetry.write_batch, gpu_hz=rate,
                              host_hz=min(rate, 2.0))
            sampler.begin_run(1, os.getpid(), tuple(range(backend.device_count())))
            sampler.start()
            time.sleep(0.5)  # past start-up
            c0, t0, k0, m0 = (time.process_time(), time.monotonic(), sampler.ticks,
                              sampler.missed_ticks)
            time.sleep(seconds)
            c1, t1, k1, m1 = (time.process_time(), time.monotonic(), sampler.ticks,
                              sampler.missed_ticks)
            sampler.stop()
            store.db.close()
            wall = t1 - t0
            rows.append({"rate_hz": rate, "achieved_hz": (k1 - k0) / wall,
                         "missed_ticks": m1 - m0, "cpu_pct_of_core": 100 * (c1 - c0) / wall,
                         "seconds": wall, "read_errors": sampler.read_errors})
    # One tick more or less is counting, not falling behind (short measurements).
    ok = [r["rate_hz"] for r in rows
          if r["achieved_hz"] + 1 / r["seconds"] >= 0.95 * r["rate_hz"]]
    return {"gpus": backend.device_count(), "simulated": bool(backend.simulated),
            "rates": rows, "fastest_sustained_hz": max(ok) if ok else None}


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, str):
        return json.dumps(v)
    return repr(v)


def dump_profile(data: dict[str, Any]) -> str:
    """The profile as TOML (its values are strings, numbers, booleans and lists)."""
    out = [f"{k} = {_toml_value(v)}" for k, v in data.items() if not isinstance(v, dict | list)
           or (isinstance(v, list) and not (v and isinstance(v[0], dict)))]
    if "defaults" in data:
        out += ["", "[defaults]", *(f"{k} = {_toml_value(v)}"
                                    for k, v in data["defaults"].items())]
    for entry in data.get("matrix", []):
        out += ["", "[[matrix]]", *(f"{k} = {_toml_value(v)}" for k, v in entry.items())]
    return "\n".join(out) + "\n"


def step_profile(args: list[str]) -> dict[str, Any]:
    from dltop.errors import UserError
    from dltop.profiles.loader import load

    template, out = Path(args[0]), Path(args[1])
    with template.open("rb") as f:
        data = tomllib.load(f)
    dropped: list[str] = []
    for _ in range(len(OPTIONAL_KEYS) + 1):
        out.write_text(dump_profile(data))
        try:
            prof = load(str(out))
        except UserError as exc:
            m = re.search(r"\.(\w+): unknown key", str(exc))
            if m is None or m.group(1) not in OPTIONAL_KEYS or m.group(1) in dropped:
                raise
            dropped.append(m.group(1))
            for table in (data.get("defaults", {}), *data.get("matrix", [])):
                table.pop(m.group(1), None)
            continue
        return {"jobs": len(prof.jobs), "dropped_keys": dropped, "path": str(out),
                "options": sorted({k for j in prof.jobs for k, _ in j.options})}
    raise RuntimeError("could not load the profile")


def _mfu(device: str | None, precision: str, flops: float | None,
         per_s: float | None) -> float | None:
    from dltop.results.peaks import peak_tflops

    peak = peak_tflops(device, precision)
    if not (peak and flops and per_s):
        return None
    return 100.0 * flops * per_s / 1e12 / peak


def stored_energy(conn: sqlite3.Connection, run_id: int) -> dict[str, float | None]:
    """The run's stored GPU rows (0.5 s windows, spawn to exit): the energy counter's
    rise against the trapezoid of the windows' mean power over the same rows, summed
    over its GPUs. The counter is read at a window's last tick, the mean power over
    the window; both span the rows' first to last window."""
    counter = integrated = 0.0
    n = 0
    for (gpu,) in conn.execute("select distinct gpu_index from gpu_samples where run_id = ?",
                               (run_id,)).fetchall():
        rows = conn.execute(
            "select t_start_mono_s, power_mean_w, energy_j from gpu_samples where run_id = ? "
            "and gpu_index = ? and power_mean_w is not null and energy_j is not null "
            "order by t_start_mono_s", (run_id, gpu)).fetchall()
        if len(rows) < 2:
            continue
        n += len(rows)
        counter += rows[-1][2] - rows[0][2]
        integrated += sum((b[0] - a[0]) * (a[1] + b[1]) / 2 for a, b in itertools.pairwise(rows))
    if not n:
        return {"rows_counter_j": None, "rows_integrated_j": None, "rows_ratio": None}
    return {"rows_counter_j": counter, "rows_integrated_j": integrated,
            "rows_ratio": counter / integrated if integrated > 0 else None}


def generation_p50(rows: list[tuple[float, float, int]]) -> dict[str, float | None]:
    """Median TTFT and time per output token of a run's measured requests
    ``(ttft_s, e2e_s, new_tokens)``; None without requests."""
    if not rows:
        return {}
    tpot = [(e2e - ttft) / (n - 1) for ttft, e2e, n in rows if n > 1]
    return {"ttft_p50_s": statistics.median(t for t, _, _ in rows),
            "tpot_p50_s": statistics.median(tpot) if tpot else None,
            "requests": len(rows)}


def _generations(conn: sqlite3.Connection) -> dict[int, list[tuple[float, float, int]]]:
    """Each run's measured generation requests, where this dltop stores them."""
    have = conn.execute("select 1 from sqlite_master where type = 'table' "
                        "and name = 'generations'").fetchone()
    out: dict[int, list[tuple[float, float, int]]] = {}
    if have:
        for run_id, ttft, e2e, n in conn.execute(
                "select run_id, ttft_s, e2e_s, new_tokens from generations where not warmup"):
            out.setdefault(run_id, []).append((ttft, e2e, n))
    return out


def step_readout(args: list[str]) -> dict[str, Any]:
    conn = sqlite3.connect(f"file:{args[0]}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    try:
        gen = _generations(conn)
        energy = {r: stored_energy(conn, r) for (r,) in conn.execute("select id from runs")}
        rows = conn.execute(
            "select r.*, j.model, j.framework, j.batch_size, j.device as job_device, "
            "j.precision, s.spec_json from runs r join jobs j on j.id = r.job_id "
            "join job_specs s on s.job_id = j.id "
            "order by r.id").fetchall()
        unsat = conn.execute("select model, precision, device from jobs "
                             "where status = 'unsatisfiable'").fetchall()
    finally:
        conn.close()
    runs = []
    keep = ("id", "status", "error_kind", "error_message", "note", "device_name", "median_s",
            "samples_per_s", "cv", "flops_per_sample", "power_mean_w", "energy_j",
            "energy_source", "energy_run_j", "joules_per_sample", "window_s", "gpu_readings",
            "host_readings",
            "gpu_mem_peak_bytes", "gpu_mem_run_peak_bytes", "gpu_util_mean_pct",
            "sm_clock_start_mhz", "sm_clock_end_mhz", "throttle_reasons",
            "sampler_achieved_hz", "telemetry_simulated", "telemetry_read_errors",
            "wall_s", "model", "framework", "batch_size", "job_device", "precision",
            "log_tail")
    for r in rows:
        cols = r.keys()  # `in` on a Row looks at its values
        d = {k: r[k] for k in keep if k in cols}
        spec = json.loads(r["spec_json"] or "{}")
        opts = spec.get("options") or {}
        # The runner's GPU settings (spec fields where this dltop has them) and options.
        d["settings"] = {**(dict(opts) if isinstance(opts, dict) else dict(map(tuple, opts))),
                         **{k: spec[SPEC_FIELDS.get(k, k)] for k in SHOWN_KEYS
                            if spec.get(SPEC_FIELDS.get(k, k)) not in (None, "train")}}
        d.update(generation_p50(gen.get(r["id"], [])))
        d["mfu_pct"] = _mfu(r["device_name"], r["precision"], r["flops_per_sample"],
                            r["samples_per_s"])
        integrated = (r["power_mean_w"] * r["window_s"]
                      if r["power_mean_w"] is not None and r["window_s"] else None)
        d["energy_mean_power_j"] = integrated
        d["energy_ratio"] = (r["energy_j"] / integrated if integrated and r["energy_j"]
                             else None)
        d.update(energy.get(r["id"], {}))
        if d["status"] == "ok":
            d.pop("log_tail", None)
        runs.append(d)
    return {"runs": runs, "unsatisfiable": [dict(u) for u in unsat]}


def step_tui_pilot(args: list[str]) -> dict[str, Any]:
    from dltop.jobs.rundir import runs_dir_of
    from dltop.telemetry import open_gpu_backend
    from dltop.tui.app import DltopApp

    db, fake, svg = Path(args[0]), int(args[1]), Path(args[2])

    async def go() -> str:
        app = DltopApp(db, runs_dir_of(db), open_gpu_backend(fake or None),
                       resume_orphans=False)
        async with app.run_test(size=(140, 44)) as pilot:
            for _ in range(10):  # device rows and the campaign table fill in
                await pilot.pause(0.3)
            return app.export_screenshot(title="dltop (gpu_check)")

    svg.write_text(asyncio.run(go()))
    return {"svg": str(svg), "bytes": svg.stat().st_size}


def step_tui_tmux(args: list[str]) -> dict[str, Any]:
    db, fake, txt = Path(args[0]), int(args[1]), Path(args[2])
    # A private tmux server: its pane gets this environment (PYTHONPATH above all), and
    # killing it touches no one else's sessions.
    tmux = ["tmux", "-L", f"dltop-gpucheck-{os.getpid()}"]
    argv = [sys.executable, "-m", "dltop", "--db", str(db), "--no-resume"]
    cmd = shlex.join(["env", f"PYTHONPATH={os.environ.get('PYTHONPATH', '')}", *argv,
                      *(["--fake-gpus", str(fake)] if fake else [])])

    def capture() -> str:
        return subprocess.run([*tmux, "capture-pane", "-p", "-t", "check"],
                              capture_output=True, text=True).stdout

    subprocess.run([*tmux, "new-session", "-d", "-s", "check", "-x", "160", "-y", "48", cmd],
                   check=True, env={**os.environ, "TERM": "xterm-256color"})
    try:
        deadline = time.monotonic() + 15.0
        text = ""
        while time.monotonic() < deadline:
            time.sleep(1.0)
            text = capture()
            if "GPU" in text and "campaign" in text.lower():
                time.sleep(2.0)  # one more device refresh
                text = capture()
                break
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)
    txt.write_text(text)
    if not text.strip():
        raise RuntimeError("the tmux pane stayed empty")
    return {"text": text}


def step_tensorflow(args: list[str]) -> dict[str, Any]:
    from dltop.runners.registry import interpreter

    python, where, extra = interpreter("tensorflow")
    code = ("import os; os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')\n"
            "import tensorflow as tf\n"
            "print(tf.__version__, tf.test.is_built_with_cuda(), "
            "len(tf.config.list_physical_devices('GPU')))")
    try:
        res = subprocess.run([python, "-c", code], capture_output=True, text=True,
                             timeout=150, env={**os.environ, **dict(extra)})
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"available": False, "python": python, "reason": f"{python}: {exc}"}
    if res.returncode != 0:
        last = (res.stderr.strip().splitlines() or ["no output"])[-1]
        return {"available": False, "python": python, "where": where,
                "reason": f"TensorFlow is not importable by {python} ({where}): {last}"}
    version, cuda, gpus = res.stdout.split()[-3:]
    ok = cuda == "True" and int(gpus) > 0
    return {"available": ok, "python": python, "where": where, "version": version,
            "built_with_cuda": cuda == "True", "gpus": int(gpus),
            "reason": None if ok else f"TensorFlow {version} sees no GPU "
                                      f"(built with CUDA: {cuda})"}


STEPS = {"nvml": step_nvml, "sampler": step_sampler, "profile": step_profile,
         "readout": step_readout, "tui-pilot": step_tui_pilot, "tui-tmux": step_tui_tmux,
         "tensorflow": step_tensorflow}


def main() -> int:
    name, result, rest = sys.argv[1], Path(sys.argv[2]), sys.argv[3:]
    data = STEPS[name](rest)
    result.write_text(json.dumps(data, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
