"""Fixtures shared by every test directory, and the framework markers' policy.

A test that needs TensorFlow, CNTK or JAX says so with ``@pytest.mark.tensorflow``,
``@pytest.mark.cntk`` or ``@pytest.mark.jax``. When the framework is missing such a test
fails with a message that says how to install it: a missing install must never pass as a
skipped test.
``DLTOP_ALLOW_MISSING=tensorflow,cntk`` (for a laptop without them) turns the named
frameworks' failures into skips that name the variable.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import json
import os
import sqlite3
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import psutil
import pytest

ALLOW_MISSING = "DLTOP_ALLOW_MISSING"
FRAMEWORK_MARKERS = ("tensorflow", "cntk", "jax")

# Profiles that do not set min_time_s measure their iterations only here: the product
# default (6 s, dltop.profiles.window) would lengthen every one of the suite's runs.
# Set at import, before any test module loads a profile; engines and CLIs inherit it.
# Tests of the time windows set min_time_s in their profiles.
os.environ.setdefault("DLTOP_DEFAULT_MIN_TIME_S", "0")


def live_in_group(pgid: int) -> list[int]:
    """Live (non-zombie) processes of a process group; a zombie has ended, only its reaper lags."""
    out = []
    for p in psutil.process_iter(["pid", "status"]):
        try:
            if os.getpgid(p.pid) == pgid and p.info["status"] != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except (ProcessLookupError, PermissionError):
            pass
    return out


@pytest.fixture(scope="session", autouse=True)
def session_lock_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A lock directory for this session (one per xdist worker), set before any fixture.

    Session- and module-scoped fixtures that start engines run before the per-test
    :func:`private_lock_dir` exists; without this they would lease devices in the shared
    ``/tmp/dltop-locks`` and wait behind unrelated engines on the host.
    """
    path = str(tmp_path_factory.mktemp("session-locks"))
    before = os.environ.get("DLTOP_LOCK_DIR")
    os.environ["DLTOP_LOCK_DIR"] = path
    try:
        yield path
    finally:
        if before is None:
            os.environ.pop("DLTOP_LOCK_DIR", None)
        else:
            os.environ["DLTOP_LOCK_DIR"] = before


