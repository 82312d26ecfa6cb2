"""The ``openai`` framework's profile keys (``mode = "serve"``, issue 41).

A ``[[matrix]]`` entry with ``frameworks = ["openai"]`` sends requests to an
OpenAI-compatible endpoint that is already serving (docs/serving.md). Two of its
settings are :class:`~dltop.profiles.jobspec.JobSpec` fields, so that they sweep like
any setting: ``request_rate`` and ``concurrency``. The others are checked here into
the job's ``options`` (every option is identity): the endpoint, the API, the arrival
process, the SLOs, the error budget, the dataset (and the longest prompt it may send:
``max_prompt_tokens``), the tokenizer file, the request fields
that force output lengths (``force_length``), the client processes and the name of the
variable that holds the API key (never the key itself).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

from dltop import catalog
from dltop.childfiles import child_module
from dltop.errors import UserError
from dltop.profiles import fields, servers
from dltop.profiles import limits as L
from dltop.profiles.jobspec import declared

KEYS: Final = ("endpoint", "api", "arrival", "burstiness", "api_key_env", "max_error_rate",
               "slo_ttft_ms", "slo_tpot_ms", "slo_e2e_ms", "dataset", "force_length", "tokenizer",
               "client_processes", "server_scope", "max_prompt_tokens", "prompt_draw")
"""The keys of an ``openai`` entry (besides the settings every entry has)."""
APIS: Final = ("chat", "completions")
ARRIVALS: Final = ("poisson", "constant", "gamma")
SCOPES: Final = ("group", "run")
"""``server_scope``: one server per configuration group (the default), or one per run."""
DRAWS: Final = ("point", "seed")
"""``prompt_draw``: prompts drawn per sweep point (the default), or from ``seed`` alone."""
MAX_ERROR_RATE_DEFAULT: Final = 0.05
"""Above this share of failed measured requests the run fails (``max_error_rate``)."""
CONCURRENCY_DEFAULT: Final = 1
REQUEST_RATE_DEFAULT: Final = "inf"
MAX_CLIENT_PROCESSES: Final = 256
"""The most client processes one serve run's load may be split over."""
SERVING: Final = " or ".join(f'["{n}"]' for n, f in catalog.CAPABILITIES.items()
                             if "serve" in f.modes)
"""The frameworks of ``mode = "serve"``, as an entry names them (``["openai"]``)."""
BATCH: Final = 1
LISTS: Final = {"batch_sizes": [BATCH], "devices": ["cpu:1"]}
"""A request is one sequence, sent from here: ``batch_sizes`` [1] and ``devices``
["cpu:1"] unless the entry sets them."""

NUMBERS: Final[dict[str, fields.Number]] = {
    "burstiness": fields.Number(0.0, L.MAX_BURSTINESS, above=True),
    "max_error_rate": fields.Number(0.0, 1.0),
    "slo_ttft_ms": fields.Number(0.0, L.MAX_SLO_MS, above=True),
    "slo_tpot_ms": fields.Number(0.0, L.MAX_SLO_MS, above=True),
    "slo_e2e_ms": fields.Number(0.0, L.MAX_SLO_MS, above=True),
}
"""The numeric option keys and their ranges (docs/profiles.md#value-ranges)."""

Err = Callable[[str, str], UserError]


def _check(err: Err, key: str, v: Any, check: fields.Check[Any]) -> Any:
    try:
        return check(v)
    except ValueError as exc:
        raise err(key, str(exc)) from None


def endpoint(v: Any) -> str:
    """An ``http://`` or ``https://`` URL with a host, without a trailing slash."""
    if not isinstance(v, str):
        raise ValueError(f"expected a URL string like \"http://127.0.0.1:8000/v1\", got {v!r}")
    parts = urlsplit(v)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"expected an http:// or https:// URL with a host, got {v!r}")
    if parts.username or parts.password:
        raise ValueError("credentials do not belong in the URL (it is stored): name the "
                         "variable that holds the key with api_key_env")
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        raise ValueError(f"the port of {v!r} is not a number from 0 to 65535") from None
    if parts.path.rstrip("/").endswith("/completions"):  # a route pasted whole
        raise ValueError(f"{v!r} names a route: endpoint is the API's base "
                         '("http://HOST:PORT/v1"); api = "chat" or "completions" picks it')
    return v.rstrip("/")


