"""Prove dltop's GPU paths on a real NVIDIA GPU in one go (scripts/gpu_check.sh; docs/gpu.md).

    python scripts/gpu_check.py OUTDIR [--no-gpu] [--budget-s 560]

Runs each step in its own process under its own time limit, within one overall
budget; a step that fails, times out or has no time left is recorded with its
error or reason and the check goes on. After every step it rewrites
OUTDIR/report.md and the JSON files (at most 8 files, what the device tool
returns), so a check cut short still leaves what it measured.

Without an NVIDIA GPU (no NVML), or with ``--no-gpu``, it checks its own
plumbing: one simulated GPU (``--fake-gpus 1``) for doctor, devices, the sampler
and the viewer, a tiny CPU campaign instead of the GPU one, the GPU profile only
validated, and the CUDA steps reported as skipped with the reason.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import gpu_check_report as report
import gpu_check_serve
from gpu_check_base import (
    CPU_LLM_PROFILE,
    CPU_PROFILE,
    TF_PROFILE,
    Proc,
    Step,
    StepTimeout,
    call,
    tail,
)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
STEPS_PY = HERE / "gpu_check_steps.py"
PROFILE = HERE / "gpu_check_profile.toml"
LLM_PROFILE = HERE / "gpu_check_llm.toml"
STEP_NAMES = ("env", "doctor", "devices", "nvml", "sampler", "profile", "llm", "campaign",
              "export", "tui", "harness", "harness-llm", "tensorflow", "serve")
"""Every step, in the order the check runs them (``--steps`` picks some)."""
DEFAULT_STEPS = STEP_NAMES[:-1]
"""The steps run without ``--steps``: all but ``serve`` (issue 41's servers, ~5 minutes
on a GPU, a device call of its own: docs/gpu.md)."""
RESERVE_S = 10.0
"""Budget kept back for the last report write."""

class Check:
    """The whole check: steps in order, results in ``self.data``, files in ``out``."""

    def __init__(self, out: Path, work: Path, budget_s: float, gpu: bool, why: str,
                 only: tuple[str, ...] = DEFAULT_STEPS, harness_rounds: int = 2) -> None:
        self.out, self.work, self.gpu, self.only = out, work, gpu, only
        self.harness_rounds = harness_rounds
        self.deadline = time.monotonic() + budget_s
        self.t0 = time.time()
        self.fake = "0" if gpu else "1"
        self.db = work / "check.db"
        self.steps: list[Step] = []
        self.data: dict[str, Any] = {
            "mode": "gpu" if gpu else "no-gpu", "mode_reason": why,
            "started_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
            "budget_s": budget_s}

    # running -------------------------------------------------------------------------
    def left(self) -> float:
        return self.deadline - time.monotonic() - RESERVE_S

    def dltop(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "dltop", *args]

    def fake_args(self) -> list[str]:
        return [] if self.gpu else ["--fake-gpus", "1"]

    def step(self, name: str, fn: Any, limit_s: float, min_s: float = 5.0,
             skip: str | None = None) -> None:
        """Run ``fn(limit) -> note`` unless skipped; record how it went, rewrite files."""
        t = time.monotonic()
        limit = min(limit_s, self.left())
        if name not in self.only:
            skip = f"not selected (--steps {','.join(self.only)})"
        if skip is not None:
            rec = Step(name, "skipped", 0.0, skip)
        elif limit < min_s:
            rec = Step(name, "skipped", 0.0, f"out of time budget ({self.left():.0f} s left)")
        else:
            print(f"gpu_check: {name} (up to {limit:.0f} s)", flush=True)
            try:
                rec = Step(name, "ok", 0.0, fn(limit) or "")
            except StepTimeout as exc:
                rec = Step(name, "timeout", 0.0, f"stopped after {limit:.0f} s", str(exc))
            except Exception as exc:
                first = (str(exc).strip().splitlines() or [""])[0][:150]
                rec = Step(name, "failed", 0.0, f"{type(exc).__name__}: {first}",
                           str(exc)[-3000:])
        rec.seconds = round(time.monotonic() - t, 1)
        self.steps.append(rec)
        print(f"gpu_check: {name}: {rec.status} {rec.seconds:.1f} s {rec.note}", flush=True)
        self.write()

    def run(self, argv: list[str], limit: float, ok_codes: tuple[int, ...] = (0,)) -> Proc:
        res = call(argv, limit, cwd=ROOT)
        if res.timed_out:
            raise StepTimeout(tail(res.out + "\n" + res.err))
        if res.rc not in ok_codes:
            raise RuntimeError(f"exit {res.rc}: {tail(res.err or res.out)}")
        return res

    def internal(self, name: str, limit: float, *args: str) -> dict[str, Any]:
        result = self.work / f"{name}.json"
        result.unlink(missing_ok=True)
        self.run([sys.executable, str(STEPS_PY), name, str(result), *args], limit)
        data: dict[str, Any] = json.loads(result.read_text())
        return data

    # steps ---------------------------------------------------------------------------
    def s_env(self, limit: float) -> str:
        code = ("import json, torch; c = torch.cuda.is_available(); print(json.dumps({"
                "'torch': torch.__version__, 'cuda': torch.version.cuda, 'cuda_available': c,"
                " 'device': torch.cuda.get_device_name(0) if c else None,"
                " 'capability': list(torch.cuda.get_device_capability(0)) if c else None}))")
        env: dict[str, Any] = {"python": sys.version.split()[0], "executable": sys.executable}
        res = call([sys.executable, "-c", code], limit - 15)  # a cold CUDA start is slow
        env["torch"] = (json.loads(res.out.strip().splitlines()[-1]) if res.rc == 0
                        else {"error": tail(res.err, 3)})
        if shutil.which("nvidia-smi"):
            smi = call(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,"
                        "power.limit,clocks.max.sm,pcie.link.gen.max,pcie.link.width.max",
                        "--format=csv"], 10)
            env["nvidia_smi"] = smi.out.strip() or tail(smi.err, 3)
        # The device tool sends the working tree without .git: the caller names the commit.
        git = (call(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], 5)
               if shutil.which("git") else None)
        env["commit"] = (os.environ.get("DLTOP_CHECK_COMMIT") or (
            git.out.strip() if git is not None and git.rc == 0 else "unknown (no git here)"))
        env["cpus"] = os.cpu_count()
        self.data["env"] = env
        return str(env["torch"].get("device") or "no CUDA device")

    def s_doctor(self, limit: float) -> str:
        res = self.run(self.dltop("doctor", *self.fake_args()), limit, ok_codes=(0, 1))
        self.data["doctor"] = res.out
        return f"exit {res.rc}"

    def s_devices(self, limit: float) -> str:
        res = self.run(self.dltop("devices", "--json", *self.fake_args()), limit)
        self.data["devices"] = json.loads(res.out)
        return ""

    def s_nvml(self, limit: float) -> str:
        self.data["nvml"] = self.internal("nvml", limit, "1000")
        if "skipped" in self.data["nvml"]:
            raise RuntimeError(self.data["nvml"]["skipped"])
        return f"{len(self.data['nvml']['queries'])} queries"

    def s_sampler(self, limit: float) -> str:
        self.data["sampler"] = self.internal("sampler", limit, self.fake,
                                             "3" if self.gpu else "1")
        return f"fastest sustained {self.data['sampler']['fastest_sustained_hz']} Hz"

    def s_profile(self, limit: float) -> str:
        self.data["profile"] = self.internal("profile", limit, str(PROFILE),
                                             str(self.work / "gpu.toml"))
        dropped = self.data["profile"]["dropped_keys"]
        return f"{self.data['profile']['jobs']} jobs" + (
            f"; dropped unknown keys: {', '.join(dropped)}" if dropped else "")

    def s_campaign(self, limit: float) -> str:
        if self.gpu:
            prof = self.work / "gpu.toml"
            if not prof.exists():
                raise RuntimeError("no loadable GPU profile (the profile step failed)")
        else:
            prof = self.work / "cpu.toml"
            prof.write_text(CPU_PROFILE)
        return self._run_campaign(prof, limit, "campaign_log", "runs",
                                  lambda r: r["model"] not in report.LLM_MODELS)

    def s_llm(self, limit: float) -> str:
        """The transformer campaign (scripts/gpu_check_llm.toml) into the same database."""
        if self.gpu:
            prof = LLM_PROFILE
        else:
            prof = self.work / "llm-cpu.toml"
            prof.write_text(CPU_LLM_PROFILE)
        return self._run_campaign(prof, limit, "llm_log", "transformer runs",
                                  lambda r: r["model"] in report.LLM_MODELS)

    def _run_campaign(self, prof: Path, limit: float, log_key: str, what: str,
                      mine: Any) -> str:
        """``dltop run`` of ``prof`` into the check's database; its runs (``mine``) read
        back into ``campaign`` even when the campaign was stopped."""
        try:
            res = call(self.dltop("run", str(prof), "--db", str(self.db), "--headless",
                                  "--skip-unavailable", *self.fake_args()), limit - 20, ROOT)
            self.data[log_key] = tail(res.out + "\n" + res.err, 40)
        finally:  # what finished is read even when the campaign was stopped
            if self.db.exists():
                self.data["campaign"] = self.internal("readout", 20, str(self.db))
        runs = [r for r in self.data.get("campaign", {}).get("runs", []) if mine(r)]
        ok = sum(r["status"] == "ok" for r in runs)
        if res.timed_out:
            raise StepTimeout(f"{ok} of {len(runs)} {what} ok when stopped")
        if res.rc != 0:
            raise RuntimeError(f"dltop run exit {res.rc}: {tail(res.err or res.out)}")
        if not ok:
            raise RuntimeError(f"none of {len(runs)} {what} ended ok (the campaign table "
                               "says why)")
        return f"{ok} of {len(runs)} {what} ok"

    def s_export(self, limit: float) -> str:
        if not self.db.exists():
            raise RuntimeError("no campaign database")
        base = self.dltop("export", "--db", str(self.db), "--campaign", "all",
                          "--table", "summary")
        self.data["export_json"] = json.loads(self.run([*base, "--format", "json"],
                                                       limit / 2).out)
        self.data["export_md"] = self.run([*base, "--format", "md"], limit / 2).out
        return f"{len(self.data['export_json'].get('rows', []))} rows"

    def harness_rounds_read(self, name: str) -> list[dict[str, Any]]:
        """The per-round medians harness_overhead.py wrote (--rounds-out), for
        telemetry.json: the raw figures behind each ratio and interval ([] if none)."""
        try:
            got = json.loads((self.work / name).read_text())
        except (OSError, ValueError):
            return []
        return got if isinstance(got, list) else []

    def s_harness(self, limit: float) -> str:
        # Keep time for the TensorFlow check after it; rows print as each case ends, so a
        # harness stopped at its limit still gives the cases it finished.
        limit = min(limit, self.left() - 25)
        res = call([sys.executable, str(ROOT / "benchmarks" / "harness_overhead.py"),
                    "--device", "gpu", "--frameworks", "torch",
                    "--rounds", str(self.harness_rounds), "--iterations", "20", "--warmup", "5",
                    "--cases", "resnet-50:64,alexnet-r:1024",
                    "--rounds-out", str(self.work / "harness-rounds.json")], limit, ROOT)
        rows = report.parse_harness(res.out)
        self.data["harness"] = {"rows": rows, "output": tail(res.out + "\n" + res.err, 20),
                                "rounds": self.harness_rounds_read("harness-rounds.json")}
        if res.timed_out:
            raise StepTimeout(f"{len(rows)} of 2 cases done")
        if res.rc != 0 or not rows:
            raise RuntimeError(f"exit {res.rc}: {tail(res.err or res.out)}")
        return f"worst ratio {max(r['ratio'] for r in rows):.3f}"

    def s_harness_llm(self, limit: float) -> str:
        limit = min(limit, self.left() - 25)
        res = call([sys.executable, str(ROOT / "benchmarks" / "harness_overhead.py"),
                    "--device", "gpu", "--frameworks", "torch", "--rounds", "2",
                    "--iterations", "20", "--warmup", "5", "--precision", "bf16",
                    "--cases", "gpt2-small:16",
                    "--rounds-out", str(self.work / "harness-llm-rounds.json")],
                   limit, ROOT)
        rows = report.parse_harness(res.out)
        h = self.data.setdefault("harness", {"rows": [], "output": ""})
        h["rows"] = [*h["rows"], *rows]
        h["rounds"] = [*h.get("rounds", []), *self.harness_rounds_read("harness-llm-rounds.json")]
        h["output_llm"] = tail(res.out + "\n" + res.err, 20)
        if res.timed_out:
            raise StepTimeout("gpt2-small case not done")
        if res.rc != 0 or not rows:
            raise RuntimeError(f"exit {res.rc}: {tail(res.err or res.out)}")
        # The decode loop's own overhead: lm_loop's timing against a bare loop of the same
        # decode calls, gpt2-small at batch 1 (eager, CUDA graph, reduce-overhead).
        dec = call([sys.executable, str(ROOT / "benchmarks" / "torch_lm_gpu.py"), "--quick",
                    "--only", "generate"], max(10.0, self.left() - 15), ROOT)
        self.data["decode"] = [json.loads(x) for x in dec.out.splitlines()
                               if x.startswith("{")]
        worst = max((c.get("overhead", 0.0) for c in self.data["decode"]), default=None)
        return (f"ratio {rows[0]['ratio']:.3f}; decode overhead worst "
                f"{'n/a' if worst is None else f'{100 * worst:.2f} %'}")

    def s_tui(self, limit: float) -> str:
        for name in ("tui.txt", "tui.svg"):
            (self.out / name).unlink(missing_ok=True)
        why = "no tmux here"
        if shutil.which("tmux"):
            txt = self.out / "tui.txt"
            try:
                got = self.internal("tui-tmux", limit / 2, str(self.db), self.fake, str(txt))
                self.data["tui"] = {"how": "tmux capture-pane", "file": txt.name,
                                    "text": got["text"]}
                return "tmux capture"
            except Exception as exc:  # the pilot still shows the viewer
                why = f"tmux failed: {str(exc).strip().splitlines()[-1][:200]}"
                txt.unlink(missing_ok=True)
        svg = self.out / "tui.svg"
        self.internal("tui-pilot", limit / 2, str(self.db), self.fake, str(svg))
        self.data["tui"] = {"how": f"Textual pilot ({why})", "file": svg.name}
        return f"pilot capture ({why})"

    def s_tensorflow(self, limit: float) -> str:
        tf = self.data["tensorflow"] = self.internal("tensorflow", min(limit, 170.0))
        if not tf["available"]:
            return f"not available on this machine: {tf['reason']}"
        prof = self.work / "tf.toml"
        prof.write_text(TF_PROFILE)
        res = call(self.dltop("run", str(prof), "--db", str(self.db), "--headless"),
                   self.left() - 5, ROOT)
        tf["campaign_log"] = tail(res.out + "\n" + res.err, 20)
        self.data["campaign"] = self.internal("readout", 20, str(self.db))
        if res.timed_out or res.rc != 0:
            raise RuntimeError(f"TensorFlow campaign: exit {res.rc}: {tail(res.err)}")
        if self.left() > 20:
            self.s_export(min(self.left(), 60.0))  # the summary with the TensorFlow rows
        return "TensorFlow runs in campaign.json and summary.json"

    def s_serve(self, limit: float) -> str:
        """Issue 41's servers: ``transformers serve`` beside dltop's own ``generate``."""
        return gpu_check_serve.run_step(self, limit)

    # all -----------------------------------------------------------------------------
    def no_cuda(self) -> str | None:
        """Why the bare CUDA loop cannot run (torch sees no CUDA device), else None."""
        torch = self.data.get("env", {}).get("torch", {})
        if torch.get("cuda_available") is not False:
            return None  # available, or the env step could not tell: try
        return f"torch {torch.get('torch')} sees no CUDA device"

    def run_all(self) -> None:
        nogpu = None if self.gpu else f"no GPU: {self.data['mode_reason']}"
        self.step("env", self.s_env, 75)
        self.step("doctor", self.s_doctor, 90)
        self.step("devices", self.s_devices, 60)
        self.step("nvml", self.s_nvml, 90, skip=nogpu)
        self.step("sampler", self.s_sampler, 60)
        self.step("profile", self.s_profile, 60)
        self.step("llm", self.s_llm, 300 if self.gpu else 150, min_s=60)
        # 21 runs with 2 s windows took ~17.5 s each on an H100 (process start, cuDNN
        # autotuning, XLA compiles): 300 s stopped the campaign after 16.
        self.step("campaign", self.s_campaign, 420 if self.gpu else 150, min_s=60)
        self.step("export", self.s_export, 60)
        self.step("tui", self.s_tui, 45, min_s=15)
        # A round of both cases took ~44 s on the H200 (four fresh CUDA processes).
        self.step("harness", self.s_harness, max(200, 50 * self.harness_rounds),
                  min_s=60, skip=nogpu or self.no_cuda())
        self.step("harness-llm", self.s_harness_llm, 150, min_s=50,
                  skip=nogpu or self.no_cuda())
        self.step("tensorflow", self.s_tensorflow, 200, min_s=20, skip=nogpu)
        self.step("serve", self.s_serve, 480 if self.gpu else 300, min_s=60)

    def write(self) -> None:
        """report.md and the JSON files (8 files at most, the device tool's limit)."""
        self.data["seconds"] = round(time.time() - self.t0, 1)
        self.data["steps"] = [asdict(s) for s in self.steps]
        report.write_files(self.out, self.data)

    def copy_db(self) -> None:
        report.copy_db(self.db, self.out / "campaign.db")


def detect_gpu() -> tuple[bool, str]:
    from dltop.telemetry import nvml

    n = nvml.device_count()
    if n:
        return True, f"{n} GPU(s) seen by NVML"
    return False, nvml.unavailable_reason() or "NVML sees no GPU"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outdir", type=Path)
    ap.add_argument("--no-gpu", action="store_true",
                    help="check the plumbing only, even where a GPU is present")
    ap.add_argument("--budget-s", type=float, default=560.0,
                    help="overall time budget in seconds (560: the device tool allows 600 "
                         "a command)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("--steps", default=",".join(DEFAULT_STEPS),
                    help="the steps to run, comma-separated (default: "
                         + ", ".join(DEFAULT_STEPS) + "; known: " + ", ".join(STEP_NAMES)
                         + "); the others are recorded as skipped")
    ap.add_argument("--harness-rounds", type=int, default=2,
                    help="alternating rounds of the harness step (2; more for an interval "
                         "narrow enough to hold the 1.01 goal)")
    args = ap.parse_args()
    only = tuple(x.strip() for x in args.steps.split(",") if x.strip())
    unknown = [x for x in only if x not in STEP_NAMES]
    if unknown:
        ap.error(f"--steps: unknown step(s) {', '.join(unknown)} "
                 f"(known: {', '.join(STEP_NAMES)})")
    args.outdir.mkdir(parents=True, exist_ok=True)
    gpu, why = (False, "--no-gpu given") if args.no_gpu else detect_gpu()
    work = Path(tempfile.mkdtemp(prefix="dltop-gpucheck-"))
    check = Check(args.outdir, work, args.budget_s, gpu, why, only, args.harness_rounds)
    print(f"gpu_check: mode {check.data['mode']} ({why}); work dir {work}", flush=True)
    try:
        check.run_all()
    finally:
        check.write()
        check.copy_db()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"gpu_check: done in {check.data['seconds']:.0f} s; report {args.outdir}/report.md",
          flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
