"""The schema steps themselves: ``_vN(db)`` for each migration, registered in
:data:`dltop.store.migrations.MIGRATIONS` (which holds the machinery: order, records,
the "newer than this dltop" guard). A new step is a function here and one line there.
"""

from __future__ import annotations

import json
from typing import Any


def v1(db: Any) -> None:
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


# The runs columns migration 2 added, frozen: later summary columns come from later
# migrations, each with its own frozen dict, all joined in RUN_TELEMETRY_COLUMNS below.
_V2_RUN_COLUMNS: dict[str, type] = {
    "gpu_util_mean_pct": float, "gpu_util_peak_pct": float, "gpu_mem_peak_bytes": int,
    "gpu_mem_run_peak_bytes": int, "power_mean_w": float, "energy_j": float,
    "energy_source": str, "joules_per_sample": float, "host_cpu_mean_pct": float,
    "rss_peak_bytes": int, "throttle_reasons": str, "sm_clock_start_mhz": float,
    "sm_clock_end_mhz": float, "contaminated": int, "telemetry_simulated": int,
    "sampler_achieved_hz": float,
}


def v2(db: Any) -> None:
    db["gpu_samples"].create(
        {"run_id": int, "t_start_mono_s": float, "gpu_index": int, "n": int,
         "util_mean_pct": float, "util_min_pct": float, "util_max_pct": float,
         "mem_used_max_bytes": int, "power_mean_w": float, "power_min_w": float,
         "power_max_w": float, "energy_j": float, "temperature_max_c": float,
         "sm_clock_mhz": float, "simulated": int},
    )
    db["gpu_samples"].create_index(["run_id"])
    db["host_samples"].create(
        {"run_id": int, "t_start_mono_s": float, "n": int, "cpu_mean_pct": float,
         "cpu_max_core_pct": float, "mem_used_bytes": int, "swap_used_bytes": int,
         "tree_cpu_pct": float, "tree_rss_bytes": int},
    )
    db["host_samples"].create_index(["run_id"])
    for name, kind in _V2_RUN_COLUMNS.items():
        db["runs"].add_column(name, kind)


def v3(db: Any) -> None:
    db["campaigns"].add_column("control", str)
    db["runs"].add_column("cooldown_waited_s", float)
    db["runs"].add_column("start_temp_c", float)


def v4(db: Any) -> None:
    db["campaigns"].add_column("cancel_run_id", int)


def v5(db: Any) -> None:
    db["campaigns"].add_column("pack", int)
    db["runs"].add_column("gpu_indices", str)
    db["runs"].add_column("cpu_affinity", str)
    db["runs"].add_column("concurrent_runs", int)
    db["runs"].add_column("start_power_w", float)


_V6_RUN_COLUMNS: dict[str, type] = {"telemetry_read_errors": int}
"""The telemetry summary column migration 6 added (frozen; it also adds protocol_errors,
which the engine fills, not the telemetry summary)."""


def v6(db: Any) -> None:
    for name, kind in _V6_RUN_COLUMNS.items():
        db["runs"].add_column(name, kind)
    db["runs"].add_column("protocol_errors", int)


def v7(db: Any) -> None:
    from dltop.profiles.jobspec import JobSpec  # 30 ms of imports no other migration needs

    # Recomputed with today's JobSpec: results read identity from spec_json anyway
    # (dltop.results.identity), so this keeps the stored column truthful for SQL users.
    updates = []
    for row in db.query("select id, spec_json from jobs"):
        try:
            key = JobSpec.from_json_dict(json.loads(row["spec_json"])).config_key
        except (KeyError, TypeError, ValueError):
            continue  # an unreadable spec keeps its old key rather than failing the open
        updates.append((key, row["id"]))
    db.conn.executemany("update jobs set config_key = ? where id = ?", updates)


_V8_RUN_COLUMNS: dict[str, type] = {
    "contamination": str, "cpu_foreign_pct": float, "window_s": float, "energy_run_j": float,
    "telemetry_note": str, "tree_cpu_mean_pct": float,
}


def v8(db: Any) -> None:
    db["iterations"].add_column("t_mono_ns", int)
    db["iterations"].add_column("t_wall_s", float)
    db["gpu_samples"].add_column("t_wall_s", float)
    db["host_samples"].add_column("t_wall_s", float)
    for name, kind in _V8_RUN_COLUMNS.items():
        db["runs"].add_column(name, kind)