def env_name(v: Any) -> str:
    """An environment variable's name (its value, the key, is read when the run starts)."""
    if not isinstance(v, str) or not v or "=" in v or not v.replace("_", "a").isalnum() \
            or v[0].isdigit():
        raise ValueError(f"expected an environment variable's name (A-Z, 0-9, _), got {v!r}")
    return v


def options(err: Err, loc: Callable[[str], str], merged: Mapping[str, Any],
            profile_dir: Path) -> tuple[tuple[str, Any], ...]:
    """The job options of an ``openai`` entry, checked (defaults filled in).

    Args:
        err: builds the UserError for (key location, message).
        loc: a key's location for messages (``matrix[0].endpoint``).
        merged: the entry's keys over [defaults].
        profile_dir: a relative ``dataset`` is read from here.
    """
    started = merged.get("server") is not None
    if merged.get("endpoint") is None and not started:
        raise err(loc("endpoint"), 'frameworks = ["openai"] needs endpoint = '
                  '"http://HOST:PORT/v1" (a server that is already serving), or server = '
                  '"NAME" (a server dltop starts: docs/serving.md#servers-dltop-starts)')
    out: dict[str, Any] = {}
    if started:  # a template: {host} and {port} are filled in when the server starts
        raw = merged.get("endpoint", servers.ENDPOINT)
        _check(err, loc("endpoint"), raw.replace("{host}", "127.0.0.1").replace("{port}", "1")
               if isinstance(raw, str) else raw, endpoint)
        out["endpoint"] = raw.rstrip("/")
    else:
        out["endpoint"] = _check(err, loc("endpoint"), merged["endpoint"], endpoint)
    out["api"] = _check(err, loc("api"), merged.get("api", "chat"), fields.one_of(APIS))
    out["arrival"] = _check(err, loc("arrival"), merged.get("arrival", "poisson"),
                            fields.one_of(ARRIVALS))
    for key, check in NUMBERS.items():
        if merged.get(key) is not None:
            out[key] = _check(err, loc(key), merged[key], check)
    out.setdefault("max_error_rate", MAX_ERROR_RATE_DEFAULT)
    if "burstiness" in out and out["arrival"] != "gamma":
        raise err(loc("burstiness"), 'burstiness shapes arrival = "gamma" only (poisson is '
                  "gamma with burstiness 1; constant has none)")
    out.setdefault("burstiness", 1.0)
    scope = _check(err, loc("server_scope"), merged.get("server_scope", "group"),
                   fields.one_of(SCOPES))
    if started and scope != "group":  # the default is not stored: the job's identity holds
        out["server_scope"] = scope
    draw = _check(err, loc("prompt_draw"), merged.get("prompt_draw", "point"),
                  fields.one_of(DRAWS))
    if draw != "point":  # the default is not stored: the job's identity holds
        out["prompt_draw"] = draw
    if merged.get("api_key_env") is not None:
        out["api_key_env"] = _check(err, loc("api_key_env"), merged["api_key_env"], env_name)
    if merged.get("force_length") is not None:
        force = _check(err, loc("force_length"), merged["force_length"], force_length)
        if force or started:  # [] with a server: send none of what it accepts
            out["force_length"] = force
    if merged.get("dataset") is not None:
        raw = _check(err, loc("dataset"), merged["dataset"], fields.path)
        path = (profile_dir / Path(raw).expanduser()).resolve()
        if not path.is_file():
            raise err(loc("dataset"), f"no such file: {path} (a JSONL of prompts or a "
                      "ShareGPT-style JSON)")
        why = dataset_problem(str(path))
        if why is not None:
            raise err(loc("dataset"), f"{path}: {why}")
        out["dataset"] = str(path)
        _no_dataset(err, loc, merged)
    if merged.get("tokenizer") is not None:
        out["tokenizer"] = tokenizer(err, loc("tokenizer"), merged["tokenizer"], profile_dir)
    if merged.get("max_prompt_tokens") is not None:
        if "dataset" not in out:
            raise err(loc("max_prompt_tokens"), "max_prompt_tokens filters the prompts of "
                      "a dataset: synthetic prompts are prompt_tokens long")
        out["max_prompt_tokens"] = _check(err, loc("max_prompt_tokens"),
                                          merged["max_prompt_tokens"],
                                          fields.Integer(1, L.MAX_TOKENS))
    if merged.get("client_processes") is not None:
        out["client_processes"] = _check(err, loc("client_processes"),
                                         merged["client_processes"], client_processes)
    return tuple(sorted(out.items()))


