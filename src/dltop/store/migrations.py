"""Schema migrations, applied in order when a database is opened.

Each migration is a function of a sqlite-utils ``Database`` registered with
:func:`migration`; ``schema_migrations`` records which have run. Never edit a
released migration: append a new one. Other store modules (telemetry, scaling)
register theirs by importing this registry and appending a higher version.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

Migration = Callable[[Any], None]
MIGRATIONS: dict[int, tuple[str, Migration]] = {}


def migration(version: int, name: str) -> Callable[[Migration], Migration]:
    """Register ``fn`` as schema migration ``version``."""

    def register(fn: Migration) -> Migration:
        if version in MIGRATIONS:
            raise RuntimeError(f"duplicate migration version {version}")
        MIGRATIONS[version] = (name, fn)
        return fn

    return register


@migration(1, "campaigns, jobs, runs, iterations, environment")
def _v1(db: Any) -> None:
    db["campaigns"].create(
        {
            "id": int, "name": str, "profiles": str, "argv": str, "status": str,
            "created_at": str, "started_at": str, "finished_at": str,
            "host": str, "dltop_version": str, "engine_pid": int,
            "engine_start_time": float,
        },
        pk="id", not_null={"name", "status", "created_at"},
    )
    db["jobs"].create(
        {
            "id": int, "campaign_id": int, "position": int, "status": str,
            "profile": str, "framework": str, "model": str, "batch_size": int,
            "device": str, "device_kind": str, "device_count": int, "repeat": int,
            "iterations": int, "warmup": int, "precision": str, "data": str,
            "batch_scaling": str, "timeout_s": float, "config_key": str, "spec_json": str,
        },
        pk="id", foreign_keys=[("campaign_id", "campaigns", "id")],
        not_null={"campaign_id", "status", "framework", "model", "batch_size", "device"},
    )
    db["jobs"].create_index(["campaign_id", "position"])
    db["runs"].create(
        {
            "id": int, "job_id": int, "campaign_id": int, "attempt": int, "status": str,
            "started_at": str, "finished_at": str, "wall_s": float,
            "pid": int, "pgid": int, "proc_start_time": float, "exit_code": int,
            "error_kind": str, "error_message": str, "log_path": str, "log_tail": str,
            "framework_version": str, "device_name": str, "param_count": int,
            "flops_per_sample": float, "samples_per_iter": int,
            "n_iterations": int, "median_s": float, "mean_s": float, "p10_s": float,
            "p90_s": float, "cv": float, "samples_per_s": float, "noisy": int,
            "final_loss": float,
        },
        pk="id",
        foreign_keys=[("job_id", "jobs", "id"), ("campaign_id", "campaigns", "id")],
        not_null={"job_id", "campaign_id", "attempt", "status"},
    )
    db["runs"].create_index(["campaign_id"])
    db["runs"].create_index(["job_id"])
    db["iterations"].create(
        {"run_id": int, "idx": int, "seconds": float, "samples": int, "warmup": int,
         "loss": float},
        pk=("run_id", "idx"), foreign_keys=[("run_id", "runs", "id")],
    )
    db["environment"].create(
        {
            "run_id": int, "host": str, "os": str, "cpu_model": str,
            "physical_cores": int, "logical_cores": int, "python_version": str,
            "python_executable": str, "framework": str, "framework_version": str,
            "blas": str, "threads": int, "thread_env": str, "cuda_version": str,
            "cudnn_version": str, "device_name": str, "extra": str,
        },
        pk="run_id", foreign_keys=[("run_id", "runs", "id")],
    )


@migration(3, "campaigns.control (pause/resume/cancel); runs cooldown before start")
def _v3(db: Any) -> None:
    db["campaigns"].add_column("control", str)
    db["runs"].add_column("cooldown_waited_s", float)
    db["runs"].add_column("start_temp_c", float)


@migration(4, "campaigns.cancel_run_id: cancel one run, the queue goes on")
def _v4(db: Any) -> None:
    db["campaigns"].add_column("cancel_run_id", int)


@migration(5, "packing: campaigns.pack; runs record their GPUs, CPUs and concurrent runs; "
              "cooldown by power: runs.start_power_w")
def _v5(db: Any) -> None:
    db["campaigns"].add_column("pack", int)
    db["runs"].add_column("gpu_indices", str)
    db["runs"].add_column("cpu_affinity", str)
    db["runs"].add_column("concurrent_runs", int)
    db["runs"].add_column("start_power_w", float)


@migration(6, "failures counted, not silent: runs.telemetry_read_errors, runs.protocol_errors")
def _v6(db: Any) -> None:
    db["runs"].add_column("telemetry_read_errors", int)
    db["runs"].add_column("protocol_errors", int)


def apply(db: Any) -> list[int]:
    """Apply every registered migration the database lacks; return the versions applied."""
    if "schema_migrations" not in db.table_names():
        db["schema_migrations"].create(
            {"version": int, "name": str, "applied_at": str}, pk="version"
        )
    done = {r["version"] for r in db["schema_migrations"].rows}
    applied = []
    for version in sorted(MIGRATIONS):
        if version in done:
            continue
        name, fn = MIGRATIONS[version]
        with db.conn:
            fn(db)
            db["schema_migrations"].insert(
                {"version": version, "name": name,
                 "applied_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            )
        applied.append(version)
    return applied
