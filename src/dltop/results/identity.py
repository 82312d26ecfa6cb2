"""Configuration identity in results: which settings tell the exported configurations apart.

A configuration is its job's identity (:meth:`dltop.profiles.jobspec.JobSpec.identity`:
framework, model, batch, device, precision, data, batch scaling, lr, momentum,
seed, iterations, warm-up, every option) plus the interpreter its run used
(``environment.python_executable``, known only once a run started). Results
read the identity from each job's ``spec_json`` with today's ``JobSpec``, so a
database written before a field existed (its spec lacks the key, which then
takes its default) groups exactly like a new one.

A table shows model, framework and batch as row keys and devices as columns;
:func:`variation` finds which other identity fields take more than one value
in the exported set: those become further row keys (:attr:`Variation.fields`),
the rest is stated once in the caption (:meth:`Variation.caption`). Options are
flattened, one field per option key (``xla``, ``command``...), absent = ``-``.
The interpreter is the one field stated per framework when each framework used
one interpreter (frameworks live in their own environments by design); it is a
row key only when one framework ran under several. Reading the identities of stored
jobs is :mod:`dltop.results.idread`'s; this module says which fields tell a set apart.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from dltop.profiles import fields as declared
from dltop.profiles import servers
from dltop.profiles.jobspec import JobSpec
from dltop.results.idread import (
    INTERPRETER,
    OPTIONS,
    Identity,
    key,
)
from dltop.results.table import Cell, Column, Role

BASE = ("model", "framework", "batch_size")
"""Row keys every table has."""
ENDPOINT = "endpoint"
"""A serve job's option: its URL, or the template of a server dltop starts (:func:`shown`)."""
SERVER = "server"
"""A serve job's server dltop starts, by name (None: the endpoint was already serving)."""
COLUMN = "device"
"""The identity field the pivot spreads over its columns."""
PLACE = "_place"
"""Not an identity field: the host a configuration ran on, which an exported set that
spans hosts adds so that each framework's interpreter is stated per host."""
PREFERRED = declared.declaring(dataclasses.fields(JobSpec), declared.ORDER)
"""Display order of the settings first (``setting(order=N)``: a transformer's lengths
beside its precision); any later identity field follows in declaration order, then the
options by name, then the interpreter."""
HEADERS: dict[str, str] = declared.headers(dataclasses.fields(JobSpec))
"""Column headers the identity fields declare (``setting(header=...)``); any other field
or option key is headed by its name with spaces (:func:`header`)."""
QUIET_DEFAULTS: dict[str, tuple[Any, ...]] = declared.quiet_values(dataclasses.fields(JobSpec))
"""Settings added after tables were first published (issue 17) that a caption leaves out
while every configuration has this value (the behaviour of a job without them); when
they vary they are row keys like any other field. ``optimizer`` is always stated: the
update rule is part of what a time per step measures. ``iterations`` is None only for
epochs jobs (:func:`identity_of`), whose ``epochs`` the caption states instead. The
transformer settings (issue 29: ``seq_len``, ``attention``, ``prompt_tokens``,
``new_tokens``) are None for every other model. The time windows (issue 30: ``min_time_s``,
``warmup_s``) are 0 in every job stored before them; a window in seconds is stated."""

MODES_OF: dict[str, tuple[str, ...]] = {
    f.name: f.metadata[declared.MODES] for f in dataclasses.fields(JobSpec)
    if f.metadata.get(declared.MODES)}
"""The modes a setting applies to (``setting(modes=...)``): a set none of whose
configurations is of those modes does not state it (a serve table has no ``lr``)."""

ROW_KEYS: tuple[str, ...] = declared.declaring(dataclasses.fields(JobSpec), declared.ROW_KEY)
"""Identity fields after the device in every summary and comparison table's row keys,
varying or not (``setting(row_key=True)``: ``precision``)."""

def modes(idents: Iterable[Identity]) -> set[str]:
    """The modes of the configurations ``idents`` (``train``, ``serve``...)."""
    return {str(ident.get("mode", "train")) for ident in idents}


def row_keys_of_other_modes(in_modes: set[str]) -> set[str]:
    """The declared row keys (:data:`ROW_KEYS`) that no configuration of ``in_modes``
    has: a set of serve runs has no ``precision`` column (the server's is its own)."""
    return {name for name in ROW_KEYS
            if in_modes and not in_modes & set(MODES_OF.get(name, in_modes))}


