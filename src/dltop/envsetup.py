"""Build framework environments that cannot live in dltop's own interpreter.

CNTK 2.7 (the last release) ships wheels for Python <= 3.7 only, and its
shared libraries link against Open MPI 1.10's sonames ``libmpi.so.12`` and
``libmpi_cxx.so.1``. :func:`setup_cntk` builds, idempotently, a private
environment under one prefix:

- ``venv/``: a Python 3.6 (or 3.7) virtual environment with the pinned
  packages of :data:`CNTK_REQUIREMENTS`;
- ``lib/``: symlinks ``libmpi.so.12`` and ``libmpi_cxx.so.1`` to Debian's
  Open MPI 4 libraries (package ``libopenmpi3``; ``openmpi-bin`` provides
  ``mpiexec`` for data-parallel runs), put on ``LD_LIBRARY_PATH``;
- ``env.json``: the interpreter, the ``LD_LIBRARY_PATH`` value and the CNTK
  version, read back by :func:`load_cntk_env`.

(A plain ``import cntk`` runs ``ldconfig -N -v`` over ``LD_LIBRARY_PATH`` to
look for optional libraries, which adds ``libmpi*.so.40`` links to ``lib/``;
they point at the same files. dltop's runner skips that check.)

Headless: standard library only. Run by hand as
``python -m dltop.envsetup cntk [--prefix DIR] [--python PATH]``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from dltop.errors import DltopError, SetupError, UserError
from dltop.paths import data_dir, library_path_with
from dltop.pyexec import ask_python

Log = Callable[[str], object]

DEFAULT_PY36 = "/root/.pyenv/versions/3.6.15/bin/python3.6"
#: Versions pip resolved for cntk 2.7.post2 on Python 3.6 (the last cp36 releases).
CNTK_REQUIREMENTS = ("cntk==2.7.post2", "numpy==1.19.5", "scipy==1.5.4")
#: How ``pip freeze`` lists them once installed (the cntk wheel calls itself 2.7).
_FROZEN = ("cntk==2.7", "numpy==1.19.5", "scipy==1.5.4")
APT_PACKAGES = ("libopenmpi3", "openmpi-bin")
#: Soname CNTK needs -> soname Debian's libopenmpi3 (Open MPI 4.x) provides.
MPI_SONAMES = {"libmpi.so.12": "libmpi.so.40", "libmpi_cxx.so.1": "libmpi_cxx.so.40"}
_PYTHON_OK = ((3, 6), (3, 7))


@dataclass(frozen=True)
class CntkEnv:
    """A built CNTK environment: how to start its interpreter."""

    python: str
    ld_library_path: str
    cntk_version: str

    def child_env(self, base: Mapping[str, str]) -> dict[str, str]:
        """``base`` with this environment's library directory first on ``LD_LIBRARY_PATH``."""
        return {**base, "LD_LIBRARY_PATH": library_path_with(self.ld_library_path, base)}


def default_prefix() -> Path:
    """``$DLTOP_CNTK_ENV``, else ``$XDG_DATA_HOME/dltop/envs/cntk`` (``~/.local/share``)."""
    explicit = os.environ.get("DLTOP_CNTK_ENV")
    if explicit:
        return Path(explicit).expanduser()
    return data_dir() / "envs" / "cntk"


