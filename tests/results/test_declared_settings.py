"""A job setting is declared once: how results show it comes from its declaration.

``setting(..., quiet=, header=, row_key=)`` in ``profiles/jobspec.py`` is the one place;
``identity.QUIET_DEFAULTS``, ``HEADERS`` and ``ROW_KEYS`` and the summary's and
comparison's key columns are derived from it. These tests fail for a new identity
setting that does not say whether a caption states it, or whose header loses its unit.
"""

from __future__ import annotations

import dataclasses
import re

from dltop.profiles import fields as declared
from dltop.profiles.fields import integer, setting
from dltop.profiles.jobspec import JobSpec
from dltop.profiles.loader import parse
from dltop.results import comparetable, identity, idread, summary
from dltop.results.queries import CampaignRow

UNIT = re.compile(r"_(s|ms|w|j|c|pct|bytes|mhz)$")
"""Field-name unit suffixes (the house rule: units in field names)."""
PROFILE = ('[[matrix]]\nframeworks = ["torch"]\nmodels = ["fcn-r"]\nbatch_sizes = [8]\n'
           'devices = ["cpu:1"]\n')


def _identity_settings() -> list[dataclasses.Field[object]]:
    return [f for f in dataclasses.fields(JobSpec)
            if declared.CHECK in f.metadata and f.metadata[declared.IDENTITY] is not False]


def test_every_identity_setting_declares_whether_a_caption_states_it() -> None:
    assert not declared.undeclared(dataclasses.fields(JobSpec))

    @dataclasses.dataclass(frozen=True)
    class Later:  # a setting added without saying: the import-time check names it
        said: int = setting(1, integer(1, 9), identity=True, quiet=True)
        unsaid: int = setting(1, integer(1, 9), identity=True)
        budget: int = setting(1, integer(1, 9), identity=False)

    assert declared.undeclared(dataclasses.fields(Later)) == ["unsaid"]
    assert declared.quiet_values(dataclasses.fields(Later)) == {"said": (1,)}


def test_quiet_defaults_and_headers_are_the_declarations() -> None:
    quiet = {f.name: f for f in _identity_settings() if f.metadata[declared.QUIET]}
    assert set(identity.QUIET_DEFAULTS) == set(quiet)
    for name, f in quiet.items():
        values = identity.QUIET_DEFAULTS[name]
        if f.metadata[declared.QUIET] is True:
            assert f.default in values, name  # a job without the setting: quiet
    assert identity.QUIET_DEFAULTS["weight_decay"] == (0, 0.0)  # 0 and 0.0 alike
    assert identity.ROW_KEYS == ("precision",)
    names = [f.name for f in dataclasses.fields(JobSpec)
             if f.metadata[declared.IDENTITY] is not False]
    heads = [identity.header(n) for n in names]
    assert len(set(heads)) == len(heads), heads  # two fields never share a header
    for name in names:  # a unit in the name is in the header too
        unit = UNIT.search(name)
        if unit:
            assert f"({unit.group(1)})" in identity.header(name), name


def test_a_caption_states_exactly_the_settings_declared_loud() -> None:
    job = parse(PROFILE, "d.toml", "d").jobs[0]
    ident = idread.identity_of(json_spec(job), "/usr/bin/python3")
    var = identity.variation([ident])
    stated = {name for name, _ in var.constant} - {idread.INTERPRETER}
    loud = {f.name for f in _identity_settings() if f.metadata[declared.QUIET] is False}
    # every loud setting with a value is stated, a quiet one only off its quiet values
    assert loud - {n for n in loud if ident.get(n) is None} <= stated
    assert stated - loud == {n for n, values in identity.QUIET_DEFAULTS.items()
                             if n in ident and ident[n] not in values}  # iterations: 50
    assert "iterations" in stated and "channels_last" not in stated


def test_the_declared_row_keys_follow_the_device_in_every_table() -> None:
    camp = CampaignRow(1, "a", "finished", "2026-11-26T00:00:00Z", None, "h")
    for cols in (summary.columns(),
                 comparetable.compare_table([], camp, camp, "time", 0.05).columns):
        keys = [c.key for c in cols]
        at = keys.index("device") + 1
        assert keys[at:at + len(identity.ROW_KEYS)] == list(identity.ROW_KEYS)
        assert [c.header for c in cols[at:at + len(identity.ROW_KEYS)]] == \
            [identity.header(n) for n in identity.ROW_KEYS]


def json_spec(job: JobSpec) -> str:
    import json

    return json.dumps(job.to_json_dict())