def dataset_problem(path: str) -> str | None:
    """Why the ``dataset`` file cannot give prompts (the runner's own reader,
    ``openai_tokens.read_dataset``: not UTF-8, a line not JSON, no prompt), or None. A file
    is read once per version of it (its size and modification time), however many jobs
    name it: a ShareGPT file is tens of megabytes."""
    st = os.stat(path)
    return _dataset_problem(path, (st.st_size, st.st_mtime_ns))


@functools.lru_cache(maxsize=8)
def _dataset_problem(path: str, version: tuple[int, int]) -> str | None:
    try:
        child_module("openai_tokens").read_dataset(path)
    except ValueError as exc:
        return str(exc)
    return None


def force_length(v: Any) -> tuple[str, ...]:
    """The request fields that force each response to ``new_tokens``, sorted: a list of
    :data:`~dltop.profiles.servers.EXTENSIONS`, each once (``[]``: none)."""
    if not isinstance(v, list) or any(f not in servers.EXTENSIONS for f in v) \
            or len(set(v)) != len(v):
        raise ValueError(f"expected a list of distinct request fields out of "
                         f"{', '.join(servers.EXTENSIONS)} ([] for none), got {v!r}")
    return tuple(sorted(v))


def client_processes(v: Any) -> int | str:
    """``"auto"`` or a number of client processes from 1 to :data:`MAX_CLIENT_PROCESSES`."""
    if v == "auto":
        return "auto"
    if isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= MAX_CLIENT_PROCESSES:
        return v
    raise ValueError(f'expected "auto" or an integer >= 1 and <= {MAX_CLIENT_PROCESSES}, '
                     f"got {v!r}")


def tokenizer(err: Err, key: str, v: Any, profile_dir: Path) -> str:
    """A ``tokenizer.json`` the ``tokenizers`` package reads (relative to the profile)."""
    path = (profile_dir / Path(_check(err, key, v, fields.path)).expanduser()).resolve()
    if not path.is_file():
        raise err(key, f"no such file: {path} (a tokenizer.json)")
    try:
        path.open("rb").close()
    except OSError as exc:
        raise err(key, f"cannot read {path}: {exc.strerror}") from None
    from tokenizers import Tokenizer  # here: only profiles that name one pay its import

    try:
        Tokenizer.from_file(str(path))
    except Exception as exc:
        raise err(key, f"{path} is not a tokenizer.json the tokenizers package reads: "
                  f"{exc}") from None
    return str(path)


def entry_options(err: Err, loc: Callable[[str], str], merged: Mapping[str, Any],
                  profile_dir: Path) -> tuple[tuple[str, Any], ...]:
    """The options of an ``openai`` entry (:func:`options`), its batch and devices checked.

    Raises:
        UserError: a batch other than 1, ``cpus:N``, or a key :func:`options` refuses.
    """
    if merged["batch_sizes"] != [BATCH]:
        raise err(loc("batch_sizes"), "a request to an endpoint is one sequence: leave "
                  "batch_sizes out (or [1]); concurrency sets the requests in flight")
    if any(isinstance(d, str) and d.strip().startswith("cpus:") for d in merged["devices"]):
        raise err(loc("devices"), 'frameworks = ["openai"] runs one client process: give '
                  "cpu:N (its threads) or gpu:N (the endpoint's GPUs, sampled by time)")
    return options(err, loc, merged, profile_dir)


