"""The lines of ``node.sh`` that keep a serve job's server inside its Slurm job (pure;
issue 41 item 7, docs/cluster.md#serve-jobs).

A serve job with ``server = "NAME"`` runs as one Slurm job: its runner starts the server
on the allocated node (``127.0.0.1`` there, ``{devices}`` the step's
``CUDA_VISIBLE_DEVICES``) and stops it at its end, as on the local executor. The
server leads a process group of its own, so Slurm's process tracking (a process group,
or the parent links of ``proctrack/linuxproc``) loses it once the runner dies
unexpectedly: it would keep serving on the node, holding the job's GPUs, after the job.
Here the runner leads a session of its own (``setsid``), which its server stays in
whatever its group, and ``node.sh`` ends what is left of that session after the
runner, and when Slurm signals the step (``scancel``, the job's time limit): TERM, a
grace of :data:`GRACE_S`, then KILL. Where the node lacks ``setsid``/``pkill`` (a bare
container image) the runner runs as before, without the sweep.
"""

from __future__ import annotations

from dltop.profiles.jobspec import JobSpec

GRACE_S = 4
"""Seconds from the session's TERM to its KILL: within Slurm's usual ``KillWait`` (30 s
by default), after which Slurm KILLs the step itself and ``node.sh`` with it."""


def runner_block(job: JobSpec, command: str) -> list[str]:
    """``node.sh``'s lines that run ``command`` (the runner) and set ``status``: for a
    job whose runner starts a server (``server = "NAME"``), in a session of its own.

    A background job of a script (no job control) is never a process group leader, so
    ``setsid`` makes the session in place: its id is the runner's pid (``$!``).
    """
    if not dict(job.options).get("server_command"):
        return [command, "status=$?"]
    return [
        "if command -v setsid >/dev/null && command -v pkill >/dev/null; then",
        "    DLTOP_SID=",
        "    dltop_end_session() {",
        '        [ -n "$DLTOP_SID" ] || return 0',
        '        pgrep -s "$DLTOP_SID" >/dev/null || return 0',
        '        pkill -TERM -s "$DLTOP_SID"',
        f"        for _ in $(seq {GRACE_S * 10}); do",
        '            pgrep -s "$DLTOP_SID" >/dev/null || return 0',
        "            sleep 0.1",
        "        done",
        '        pkill -KILL -s "$DLTOP_SID"',
        "    }",
        "    trap 'DLTOP_SIGNALLED=1; dltop_end_session' TERM INT",
        f"    setsid {command} &",
        "    DLTOP_SID=$!",
        '    wait "$DLTOP_SID"',
        "    status=$?",
        # wait returned for the trap: the runner's own status once the session ended
        '    if [ -n "${DLTOP_SIGNALLED:-}" ]; then wait "$DLTOP_SID"; status=$?; fi',
        "    trap - TERM INT",
        "    dltop_end_session  # a server the runner left behind (it was KILLed)",
        "else",
        f"    {command}",
        "    status=$?",
        "fi"]
