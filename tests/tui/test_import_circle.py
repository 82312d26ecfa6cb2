"""The viewer's modules import one another in one direction: no circle, not even
through ``if TYPE_CHECKING:`` imports (which import-linter is told to skip).

The app imports its screens and palette; they know it only as the
:class:`dltop.tui.viewer.Viewer` protocol.
"""

from __future__ import annotations

import ast
from pathlib import Path

import dltop.tui

TUI = Path(dltop.tui.__file__).parent


def _imports(path: Path) -> set[str]:
    """The ``dltop.tui`` modules ``path`` imports, wherever the import statement is."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            # `from dltop.tui import ops` imports the module dltop.tui.ops
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return {m for m in found if m.startswith("dltop.tui.")}


def _graph() -> dict[str, set[str]]:
    mods = {f"dltop.tui.{p.stem}": p for p in TUI.glob("*.py") if p.stem != "__init__"}
    return {m: _imports(p) & mods.keys() for m, p in mods.items()}


def test_nothing_in_the_viewer_imports_the_app_back() -> None:
    graph = _graph()
    assert "dltop.tui.screens" in graph["dltop.tui.app"]  # the graph is read at all
    back = sorted(m for m, deps in graph.items() if "dltop.tui.app" in deps)
    assert back == []


def test_the_viewer_modules_have_no_import_circle() -> None:
    graph = _graph()
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    circles: list[list[str]] = []

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                circles.append([*path[path.index(d):], m, d] if d in path else [m, d])
            elif d not in state:
                visit(d, [*path, m])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [])
    assert circles == []