def v9(db: Any) -> None:
    db["campaigns"].add_column("waiting_for", str)
    db["runs"].add_column("device_lease", str)


_V10_RUN_COLUMNS: dict[str, type] = {
    "host_cpu_user_pct": float, "host_cpu_system_pct": float, "host_cpu_iowait_pct": float,
}


def v10(db: Any) -> None:
    for name in ("cpu_user_pct", "cpu_system_pct", "cpu_iowait_pct"):
        db["host_samples"].add_column(name, float)
    for name, kind in _V10_RUN_COLUMNS.items():
        db["runs"].add_column(name, kind)
    db["environment"].add_column("driver_version", str)


def v11(db: Any) -> None:
    # The engine's next-job query walks this index in queue order and reads the device
    # from it (covering); progress and the end-of-queue check count within it.
    db.execute("create index if not exists idx_jobs_queue on jobs "
               "(campaign_id, status, position, device_kind, device_count, device)")
    db.execute("create index if not exists idx_runs_campaign_status on runs "
               "(campaign_id, status)")
    # The engine's progress (done, total) at every job start, read from one row: counts
    # kept by triggers, so that every writer (engine, viewer edits, SQL) keeps them true.
    for name in ("jobs_counted", "jobs_queued"):
        db["campaigns"].add_column(name, int, not_null_default=0)
    counted = "not in ('removed', 'unsatisfiable')"

    def delta(row: str, sign: str) -> str:
        return (f"jobs_counted = jobs_counted {sign} ({row}.status {counted}), "
                f"jobs_queued = jobs_queued {sign} ({row}.status = 'queued')")

    db.execute(f"create trigger jobs_count_insert after insert on jobs begin "
               f"update campaigns set {delta('new', '+')} where id = new.campaign_id; end")
    db.execute(f"create trigger jobs_count_delete after delete on jobs begin "
               f"update campaigns set {delta('old', '-')} where id = old.campaign_id; end")
    db.execute(f"create trigger jobs_count_update after update of status, campaign_id on jobs "
               f"begin update campaigns set {delta('old', '-')} where id = old.campaign_id; "
               f"update campaigns set {delta('new', '+')} where id = new.campaign_id; end")
    db.execute(f"update campaigns set jobs_counted = (select count(*) from jobs j where "
               f"j.campaign_id = campaigns.id and j.status {counted}), jobs_queued = (select "
               f"count(*) from jobs j where j.campaign_id = campaigns.id and j.status = 'queued')")
    # Exports read runs.telemetry_simulated instead of counting gpu_samples. Before this
    # migration the engine set it only for runs holding a GPU, while a CPU run on
    # simulated GPUs owned simulated rows too: derive it once from the rows.
    db.execute("update runs set telemetry_simulated = 1 where telemetry_simulated is not 1 "
               "and exists (select 1 from gpu_samples g where g.run_id = runs.id "
               "and g.simulated = 1)")


def v12(db: Any) -> None:
    # iterations as a WITHOUT ROWID table: the rows live in the (run_id, idx) key's
    # B-tree itself, so the separate primary-key index (about a third of the table's
    # size) goes. Same columns, same order, same key and foreign key; rows copied.
    # A row with a NULL key (never written by dltop) cannot be in such a table.
    conn = db.conn
    cols = [(r[1], r[2] or "") for r in conn.execute("pragma table_info(iterations)")]
    indexes = [r[0] for r in conn.execute(
        "select sql from sqlite_master where type = 'index' and tbl_name = 'iterations' "
        "and sql is not null")]
    names = ", ".join(f"[{name}]" for name, _ in cols)
    defs = ", ".join(f"[{name}] {kind}".strip() for name, kind in cols)
    conn.execute(f"create table iterations_v12 ({defs}, primary key (run_id, idx), "
                 "foreign key (run_id) references runs(id)) without rowid")
    conn.execute(f"insert into iterations_v12 ({names}) select {names} from iterations "
                 "where run_id is not null and idx is not null")
    conn.execute("drop table iterations")
    conn.execute("alter table iterations_v12 rename to iterations")
    for sql in indexes:
        conn.execute(sql)
    # What exports read from a run's raw rows, kept when `dltop prune` deletes them
    # (dltop.store.retention): the measured iterations, packed; the mean process-tree
    # CPU over every host sample; whether any GPU sample was simulated.
    db["run_archive"].create(
        {"run_id": int, "pruned_at": str, "n_measured": int, "measured_seconds": bytes,
         "measured_samples": bytes, "tree_cpu_all_pct": float, "gpu_simulated": int,
         "iterations": int, "gpu_samples": int, "host_samples": int},
        pk="run_id", foreign_keys=[("run_id", "runs", "id")], not_null={"pruned_at"},
    )


