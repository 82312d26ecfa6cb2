#!/usr/bin/env bash
# Download into .whl/ the wheels dltop needs on the lent GPU machine beyond what it has.
#
# Run here, on a machine with a package registry, from the repository root, with the
# development venv (its installed versions are the ones the tests passed with):
#
#     scripts/gpu_wheels.sh            # PYTHON=.venv/bin/python by default
#
# The GPU machine (docs/gpu.md) has Python 3.12 with torch (CUDA), JAX, nvidia-ml-py,
# psutil, rich, aiohttp, jinja2, click... but no textual, sqlite-utils and their needs.
# This resolves dltop's runtime dependencies (pyproject.toml) transitively over the
# venv's installed distributions, pins each at the version installed here, drops the
# ones the machine already has (its list in .library/device/KINDS.md, copied below),
# and fetches the rest as cp312 manylinux x86_64 (or pure-Python) wheels, one version
# of each. vl-convert-python (`dltop report` only, ~30 MB) is left out unless
# WITH_REPORT=1; transformers[serving] (gpu_check.sh --steps serve, ~16 MB) is carried
# unless WITH_SERVE=0. The wheels travel with the device tool's `carry: [".whl"]` and
# scripts/gpu_check.sh installs them with pip --no-index --no-deps --target.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
DEST=.whl
mkdir -p "$DEST"
grep -qx '/.whl/' .gitignore 2>/dev/null || echo '/.whl/' >> .gitignore

# Text-rendering packages the machine has too, carried anyway at the tested version:
# textual 8 needs rich >= 14.2 and pygments >= 2.19.2, mdit-py-plugins markdown-it-py
# >= 3 (a few hundred KiB against a failed TUI step).
pins=$("$PY" - "${WITH_REPORT:-0}" "${WITH_SERVE:-1}" <<'EOF'
import importlib.metadata as md
import re
import sys
import tomllib

from packaging.requirements import Requirement

MACHINE = set("""absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc
anyio attrs botorch build certifi charset-normalizer chex click cloudpickle cmake colorama
contourpy coverage cuda-bindings cuda-core cuda-pathfinder cuda-toolkit cupy-cuda13x cycler
cython diffrax e3nn einops equinox etils execnet filelock flatbuffers flax fonttools
formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub
humanize hypothesis idna imageio iniconfig interface-meta jax jax-cuda13-pjrt
jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver lazy-loader lightning
lightning-utilities linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe
matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch
mypy-extensions nanobind narwhals networkx ninja numba numba-cuda numpy numpyro
nvidia-ml-py onnx onnx-ir onnxruntime onnxscript opencv-python-headless optax opt-einsum
opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec patsy peft pillow pip
pluggy portalocker prometheus-client propcache protobuf psutil pyarrow pybind11
py-cpuinfo pygments pyparsing pyproject-hooks pyre-extensions pytest pytest-benchmark
pytest-cov pytest-mock pytest-timeout pytest-xdist python-dateutil pytorch-lightning pyyaml
regex requests rich sacrebleu safetensors scikit-build-core scikit-image scikit-learn scipy
seaborn sentencepiece sentence-transformers setuptools shellingham simplejson six
sortedcontainers statsmodels sympy tabulate tensorboard tensorboard-data-server tensorstore
threadpoolctl tifffile tiktoken timm tokenizers toolz torch torchaudio torchdiffeq
torch-geometric torchmetrics torchvision tqdm transformers treescope triton typer
typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray
xxhash yarl zipp""".split())
CARRY_ANYWAY = {"rich", "pygments", "markdown-it-py", "mdurl"}
# gpu_check.sh --steps serve (issue 41): `transformers serve` at the version tested here
# (the machine's transformers is another, 5.17 in 2026-11), with its serving extra's needs
# the machine lacks (fastapi, uvicorn, openai, pydantic...). WITH_SERVE=0 leaves it out.
SERVE = ["transformers[serving]"] if sys.argv[2] == "1" else []
if SERVE:
    CARRY_ANYWAY.add("transformers")
ENV = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
       "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
       "implementation_name": "cpython", "platform_python_implementation": "CPython"}


def canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


with open("pyproject.toml", "rb") as f:
    roots = tomllib.load(f)["project"]["dependencies"] + SERVE
if sys.argv[1] != "1":
    roots = [r for r in roots if canon(Requirement(r).name) != "vl-convert-python"]
seen: dict[str, tuple[str, set[str]]] = {}
todo = [Requirement(r) for r in roots]
while todo:
    req = todo.pop()
    key = canon(req.name)
    old = seen.get(key, ("", set()))[1]
    if key in seen and set(req.extras) <= old:
        continue
    extras = old | set(req.extras)
    try:
        dist = md.distribution(req.name)
    except md.PackageNotFoundError:
        sys.exit(f"gpu_wheels: {req.name} is not installed in {sys.executable}; "
                 "install dltop's dependencies there first")
    seen[key] = (dist.version, extras)
    if key in MACHINE and key not in CARRY_ANYWAY:
        continue  # the machine's own copy and its needs serve
    for text in dist.requires or []:
        dep = Requirement(text)
        if dep.marker is not None and not any(
                dep.marker.evaluate({**ENV, "extra": e}) for e in (extras or {""})):
            continue
        todo.append(dep)
for key, (version, _) in sorted(seen.items()):
    if key not in MACHINE or key in CARRY_ANYWAY:
        print(f"{key}=={version}")
EOF
)
echo "gpu_wheels: $(echo "$pins" | wc -l) wheels: $(echo $pins)"
rm -f "$DEST"/*.whl
# shellcheck disable=SC2086
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux1_x86_64 -d "$DEST" $pins
n_pins=$(echo "$pins" | wc -l)
n_whl=$(ls "$DEST"/*.whl | wc -l)
dupes=$(ls "$DEST"/*.whl | sed 's#.*/##; s/-.*//' | tr 'A-Z' 'a-z' | tr '_.' '--' | sort | uniq -d)
if [ "$n_whl" -ne "$n_pins" ] || [ -n "$dupes" ]; then
    echo "gpu_wheels: expected $n_pins wheels, got $n_whl (duplicates: ${dupes:-none})" >&2
    exit 1
fi
bytes=$(cat "$DEST"/*.whl | wc -c)
echo "gpu_wheels: $n_whl wheels in $DEST/, $((bytes / 1024)) KiB in all"
if [ "$bytes" -gt $((48 * 1024 * 1024)) ]; then
    echo "gpu_wheels: over 48 MiB: the device tool carries 64 MiB with the tree" >&2
    exit 1
fi