def load_cntk_env(prefix: Path) -> CntkEnv | None:
    """The environment recorded in ``prefix/env.json``, or None when absent or unusable.

    Args:
        prefix: the directory :func:`setup_cntk` built.

    Returns:
        The recorded environment; None when ``env.json`` is missing, malformed,
        or names an interpreter that no longer exists.
    """
    try:
        data = json.loads((Path(prefix) / "env.json").read_text())
        env = CntkEnv(str(data["python"]), str(data["ld_library_path"]),
                      str(data["cntk_version"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return env if os.access(env.python, os.X_OK) else None


def _run(cmd: Sequence[str], what: str, env: Mapping[str, str] | None = None,
         check: bool = True) -> subprocess.CompletedProcess[str]:
    try:
        res = subprocess.run(list(cmd), capture_output=True, text=True, env=env)
    except OSError as exc:
        raise SetupError(f"{what}: cannot run {cmd[0]}: {exc}") from None
    if check and res.returncode != 0:
        tail = (res.stdout + res.stderr).strip()[-3000:]
        raise SetupError(f"{what} failed (exit {res.returncode}): {' '.join(cmd)}\n{tail}")
    return res


def _python_version(python: str) -> tuple[int, int] | None:
    if not (os.path.isfile(python) and os.access(python, os.X_OK)):
        return None
    answer = ask_python(python, "import sys; print('%d %d' % sys.version_info[:2])")
    try:
        major, minor = answer.out.split()
        return int(major), int(minor)
    except ValueError:
        return None


def _pyenv_candidates() -> list[str]:
    roots = []
    if shutil.which("pyenv"):
        res = subprocess.run(["pyenv", "root"], capture_output=True, text=True)
        if res.returncode == 0 and res.stdout.strip():
            roots.append(Path(res.stdout.strip()))
    roots.append(Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv"))
    found = []
    for root in dict.fromkeys(roots):
        for minor in ("3.6", "3.7"):
            found += [str(v / "bin" / f"python{minor}")
                      for v in sorted((root / "versions").glob(f"{minor}*"), reverse=True)]
    return found


def find_python36(python36: str | None = None) -> str:
    """An interpreter CNTK 2.7 supports (Python 3.6 or 3.7).

    Args:
        python36: an explicit interpreter; when given, only it is tried.

    Returns:
        The interpreter's path.

    Raises:
        UserError: none was found; the message names every place looked at.
    """
    if python36 is not None:
        if _python_version(python36) in _PYTHON_OK:
            return python36
        raise UserError(f"CNTK 2.7 needs Python 3.6 or 3.7: {python36} is missing, not "
                        "executable, or another version")
    tried = [DEFAULT_PY36, *_pyenv_candidates()]
    tried += [p for p in (shutil.which("python3.6"), shutil.which("python3.7")) if p]
    for cand in dict.fromkeys(tried):
        if _python_version(cand) in _PYTHON_OK:
            return cand
    raise UserError("CNTK 2.7 needs Python 3.6 or 3.7 and none was found; looked for "
                    f"{DEFAULT_PY36}, $(pyenv root)/versions/3.6*|3.7*, and python3.6/"
                    "python3.7 on PATH. Install one (e.g. `pyenv install 3.6.15`) or pass "
                    "--python PATH")


def _pip(venv_python: str, *args: str) -> subprocess.CompletedProcess[str]:
    # The venv's pip 18 crashes when PIP_NO_CACHE_DIR=1 is set: pass it as a flag instead.
    env = dict(os.environ)
    no_cache = env.pop("PIP_NO_CACHE_DIR", "").lower() not in ("", "0", "false", "no", "off")
    if no_cache and args[0] == "install":
        args = ("install", "--no-cache-dir", *args[1:])
    return _run([venv_python, "-m", "pip", *args], f"pip {args[0]}", env=env)


def _ensure_venv(prefix: Path, python: str, log: Log) -> str:
    venv_python = prefix / "venv" / "bin" / "python"
    if _python_version(str(venv_python)) not in _PYTHON_OK:
        log(f"creating virtual environment {prefix / 'venv'} with {python}")
        shutil.rmtree(prefix / "venv", ignore_errors=True)
        _run([python, "-m", "venv", str(prefix / "venv")], "creating the CNTK venv")
    installed = _pip(str(venv_python), "freeze").stdout.split()
    if any(req not in installed for req in _FROZEN):
        log(f"pip install {' '.join(CNTK_REQUIREMENTS)} (about 115 MB)")
        _pip(str(venv_python), "install", "-q", *CNTK_REQUIREMENTS)
    return str(venv_python)


def _system_libs() -> dict[str, str]:
    """soname -> path of the native-architecture libraries the dynamic linker knows."""
    res = _run(["ldconfig", "-p"], "listing shared libraries", check=False)
    if res.returncode != 0:
        res = _run(["/sbin/ldconfig", "-p"], "listing shared libraries", check=False)
    arch = "x86-64" if sys.maxsize > 2**32 else ""
    libs: dict[str, str] = {}
    for line in res.stdout.splitlines():
        m = re.match(r"\s*(\S+) \(([^)]*)\) => (\S+)", line)
        if m and (not arch or arch in m.group(2) or "64" in m.group(2)):
            libs.setdefault(m.group(1), m.group(3))
    return libs


def _ensure_mpi(log: Log) -> dict[str, str]:
    """Open MPI 4 libraries (and mpiexec) present, installed with apt-get when root."""
    libs = _system_libs()
    want = list(MPI_SONAMES.values())
    if all(s in libs for s in want) and shutil.which("mpiexec"):
        return {s: libs[s] for s in want}
    apt = f"apt-get install -y {' '.join(APT_PACKAGES)}"
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise UserError(f"CNTK needs Open MPI ({', '.join(want)} and mpiexec), which are not "
                        f"installed. On Debian/Ubuntu run as root: apt-get update && {apt}")
    log(f"installing Open MPI: {apt}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    lock = ["-o", "DPkg::Lock::Timeout=300"]  # wait for another apt run to finish
    cmd = ["apt-get", *lock, "install", "-y", "--no-install-recommends", *APT_PACKAGES]
    if _run(cmd, apt, env=env, check=False).returncode != 0:
        log("apt-get update (package lists missing or stale)")
        _run(["apt-get", *lock, "update"], "apt-get update", env=env)
        _run(cmd, apt, env=env)
    libs = _system_libs()
    missing = [s for s in want if s not in libs]
    if missing:
        raise SetupError(f"after `{apt}` the dynamic linker still lacks {', '.join(missing)} "
                        "(`ldconfig -p`); this Open MPI build has no C++ bindings")
    return {s: libs[s] for s in want}


def _link_mpi(prefix: Path, real: Mapping[str, str]) -> Path:
    lib = prefix / "lib"
    lib.mkdir(parents=True, exist_ok=True)
    for cntk_name, debian_name in MPI_SONAMES.items():
        link, target = lib / cntk_name, os.path.realpath(real[debian_name])
        if link.is_symlink() and os.readlink(link) == target:
            continue
        tmp = lib / (cntk_name + ".tmp")
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(target)
        tmp.replace(link)
    return lib


def setup_cntk(prefix: Path, python36: str | None = None, log: Log = print) -> CntkEnv:
    """Build (or check and reuse) the CNTK 2.7 environment under ``prefix``.

    Safe to repeat: each step is skipped when its result is already in place.

    Args:
        prefix: directory for ``venv/``, ``lib/`` and ``env.json``.
        python36: the Python 3.6/3.7 interpreter to build the venv from; found
            automatically when None (see :func:`find_python36`).
        log: receives one line per step that does work.

    Returns:
        The verified environment (also written to ``prefix/env.json``).

    Raises:
        UserError: no suitable Python, or Open MPI missing and not installable
            (nothing was built).
        SetupError: a step (venv, pip, apt-get, the import check) failed.
    """
    prefix = Path(prefix).expanduser().absolute()
    python = find_python36(python36)
    try:
        prefix.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create the CNTK environment directory {prefix}: {exc}") from None
    real = _ensure_mpi(log)
    lib = _link_mpi(prefix, real)
    venv_python = _ensure_venv(prefix, python, log)
    env = CntkEnv(venv_python, str(lib), "")
    check = _run([venv_python, "-c", "import cntk; print(cntk.__version__)"],
                 f"checking `import cntk` with LD_LIBRARY_PATH={lib}",
                 env=env.child_env(os.environ))
    version = check.stdout.strip().splitlines()[-1] if check.stdout.strip() else "?"
    env = CntkEnv(venv_python, str(lib), version)
    tmp = prefix / "env.json.tmp"
    tmp.write_text(json.dumps(asdict(env), indent=1) + "\n")
    tmp.replace(prefix / "env.json")
    log(f"CNTK {version} ready: {venv_python} (LD_LIBRARY_PATH={lib})")
    return env


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m dltop.envsetup cntk [--prefix DIR] [--python PATH]``."""
    parser = argparse.ArgumentParser(prog="python -m dltop.envsetup",
                                     description="Build a framework environment for dltop.")
    parser.add_argument("framework", choices=["cntk"])
    parser.add_argument("--prefix", type=Path, default=None,
                        help="where to build it (default: %(default)s -> $DLTOP_CNTK_ENV or "
                             "$XDG_DATA_HOME/dltop/envs/cntk)")
    parser.add_argument("--python", default=None, help="a Python 3.6/3.7 interpreter")
    args = parser.parse_args(argv)
    try:
        env = setup_cntk(args.prefix or default_prefix(), args.python)
    except DltopError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    print(json.dumps(asdict(env)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
