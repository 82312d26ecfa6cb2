"""The closed vocabularies that profiles, runners, the engine and the viewers agree on.

Statuses, error kinds and control verbs are ``StrEnum`` classes: a member
equals the string stored in the database (``RunStatus.OK == "ok"``), so rows
read back as plain strings compare with them directly.
"""

import os
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

TRANSFORMER_MODELS: Final = ("gpt-tiny", "gpt2-small", "gpt2-medium", "llama-1b")
"""Decoder-only language models (docs/models.md, "Transformer models"): PyTorch, JAX and
TensorFlow build them alike; CNTK refuses them at load."""
MODELS: Final = ("fcn-s", "fcn-r", "alexnet-s", "alexnet-r", "resnet-50", "resnet-56", "lstm",
                  "lenet", "vgg16", *TRANSFORMER_MODELS)
"""Benchmark models of docs/models.md, in the paper's order, then the thesis's LeNet-5 and
VGG16, then the transformers."""
ATTENTIONS: Final = ("fused", "plain")
"""Transformer attention: the framework's fused kernel, or the unfused softmax(QK^T)V."""

PRECISIONS: Final = ("fp32", "tf32", "fp16", "bf16", "fp8")
"""``fp8``: PyTorch training of the transformers on compute capability 8.9 or later
(torchao's float8 training; docs/profiles.md), refused elsewhere at load or preflight."""
FP8_RECIPES: Final = ("tensorwise", "rowwise")
"""torchao's float8 scaling recipes (``fp8_recipe``): one scale per tensor, or per row."""
DATA_KINDS: Final = ("synthetic", "real")
OPTIMIZERS: Final = ("sgd", "adam", "adamw")
MODES: Final = ("train", "inference", "generate", "serve")
"""``generate`` (transformers only): prefill a prompt, then decode tokens with a KV cache;
``serve`` (``frameworks = ["openai"]`` only): requests to an endpoint that serves."""
OWN_MODEL: Final = tuple(m for m in MODES if m != "serve")
"""The modes in which dltop runs the model itself: a training setting, the precision
(``setting(modes=OWN_MODEL)``) and a FLOPs count say nothing of a served model."""
INPUT_SIZE_MODELS: Final = ("resnet-50", "resnet-56")
"""Models whose image side the ``input_size`` setting may change."""
DATA_LOADERS: Final = ("device", "host")
BATCH_SCALINGS: Final = ("global", "per-device")
EXECUTORS_ENV: Final = "DLTOP_EXECUTORS"
"""More executors, added without a change to dltop: ``name=module:Class`` entries, comma
separated (:mod:`dltop.jobs.executors.pick` loads them)."""


def added_executors(env: Mapping[str, str]) -> dict[str, str]:
    """``DLTOP_EXECUTORS``'s entries in ``env``: name → ``module:Class`` (unchecked)."""
    entries = (e.partition("=") for e in env.get(EXECUTORS_ENV, "").split(","))
    return {name.strip(): target.strip() for name, _, target in entries if name.strip()}


EXECUTORS: Final = tuple(dict.fromkeys(("local", "slurm", *added_executors(os.environ))))
"""Where a job runs: this host (the supervisor's child), a Slurm job (docs/cluster.md),
or an executor ``DLTOP_EXECUTORS`` adds."""


@dataclass(frozen=True)
class Framework:
    """What one framework's runner can do: every check outside ``runners/`` asks this
    table (:data:`CAPABILITIES`), never the framework's name (issue 39)."""

    script: str
    """Its runner, under ``runners/child/``."""
    module: str | None = None
    """The module its interpreter must find (``dltop doctor``), and how to install it."""
    install: str = ""
    modes: tuple[str, ...] = ("train", "inference", "generate")
    precisions: tuple[str, ...] = PRECISIONS[:-1]
    no_fp8: str = ""
    """Why it has no ``fp8`` (empty: ``NAME has no fp8 training path``)."""
    optimizers: tuple[str, ...] = OPTIMIZERS
    transformers: bool = True
    pytorch_settings: bool = False
    """It reads ``channels_last``, ``compile``, ``cudnn_benchmark``, ``cuda_graphs``."""
    program: bool = False
    """It runs the user's own program: dltop's settings, windows and nodes do not apply."""
    keys: str | None = None
    """The profile keys it owns (their group in ``profiles/loader.py``: ``command``'s,
    ``serve``'s): valid only in an entry of it, where no other framework may be."""
    launcher: str | None = None
    """What starts its workers on one host: ``torchrun``, ``mpiexec`` (on PATH: preflight
    checks), or None (the runner's own threads or strategy)."""
    nodes: str | None = None
    """How a job spans Slurm nodes: ``torchrun`` (c10d rendezvous, every node's events
    relayed), ``tf_config`` (one MultiWorkerMirroredStrategy worker per node), or None."""
    nodes_on_cpus: bool = True
    one_node_why: str = ""
    clock_ranks: bool = True
    """Its training ranks can stop together on a clock (a time window applies)."""
    gpu_below: tuple[int, int] | None = None
    """Its GPU build cannot run at or above this compute capability."""