@pytest.fixture(autouse=True)
def private_lock_dir(tmp_path_factory: pytest.TempPathFactory,
                     monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test leases devices in its own lock directory (engines it starts inherit it).

    Tests run beside each other and beside real engines on this host; with the shared
    ``/tmp/dltop-locks`` they would wait for each other's devices.
    """
    path = str(tmp_path_factory.mktemp("locks"))
    monkeypatch.setenv("DLTOP_LOCK_DIR", path)
    return path


@pytest.fixture(autouse=True)
def no_inherited_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    """pytest-xdist's workers see a ``COLUMNS`` that ``pytest`` alone does not set, and
    piped listings are cut to it; a test that wants a width sets its own."""
    monkeypatch.delenv("COLUMNS", raising=False)


@contextmanager
def watching_other_runners(ours: Path) -> Iterator[set[int]]:
    """Collect dltop runners on this host whose argv does not mention ``ours``.

    Other tests or real engines on a shared host run beside a test's engines, and an
    engine rightly counts them in ``concurrent_runs`` (jobs.foreign): a test asserts
    a clean ``concurrent_runs = 0`` only when none was seen.
    """
    from dltop.jobs.foreign import sharing_runners

    seen: set[int] = set()
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.1):
            for pid in sharing_runners(None, []):
                try:
                    if str(ours) not in " ".join(psutil.Process(pid).cmdline()):
                        seen.add(pid)
                except psutil.Error:
                    pass

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    try:
        yield seen
    finally:
        done.set()
        t.join()


@pytest.fixture
def other_runners() -> Callable[[Path], AbstractContextManager[set[int]]]:
    """:func:`watching_other_runners` as a fixture."""
    return watching_other_runners


@pytest.fixture
def group_members() -> Callable[[int], list[int]]:
    """Returns live processes of a process group, to assert nothing outlived a run."""
    return live_in_group


def wait_until(cond: Callable[[], object], timeout_s: float, what: str = "the condition",
               interval_s: float = 0.05) -> None:
    """Poll ``cond`` until it is true; fail naming ``what`` after ``timeout_s``.

    Replaces ``time.sleep(n); assert ...``: it returns as soon as the event happened, and
    ``timeout_s`` is a generous ceiling for a loaded machine, not an expected duration.
    """
    end = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(interval_s)


async def wait_until_async(cond: Callable[[], object], timeout_s: float,
                           what: str = "the condition", interval_s: float = 0.05) -> None:
    """:func:`wait_until` for async tests: sleeps without blocking the event loop."""
    end = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        await asyncio.sleep(interval_s)


@pytest.fixture(name="wait_until")
def wait_until_fixture() -> Callable[..., None]:
    """:func:`wait_until` (``tests/`` is not a package, so tests get it as a fixture)."""
    return wait_until


@pytest.fixture(name="wait_until_async")
def wait_until_async_fixture() -> Callable[..., object]:
    """:func:`wait_until_async` as a fixture."""
    return wait_until_async


# profile text ---------------------------------------------------------------------------
class TomlSource(str):
    """A value (or lines) already written in TOML, which :class:`ProfileText` keeps as is."""


def toml_value(value: object) -> str:
    """``value`` as TOML: str, bool, int, float, or a list of those; TomlSource unchanged."""
    if isinstance(value, TomlSource):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML for {value!r}")


class ProfileText:
    """Builds a profile's TOML text from its keys and values, in the order given.

    ``profile_text({"frameworks": ["torch"], ...}, name="x", defaults={...})`` gives
    ``name``, then ``[defaults]``, then one ``[[matrix]]`` table a mapping; ``extra``
    (TOML lines) ends the last table. ``profile_text.raw(s)`` marks ``s`` as TOML already.
    """

    raw = TomlSource

    def __call__(self, *matrix: Mapping[str, object], name: str | None = None,
                 defaults: Mapping[str, object] | None = None, extra: str = "") -> str:
        lines = [] if name is None else [f"name = {toml_value(name)}"]
        tables = ([("[defaults]", defaults)] if defaults is not None else []) + \
            [("[[matrix]]", row) for row in matrix]
        for header, keys in tables:
            lines.append(header)
            lines += [f"{k} = {toml_value(v)}" for k, v in keys.items()]
        return "\n".join([*lines, extra]) + "\n"


@pytest.fixture
def profile_text() -> ProfileText:
    """:class:`ProfileText`: tests state a profile's keys and values, not its TOML layout."""
    return ProfileText()


@pytest.fixture
def foreign_sqlite() -> Callable[[Path, str], Path]:
    """Writes a SQLite database that is not dltop's: ``(path, create_table_sql) -> path``."""
    def write(path: Path, create_table_sql: str) -> Path:
        conn = sqlite3.connect(path)
        conn.execute(create_table_sql)
        conn.commit()
        conn.close()
        return path
    return write


SynthData = Callable[[str], Path]
"""``synth_data(kind)`` -> the directory of a generated data set (mnist, cifar10, ptb)."""


@pytest.fixture(scope="session")
def synth_data(tmp_path_factory: pytest.TempPathFactory) -> SynthData:
    """Small learnable data sets in the real formats (dltop.datagen), generated once per
    session and kind with the default sizes and seed 0. Treat the directories as read-only:
    every test of the session shares them."""
    made: dict[str, Path] = {}
    lock = threading.Lock()

    def get(kind: str) -> Path:
        from dltop import datagen

        with lock:
            if kind not in made:
                out = tmp_path_factory.mktemp(f"synth-{kind}")
                datagen.synth(kind, out, seed=0)
                made[kind] = out
            return made[kind]

    return get


# framework markers ---------------------------------------------------------------------
@functools.cache
def missing_reason(framework: str) -> str | None:
    """Why ``framework`` cannot run here, or None when it can (checked once a session)."""
    if framework == "tensorflow":
        if importlib.util.find_spec("tensorflow") is None:
            return ("TensorFlow is not importable by this interpreter: `make venv` installs "
                    "it (tensorflow-cpu)")
        return None
    if framework == "jax":
        if importlib.util.find_spec("jax") is None:
            return "JAX is not importable by this interpreter: `make venv` installs it (CPU build)"
        return None
    from dltop import envsetup

    prefix = envsetup.default_prefix()
    if envsetup.load_cntk_env(prefix) is None:
        return (f"the CNTK environment is missing at {prefix}: build it with "
                "`dltop env setup cntk` (`make venv` does)")
    return None


def allowed_missing() -> set[str]:
    return {x.strip() for x in os.environ.get(ALLOW_MISSING, "").split(",") if x.strip()}


def pytest_runtest_setup(item: pytest.Item) -> None:
    for framework in FRAMEWORK_MARKERS:
        if item.get_closest_marker(framework) is None:
            continue
        reason = missing_reason(framework)
        if reason is None:
            continue
        if framework in allowed_missing():
            pytest.skip(f"{reason} ({ALLOW_MISSING} allows it)")
        pytest.fail(f"needs {framework}: {reason}; or set {ALLOW_MISSING}={framework} "
                    "to skip such tests knowingly", pytrace=False)


SLOW_FIXTURES = frozenset({"browser", "slurm_cluster"})
"""Fixtures that start something heavy: a test that uses one is ``slow``."""


LONGEST_FIRST = ("tests/runners/test_parity.py::test_every_framework",
                 "tests/runners/test_tf_runner.py",
                 "tests/runners/test_jax_runner.py::test_every_model",
                 "tests/core/test_gpu_check_script.py", "tests/runners/test_tf_data_parallel.py",
                 "tests/runners/test_tf_dist.py", "tests/core/test_data_parallel.py",
                 "tests/runners/test_torch_convergence.py", "tests/faults/test_engine_faults.py")
"""The suite's longest tests (``--durations``): started first, so that under xdist
(``make test``: three workers) no minute-long test begins while the others have nothing
left to do."""


def _start_order(item: pytest.Item) -> int:
    if item.nodeid.startswith(LONGEST_FIRST):
        return 0
    return 1 if item.get_closest_marker("slow") else 2


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Loading TensorFlow or CNTK takes seconds: whatever needs one is slow by definition,
    # so `pytest -m "not slow"` never needs either framework installed.
    for item in items:
        if any(item.get_closest_marker(f) for f in FRAMEWORK_MARKERS):
            item.add_marker(pytest.mark.slow)
        # A real Chromium or a Slurm cluster starts in seconds, and the edit-test loop
        # must pass on a machine that has neither installed.
        if SLOW_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
        # Under pytest-xdist (`make test`), the Slurm tests share one worker and so one
        # session-scoped cluster, instead of a slurmctld per worker.
        if "slurm" in item.nodeid.split("/")[:2]:
            item.add_marker(pytest.mark.xdist_group("slurm"))
    # Long before short (stable: file order within each class); `pytest` alone runs in
    # the same order, which only matters for the time it takes.
    items.sort(key=_start_order)


pytest_plugins = ["pytester"]  # tests/core/test_framework_markers.py runs an inner pytest


@pytest.fixture
def stand_in_engine() -> Iterator[int]:
    """A live process recorded as a campaign's engine, so no viewer resumes the campaign
    (the TUI's control tests and the served TUI only read the database)."""
    proc = subprocess.Popen(["sleep", "600"])
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Drop JAX's garbage-collection hook once a worker's tests are done.

    execnet stops a pytest-xdist worker by interrupting its main thread
    (``_thread.interrupt_main``); when that lands inside JAX's ``_xla_gc_callback`` the
    KeyboardInterrupt is printed as an "exception ignored" traceback after a green run
    (issue 40: two of them ended ``make test-fast``). No test runs after this hook.
    """
    import gc
    import sys

    if "jax" in sys.modules:
        gc.callbacks[:] = [cb for cb in gc.callbacks
                           if not getattr(cb, "__module__", "").startswith("jax")]
