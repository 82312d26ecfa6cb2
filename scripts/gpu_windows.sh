#!/usr/bin/env bash
# Issue 30's windows on a real GPU, in about a minute (docs/gpu.md, "Windows"):
#     scripts/gpu_windows.sh OUTDIR
# Runs scripts/gpu_windows.toml with dltop from this tree (wheels of .whl/ installed
# into a target folder, as scripts/gpu_check.sh does) and writes to OUTDIR the run
# log, `export --metric energy` and `--metric power`, the summary, and runs.json: each
# run's window, readings, energy (counter, interpolated at the edges) with its bound,
# power x window (the integrated cross-check), the kernel's and the framework's peaks.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: scripts/gpu_windows.sh OUTDIR}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
T=$(mktemp -d)
"$PY" -m pip install -q --no-index --no-deps --target "$T" .whl/*.whl > "$OUT/pip.txt" 2>&1
export PYTHONPATH="$PWD/src:$T"
DB="$OUT/windows.db"
"$PY" -m dltop run scripts/gpu_windows.toml --db "$DB" --headless > "$OUT/run.txt" 2>&1
echo "run exit $?" >> "$OUT/run.txt"
for m in energy power; do
    "$PY" -m dltop export --db "$DB" --metric "$m" --format md > "$OUT/$m.md" 2>&1
done
"$PY" -m dltop export --db "$DB" --table summary --format md > "$OUT/summary.md" 2>&1
"$PY" - "$DB" > "$OUT/runs.json" <<'PYEOF'
import json, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.row_factory = sqlite3.Row
cols = ("id", "status", "n_iterations", "window_s", "gpu_readings", "host_readings",
        "power_mean_w", "energy_j", "energy_bound_j", "energy_source", "joules_per_sample",
        "rss_peak_bytes", "rss_peak_kernel_bytes", "gpu_mem_peak_bytes",
        "gpu_mem_framework_peak_bytes", "samples_per_s", "note", "telemetry_note")
rows = []
for r in db.execute("select r.*, j.model from runs r join jobs j on j.id = r.job_id"):
    d = {c: r[c] for c in cols if c in r.keys()}
    d["model"] = r["model"]
    if r["power_mean_w"] and r["window_s"] and r["energy_j"]:
        d["power_x_window_j"] = r["power_mean_w"] * r["window_s"]
        d["counter_over_power"] = r["energy_j"] / d["power_x_window_j"]
    rows.append(d)
print(json.dumps(rows, indent=1))
PYEOF
# one self-contained file, ready to commit under docs/gpu-runs/ (no -wal/-shm)
"$PY" -c 'import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute("PRAGMA wal_checkpoint(TRUNCATE)"); c.execute("PRAGMA journal_mode=DELETE"); c.close()' "$DB"
rm -rf "$T"
