#!/usr/bin/env bash
# One command that proves dltop's GPU paths on a real NVIDIA GPU (docs/gpu.md):
#
#     scripts/gpu_check.sh OUTDIR [--no-gpu] [--budget-s 560]
#
# Installs the wheels of .whl/ (scripts/gpu_wheels.sh fetched them on a machine with a
# registry) into a target folder with pip --no-index --no-deps, runs dltop from this
# working tree (src/ on PYTHONPATH, nothing installed), and writes OUTDIR/report.md with
# the raw JSON beside it (8 files at most). Without a GPU it checks its own plumbing.
# PYTHON picks the interpreter (default python3: on the GPU machine, the one with torch);
# DLTOP_SITE the wheels' target folder (default /tmp/dltop-site).
set -u
cd "$(dirname "$0")/.."
if [ $# -lt 1 ]; then
    echo "usage: scripts/gpu_check.sh OUTDIR [--no-gpu] [--budget-s SECONDS]" >&2
    exit 2
fi
PY=${PYTHON:-python3}
SITE=${DLTOP_SITE:-/tmp/dltop-site}
path="$PWD/src"
if compgen -G ".whl/*.whl" > /dev/null; then
    echo "gpu_check: installing $(ls .whl/*.whl | wc -l) wheels into $SITE"
    if "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target "$SITE" .whl/*.whl; then
        path="$path:$SITE"
    else
        echo "gpu_check: installing the wheels failed; going on with what is importable" >&2
    fi
fi
export PYTHONPATH="$path${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
exec "$PY" scripts/gpu_check.py "$@"