def v13(db: Any) -> None:
    db["runs"].add_column("note", str)
    db["campaigns"].add_column("error_message", str)


def v14(db: Any) -> None:
    # Convergence, inference and operator profiles (issue 17). Both tables are keyed by
    # (run_id, ...) WITHOUT ROWID, as iterations: their rows are read per run.
    db.conn.execute(
        "create table evals (run_id integer not null references runs(id), idx integer not null, "
        "epoch float, accuracy float, perplexity float, loss float, eval_s float, "
        "train_s float, samples integer, t_mono_ns integer, primary key (run_id, idx)) "
        "without rowid")
    db.conn.execute(
        "create table profile_ops (run_id integer not null references runs(id), "
        "rank integer not null, name text, calls integer, self_cpu_ms float, "
        "self_device_ms float, total_ms float, share_pct float, shapes text, "
        "primary key (run_id, rank)) without rowid")
    for name, kind in (("plan_iterations", int), ("profile_steps", int),
                       ("profile_step_ms", float), ("profile_device", str),
                       ("latency_p50_s", float), ("latency_p99_s", float)):
        db["runs"].add_column(name, kind)


_V18_RUN_COLUMNS: dict[str, type] = {"gpu_readings": int, "host_readings": int}
"""The readings behind a run's telemetry figures (issue 30): GPU ticks inside the measured
window (the fewest of its GPUs) and host ticks inside it; dltop.telemetry.readings judges
a figure by them."""

_V19_RUN_COLUMNS: dict[str, type] = {
    "energy_bound_j": float, "cpu_energy_j": float, "dram_energy_j": float,
    "cpu_energy_bound_j": float, "cpu_joules_per_sample": float, "cpu_energy_note": str,
}

RUN_TELEMETRY_COLUMNS: dict[str, type] = {**_V2_RUN_COLUMNS, **_V6_RUN_COLUMNS,
                                          **_V8_RUN_COLUMNS, **_V10_RUN_COLUMNS,
                                          **_V18_RUN_COLUMNS, **_V19_RUN_COLUMNS}
"""Every ``runs`` column a telemetry summary fills (the writer's list,
:data:`dltop.store.telemetry.RUN_COLUMNS`). A migration that adds summary columns
defines its own frozen dict, adds them from it, and joins it here.
"""


def v15(db: Any) -> None:
    # Slurm (issue 15): a Slurm run records its job id, node list, and Slurm's state and
    # reason (PENDING shown as pending, with squeue's reason). The job's node count stays in
    # spec_json, where results read every identity field.
    for name in ("slurm_job_id", "slurm_nodes", "slurm_state", "slurm_reason"):
        db["runs"].add_column(name, str)


def v16(db: Any) -> None:
    # Telemetry from every node of a Slurm job (issue 15): each sample row says which node
    # it came from; NULL is the engine's own host (every local run, and every row before).
    # Neither table has a primary key (rows are keyed by rowid, read by run_id), so two
    # nodes' GPU 0 in the same window are two rows, told apart by this column.
    for table in ("gpu_samples", "host_samples"):
        db[table].add_column("node", str)


def v17(db: Any) -> None:
    # Generation requests (issue 29): one row per request, keyed by (run_id, idx) WITHOUT
    # ROWID like iterations and evals, its inter-token latencies packed in one BLOB
    # (dltop.store.generations says why).
    db.conn.execute(
        "create table generations (run_id integer not null references runs(id), "
        "idx integer not null, warmup integer, ttft_s float, e2e_s float, "
        "prompt_tokens integer, new_tokens integer, batch integer, itl_s blob, "
        "primary key (run_id, idx)) without rowid")


