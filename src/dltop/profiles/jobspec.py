"""Validated, frozen profile and job specifications.

These are the values that cross from ``profiles/`` into ``jobs/`` and onto the
runner's command line. Units are in the field names. A job's parts have their own
modules (:mod:`dltop.profiles.device`, the ``[slurm]`` table in
:mod:`dltop.profiles.slurm`) and are re-exported here, where ``JobSpec`` users
import them; what a field declares, and the JSON decoding read off those
declarations, is :mod:`dltop.profiles.fields`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import Field, dataclass, field, fields
from typing import Any

from dltop import catalog
from dltop.profiles import limits as L
from dltop.profiles.device import DeviceSpec
from dltop.profiles.fields import (
    CHECK,
    CODEC,
    COLUMN,
    IDENTITY,
    KEY,
    Number,
    NumberOr,
    boolean,
    check_declarations,
    declaring,
    every,
    fraction,
    integer,
    json_decoders,
    label,
    number,
    one_of,
    optional,
    path,
    seconds,
    setting,
)
from dltop.profiles.references import Reference, references_from_json, references_to_json
from dltop.profiles.slurm import SlurmSettings


@dataclass(frozen=True)
class JobSpec:
    """One configuration to run once: the unit the queue holds and a runner executes.

    Adding a field is one edit here (see docs/architecture.md): ``setting(...)``
    makes it a profile key with its default and check, ``column`` stores it in
    the ``jobs`` table, ``identity`` says whether it tells configurations apart
    (and, for an identity setting, ``quiet``/``header``/``row_key`` how results show
    it: :mod:`dltop.profiles.fields`), and the runner's spec.json carries every field.
    """

    profile: str = field(metadata={COLUMN: True, IDENTITY: False})
    framework: str = field(metadata={COLUMN: True, IDENTITY: True})
    model: str = field(metadata={COLUMN: True, IDENTITY: True})
    batch_size: int = field(metadata={COLUMN: True, IDENTITY: True})
    device: DeviceSpec = field(metadata={
        COLUMN: lambda d: {"device": d.label, "device_kind": d.kind, "device_count": d.count},
        CODEC: (lambda d: {"kind": d.kind, "count": d.count},
                lambda j: DeviceSpec(j["kind"], int(j["count"]))),
        IDENTITY: lambda d: d.label,
    })
    repeat: int = field(metadata={COLUMN: True, IDENTITY: False})
    """0-based repeat of the configuration (the profile key ``repeats`` counts them)."""
    iterations: int = setting(50, integer(1, L.MAX_ITERATIONS), column=True, identity=True,
                              quiet=(None,), order=11, short="{} it", last=True, shown=True)
    """Measured iterations per run (identity: the measured window is what a result is of)."""
    warmup: int = setting(10, integer(0, L.MAX_ITERATIONS), column=True, identity=True, quiet=False,
                          order=13, short="{} warm-up", last=True, shown=True)
    """Iterations run first and excluded from statistics."""
    min_time_s: float = setting(0.0, seconds, identity=True, quiet=True,
                                header="min time (s)", sweep=6, group="window", order=12,
                                short="min {} s", last=True, shown=True)
    """Measure past ``iterations`` until the measured window has lasted this long (0:
    counts only). A profile that does not set it gets ``window.DEFAULT_MIN_TIME_S``;
    0 here is also what a job stored before the setting existed did."""
    warmup_s: float = setting(0.0, seconds, identity=True, quiet=True,
                              header="warm-up (s)", sweep=7, group="window", order=14,
                              short="warm-up {} s", last=True)
    """Warm up past ``warmup`` iterations until this long has passed since the first."""
    timeout_s: float = setting(900.0, number(positive=True, maximum=L.MAX_TIMEOUT_S),
                              column=True, identity=False, shown=True)
    """Wall-clock budget of one run, start-up included."""
    precision: str = setting("fp32", one_of(catalog.PRECISIONS), column=True, identity=True,
                             quiet=False, row_key=True, order=1, shown=True,
                             modes=catalog.OWN_MODEL)
    data: str = setting("synthetic", one_of(catalog.DATA_KINDS), column=True, identity=True,
                        quiet=False, order=6, shown=True, modes=catalog.OWN_MODEL)
    data_dir: str | None = setting(None, optional(path), identity=False, shown=True)
    """Required with ``data = "real"`` (the loader checks and expands it). Not identity:
    it says where the model's dataset lives on this host, not which dataset it is."""
    batch_scaling: str = setting("global", one_of(catalog.BATCH_SCALINGS), column=True,
                                 identity=True, quiet=False, order=7, modes=catalog.OWN_MODEL)
    lr: float = setting(0.01, number(positive=True, maximum=L.MAX_LR), identity=True, quiet=False,
                        sweep=2, order=8, modes=catalog.OWN_MODEL)
    momentum: float = setting(0.0, number(positive=False, maximum=1.0), identity=True,
                              quiet=False, sweep=3, order=9, modes=catalog.OWN_MODEL)
    seed: int = setting(0, integer(0, L.MAX_SEED), identity=True, quiet=False, order=10, last=True)
    optimizer: str = setting("sgd", one_of(catalog.OPTIMIZERS), identity=True, quiet=False,
                             sweep=1, modes=catalog.OWN_MODEL)
    """``sgd`` (with ``momentum``), ``adam`` or ``adamw``; docs/profiles.md has each
    framework's equivalent. ``lr``, ``momentum``, ``weight_decay`` and ``optimizer``
    may be lists in a profile: each value is a configuration."""
    weight_decay: float = setting(0.0, number(positive=False, maximum=1.0), identity=True,
                                  quiet=True, sweep=4, modes=catalog.OWN_MODEL)
    """L2 penalty for ``sgd``/``adam`` (added to the gradient), decoupled for ``adamw``."""
    mode: str = setting("train", one_of(catalog.MODES), identity=True, quiet=True)
    """``train`` (forward, backward, update), ``inference`` (forward only) or, for the
    transformers, ``generate`` (prefill, then a KV-cached decode loop)."""
    epochs: int | None = setting(None, optional(integer(1, L.MAX_EPOCHS)), identity=True,
                                quiet=True, shown=True)
    """Convergence runs: whole passes over the training set instead of ``iterations``."""
    eval_every: int | str | None = setting(None, optional(every(L.MAX_ITERATIONS)),
                                           identity=True, quiet=True)
    """Evaluate on the test set every N iterations or every ``"epoch"`` (real data only;
    default: every epoch when ``epochs`` is set, never otherwise)."""
    target_accuracy: float | None = setting(None, optional(fraction), identity=False)
    """Accuracy (0, 1] for time-to-accuracy; not identity: it reads the same runs."""
    target_perplexity: float | None = setting(
        None, optional(number(positive=True, maximum=L.MAX_PERPLEXITY)), identity=False)
    """Perplexity (> 0) for time-to-perplexity (language models); not identity either."""
    shuffle: bool | None = setting(None, optional(boolean), identity=True, quiet=(None, False))
    """Reshuffle the training set every epoch (default: true for real data)."""
    op_profile: bool = setting(False, boolean, identity=False, key="profile")
    """Profile a few extra steps after the measured ones (profile key ``profile``):
    never part of the measured times, so not identity."""
    input_size: int | None = setting(None, optional(integer(8, L.MAX_INPUT_SIZE)),
                                     identity=True, quiet=True)
    """Image side for the ResNets (e.g. ResNet-50 at 32); default the model's own."""
    data_loader: str = setting("device", one_of(catalog.DATA_LOADERS), identity=True, quiet=True)
    """``device``: batches made on the device once; ``host``: each step copies a batch
    from host memory (pinned on CUDA), so the copy is measured."""
    loader_workers: int = setting(0, integer(0, L.MAX_LOADER_WORKERS), identity=True,
                                 quiet=True)
    """Background workers preparing real-data batches (``data_loader = "host"``)."""
    channels_last: bool = setting(False, boolean, identity=True, quiet=True, group="pytorch")
    """PyTorch, image models: NHWC memory format for the model and its input batches."""
    torch_compile: str = setting(
        "off", one_of(("off", "default", "reduce-overhead", "max-autotune")),
        identity=True, quiet=True, header="compile", key="compile", group="pytorch")
    """PyTorch: ``torch.compile`` mode (profile key ``compile``), or ``off``. Compiling
    happens before the first iteration; its time is reported apart (``compile_s``)."""
    cudnn_benchmark: bool = setting(True, boolean, identity=True, quiet=True, group="pytorch")
    """PyTorch on CUDA: ``torch.backends.cudnn.benchmark`` (autotuned convolutions)."""
    cuda_graphs: bool = setting(False, boolean, identity=True, quiet=True, group="pytorch")
    """PyTorch on CUDA: capture the step in a CUDA graph replayed each iteration, the
    batch copied into static buffers; elsewhere the run ends ``unsupported``."""
    fp8_recipe: str | None = setting(None, optional(one_of(catalog.FP8_RECIPES)),
                                     identity=True, quiet=True, header="fp8 recipe")
    """``precision = "fp8"``: torchao's float8 scaling, ``tensorwise`` (the loader's
    default) or ``rowwise``; None for every other precision (:mod:`dltop.profiles.fp8`)."""
    seq_len: int | None = setting(None, optional(integer(1, L.MAX_TOKENS)), identity=True,
                                  quiet=True, group="lm", order=2)
    """Transformers: tokens per training (or inference) sequence; the loader fills in the
    model's default (docs/models.md). Samples are tokens: batch x seq_len per step."""
    attention: str | None = setting(None, optional(one_of(catalog.ATTENTIONS)), identity=True,
                                    quiet=True, group="lm", order=5)
    """Transformers: ``fused`` (the framework's fused attention) or ``plain`` (unfused
    math); the loader fills in ``fused``. None for the other models."""
    prompt_tokens: int | None = setting(None, optional(integer(1, L.MAX_TOKENS)), identity=True,
                                        quiet=True, header="prompt", group="lm", order=3,
                                        modes=("generate", "serve"))
    """``mode = "generate"``: tokens of each prompt (prefill); the loader's default 128."""
    new_tokens: int | None = setting(None, optional(integer(1, L.MAX_TOKENS)), identity=True,
                                     quiet=True, group="lm", order=4,
                                     modes=("generate", "serve"))
    """``mode = "generate"``: tokens decoded after the prompt; the loader's default 128."""
    request_rate: float | str | None = setting(
        None, optional(NumberOr(0.0, L.MAX_REQUEST_RATE, above=True, also=("inf",))),
        identity=True, quiet=True, header="rate (req/s)", sweep=8, group="serve",
        codec=(lambda v: v, lambda v: v if v is None or isinstance(v, str) else float(v)))
    """``mode = "serve"``: requests per second of the open-loop arrivals, or ``"inf"`` (all
    at once, ``concurrency`` permitting); the loader's default ``"inf"``."""
    concurrency: int | None = setting(None, optional(integer(1, L.MAX_CONCURRENCY)),
                                      identity=True, quiet=True, sweep=9, group="serve")
    """``mode = "serve"``: the most requests in flight; the loader's default 1."""
    server: str | None = setting(None, optional(label), identity=True, quiet=True, sweep=10,
                                 group="serve")
    """``mode = "serve"``: the server dltop starts for the run (``[servers.NAME]`` or a
    preset, :mod:`dltop.profiles.servers`); None: the endpoint is already serving."""
    prefix_tokens: int | None = setting(None, optional(integer(0, L.MAX_TOKENS)),
                                        identity=True, quiet=True, sweep=11, group="serve")
    """``mode = "serve"``: tokens of the shared prefix each synthetic prompt starts with,
    added to its own ``prompt_tokens`` (vLLM's ``--random-prefix-len``); None: none (the
    loader stores 0 as None, so a run without a prefix keeps its identity)."""
    prefix_groups: int | None = setting(None, optional(integer(1, L.MAX_PREFIX_GROUPS)),
                                        identity=True, quiet=True, sweep=12, group="serve")
    """``mode = "serve"``: distinct shared prefixes, request ``i`` taking the ``i mod N``-th
    (SGLang's ``generated-shared-prefix`` groups); None: one."""
    prompt_tokens_spread: float | None = setting(
        None, optional(Number(0.0, L.MAX_SPREAD, below=True)), identity=True, quiet=True,
        sweep=13, group="serve")
    """``mode = "serve"``: each request's own prompt length drawn uniformly from
    ``[prompt_tokens(1-r), prompt_tokens(1+r)]`` (vLLM's ``--random-range-ratio``);
    None: every prompt ``prompt_tokens``."""
    new_tokens_spread: float | None = setting(
        None, optional(Number(0.0, L.MAX_SPREAD, below=True)), identity=True, quiet=True,
        sweep=14, group="serve")
    """``mode = "serve"``: each request's ``max_tokens`` drawn as ``prompt_tokens_spread``
    draws its prompt; None: every request ``new_tokens``."""
    shape: str | None = setting(None, optional(one_of(catalog.TRANSFORMER_MODELS)),
                                identity=True, quiet=True, group="serve")
    """``mode = "serve"``: which of dltop's own transformer models the server serves (the
    served name in ``models`` is free-form): ``dltop export --table overhead`` sets the
    run beside ``generate`` runs of that model. Identity: two runs that claim different
    models are never repeats of one configuration; None: not said."""
    nodes: int = setting(1, integer(1, L.MAX_NODES), identity=True, quiet=True, sweep=5)
    """Hosts the job spans; ``device`` is per node (``nodes > 1`` needs ``executor = "slurm"``)."""
    executor: str = setting("local", one_of(catalog.EXECUTORS), identity=True, quiet=True)
    """``local`` (this host) or ``slurm`` (one Slurm job per run; see ``slurm``). Identity:
    a compute node is other hardware than the host the engine runs on."""
    system: str | None = field(default=None, metadata={IDENTITY: True})
    """The site (``dltop run --system NAME``, a ``[systems.NAME]`` table of the config) the
    job ran on, or None. Identity, like the executor: two systems' runs never pool."""
    options: tuple[tuple[str, Any], ...] = field(default=(), metadata={
        CODEC: (dict, lambda j: tuple(sorted(
            (k, tuple(v) if isinstance(v, list) else v) for k, v in j.items()))),
        # every option key, present or later added, is identity
        IDENTITY: lambda o: {k: list(v) if isinstance(v, tuple) else v for k, v in o},
    })
    """Runner switches (``xla``, ``inject``, a command's argv), sorted by name."""
    retries: int = setting(0, integer(0, L.MAX_RETRIES), identity=False)
    """Extra attempts for a run that ends ``crashed`` (never for oom, timeout, ...)."""
    cooldown_s: float = setting(0.0, number(positive=False, maximum=L.MAX_COOLDOWN_S),
                                identity=False)
    """Longest pause before the run (fixed pause without ``cooldown_temp_c``)."""
    cooldown_temp_c: float | None = setting(
        None, optional(number(positive=True, maximum=L.MAX_TEMP_C)), identity=False)
    """GPU jobs: start once every GPU of the job is at or below this temperature."""
    cooldown_power_w: float | None = setting(
        None, optional(number(positive=True, maximum=L.MAX_POWER_W)), identity=False)
    """GPU jobs: start once every GPU of the job draws at most this power."""
    slurm: SlurmSettings | None = field(default=None, metadata={
        CODEC: (lambda s: None if s is None else s.to_json_dict(),
                lambda j: None if j is None else SlurmSettings.from_json_dict(j)),
        IDENTITY: False,
    })
    """The profile's ``[slurm]`` table, on jobs with ``executor = "slurm"`` (else None)."""
    references: tuple[Reference, ...] = field(default=(), metadata={
        CODEC: (references_to_json, references_from_json),
        IDENTITY: False,
    })
    """The performance references that apply to this configuration on its system, resolved
    at load (``[references]``; :mod:`dltop.profiles.references`). Not identity: they judge
    the result, they do not change it."""

    def identity(self) -> dict[str, Any]:
        """The identity fields as plain JSON values, in declaration order.

        Two jobs are repeats of one configuration exactly when their identities
        are equal. The interpreter, known only when a run starts, is added by
        :mod:`dltop.results.identity`.
        """
        out: dict[str, Any] = {}
        for f in fields(self):
            decl = f.metadata[IDENTITY]
            if decl is True:
                out[f.name] = getattr(self, f.name)
            elif callable(decl):
                out[f.name] = decl(getattr(self, f.name))
        return out

    @classmethod
    def identity_fields(cls) -> tuple[str, ...]:
        """Names of the identity fields, in declaration order."""
        return tuple(f.name for f in fields(cls) if f.metadata[IDENTITY] is not False)

    @property
    def config_key(self) -> str:
        """The identity as canonical JSON (sorted keys, no spaces), shared by its repeats."""
        return identity_key(self.identity())

    @property
    def world_size(self) -> int:
        """Data-parallel workers over all nodes: the device's workers on each node."""
        return self.device.workers * self.nodes

    @property
    def per_device_batch(self) -> int:
        """Samples each device processes per step (global batch split over all workers)."""
        if self.batch_scaling == "global":
            return self.batch_size // self.world_size
        return self.batch_size

    @property
    def samples_per_iter(self) -> int:
        """Samples one training step consumes across all devices."""
        if self.batch_scaling == "per-device":
            return self.batch_size * self.world_size
        return self.batch_size

    @property
    def units_per_iter(self) -> int:
        """What one iteration's throughput counts, all devices: samples, or for the
        transformers tokens (sequences x ``seq_len``; generate: sequences x
        ``new_tokens``, the tokens a request generates). The runners report the same
        in each ``iter`` event's ``samples``; ``runs.samples_per_iter`` stores it."""
        if self.mode in ("generate", "serve") and self.new_tokens:
            return self.samples_per_iter * self.new_tokens
        if self.seq_len and self.model in catalog.TRANSFORMER_MODELS:
            return self.samples_per_iter * self.seq_len
        return self.samples_per_iter

    def describe(self) -> str:
        """A short human label, e.g. ``torch fcn-r b1024 cpu:2 #1``.

        A transformer's batch carries its sequence length (``torch gpt2-small b16x1024
        gpu:1 #1``), a generate job its prompt and new tokens (``b8 gen128+128``), a serve
        job also its request rate and concurrency (``b1 gen128+128 8 req/s c16``).
        """
        nodes = f" x{self.nodes} nodes" if self.nodes > 1 else ""
        batch = f"b{self.batch_size}"
        if self.seq_len is not None:
            batch += f"x{self.seq_len}"
        if self.prompt_tokens is not None and self.new_tokens is not None:
            batch += f" gen{self.prompt_tokens}+{self.new_tokens}"
        if self.mode == "serve":  # the load's sweep keys: else a rate sweep's lines are alike
            rate = self.request_rate
            batch += f" {rate if isinstance(rate, str) else f'{rate:g}'} req/s c{self.concurrency}"
        return (f"{self.framework} {self.model} {batch} "
                f"{self.device.label}{nodes} #{self.repeat + 1}")

    def columns(self) -> dict[str, Any]:
        """This job's columns of the ``jobs`` table (the store adds campaign, position, status)."""
        row: dict[str, Any] = {}
        for f in fields(self):
            column = f.metadata.get(COLUMN)
            if callable(column):
                row.update(column(getattr(self, f.name)))
            elif column:
                row[f.name] = getattr(self, f.name)
        row["config_key"] = self.config_key
        row["spec_json"] = json.dumps(self.to_json_dict())
        return row

    def to_json_dict(self) -> dict[str, Any]:
        """Plain-JSON form, the runner's job spec (protocol v1)."""
        d = {}
        for f in fields(self):
            value = getattr(self, f.name)
            codec = f.metadata.get(CODEC)
            d[f.name] = codec[0](value) if codec else value
        d["v"] = 1
        d["per_device_batch"] = self.per_device_batch
        d["samples_per_iter"] = self.samples_per_iter
        return d

    @classmethod
    def from_json_dict(cls, d: dict[str, Any]) -> JobSpec:
        """Inverse of :meth:`to_json_dict`; a key missing from an older spec takes its default.

        Raises:
            KeyError: a field without a default is missing.
        """
        kw = {name: decode(d[name]) for name, decode in _DECODERS.items() if name in d}
        return cls(**kw)


