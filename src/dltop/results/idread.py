"""Reading configuration identities of stored jobs (:mod:`dltop.results.identity`).

A job's flat identity comes from its stored ``config_key`` (its identity as JSON) when
that key has today's identity fields, else from its ``spec_json`` parsed with today's
``JobSpec``; the interpreter is its latest run's. :func:`resolve` gives a campaign's
rows theirs, one parse per configuration, and :func:`resolve_keyed` their canonical
keys too, without one JSON encoding per row. Everything here is importable from
:mod:`dltop.results.identity` as well.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import fields
from typing import TYPE_CHECKING, Any

from dltop.profiles.fields import GROUP, declaring
from dltop.profiles.jobspec import JobSpec, identity_key
from dltop.store.read import jobs

if TYPE_CHECKING:  # annotations only: sqlite-utils costs ~0.1 s to import (store.reader)
    import sqlite_utils

INTERPRETER = "interpreter"
OPTIONS = "options"
LM_FIELDS = declaring(fields(JobSpec), GROUP, "lm")
"""The transformer settings: None (left out of a flat identity) for the other models."""

SYSTEM = "system"
"""The site of ``dltop run --system``: None (left out of a flat identity) without one."""

FP8_RECIPE = "fp8_recipe"
"""torchao's float8 recipe: None (left out of a flat identity) but for fp8 jobs."""

WINDOW_FIELDS = declaring(fields(JobSpec), GROUP, "window")
"""The time windows: 0 (left out of a flat identity) where a run measured counts only."""

Identity = Mapping[str, Any]
"""An identity, flat: one entry per field and per option key, plus the interpreter."""


def identity_of(spec_json: str, interpreter: str | None) -> dict[str, Any]:
    """The flat identity of a stored job run under ``interpreter`` (``None``: unknown).

    Raises:
        ValueError: ``spec_json`` is not JSON.
        KeyError: a field without a default is missing from it.
    """
    return _flat(JobSpec.from_json_dict(json.loads(spec_json)).identity(), interpreter)


def identity_of_key(config_key: str, interpreter: str | None) -> dict[str, Any] | None:
    """:func:`identity_of` read from a job's stored ``config_key`` (its identity as
    JSON: 5 times cheaper than parsing its spec), or None when the key was written
    with other identity fields than today's (an older dltop: its spec fills the
    defaults of fields added since).
    """
    stored = json.loads(config_key)
    names = _identity_fields()
    if not isinstance(stored, dict) or len(stored) != len(names) or \
            any(name not in stored for name in names):
        return None
    return _flat({name: stored[name] for name in names}, interpreter)


@functools.cache
def _identity_fields() -> tuple[str, ...]:
    return JobSpec.identity_fields()  # fixed by the class: not 10 000 walks of its fields


def _flat(ident: dict[str, Any], interpreter: str | None) -> dict[str, Any]:
    for name in (*LM_FIELDS, SYSTEM, FP8_RECIPE):
        # Absent, not null, for the models without them: an exported identity of a
        # CNN reads as it did before the transformers existed (and a run without
        # --system as it did before systems).
        if ident.get(name) is None:
            ident.pop(name, None)
    for name in WINDOW_FIELDS:
        # Absent when 0 (counts only), as in every job stored before issue 30.
        if not ident.get(name):
            ident.pop(name, None)
    if ident.get("epochs") is not None:
        # An epochs job's length is its epochs (the runner counts the steps from the
        # training set): the spec's iterations are the unused default, not a claim.
        ident["iterations"] = None
    options = ident.pop(OPTIONS, {})
    if options.get("arrival", "gamma") != "gamma":
        # a serve job's profile stores burstiness 1 whatever its arrival: it shapes
        # gamma's gaps only, and a caption stating it for poisson or constant misleads
        options = {k: v for k, v in options.items() if k != "burstiness"}
    ident.update(options)
    ident[INTERPRETER] = interpreter
    return ident


def key(ident: Identity) -> str:
    """Canonical JSON of a (flat) identity: the grouping key of a configuration."""
    return identity_key(ident)


