"""``dltop agent``: one node's telemetry, headless, as JSON lines in a file.

A Slurm job's batch script starts one agent per node, in the background, for the
job's lifetime (``python -m dltop agent --out <rundir>/agent-<node>.jsonl``). The
agent is the engine's own :class:`~dltop.telemetry.sampler.Sampler` without an
engine: it samples this node's GPUs (all of them, or those in ``--gpus`` /
``$CUDA_VISIBLE_DEVICES``) and the host, downsamples them into the same windows
the engine stores, and appends each window as one JSON line to ``--out``. The
engine, on the login host, tails those files (:mod:`dltop.jobs.agentfeed`) and
stores the windows tagged with the node name.

Files on the shared filesystem rather than the job's output stream: an engine
that submits with ``sbatch --wait`` from a login node has no stream back from the
nodes; the files survive an engine restart (``dltop run --resume`` reads them
from the offset it had stored, or from the start), and the runner's own log
stays clean. See docs/cluster.md, "Telemetry from every node".

Lines (each a JSON object with ``"v": 1``, ``"kind"`` and ``"node"``):

- ``hello``: pid, rate, ``simulated``, the GPUs sampled (index, name, uuid,
  memory), ``gpu_unavailable`` (why none, or null), ``t_wall_s``;
- ``gpu``: one GPU over one window, the fields of
  :class:`~dltop.telemetry.windows.GpuWindow` but ``run_id``;
- ``host``: the host over one window, :class:`~dltop.telemetry.windows.HostWindow`'s
  fields but ``run_id`` (no process tree: the agent attributes nothing to a run);
- ``bye``: why it stopped (``SIGTERM``, ``SIGINT``, ``parent exited``).

Each batch (about one a second) is one ``write`` of whole lines followed by a
flush, so a reader sees at most one partial line, the last. Standard library,
psutil and (through :mod:`dltop.telemetry.nvml` only) nvml-ml-py: no Textual,
no Rich, no sqlite.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dltop.errors import UserError
from dltop.procs import SignalCatcher
from dltop.telemetry.clock import anchor
from dltop.telemetry.sampler import Sampler, check_rate
from dltop.telemetry.values import GpuBackend, GpuSample, GpuStatic
from dltop.telemetry.windows import Batch

FORMAT_VERSION = 1
NODE_ENV = "SLURMD_NODENAME"
PARENT_CHECK_S = 1.0
"""How often the agent checks that its parent (the job step's shell) is still there."""
SIGNAL_POLL_S = 0.2
"""How often the main loop looks at the signals caught (their handler sets no lock)."""


def node_name() -> str:
    """This node's name: Slurm's (``$SLURMD_NODENAME``), else the host name."""
    return os.environ.get(NODE_ENV, "").strip() or socket.gethostname()


def parse_gpus(text: str) -> tuple[str, ...]:
    """A GPU list (``0,1`` or ``GPU-uuid,...``, as ``CUDA_VISIBLE_DEVICES``) as entries."""
    return tuple(e.strip() for e in text.split(",") if e.strip())


class SubsetBackend:
    """The GPUs of ``backend`` named by ``indices``, keeping their own (NVML) indexes.

    The sampler asks for GPUs 0..n-1; this hands it the chosen ones, and their
    readings keep the index the node knows them by (``nvidia-smi``'s), so the rows
    say which GPU of the node they are.
    """

    def __init__(self, backend: GpuBackend, indices: Sequence[int]) -> None:
        self._inner = backend
        self._indices = tuple(indices)
        self.simulated = backend.simulated

    def device_count(self) -> int:
        return len(self._indices)

    def static(self, index: int) -> GpuStatic:
        return self._inner.static(self._indices[index])

    def sample(self, index: int, slow: bool) -> GpuSample:
        return dataclasses.replace(self._inner.sample(self._indices[index], slow),
                                   index=self._indices[index])

    def unavailable_reason(self) -> str | None:
        return self._inner.unavailable_reason()


def resolve_gpus(backend: GpuBackend, entries: Sequence[str]) -> tuple[int, ...]:
    """The node's GPU indexes named by ``entries`` (indexes or UUIDs, as CUDA takes them).

    Raises:
        UserError: an entry names no GPU of this node.
    """
    n = backend.device_count()
    by_uuid = {}
    if any(not e.isdigit() for e in entries):
        by_uuid = {backend.static(i).uuid: i for i in range(n)}
    found: list[int] = []
    for e in entries:
        index = int(e) if e.isdigit() else by_uuid.get(e)
        if index is None or index >= n:
            raise UserError(f"--gpus: {e!r} is not a GPU of this node ({n} GPUs)")
        if index not in found:
            found.append(index)
    return tuple(found)


@dataclass(frozen=True)
class AgentOptions:
    """What ``dltop agent`` was asked to do."""

    out: Path
    hz: float = 10.0
    gpus: tuple[str, ...] | None = None
    """GPUs to sample (indexes or UUIDs); None: all of the node's."""
    node: str = ""
    """Node name written in every line; empty: :func:`node_name`."""


class JsonLinesSink:
    """Appends the sampler's batches to the output file as JSON lines."""

    def __init__(self, path: Path, node: str) -> None:
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0)
        try:
            fd = os.open(path, flags, 0o600)
        except OSError as exc:
            raise UserError(f"--out {path}: cannot write: {exc.strerror}") from exc
        self._f = os.fdopen(fd, "a", encoding="utf-8")
        self.node = node
        self._lock = threading.Lock()
        self.lines = 0

    def write(self, records: Sequence[dict[str, Any]]) -> None:
        """Write whole lines in one go, then flush (a reader sees at most one partial line)."""
        text = "".join(json.dumps({"v": FORMAT_VERSION, "node": self.node, **r},
                                  separators=(",", ":"), allow_nan=False) + "\n"
                       for r in records)
        with self._lock:
            self._f.write(text)
            self._f.flush()
            self.lines += len(records)

    def on_batch(self, batch: Batch) -> None:
        """The sampler's ``on_batch``: its windows, without the run id (none here)."""
        records: list[dict[str, Any]] = []
        for kind, windows in (("gpu", batch.gpu), ("host", batch.host)):
            for w in windows:
                row = {k: _finite(v) for k, v in vars(w).items() if k != "run_id"}
                records.append({"kind": kind, **row})
        if records:
            self.write(records)

    def close(self) -> None:
        with self._lock:
            self._f.close()


