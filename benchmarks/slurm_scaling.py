"""The same data-parallel campaign on the local executor and through a real Slurm, side by side.

fcn-r at a fixed global batch as ``cpus:1`` and ``cpus:2`` (torchrun's gloo ranks),
run once with ``executor = "local"`` and once with ``executor = "slurm"`` (each run
one sbatch job on a single-node Slurm that this script brings up on 127.0.0.1:
munged, slurmctld and slurmd from Debian's slurm-wlm and munge, as tests/slurm
does). The two campaigns alternate for ``--rounds`` rounds, so the machine's noise
falls on both; then it prints both scaling tables (dltop's own export) and, per
device, the ratio of the Slurm run's median s/iter to the local one's with the
per-round spread, plus the start overhead Slurm adds (run start -> first
iteration, as the engine stores it).

    .venv/bin/python benchmarks/slurm_scaling.py [--batch 1024] [--rounds 3] [--iterations 15]
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.slurm import cluster

PROFILE = """
name = "scaling-{executor}"
[[matrix]]
frameworks = ["torch"]
models = ["fcn-r"]
batch_sizes = [{batch}]
devices = ["cpus:1", "cpus:2"]
executor = "{executor}"
iterations = {iterations}
warmup = 5
timeout_s = 1800
"""


def run_campaign(tmp: Path, db: Path, executor: str, args: argparse.Namespace,
                 env: dict[str, str]) -> None:
    prof = tmp / f"{executor}.toml"
    prof.write_text(PROFILE.format(executor=executor, batch=args.batch,
                                   iterations=args.iterations))
    subprocess.run([sys.executable, "-m", "dltop", "run", str(prof), "--db", str(db),
                    "--headless"], env=env, check=True, stdout=subprocess.DEVNULL)


def medians(db: Path) -> dict[tuple[str, str], list[tuple[float, float]]]:
    """(executor campaign, device) -> [(median s/iter, start -> first iteration s)] per run."""
    conn = sqlite3.connect(db)
    rows = conn.execute(
        "select c.name, j.device, r.median_s, "
        "(select min(i.t_wall_s) from iterations i where i.run_id = r.id) "
        "  - strftime('%s', r.started_at) "
        "from runs r join jobs j on j.id = r.job_id join campaigns c on c.id = r.campaign_id "
        "where r.status = 'ok' order by r.id").fetchall()
    conn.close()
    out: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for name, device, med, start in rows:
        out.setdefault((name, device), []).append((med, start))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=15)
    args = ap.parse_args()
    missing = cluster.missing_daemons()
    if missing:
        print(f"needs {', '.join(missing)}: {cluster.INSTALL_HINT}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        slurm = cluster.start(tmp / "slurm")
        try:
            db = tmp / "b.db"
            for _ in range(args.rounds):
                for executor in ("local", "slurm"):
                    run_campaign(tmp, db, executor, args, slurm.env)
            for executor in ("local", "slurm"):
                table = subprocess.run(
                    [sys.executable, "-m", "dltop", "export", "--db", str(db), "--campaign",
                     "all", "--table", "scaling", "--format", "md"],
                    env=slurm.env, capture_output=True, text=True, check=True).stdout \
                    if executor == "local" else ""
                if table:
                    print(table)
            got = medians(db)
        finally:
            slurm.stop()
    print("per device: Slurm / local median s/iter (per-round medians), start -> first "
          "iteration (median s)")
    for device in ("cpus:1", "cpus:2"):
        loc = got.get(("scaling-local", device), [])
        slu = got.get(("scaling-slurm", device), [])
        if not loc or not slu:
            print(f"{device}: missing runs (local {len(loc)}, slurm {len(slu)})")
            continue
        lm = statistics.median(m for m, _ in loc)
        sm = statistics.median(m for m, _ in slu)
        print(f"{device}: local {lm:.4f} s/iter {[round(m, 4) for m, _ in loc]}, slurm "
              f"{sm:.4f} {[round(m, 4) for m, _ in slu]}; ratio {sm / lm:.3f}; start "
              f"local {statistics.median(s for _, s in loc):.1f} s, slurm "
              f"{statistics.median(s for _, s in slu):.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