def resolve(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The flat identities of job rows given in queue order (each with ``config_key``,
    ``spec_json`` and ``python_executable``: the interpreter of its latest run, or None).

    A row whose interpreter is unknown (queued, or its run died before its first
    message) takes the interpreter of the first row of the same identity that has
    one, so an unfinished repeat stays with its configuration instead of making a
    configuration of its own. Rows of one ``config_key`` (the stored identity) share
    one parsed spec and one key: a campaign of 100 000 jobs parses a spec per
    configuration, not per job.
    """
    return resolve_keyed(rows)[0]


def resolve_keyed(rows: Iterable[Mapping[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """:func:`resolve`, and each identity's :func:`key`: its key without the interpreter
    (computed once per configuration) with the interpreter put in, not each encoded
    again (10 000 configurations: 0.2 s)."""
    parsed: dict[str, tuple[dict[str, Any], str]] = {}
    idents: list[dict[str, Any]] = []
    bare: list[str] = []  # each row's identity key without the interpreter
    for r in rows:
        ck = r["config_key"]
        if ck is None:
            ident = identity_of(r["spec_json"], r["python_executable"])
            bare.append(key({**ident, INTERPRETER: None}))
        else:
            if ck not in parsed:
                first = identity_of_key(ck, None) or identity_of(r["spec_json"], None)
                parsed[ck] = (first, key(first))
            ident = {**parsed[ck][0], INTERPRETER: r["python_executable"]}
            bare.append(parsed[ck][1])
        idents.append(ident)
    known: dict[str, str] = {}
    for ident, b in zip(idents, bare, strict=True):
        if ident[INTERPRETER]:
            known.setdefault(b, ident[INTERPRETER])
    for ident, b in zip(idents, bare, strict=True):
        if not ident[INTERPRETER]:
            ident[INTERPRETER] = known.get(b)
    keys: dict[tuple[str, Any], str] = {}  # one string per configuration, not per row
    out = []
    for ident, b in zip(idents, bare, strict=True):
        memo = (b, ident[INTERPRETER])
        out.append(keys.get(memo) or keys.setdefault(memo, _with_interpreter(b, ident)))
    return idents, out


_NULL = json.dumps({INTERPRETER: None}, separators=(",", ":"))[1:-1]  # "interpreter":null


def _with_interpreter(bare: str, ident: Identity) -> str:
    """:func:`key` of ``ident`` from ``bare``, its key with a null interpreter: the
    keys are sorted, so only the interpreter's entry differs (where the text of that
    entry occurs once: a nested option could hold it too)."""
    interpreter = ident[INTERPRETER]
    if interpreter is None:
        return bare
    if bare.count(_NULL) != 1:
        return key(ident)
    return bare.replace(_NULL, f'"{INTERPRETER}":' + json.dumps(interpreter, ensure_ascii=False))


def campaign_identities(db: sqlite_utils.Database, campaign_id: int) -> dict[int, dict[str, Any]]:
    """Every job of a campaign → its flat identity, in queue order (:func:`resolve`).

    This reads every job, queued or not: results read :func:`ran_identities` and
    count the jobs never run per configuration instead.
    """
    rows = jobs.campaign_specs(db, campaign_id)
    return {int(r["id"]): ident for r, ident in zip(rows, resolve(rows), strict=True)}


def ran_identities(db: sqlite_utils.Database, campaign_id: int) -> dict[int, dict[str, Any]]:
    """The jobs of a campaign that have a run → their flat identity, in queue order.

    Reads the runs that exist (their latest attempt per job), never the queue: the
    same identities as :func:`campaign_identities` for these jobs, at a cost that
    follows the runs.
    """
    rows = jobs.campaign_specs(db, campaign_id, ran=True)
    return {int(r["id"]): ident for r, ident in zip(rows, resolve(rows), strict=True)}


def run_identities(db: sqlite_utils.Database, run_ids: Sequence[int]) -> dict[int, dict[str, Any]]:
    """Runs → the flat identity of their job under the interpreter each run used."""
    return {run_id: identity_of(r["spec_json"], r["python_executable"])
            for run_id, r in jobs.run_specs(db, run_ids).items()}