def fmt_value(value: Any) -> str:
    """One identity value as a table shows it: ``0.01``, ``true``, an argv joined, ``-``."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list | tuple):
        return shlex.join(str(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    return str(value)


def endpoint_text(value: Any, server: Any = None) -> str:
    """A serve job's ``endpoint`` as a table shows it: its URL, or for a server dltop
    starts (its template, ``http://{host}:{port}/v1``, filled in as each server starts:
    the run's environment holds the URL) ``started by dltop (server NAME)``, with the
    scheme, host or path where the profile gave another than
    :data:`~dltop.profiles.servers.ENDPOINT`'s (``https``, ``path /api/v1``)."""
    if not isinstance(value, str) or "{port}" not in value:
        return fmt_value(value)
    said = [] if server is None else [f"server {fmt_value(server)}"]
    # each part said where it is not the default's: an https template is not "path /v1"
    for part, default, text in zip(_parts(value), _parts(servers.ENDPOINT),
                                   ("{}", "host {}", "path {}"), strict=True):
        if part != default:
            said.append(text.format(part or "/"))
    return "started by dltop" + (f" ({', '.join(said)})" if said else "")


def _parts(template: str) -> tuple[str, str, str]:
    """An endpoint template's scheme, host (before ``:{port}``) and path (after it)."""
    head, _, path = template.partition("{port}")
    scheme, _, host = head.partition("://")
    return scheme, host.removesuffix(":"), path


def shown(name: str, value: Any, server: Any = None) -> str:
    """:func:`fmt_value`, the endpoint of a server dltop starts as :func:`endpoint_text`
    says it (``server``: the configuration's, when known)."""
    return endpoint_text(value, server) if name == ENDPOINT else fmt_value(value)


def header(name: str) -> str:
    """A field's column header (``batch scaling``, ``lr``, ``xla``...)."""
    return HEADERS.get(name, name.replace("_", " "))


def value_cells(values: Iterable[Any], texts: Iterable[str] | None = None
                ) -> tuple[Cell, ...]:
    """Row-key cells of identity values as displayed (``texts``, else :func:`fmt_value`'s);
    numbers keep their value for CSV/JSON."""
    values = tuple(values)
    shown_texts = (fmt_value(v) for v in values) if texts is None else texts
    return tuple(Cell(t, v if isinstance(v, int | float) and not isinstance(v, bool)
                      else None) for v, t in zip(values, shown_texts, strict=True))


def row_key_cells(ident: Identity) -> tuple[Cell, ...]:
    """The cells of the declared row keys (:data:`ROW_KEYS`) of one configuration."""
    return value_cells(ident.get(name) for name in ROW_KEYS)


def sort_value(value: Any) -> tuple[int, float, str]:
    """Orders values of any JSON type: absent first, then numbers, then text."""
    if value is None:
        return (0, 0.0, "")
    if isinstance(value, int | float) and not isinstance(value, bool):
        return (1, float(value), "")
    return (2, 0.0, fmt_value(value))


@dataclass(frozen=True)
class Variation:
    """What tells an exported set of configurations apart, and what they share."""

    fields: tuple[str, ...]
    """Identity fields beyond model, framework, batch and device that vary: row keys."""
    constant: tuple[tuple[str, Any], ...]
    """``(field, value)`` shared by every configuration (unknown interpreters left out)."""
    per_framework: tuple[tuple[str, Any], ...] = ()
    """``(framework, interpreter)`` when each framework used one interpreter, several
    in all (stated in the caption rather than as a row key)."""

    def values(self, ident: Identity) -> tuple[Any, ...]:
        """The varying fields' values of one configuration (``None``: absent)."""
        return tuple(ident.get(f) for f in self.fields)

    def texts(self, ident: Identity) -> tuple[str, ...]:
        """The varying fields' values of one configuration as displayed."""
        return tuple(shown(f, ident.get(f), ident.get(SERVER)) for f in self.fields)

    def group(self, ident: Identity) -> str:
        """The varying fields' values as one canonical string (a row's grouping key)."""
        return key({"v": list(self.values(ident))})

    def cells(self, ident: Identity) -> tuple[Cell, ...]:
        """Row-key cells of the varying fields: numbers keep their value for CSV/JSON."""
        return value_cells(self.values(ident), self.texts(ident))

    def columns(self) -> tuple[Column, ...]:
        """Row-key columns of the varying fields (JSON key: the field's name)."""
        return tuple(Column(f, header(f), Role.KEY) for f in self.fields)

    def without(self, *names: str) -> Variation:
        """The same variation with ``names`` not row keys (a table that always shows them)."""
        return Variation(tuple(f for f in self.fields if f not in names), self.constant,
                         self.per_framework)

    def sort_key(self, ident: Identity) -> tuple[tuple[int, float, str], ...]:
        """Orders configurations that share model, framework and batch."""
        return tuple(sort_value(v) for v in self.values(ident))

    @property
    def headers(self) -> tuple[str, ...]:
        """Column headers of the varying fields."""
        return tuple(header(f) for f in self.fields)

    def caption(self) -> str:
        """``constant: precision fp32, lr 0.01, ...; interpreter: torch /usr/bin/python3``.

        Empty when nothing is constant and no interpreter is stated per framework. An
        optional setting left unset in every job (``epochs``, ``input_size``...) is not
        listed: it names no value (the JSON export keeps it, as null).
        """
        parts = []
        stated = [(name, value) for name, value in self.constant if value is not None]
        server = dict(self.constant).get(SERVER)
        if stated:
            parts.append("constant: " + ", ".join(
                f"{header(name)} {shown(name, value, server)}" for name, value in stated))
        if self.per_framework:
            parts.append("interpreter: " + ", ".join(
                f"{fw} {fmt_value(path)}" for fw, path in self.per_framework))
        return "; ".join(parts)

    def as_json(self) -> dict[str, Any]:
        """``{"varying": [...], "constant": {...}, "interpreters": {...}}`` for JSON exports."""
        return {"varying": list(self.fields), "constant": dict(self.constant),
                "interpreters": dict(self.per_framework)}


def _order(names: Iterable[str]) -> list[str]:
    present = set(names)
    first = [n for n in PREFERRED if n in present]
    later = [n for n in JobSpec.identity_fields()
             if n != OPTIONS and n in present and n not in first]
    known = {*first, *later, INTERPRETER}
    options = sorted(n for n in present if n not in known)
    tail = [INTERPRETER] if INTERPRETER in present else []
    return first + later + options + tail


def variation(identities: Iterable[Identity]) -> Variation:
    """Which identity fields vary over ``identities`` (flat, from :func:`identity_of`).

    Model, framework, batch and device are never listed: every table keys by them; nor
    is a setting of other modes than the configurations' (:data:`MODES_OF`).
    """
    idents = list(identities)
    in_modes = modes(idents)
    names = {n for ident in idents for n in ident
             if in_modes & set(MODES_OF.get(n, in_modes))} - {*BASE, COLUMN, PLACE}
    varying: list[str] = []
    constant: list[tuple[str, Any]] = []
    per_framework: list[tuple[str, Any]] = []
    for name in _order(names):
        distinct = _distinct(idents, name)
        if len(distinct) == 1:
            value = _plain(next(iter(distinct)))
            if value not in QUIET_DEFAULTS.get(name, ()):
                constant.append((name, value))
        elif len(distinct) > 1:
            by_fw = _by_framework(idents, name)
            if name == INTERPRETER and by_fw is not None:
                per_framework = by_fw
            else:
                varying.append(name)
    return Variation(tuple(varying), tuple(constant), tuple(per_framework))


_SCALARS = frozenset({str, int, float, bool, type(None)})


def _distinct(idents: Sequence[Identity], name: str) -> set[tuple[str, Any]]:
    """The :func:`_canon` keys of ``name``'s values (the interpreter's None left out):
    deduplicated by a set first (a report asks this of 10 000 configurations, often),
    unless the set could merge values JSON tells apart (1, 1.0, True) or cannot hold them."""
    values = [ident.get(name) for ident in idents]
    if name == INTERPRETER:
        values = [v for v in values if v is not None]
    try:
        raw = set(values)
    except TypeError:  # a list or dict value
        return {_canon(v) for v in values}
    types = set(map(type, values))  # of every value: the set kept one of 1 and 1.0
    if not types <= _SCALARS or len(types & {int, float, bool}) > 1:
        return {_canon(v) for v in values}
    return {_canon(v) for v in raw}


def _by_framework(idents: Sequence[Identity], name: str) -> list[tuple[str, Any]] | None:
    """``[(framework, value)]`` when each framework has one known value of ``name``
    (per host, ``framework @host``, when the identities carry :data:`PLACE`)."""
    seen: dict[str, set[tuple[str, Any]]] = {}
    for ident in idents:
        if ident.get(name) is not None:
            fw = str(ident["framework"])
            if ident.get(PLACE):
                fw += f" @{ident[PLACE]}"
            seen.setdefault(fw, set()).add(_canon(ident[name]))
    if any(len(v) > 1 for v in seen.values()):
        return None
    return [(fw, _plain(next(iter(v)))) for fw, v in sorted(seen.items())]


def _canon(value: Any) -> tuple[str, Any]:
    """A hashable value equal for values of equal canonical JSON: scalars as (type,
    value), which is 20 times cheaper than a JSON dump per field and configuration."""
    if value is None or isinstance(value, str | int | float):  # bool is an int subclass
        return (type(value).__name__, value)
    return ("json", key({"v": value}))


def _plain(canon: tuple[str, Any]) -> Any:
    """The JSON value of a :func:`_canon` key (a tuple option reads back as a list)."""
    kind, value = canon
    return json.loads(value)["v"] if kind == "json" else value

