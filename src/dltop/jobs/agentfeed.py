"""Reads the node agents' telemetry files of a run as they grow.

Each node of a Slurm job runs ``dltop agent`` (:mod:`dltop.telemetry.agent`),
appending JSON lines to ``<run dir>/agent-<node>.jsonl`` on the shared
filesystem. :class:`AgentFeed` follows every such file of one run folder from
the offset it last read: :meth:`AgentFeed.poll` while the run goes (new files
are picked up as nodes start), :meth:`AgentFeed.drain` once at its end (the
last, partial line too, when the agent was killed mid-write). A line whose
newline has not arrived yet is left for the next poll; a line that is not a v1
agent record (garbage, a torn write after a kill) is counted in ``bad_lines``
and skipped, never fatal.

Times: a window's ``t_start_mono_s`` is the node's own monotonic clock, which
means nothing on the engine's host; the feed moves it onto the engine's
monotonic axis through the window's wall time (``t_wall_s``, nodes' clocks are
NTP-synchronised), so agent rows sort with the run's other rows.

The caller stores what a poll returns, e.g. from the engine's writer thread::

    feed = AgentFeed(run_dir)          # one per run: each file is read once
    for got in feed.poll():            # every second while the run goes
        store.telemetry.add_agent_samples(run_id, got.node, got.gpu, got.host)
    ...                                # at the run's end: feed.drain() the same way, then
    store.telemetry.finish_node_run(run_id, samples)   # the summary over every node
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from dltop.telemetry.clock import anchor
from dltop.telemetry.windows import GpuWindow, HostWindow

PATTERN = "agent-*.jsonl"
MAX_READ = 8 << 20
"""Most bytes read from one file per poll (a backlog is read over several polls)."""
MAX_LINE = 1 << 20
"""A longer line without a newline is garbage: dropped, counted."""
_GPU_FIELDS = tuple(f.name for f in fields(GpuWindow) if f.name != "run_id")
_HOST_FIELDS = tuple(f.name for f in fields(HostWindow) if f.name != "run_id")


@dataclass(frozen=True)
class NodeSamples:
    """What one poll read of one node's file."""

    node: str
    gpu: tuple[GpuWindow, ...]
    host: tuple[HostWindow, ...]
    hello: dict[str, Any] | None = None
    """The agent's first line (its GPUs, ``simulated``), when this poll read it."""
    stopped: str | None = None
    """Why the agent stopped (its ``bye`` line), when this poll read it."""


@dataclass
class _Tail:
    path: Path
    offset: int = 0
    partial: bytes = b""
    node: str = ""


def _number(v: Any) -> bool:
    return (isinstance(v, int | float) and not isinstance(v, bool)
            and (not isinstance(v, float) or math.isfinite(v)))


def _window(kind: str, rec: dict[str, Any], shift_s: float) -> GpuWindow | HostWindow:
    """A record as the sampler's window, on the engine's clock (KeyError/TypeError if bad)."""
    names = _GPU_FIELDS if kind == "gpu" else _HOST_FIELDS
    values: dict[str, Any] = {k: rec.get(k) for k in names}
    for k, v in values.items():
        if v is not None and not isinstance(v, bool) and not _number(v):
            raise TypeError(f"{k}: {v!r} is not a number")
    wall = values["t_wall_s"]
    if not _number(wall) or not _number(values["t_start_mono_s"]):
        raise TypeError("no time")
    values["t_start_mono_s"] = float(wall) + shift_s
    if kind == "gpu":
        if not isinstance(values["gpu_index"], int):
            raise TypeError("gpu_index")
        values["simulated"] = bool(values["simulated"])
        return GpuWindow(run_id=None, **values)
    return HostWindow(run_id=None, **values)


class AgentFeed:
    """Follows the ``agent-*.jsonl`` files of one run folder.

    Args:
        run_dir: the run's folder (on the shared filesystem).
    """

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        self._tails: dict[Path, _Tail] = {}
        self.bad_lines = 0
        """Lines skipped because they were not agent records."""
        self.nodes: dict[str, dict[str, Any]] = {}
        """Each node's hello line, by node name, once read."""
        # wall seconds -> the engine's monotonic seconds
        a = anchor()
        self._shift_s = a.mono_ns / 1e9 - a.wall_s

    def poll(self) -> list[NodeSamples]:
        """The whole lines appended since the last poll, per node (files new ones included)."""
        return self._read(final=False)

    def drain(self) -> list[NodeSamples]:
        """Everything left, a last line without its newline too (call once the run ended)."""
        return self._read(final=True)

    def _read(self, final: bool) -> list[NodeSamples]:
        try:
            paths = sorted(self.run_dir.glob(PATTERN))
        except OSError:
            return []
        out: list[NodeSamples] = []
        for path in paths:
            tail = self._tails.setdefault(path, _Tail(path))
            got = self._read_file(tail, final)
            if got is not None:
                out.append(got)
        return out

    def _read_file(self, tail: _Tail, final: bool) -> NodeSamples | None:
        try:
            with open(tail.path, "rb") as f:
                f.seek(tail.offset)
                data = f.read(MAX_READ)
        except OSError:
            return None  # vanished or unreadable now: tried again next poll
        tail.offset += len(data)
        data = tail.partial + data
        lines = data.split(b"\n")
        tail.partial = lines.pop()  # after the last newline: incomplete (or empty)
        if final and tail.partial:
            lines.append(tail.partial)
            tail.partial = b""
        elif len(tail.partial) > MAX_LINE:
            self.bad_lines += 1
            tail.partial = b""
        gpu: list[GpuWindow] = []
        host: list[HostWindow] = []
        hello: dict[str, Any] | None = None
        stopped: str | None = None
        for line in lines:
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                kind = rec["kind"]
                if rec.get("v") != 1 or not isinstance(rec.get("node"), str) or not rec["node"]:
                    raise ValueError("not a v1 agent record")
                tail.node = tail.node or rec["node"]
                if kind in ("gpu", "host"):
                    w = _window(kind, rec, self._shift_s)
                    if isinstance(w, GpuWindow):
                        gpu.append(w)
                    else:
                        host.append(w)
                elif kind == "hello":
                    hello = rec
                    self.nodes[rec["node"]] = rec
                elif kind == "bye":
                    stopped = str(rec.get("reason"))
                else:
                    raise ValueError(f"kind {kind!r}")
            except (ValueError, KeyError, TypeError, UnicodeDecodeError):
                self.bad_lines += 1
        if not (gpu or host or hello or stopped):
            return None
        node = tail.node or _node_from_name(tail.path)
        return NodeSamples(node, tuple(gpu), tuple(host), hello, stopped)


def _node_from_name(path: Path) -> str:
    """``agent-<node>.jsonl`` -> ``<node>`` (when no line named it)."""
    return path.name[len("agent-"):-len(".jsonl")] or os.path.basename(path)

