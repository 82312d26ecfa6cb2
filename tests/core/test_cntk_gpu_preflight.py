"""CNTK 2.7 on GPUs of compute capability >= 8.0 is refused at preflight, the
capability read from a FAKE NVML (pynvml injected at the hardware boundary)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest
from tests.telemetry.test_nvml import fake_pynvml

from dltop.errors import UserError
from dltop.jobs import campaign
from dltop.profiles.loader import parse
from dltop.store import Store
from dltop.store.db import memory_db
from dltop.telemetry import nvml

PROFILE = """
[[matrix]]
frameworks = ["{fw}"]
models = ["fcn-r"]
batch_sizes = [12]
devices = ["{device}"]
"""


@pytest.fixture
def gpus(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """FAKE NVML: GPUs of the given compute capabilities (None: NVML cannot say)."""
    def go(*caps: tuple[int, int] | None) -> int:
        module = fake_pynvml(instant=True)
        module.nvmlDeviceGetCount = lambda: len(caps)  # type: ignore[attr-defined]

        def capability(h: str) -> tuple[int, int]:
            cap = caps[int(h[1:])]  # the fake's handles are "h0", "h1", ...
            if cap is None:
                raise module.NVMLError_NotSupported("Not Supported")  # type: ignore[attr-defined]
            return cap

        module.nvmlDeviceGetCudaComputeCapability = capability  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "pynvml", module)
        nvml.reset_for_tests()
        return nvml.device_count()

    yield go
    nvml.reset_for_tests()


def plan(fw: str, device: str, n_gpus: int, skip: bool = False) -> campaign.Plan:
    prof = parse(PROFILE.format(fw=fw, device=device), "c.toml", "c")
    return campaign.preflight([prof], n_gpus, skip_unavailable=skip)


def test_cntk_on_a_compute_capability_9_gpu_is_refused_with_the_reason(gpus: Any) -> None:
    n = gpus((9, 0))
    with pytest.raises(UserError) as info:
        plan("cntk", "gpu:1", n)
    msg = str(info.value)
    assert "1 of 1 jobs cannot run on this host" in msg
    assert ("gpu:1 with CNTK: CNTK 2.7's GPU build needs CUDA 10, which cannot run on "
            "compute capability 8.0 or later (A100, H100, H200); this host's GPUs are "
            "compute capability 9.0") in msg


def test_with_skip_unavailable_it_is_stored_unsatisfiable(gpus: Any) -> None:
    n = gpus((8, 0), (8, 0))
    p = plan("cntk", "gpu:1", n, skip=True)
    assert p.problems[0] is not None and "compute capability 8.0" in p.problems[0]
    store = Store(memory_db())
    _, queued = campaign.create(store, p, ["dltop"])
    assert queued == []
    row = next(iter(store.db.query("select status, error_message from runs")))
    assert row["status"] == "unsatisfiable" and "CUDA 10" in row["error_message"]


def test_cntk_on_a_compute_capability_7_gpu_is_allowed(gpus: Any) -> None:
    n = gpus((7, 0))
    p = plan("cntk", "gpu:1", n, skip=True)
    assert p.problems == (None,)  # the CNTK environment of this host resolves


def test_enough_old_gpus_on_a_mixed_host(gpus: Any) -> None:
    n = gpus((9, 0), (7, 5), (7, 0))
    caps = campaign._Capabilities(n)
    ok = parse(PROFILE.format(fw="cntk", device="gpu:2"), "c.toml", "c").jobs[0]
    too_many = parse(PROFILE.format(fw="cntk", device="gpu:3"), "c.toml", "c").jobs[0]
    assert campaign.cntk_gpu_problem(ok, n, caps) is None
    problem = campaign.cntk_gpu_problem(too_many, n, caps)
    assert problem is not None and "compute capability 7.0, 7.5, 9.0" in problem


def test_an_unknown_capability_counts_as_usable(gpus: Any) -> None:
    n = gpus(None)
    job = parse(PROFILE.format(fw="cntk", device="gpu:1"), "c.toml", "c").jobs[0]
    assert campaign.cntk_gpu_problem(job, n, campaign._Capabilities(n)) is None


@pytest.mark.parametrize(("fw", "device"), [("torch", "gpu:1"), ("cntk", "cpu:1")])
def test_other_frameworks_and_cntk_on_cpu_are_not_concerned(gpus: Any, fw: str,
                                                             device: str) -> None:
    n = gpus((9, 0))
    job = parse(PROFILE.format(fw=fw, device=device), "c.toml", "c").jobs[0]
    assert campaign.cntk_gpu_problem(job, n, campaign._Capabilities(n)) is None


def test_too_few_gpus_is_the_gpu_count_checks_to_say(gpus: Any) -> None:
    n = gpus((9, 0))
    p = plan("cntk", "gpu:2", n, skip=True)
    assert p.problems == ("gpu:2 needs 2 GPU(s); this host has 1",)