def check_job(err: Err, loc: Callable[[str], str], s: dict[str, Any],
              framework: str) -> dict[str, Any]:
    """One job's serve settings with their defaults, checked against its framework.

    Raises:
        UserError: ``mode = "serve"`` without ``frameworks = ["openai"]`` or the other way
            round, serve keys on another mode, a setting a client cannot honour, or
            ``executor = "slurm"`` without a ``server`` dltop starts in the allocation.
    """
    can = catalog.capabilities(framework)
    if "serve" not in can.modes:
        if s["mode"] == "serve":
            raise err(loc("mode"), f'mode = "serve" needs frameworks = {SERVING} (an '
                      "OpenAI-compatible endpoint)")
        for key in declared(fields.GROUP, "serve"):
            if s[key] is not None:
                raise err(loc(key), f'{key} applies to frameworks = {SERVING} '
                          '(mode = "serve") only')
        return s
    entry = f'frameworks = ["{framework}"]'
    if s["mode"] not in can.modes:
        raise err(loc("mode"), f'{entry} takes mode = "{can.modes[0]}" (set it in the '
                  "entry or in [defaults])")
    for key, default in (("epochs", None), ("optimizer", "sgd"), ("profile", False),
                         ("data", "synthetic"), ("data_loader", "device"), ("nodes", 1)):
        if s[key] != default:
            raise err(loc(key), f"{key} does not apply to {entry} (the "
                      "server decides how it runs)")
    if s["executor"] == "slurm" and s["server"] is None:
        raise err(loc("executor"), f'executor = "slurm" with {entry} needs '
                  'server = "NAME": the job starts its server and client in one allocation '
                  "(docs/cluster.md#serve-jobs); an endpoint that already serves is not the "
                  "allocation's, so run the client against it with executor = \"local\"")
    out = dict(s)
    from dltop.profiles import lm  # here: lm imports the runners' catalogue at first use

    if out["prompt_tokens"] is None:
        out["prompt_tokens"] = lm.default_prompt_tokens()
    if out["new_tokens"] is None:
        out["new_tokens"] = lm.default_new_tokens()
    if out["request_rate"] is None:
        out["request_rate"] = REQUEST_RATE_DEFAULT
    if out["concurrency"] is None:
        out["concurrency"] = CONCURRENCY_DEFAULT
    return _workload(err, loc, out)


NONE_WHEN: Final = {"prefix_tokens": 0, "prefix_groups": 1, "prompt_tokens_spread": 0.0,
                    "new_tokens_spread": 0.0}
"""The workload settings' values that mean "none", stored as None: a run that gives them
keeps the identity of one stored before they existed (docs/serving.md#workloads)."""


def _workload(err: Err, loc: Callable[[str], str], out: dict[str, Any]) -> dict[str, Any]:
    if out["prefix_groups"] not in (None, 1) and out["prefix_tokens"] is None:
        raise err(loc("prefix_groups"), "prefix_groups counts shared prefixes: give "
                  "prefix_tokens > 0 (their length) too")
    if out["prefix_tokens"] == 0:  # a sweep's point without a prefix has no groups either
        out["prefix_groups"] = None
    for key, none in NONE_WHEN.items():
        if out[key] == none:
            out[key] = None
    return out


def _no_dataset(err: Err, loc: Callable[[str], str], merged: Mapping[str, Any]) -> None:
    # A dataset's prompts are sent whole: nothing to prefix or to draw a length for.
    for key in ("prefix_tokens", "prompt_tokens_spread"):
        v = merged.get(key)
        if any(x not in (None, 0) for x in (v if isinstance(v, list) else [v])):
            raise err(loc(key), f"{key} shapes synthetic prompts; a dataset's prompts "
                      "are sent whole (leave dataset out, or this key)")


def server_options(err: Err, loc: Callable[[str], str], options: tuple[tuple[str, Any], ...],
                   server: servers.Server) -> tuple[tuple[str, Any], ...]:
    """A job's options with the server dltop starts for it: ``force_length`` is what the
    profile asked, else every field the server accepts (its ``extensions``); an empty
    one is left out.

    Raises:
        UserError: a ``force_length`` field the server does not accept.
    """
    opts = dict(options)
    force = opts.pop("force_length", server.extensions)
    for name in force:
        if name not in server.extensions:
            raise err(loc("force_length"), f"server {server.name!r} does not accept {name} "
                      "(transformers serve refuses unknown fields with 422); give it "
                      f'extensions = ["{name}"] in [servers.NAME] if it does')
    if force:
        opts["force_length"] = tuple(force)
    return tuple(sorted((*opts.items(), *server.options())))