def v18(db: Any) -> None:
    # Figures that refuse to guess (issue 30): each run's summary says how many readings
    # its figures stand on. Runs stored before keep NULL (judged by their window alone).
    for name, kind in _V18_RUN_COLUMNS.items():
        db["runs"].add_column(name, kind)


def v19(db: Any) -> None:
    # Energy at the window's edges and CPU energy (issue 30): the counter's error bound
    # beside energy_j; RAPL package and DRAM energy over the window, its bound, J/sample
    # and why it is n/a. Memory from the kernel and from the framework: wait4's peak RSS
    # of the runner's tree, the framework's own GPU memory peak (the done event's).
    for name, kind in _V19_RUN_COLUMNS.items():
        db["runs"].add_column(name, kind)
    db["runs"].add_column("rss_peak_kernel_bytes", int)
    db["runs"].add_column("gpu_mem_framework_peak_bytes", int)


JOB_CONFIG_COLUMNS = ("framework", "model", "batch_size", "device", "precision", "spec_json")
"""``job_configs``' copy of one job of the configuration (every job of a ``config_key``
has the same identity, so any one of them represents it)."""


def v20(db: Any) -> None:
    # Results at 100 000 queued jobs (issue 32): each configuration's job count and one
    # job of it, kept by triggers, so that an export reads its configurations (a few
    # hundred rows) and the runs that exist instead of every queued job's row (200 MB at
    # 100 000 jobs: a 564-byte config_key and a 1.3 kB spec each). Jobs stored without a
    # config_key (none since migration 5's backfill) are not counted; readers compare the
    # total with the campaign's job count and read the jobs themselves when it differs.
    cols = ", ".join(JOB_CONFIG_COLUMNS)
    new = ", ".join(f"new.{c}" for c in JOB_CONFIG_COLUMNS)
    db.conn.execute(
        "create table job_configs (campaign_id integer not null, config_key text not null, "
        "jobs integer not null, first_position integer, framework text, model text, "
        "batch_size integer, device text, precision text, spec_json text, "
        "primary key (campaign_id, config_key)) without rowid")
    db.conn.execute(
        f"insert into job_configs (campaign_id, config_key, jobs, first_position, {cols}) "
        f"select campaign_id, config_key, count(*), min(position), {cols} from jobs "
        "where config_key is not null group by campaign_id, config_key")
    db.conn.execute(
        "create trigger job_configs_insert after insert on jobs "
        "when new.config_key is not null begin "
        f"insert into job_configs (campaign_id, config_key, jobs, first_position, {cols}) "
        f"values (new.campaign_id, new.config_key, 1, new.position, {new}) "
        "on conflict (campaign_id, config_key) do update set jobs = jobs + 1, "
        "first_position = min(coalesce(first_position, excluded.first_position), "
        "coalesce(excluded.first_position, first_position)); end")
    # A deleted job leaves the copy (its configuration's other jobs are the same) and the
    # first position (an order of first appearance, at worst a little early).
    db.conn.execute(
        "create trigger job_configs_delete after delete on jobs "
        "when old.config_key is not null begin "
        "update job_configs set jobs = jobs - 1 "
        "where campaign_id = old.campaign_id and config_key = old.config_key; "
        "delete from job_configs where campaign_id = old.campaign_id "
        "and config_key = old.config_key and jobs <= 0; end")
    # dltop never moves a job to another campaign or changes its key; SQL that does
    # counts it out of one configuration and into the other.
    db.conn.execute(
        "create trigger job_configs_update after update of campaign_id, config_key on jobs "
        "begin "
        "update job_configs set jobs = jobs - 1 "
        "where campaign_id = old.campaign_id and config_key = old.config_key; "
        "delete from job_configs where campaign_id = old.campaign_id "
        "and config_key = old.config_key and jobs <= 0; "
        f"insert into job_configs (campaign_id, config_key, jobs, first_position, {cols}) "
        f"select new.campaign_id, new.config_key, 1, new.position, {new} "
        "where new.config_key is not null "
        "on conflict (campaign_id, config_key) do update set jobs = jobs + 1; end")


def v21(db: Any) -> None:
    # The readers' shared views (dltop.store.views). A view changed later is a new
    # migration that drops and recreates it: this one creates what VIEWS holds today.
    from dltop.store.views import LATEST_RUNS, create_views

    create_views(db, [LATEST_RUNS])

