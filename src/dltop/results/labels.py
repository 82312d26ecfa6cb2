"""One run label everywhere: model, framework, batch, device and every identity field that
varies in the set the label is read in.

``torch resnet-50 b256 gpu:1 bf16`` names a configuration of a campaign whose runs differ
in precision; the same job in a campaign of fp32 runs only is ``torch resnet-50 b256
gpu:1``: what every configuration shares is stated once (a caption, the ``constant:``
line), never repeated per label. The varying fields are :func:`dltop.results.identity.
variation`'s, the fields that become row keys of a table, so a label and a table row
name a configuration by the same values. The TUI's queue and run detail, the report's
run figures, picker, captions and ``figures.md``, and ``dltop runs`` all call
:func:`label`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from dltop.profiles import fields
from dltop.profiles.jobspec import JobSpec
from dltop.results import identity, idread
from dltop.store.read import jobs
from dltop.store.read.changes import main_file
from dltop.textsafe import one_line

if TYPE_CHECKING:
    from dltop.store.reader import Db

K = TypeVar("K", bound=Hashable)

BARE = ("precision", "mode")
"""Fields whose value names itself (``bf16``, ``inference``): shown without the field."""
SHORT = {f.name: str(f.metadata[fields.SHORT]) for f in dataclasses.fields(JobSpec)
         if f.metadata.get(fields.SHORT)}
"""Fields shown in a shorter form than ``header value`` (``setting(short=...)``)."""
LAST = (*fields.declaring(dataclasses.fields(JobSpec), fields.LAST), idread.INTERPRETER)
"""How long and where a run ran: after the fields that make the configuration
(``setting(last=True)``)."""


def field_text(name: str, value: Any) -> str:
    """One varying field as a label shows it (empty: nothing to show).

    ``bf16``, ``inference``, ``cuda graphs`` (a flag that is on; off, or a setting at
    its default such as ``compile off``, shows nothing: the label without it says so),
    ``compile default``, ``seq len 1024``, ``40 it``.
    """
    if value is None or value is False or value in identity.QUIET_DEFAULTS.get(name, ()):
        return ""  # a flag off or a setting at its default: the label without it says so
    if value is True:
        return identity.header(name)
    text = identity.shown(name, value)
    if name in BARE:
        return text
    if name in SHORT:
        return SHORT[name].format(text)
    return f"{identity.header(name)} {text}"


def label(ident: Mapping[str, Any], varying: Sequence[str], *, repeat: int | None = None
          ) -> str:
    """``torch resnet-50 b256 gpu:1 bf16 cuda graphs`` (``#2``: the repeat, 0-based).

    Args:
        ident: the configuration's flat identity (:func:`dltop.results.identity.identity_of`).
        varying: the fields that vary in the set shown (:attr:`Variation.fields`).
        repeat: its repeat index, shown ``#N`` (1-based) when given.
    """
    return compose(ident.get("framework"), ident.get("model"), ident.get("batch_size"),
                   ident.get("device"), settings_text(ident, varying), repeat)


def compose(framework: Any, model: Any, batch_size: Any, device: Any, settings: str = "",
            repeat: int | None = None) -> str:
    """The words of :func:`label` from their parts, for a caller that holds a row's
    columns and its :func:`settings_text` rather than an identity (the TUI's queue and
    run detail, the report's run figures): the one place the label's order is written.

    ``framework=None`` leaves the framework out, for a figure whose colour says it.
    """
    parts = [str(framework)] if framework is not None else []
    parts += [str(model), f"b{batch_size}", str(device)]
    if settings:
        parts.append(settings)
    if repeat is not None:
        parts.append(f"#{repeat + 1}")
    return one_line(" ".join(parts))


def settings_text(ident: Mapping[str, Any], varying: Sequence[str]) -> str:
    """The part of :func:`label` after model, framework, batch and device: ``bf16
    channels last 40 it`` (empty when nothing varies), for a caller that shows those
    four from its own columns."""
    names = [n for n in varying if n not in LAST] + [n for n in LAST if n in varying]
    return one_line(" ".join(t for name in names if (t := field_text(name, ident.get(name)))))


def labels(idents: Mapping[K, Mapping[str, Any]]) -> dict[K, str]:
    """Each identity's :func:`label` against the fields that vary among them all."""
    varying = identity.variation(idents.values()).fields
    return {k: label(ident, varying) for k, ident in idents.items()}


def _campaign_variation(db: Db, campaign_ids: Sequence[int]
                        ) -> tuple[dict[int, Mapping[str, Any]], tuple[str, ...]]:
    idents: dict[int, Mapping[str, Any]] = {}
    for cid in campaign_ids:
        # a ReadDb answers the same queries (the TUI's reader thread)
        idents.update(idread.campaign_identities(db, cid))  # type: ignore[arg-type]
    return idents, identity.variation(idents.values()).fields


def run_settings(db: Db, run_ids: Sequence[int]) -> dict[int, str]:
    """Run id → :func:`settings_text` of its job against its campaigns' varying fields."""
    if not run_ids:
        return {}
    rows = jobs.runs_jobs(db, run_ids)
    idents, varying = _campaign_variation(db, sorted({cid for _, _, cid in rows}))
    return {run: settings_text(idents[job], varying) for run, job, _ in rows if job in idents}


_VARYING: dict[tuple[str, int], tuple[tuple[int, int], tuple[str, ...]]] = {}
"""(database file, campaign) → (its jobs' count and last id, the fields varying)."""


def campaign_varying(db: Db, campaign_id: int) -> tuple[str, ...]:
    """The identity fields varying over a campaign's jobs (queued ones too), kept until
    a job is added or removed: a viewer asks at every refresh, and reading the
    identity of every job of a large queue each time would cost it."""
    where = main_file(db) or f"memory:{id(db)}"
    stamp = jobs.jobs_stamp(db, campaign_id)
    known = _VARYING.get((where, campaign_id))
    if known is None or known[0] != stamp:
        # one identity per configuration, not per job: repeats share their stored key
        idents = []
        for r in jobs.configurations(db, campaign_id):
            ident = idread.identity_of_key(r["config_key"], None)
            idents.append(ident or idread.identity_of(r["spec_json"], None))
        _VARYING[(where, campaign_id)] = known = (stamp, identity.variation(idents).fields)
    return known[1]


def job_settings(db: Db, job_ids: Sequence[int], varying: Sequence[str]) -> dict[int, str]:
    """Job id → :func:`settings_text` of its identity (empty when nothing varies)."""
    if not varying or not job_ids:
        return {}
    rows = jobs.job_specs(db, job_ids)
    out = {}
    for r in rows:
        # the stored key is 5 times cheaper to read than the spec (None: an older key)
        ident = idread.identity_of_key(r["config_key"], None) if r["config_key"] else None
        if ident is None:
            ident = idread.identity_of(r["spec_json"], None)
        out[int(r["id"])] = settings_text(ident, varying)
    return out
