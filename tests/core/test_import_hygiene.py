"""Import hygiene, checked on what really loads and on the import graph.

The headless core never imports Textual or Rich, the viewers (``dltop.live``,
``dltop.tui``) never load the engine, the supervisor or the sampler (both in a
fresh interpreter), and no dltop module imports itself through others.
"""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import grimp
import pytest

import dltop

CORE_PACKAGES = ("profiles", "jobs", "runners", "store", "telemetry", "results", "live")
CORE_MODULES = ("dltop", "dltop.errors", "dltop.catalog", "dltop.config", "dltop.envsetup",
                "dltop.paths", "dltop.procs", "dltop.pyexec", "dltop.systems")
VIEWER_FORBIDDEN = ("dltop.jobs.engine", "dltop.jobs.supervisor", "dltop.telemetry.sampler")


def core_modules() -> list[str]:
    mods = list(CORE_MODULES)
    for info in pkgutil.walk_packages(dltop.__path__, "dltop."):
        top = info.name.split(".")[1]
        if top in CORE_PACKAGES and ".child." not in info.name + ".":
            mods.append(info.name)
    return mods


def test_core_modules_do_not_import_textual_or_rich() -> None:
    mods = core_modules()
    assert "dltop.jobs.engine" in mods and "dltop.store.writer" in mods
    code = (
        "import importlib, sys\n"
        f"for m in {mods!r}:\n"
        "    importlib.import_module(m)\n"
        "bad = sorted(n for n in sys.modules if n.split('.')[0] in ('textual', 'rich'))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "", f"core pulled in: {out.stdout.strip()}"


def test_the_check_would_notice_rich() -> None:
    out = subprocess.run([sys.executable, "-c",
                          "import dltop.tui.progress, sys; print('rich' in sys.modules)"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


def loaded_by(module: str) -> set[str]:
    """The dltop modules a fresh interpreter has loaded after importing ``module``."""
    code = (f"import sys, {module}\n"
            "print(' '.join(n for n in sys.modules if n.split('.')[0] == 'dltop'))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    return set(out.stdout.split())


@pytest.mark.slow  # over 1.5 s on an idle 2-core machine
def test_viewers_do_not_load_the_engine() -> None:
    viewers = ["dltop.tui.app"] + [m for m in core_modules() if m.startswith("dltop.live")]
    assert "dltop.live.campaign" in viewers and "dltop.live.devices" in viewers
    for module in viewers:
        loaded = loaded_by(module)
        assert module in loaded
        bad = sorted(loaded.intersection(VIEWER_FORBIDDEN))
        assert not bad, f"{module} loads {bad}"


def test_the_viewer_check_would_notice_the_engine() -> None:
    assert set(VIEWER_FORBIDDEN) <= loaded_by("dltop.jobs.engine")


def find_cycle(graph: grimp.ImportGraph, modules: set[str]) -> list[str] | None:
    """One import cycle among ``modules`` (first module repeated at the end), or None."""
    done: set[str] = set()
    for root in sorted(modules):
        if root in done:
            continue
        # Iterative DFS: path holds the modules on the current chain, in order.
        path, on_path = [root], {root}
        stack = [iter(sorted(graph.find_modules_directly_imported_by(root) & modules))]
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                stack.pop()
                done.add(path[-1])
                on_path.discard(path.pop())
            elif nxt in on_path:
                return [*path[path.index(nxt):], nxt]
            elif nxt not in done:
                path.append(nxt)
                on_path.add(nxt)
                stack.append(iter(sorted(graph.find_modules_directly_imported_by(nxt)
                                         & modules)))
    return None


def dltop_graph() -> tuple[grimp.ImportGraph, set[str]]:
    # TYPE_CHECKING imports count: an annotation-only circle is still a circle (issue 39)
    graph = grimp.build_graph("dltop", exclude_type_checking_imports=False)
    # A package's __init__ is its own node; child scripts run in another interpreter.
    mods = {m for m in graph.modules if ".child" not in m}
    return graph, mods


def test_no_import_cycles() -> None:
    graph, mods = dltop_graph()
    assert "dltop.tui.app" in mods and "dltop.jobs.engine" in mods
    cycle = find_cycle(graph, mods)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_check_finds_a_cycle() -> None:
    graph, mods = dltop_graph()
    graph.add_import(importer="dltop.procs", imported="dltop.live.campaign")
    cycle = find_cycle(graph, mods)
    assert cycle is not None and cycle[0] == cycle[-1]
    assert {"dltop.procs", "dltop.live.campaign"} <= set(cycle)
