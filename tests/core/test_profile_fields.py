"""What ``profiles/fields.py`` reads off a JobSpec-like dataclass's declarations: the
import-time check and the JSON decoders (``JobSpec`` runs both when imported)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from dltop.profiles.device import DeviceSpec
from dltop.profiles.fields import (
    IDENTITY,
    check_declarations,
    integer,
    json_decoders,
    optional,
    setting,
)
from dltop.profiles.jobspec import JobSpec
from dltop.profiles.slurm import SlurmSettings


def test_a_field_without_identity_or_quiet_fails_naming_it() -> None:
    @dataclasses.dataclass(frozen=True)
    class NoIdentity:
        ok: int = setting(1, integer(1, 10), identity=False)
        bare: int = 0

    @dataclasses.dataclass(frozen=True)
    class NoQuiet:
        unsaid: int = setting(1, integer(1, 10), identity=True)

    with pytest.raises(TypeError, match=r"NoIdentity fields \['bare'\] do not declare identity"):
        check_declarations(NoIdentity)
    @dataclasses.dataclass(frozen=True)
    class Unbounded:  # issue 38: a numeric setting with no range could take NaN or 1e308
        wait_s: float = setting(0.0, lambda v: float(v), identity=False)
        cap: int | None = setting(None, optional(lambda v: int(v)), identity=False)

    with pytest.raises(TypeError, match=r"NoQuiet identity settings \['unsaid'\] .* quiet="):
        check_declarations(NoQuiet)
    with pytest.raises(TypeError, match=r"Unbounded numeric settings \['wait_s', 'cap'\] have "
                       "no range"):
        check_declarations(Unbounded)
    check_declarations(JobSpec)


def test_decoders_follow_the_types_and_refuse_one_without_a_codec() -> None:
    @dataclasses.dataclass(frozen=True)
    class Plain:
        n: int = dataclasses.field(default=0, metadata={IDENTITY: True})
        cap: int | None = setting(None, optional(integer(1, 10)), identity=False)
        every: int | str | None = dataclasses.field(default=None, metadata={IDENTITY: True})

    dec = json_decoders(Plain)
    assert (dec["n"]("3"), dec["cap"](None), dec["cap"](2.0)) == (3, None, 2)
    assert dec["every"]("epoch") == "epoch"

    @dataclasses.dataclass(frozen=True)
    class Opaque:
        where: DeviceSpec = dataclasses.field(default=DeviceSpec("cpu", 1),
                                              metadata={IDENTITY: True})

    with pytest.raises(TypeError, match=r"Opaque.where: no JSON decoder .*give it a codec"):
        json_decoders(Opaque)


def test_a_job_with_its_parts_round_trips_through_spec_json() -> None:
    # DeviceSpec and SlurmSettings live in their own modules, re-exported from model.
    job = JobSpec("p", "torch", "fcn-r", 8, DeviceSpec.parse("gpu:2"), 0, nodes=2,
                  executor="slurm", slurm=SlurmSettings(partition="gpu", parallel=3))
    back = JobSpec.from_json_dict(json.loads(json.dumps(job.to_json_dict())))
    assert back == job and back.slurm is not None and back.slurm.parallel == 3
