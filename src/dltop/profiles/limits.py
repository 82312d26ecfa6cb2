"""The bounds of profile values and the job-count limit (docs/profiles.md#value-ranges).

Every number a profile, a ``[slurm]`` table or a ``[systems.NAME]`` table gives is
checked at load against a bound here, so that nothing absurd is stored: a value that
is not finite cannot be stored as JSON the database and ``--resume`` read back, a
seed beyond 32 bits is refused by NumPy, TensorFlow and JAX, a batch of 2**63
overflows a runner's allocation, a pause of 1e308 seconds never ends. The bounds are
wide: each is far beyond what a benchmark uses, not a judgement of a setting.

The number of jobs a profile (or a ``dltop run`` of several) expands to is limited too,
counted before anything is expanded: :func:`max_jobs` says how many.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from dltop.config import config_path, read_config
from dltop.errors import UserError

DAY_S = 86_400
MAX_ITERATIONS = 10**9
"""``iterations``, ``warmup``, ``eval_every``: a step count a runner can keep in an int."""
MAX_SEED = 2**32 - 1
"""``seed``: NumPy's ``RandomState``, TensorFlow and JAX all take 0 .. 2**32 - 1."""
MAX_BATCH = 2**20
"""``batch_sizes``: samples (sequences) per step."""
MAX_CPUS = 4096
"""``cpu:N``, ``cpus:P``, ``slurm.cpus_per_task``, ``slurm.cpus_per_gpu``: beyond any node;
a local count above this host's CPUs is still only a warning (the run is not pinned)."""
MAX_GPUS = 64
"""``gpu:N``, ``slurm.gpus_per_node``: GPUs per node (as many as ``--fake-gpus`` allows)."""
MAX_NODES = 4096
MAX_REPEATS = 1_000_000
MAX_TIMEOUT_S = 7 * DAY_S
"""``timeout_s``, ``min_time_s``, ``warmup_s``: a week."""
MAX_COOLDOWN_S = DAY_S
MAX_EPOCHS = 10_000
MAX_TOKENS = 2**20
"""``seq_len``, ``prompt_tokens``, ``new_tokens`` (each model's context is checked too)."""
MAX_INPUT_SIZE = 4096
MAX_LOADER_WORKERS = 256
MAX_RETRIES = 100
MAX_LR = 1000.0
MAX_TEMP_C = 150.0
MAX_POWER_W = 10_000.0
MAX_PERPLEXITY = 1e9
MAX_PARALLEL = 1000
"""``slurm.parallel``: runs of a campaign in Slurm at once."""
MAX_STEPS_PER_MATCH = 10**6
MAX_REFERENCE = 1e15
"""A reference's value, in its metric's unit (tokens/s, samples/s, s)."""
MAX_UPPER_TOLERANCE = 100.0
"""A reference's upper tolerance: +10 000 %."""
MAX_REQUEST_RATE = 1e6
"""``request_rate``: requests per second (``"inf"`` sends them all at once)."""
MAX_CONCURRENCY = 100_000
"""``concurrency``: requests in flight (each holds a connection)."""
MAX_BURSTINESS = 1000.0
"""``burstiness``: the gamma arrivals' shape (1 is Poisson; below 1 burstier)."""
MAX_SLO_MS = 1e9
"""``slo_ttft_ms``, ``slo_tpot_ms``, ``slo_e2e_ms``: ~11 days."""
MAX_PREFIX_GROUPS = 100_000
"""``prefix_groups``: shared prefixes of a serve run (each one request's at least)."""
MAX_SPREAD = 1.0
"""``prompt_tokens_spread``, ``new_tokens_spread``: below 1 (vLLM's range ratio), so that
the shortest length drawn is above 0."""
MAX_LABEL = 200
"""Characters of a label: a profile's ``name``, a command entry's ``models``."""

MAX_JOBS_DEFAULT = 100_000
MAX_JOBS_ENV = "DLTOP_MAX_JOBS"
"""Overrides the job-count limit (and the config's ``[limits] max_jobs``)."""
LIMITS_KEYS = ("max_jobs",)


def max_jobs(path: Path | None = None) -> int:
    """The most jobs a profile or a campaign may hold: ``$DLTOP_MAX_JOBS``, else the config
    file's ``[limits] max_jobs``, else :data:`MAX_JOBS_DEFAULT`.

    Raises:
        UserError: the variable or the key is not an integer >= 1 (naming which), or the
            config file cannot be read.
    """
    raw = os.environ.get(MAX_JOBS_ENV, "").strip()
    if raw:
        try:
            n = int(raw)
        except ValueError:
            n = 0
        if n < 1:
            raise UserError(f"${MAX_JOBS_ENV}={raw!r}: expected an integer >= 1 (the most "
                            "jobs a campaign may hold)")
        return n
    path = path or config_path()
    data = read_config(path)
    table = (data or {}).get("limits", {})
    if not isinstance(table, dict):
        raise UserError(f"{path}: limits: expected a table [limits]")
    for key in table:
        if key not in LIMITS_KEYS:
            raise UserError(f"{path}: limits.{key}: unknown key (valid here: "
                            f"{', '.join(LIMITS_KEYS)})")
    n = table.get("max_jobs", MAX_JOBS_DEFAULT)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise UserError(f"{path}: limits.max_jobs: expected an integer >= 1, got {n!r}")
    return n


def too_many_jobs(count: int, limit: int) -> str:
    """The reason a plan of ``count`` jobs is refused (``count`` > ``limit``)."""
    return (f"{count} jobs, over the limit of {limit} (set ${MAX_JOBS_ENV} or [limits] "
            "max_jobs in config.toml to allow more; docs/profiles.md#value-ranges)")


def entry_jobs(entry: Mapping[str, Any], lists: Iterable[str], ladder: int) -> int:
    """How many jobs a ``[[matrix]]`` entry (its settings over the defaults) expands to,
    from its lists' lengths and ``repeats``, without making one.

    Args:
        lists: the keys whose list values multiply (the list keys and the sweeps).
        ladder: the devices ``cpu:1..max`` (``cpu:all``) stands for on this host.

    A value of the wrong kind counts as one: its own check, later, says what is wrong.
    """
    n = 1
    for key in lists:
        v = entry.get(key)
        if key == "devices" and isinstance(v, list):
            n *= sum(ladder if isinstance(d, str) and d.strip() in ("cpu:1..max", "cpu:all")
                     else 1 for d in v)
        elif isinstance(v, list):
            n *= len(v)
    repeats = entry.get("repeats")
    if isinstance(repeats, int) and not isinstance(repeats, bool) \
            and 1 < repeats <= MAX_REPEATS:  # else its own check says it is wrong
        n *= repeats
    return n