def _finite(v: Any) -> Any:
    """JSON has no NaN: a non-finite reading is unknown (null)."""
    if isinstance(v, float) and (v != v or v in (float("inf"), float("-inf"))):
        return None
    return v


def hello(backend: GpuBackend, hz: float) -> dict[str, Any]:
    """The first line: who samples what."""
    gpus = []
    for i in range(backend.device_count()):
        s = backend.static(i)
        gpus.append({"index": s.index, "name": s.name, "uuid": s.uuid,
                     "memory_total_bytes": s.memory_total_bytes})
    return {"kind": "hello", "pid": os.getpid(), "hz": hz, "simulated": backend.simulated,
            "gpus": gpus, "gpu_unavailable": backend.unavailable_reason(),
            "t_wall_s": anchor().wall(anchor().mono_ns)}


class Agent:
    """Samples until :meth:`stop` (a signal) or until its parent process is gone."""

    def __init__(self, backend: GpuBackend, options: AgentOptions) -> None:
        self.hz = check_rate("--hz", options.hz)
        if options.gpus is not None:
            backend = SubsetBackend(backend, resolve_gpus(backend, options.gpus))
        self.backend = backend
        self.sink = JsonLinesSink(options.out, options.node or node_name())
        window_s = max(0.5, 1.0 / self.hz)
        self.sampler = Sampler(backend, self.sink.on_batch, gpu_hz=self.hz,
                               host_hz=min(self.hz, 2.0), window_s=window_s)
        self._stop = threading.Event()
        self.reason = ""

    def stop(self, reason: str) -> None:
        """Ask the loop to end (safe from a signal handler: it only sets an event)."""
        self.reason = self.reason or reason
        self._stop.set()

    def run(self, signals: SignalCatcher | None = None) -> str:
        """Sample until stopped (or ``signals`` caught one); returns why it stopped.

        The file ends with ``bye``.
        """
        catcher = signals or SignalCatcher()
        parent = os.getppid()
        self.sink.write([hello(self.backend, self.hz)])
        self.sampler.start()
        try:
            next_check_s = time.monotonic() + PARENT_CHECK_S
            while not self._stop.wait(SIGNAL_POLL_S):
                if catcher.name:
                    self.stop(catcher.name)
                elif time.monotonic() >= next_check_s:
                    next_check_s += PARENT_CHECK_S
                    if os.getppid() != parent:  # re-parented: the step's shell is gone
                        self.stop("parent exited")
        finally:
            self.sampler.stop()  # hands over the last window
            self.sink.write([{"kind": "bye", "reason": self.reason or "stopped",
                              "t_wall_s": anchor().wall(anchor().mono_ns)}])
            self.sink.close()
        return self.reason


def run_agent(options: AgentOptions, fake_gpus: int | None = None) -> str:
    """``dltop agent``: sample this node into ``options.out`` until SIGTERM/SIGINT.

    Raises:
        UserError: a bad rate, GPU list or output path (before anything is written).
    """
    from dltop.telemetry import open_gpu_backend

    check_rate("--hz", options.hz)
    backend = open_gpu_backend(fake_gpus or None)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    if options.gpus is None and not fake_gpus and parse_gpus(visible):
        # Slurm's cgroups may renumber the GPUs a job sees: when the variable names GPUs
        # NVML does not know by those names, every GPU the node shows the job is sampled
        # (rather than none: an agent that exits leaves the run without telemetry).
        try:
            resolve_gpus(backend, parse_gpus(visible))
            options = dataclasses.replace(options, gpus=parse_gpus(visible))
        except UserError:
            pass
    agent = Agent(backend, options)

    with SignalCatcher().installed((signal.SIGTERM, signal.SIGINT, signal.SIGHUP)) as caught:
        return agent.run(caught)