CAPABILITIES: Final[dict[str, Framework]] = {
    "torch": Framework("torch_runner.py", "torch", "pip install torch", precisions=PRECISIONS,
                       pytorch_settings=True, launcher="torchrun", nodes="torchrun"),
    "tensorflow": Framework(
        "tf_runner.py", "tensorflow",
        "pip install tensorflow-cpu (GPU servers: tensorflow[and-cuda])",
        nodes="tf_config", nodes_on_cpus=False),
    # CUDA 10 (CNTK 2.7's GPU build) cannot run on compute capability 8.0 or later
    "cntk": Framework("cntk_runner.py", "cntk", "dltop env setup cntk",
                      modes=("train", "inference"), optimizers=("sgd", "adam"),
                      transformers=False, launcher="mpiexec",
                      one_node_why=": its runner starts mpiexec on one host",
                      clock_ranks=False, gpu_below=(8, 0)),
    "jax": Framework("jax_runner.py", "jax",
                     "pip install 'dltop[jax]' (GPU servers: jax[cuda13] or jax[cuda12])",
                     no_fp8="JAX's fp8 (jax.numpy.float8 dot products) is not built in dltop"),
    "command": Framework("command_runner.py", modes=("train",), transformers=False,
                         program=True, keys="command"),
    "openai": Framework("openai_runner.py", "aiohttp", "pip install aiohttp",
                        modes=("serve",), transformers=False, keys="serve"),
}
"""Each framework's :class:`Framework`, in the order tables list them."""
FRAMEWORKS: Final = tuple(CAPABILITIES)
"""Framework names a profile may use, each with its runner (``dltop.runners``).

``command`` runs the user's own program; ``openai`` sends requests to an
OpenAI-compatible endpoint (``mode = "serve"``, docs/serving.md); ``cntk`` runs in the
environment that ``dltop env setup cntk`` builds."""
TRANSFORMER_FRAMEWORKS: Final = tuple(n for n, f in CAPABILITIES.items() if f.transformers)
"""Frameworks whose runners build the transformer models."""
MULTI_NODE_FRAMEWORKS: Final = tuple(n for n, f in CAPABILITIES.items() if f.nodes)
"""Frameworks one job of which may span several Slurm nodes."""
SERVE_FRAMEWORKS: Final = tuple(n for n, f in CAPABILITIES.items() if f.modes == ("serve",))
"""Frameworks whose runs are serve runs: their iterations are requests, many in flight at
once, each one's seconds its end-to-end latency (no time per iteration)."""


def capabilities(framework: str) -> Framework:
    """``framework``'s :class:`Framework`; a name this version does not know (a stored
    spec edited by hand: preflight says it has no runner) gets the defaults."""
    return CAPABILITIES.get(framework) or Framework("")



class RunStatus(StrEnum):
    """A run's status: ``running`` while it goes, then one of the final ones."""

    RUNNING = "running"
    OK = "ok"
    OOM = "oom"
    UNSUPPORTED = "unsupported"
    DIVERGED = "diverged"
    TIMEOUT = "timeout"
    CRASHED = "crashed"
    CANCELLED = "cancelled"
    UNSATISFIABLE = "unsatisfiable"
    """The host lacks the devices the job asks for (recorded, never run)."""
    SHORT = "short"
    """The program ended by itself with fewer measured iterations than asked (a
    ``command`` job; the count is in the run's ``error_message``)."""
    SETUP_FAILED = "setup_failed"
    """A Slurm job's ``setup`` line failed, so the runner never started (the line is in
    the run's ``error_message``); not retried: the same line would fail again."""


class JobStatus(StrEnum):
    """A job's place in the queue. Once run, a job's status is its latest run's final
    :class:`RunStatus` (``jobs.status`` holds both: see :data:`JOB_STATUSES`)."""

    QUEUED = "queued"
    RUNNING = "running"
    REMOVED = "removed"
    """Taken out of the queue by the user."""