def identity_key(identity: Mapping[str, Any]) -> str:
    """Canonical JSON of an identity: equal identities give equal strings."""
    return json.dumps(identity, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


# A field that forgets a declaration fails every import, not a results table later.
check_declarations(JobSpec)
_DECODERS = json_decoders(JobSpec)
"""How each field is read back from spec.json, derived from its type (or codec)."""


def settings() -> dict[str, Field[Any]]:
    """The JobSpec fields that are profile settings, by profile key, in declaration order."""
    return {f.metadata.get(KEY) or f.name: f for f in fields(JobSpec) if CHECK in f.metadata}


def declared(what: str, value: Any = None) -> tuple[str, ...]:
    """The settings that declare ``what`` (``fields.SWEEP``, ``fields.GROUP`` equal to
    ``value``...), by profile key: every list of settings is read off their declarations
    (:func:`dltop.profiles.fields.declaring`)."""
    keys = {f.name: key for key, f in settings().items()}
    return tuple(keys[name] for name in declaring(settings().values(), what, value))


@dataclass(frozen=True)
class Profile:
    """A validated profile: where it came from and the jobs it expands to."""

    name: str
    description: str
    source: str
    jobs: Sequence[JobSpec]
    """In queue order; from the loader a :class:`~dltop.profiles.joblist.JobList`
    (configurations times repeats, each job made when read)."""
    pack: bool = False
    """Run jobs at once on disjoint devices (see :mod:`dltop.jobs.allocator`)."""
