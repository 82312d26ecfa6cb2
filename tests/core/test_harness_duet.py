"""benchmarks/harness_duet.py: the bare loop and dltop's runner sharing one core.

The benchmark's ratio is only as good as its matching of the two sides in time: these
tests hold the overlap rule, and run one real round (PyTorch, a small batch) to check
that the bare loop stops when told, stamps its steps on the runner's clock, and that
both sides' steps land in one shared window on the CPU dltop pinned.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import harness_duet  # noqa: E402

from dltop.jobs.environment import core_order  # noqa: E402


def test_only_steps_wholly_inside_the_overlap_count() -> None:
    steps = [(0.0, 1.0), (1.0, 2.0), (2.0, 3.0), (3.0, 4.0)]
    assert harness_duet._inside(steps, 0.5, 3.5) == [1.0, 1.0]
    assert harness_duet._inside(steps, 1.0, 3.0) == [1.0, 1.0]
    assert harness_duet._inside(steps, 5.0, 6.0) == []


def test_the_round_ratio_is_dltop_over_bare() -> None:
    r = harness_duet.Round(cpu=0, overlap_s=10.0, dltop_steps=20, bare_steps=21,
                           dltop_mean_s=0.103, bare_mean_s=0.1)
    assert r.ratio == pytest.approx(1.03)


def test_median_interval_holds_the_median_and_narrows_with_agreement() -> None:
    lo, hi = harness_duet.median_interval([0.99, 1.0, 1.01, 1.0, 0.995, 1.005])
    assert lo <= 1.0 <= hi
    assert hi - lo <= 0.02
    wide = harness_duet.median_interval([0.8, 1.2, 0.9, 1.1, 1.0, 0.85])
    assert wide[1] - wide[0] > hi - lo


@pytest.mark.slow
def test_one_real_round_shares_the_pinned_core(tmp_path: Path) -> None:
    cpu = core_order()[0]
    r = harness_duet.duet_round("torch", "fcn-r", 16, iterations=15, warmup=2,
                                cpu=cpu, workdir=tmp_path)
    assert r is not None, "the two sides' measured windows did not overlap"
    assert r.cpu == cpu
    assert r.dltop_steps >= harness_duet.MIN_STEPS
    assert r.bare_steps >= harness_duet.MIN_STEPS
    # Same work on one core, fair shares: the sides agree to well within a factor.
    assert 0.5 < r.ratio < 2.0
    assert (tmp_path / "stop").exists()
    # The runner alone, by hand, on that round's spec: its iter events on stderr.
    alone = harness_duet.duet_round("torch", "fcn-r", 16, iterations=15, warmup=2,
                                    cpu=cpu, workdir=tmp_path, side="runner")
    assert alone is not None and alone.dltop_steps >= harness_duet.MIN_STEPS
    assert 0.5 < alone.ratio < 2.0


def test_a_runner_round_needs_a_dltop_round_first(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="needs a dltop round"):
        harness_duet._runner_side("torch", tmp_path)


@pytest.mark.slow
def test_a_control_round_compares_two_bare_loops(tmp_path: Path) -> None:
    r = harness_duet.duet_round("torch", "fcn-r", 16, iterations=15, warmup=2,
                                cpu=core_order()[0], workdir=tmp_path, side="control")
    assert r is not None
    assert r.dltop_steps >= harness_duet.MIN_STEPS
    assert not (tmp_path / "duet.db").exists()  # no dltop run in a control round
    assert 0.5 < r.ratio < 2.0