class CampaignStatus(StrEnum):
    """A campaign's status, as its engine records it."""

    QUEUED = "queued"
    RUNNING = "running"
    PAUSED = "paused"
    FINISHED = "finished"
    CANCELLED = "cancelled"
    FAILED = "failed"
    """The engine itself failed (the reason is stored with the campaign)."""
    WAITING = "waiting"
    """Running, but its next run waits for devices another engine on the host leases
    (``campaigns.waiting_for`` says which; see dltop.jobs.lease)."""


class ErrorKind(StrEnum):
    """Why a run failed, stored as ``runs.error_kind``."""

    OOM = "oom"
    UNSUPPORTED = "unsupported"
    DIVERGED = "diverged"
    CRASH = "crash"
    """These four come from the runner's ``error`` event (dltop_protocol.py)."""
    ENGINE_LOST = "engine_lost"
    """The engine died during the run (set when the campaign is resumed)."""
    INTERPRETER = "interpreter"
    """The framework's interpreter could not be resolved: the run never started."""
    RUN_DIR = "run_dir"
    """The run's folder was unsafe (a planted symlink, another user's): the run never
    started and nothing was written (dltop.jobs.rundir)."""
    SETUP = "setup"
    """The runner could not set up what it measures (an ``openai`` run's endpoint refused
    the connection, or its TLS failed): ``setup_failed``, never retried."""
    STORAGE = "storage"
    """The run's files could not be written (permissions, a full disk): it never started."""


class Control(StrEnum):
    """A request a client leaves in ``campaigns.control`` for the campaign's engine.

    The CLI verbs and the stored values are the same words. Databases written
    before they were stored ``run`` for resume: ``Control("run")`` is ``RESUME``.
    """

    PAUSE = "pause"
    RESUME = "resume"
    CANCEL = "cancel"

    @classmethod
    def _missing_(cls, value: object) -> "Control | None":
        return cls.RESUME if value == "run" else None


def control_of(value: str | None) -> Control | None:
    """The request a stored ``control`` value makes: None for none, or for a word this
    version does not know (an engine must not stop on it)."""
    if not value:
        return None
    try:
        return Control(value)
    except ValueError:
        return None


FINAL_RUN_STATUSES: Final = tuple(s for s in RunStatus if s is not RunStatus.RUNNING)
"""Statuses a run can end with."""
FAILURE_STATUSES: Final = frozenset({RunStatus.CRASHED, RunStatus.TIMEOUT, RunStatus.DIVERGED,
                                    RunStatus.SETUP_FAILED})
"""Runs that went wrong (``dltop run`` exits 1); ``oom``, ``unsupported`` and
``unsatisfiable`` are expected benchmark outcomes."""
RESULT_STATUSES: Final = frozenset({RunStatus.OK, RunStatus.SHORT})
"""Runs whose figures are their result. Any other run's median (a cancelled, timed-out
or crashed one's) covers only the iterations before it stopped: the queue, ``dltop
runs`` and ``dltop run``'s lines show it marked ``partial``, or not at all."""
RETRYABLE_STATUSES: Final = FAILURE_STATUSES | {RunStatus.CANCELLED}
"""Jobs that retrying queues again."""
ACTIVE_CAMPAIGN_STATUSES: Final = frozenset(
    {CampaignStatus.QUEUED, CampaignStatus.RUNNING, CampaignStatus.PAUSED,
     CampaignStatus.WAITING})
"""Campaigns not finished: an engine runs them, or should."""
ENDED_CAMPAIGN_STATUSES: Final = frozenset(CampaignStatus) - ACTIVE_CAMPAIGN_STATUSES
"""Campaigns closed: finished, cancelled, or their engine failed."""
JOB_STATUSES: Final = frozenset({*JobStatus, *FINAL_RUN_STATUSES})
"""Every value ``jobs.status`` takes."""
PENDING_JOB_STATUSES: Final = frozenset({JobStatus.QUEUED, JobStatus.RUNNING})
"""Jobs not done yet."""
ERROR_KIND_STATUS: Final[dict[str, RunStatus]] = {
    ErrorKind.OOM: RunStatus.OOM, ErrorKind.UNSUPPORTED: RunStatus.UNSUPPORTED,
    ErrorKind.DIVERGED: RunStatus.DIVERGED, ErrorKind.CRASH: RunStatus.CRASHED,
    ErrorKind.SETUP: RunStatus.SETUP_FAILED}
"""A runner's error kind -> its run's status (an unknown kind is a crash)."""


OPERATOR_PROFILE: Final = "operator profile"
PROFILE_NOT_STORED: Final = f"{OPERATOR_PROFILE} not stored"
"""How a run's note says that its runner profiled (``profile = true``) but the profile
could not be stored: its event refused (a protocol error), or its write failed.
``dltop export --table profile`` finds it there and says so, not "profiling not set"."""
