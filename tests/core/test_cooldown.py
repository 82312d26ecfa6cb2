"""Cooldown between runs: a fixed pause, or until the job's GPUs are cool enough."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dltop.jobs.engine import Engine
from dltop.profiles.loader import parse
from dltop.store import Store, memory_db

STEPS = Path(__file__).resolve().parents[1] / "programs" / "steps.py"


@pytest.fixture
def profile(profile_text: Any) -> Callable[..., str]:
    """Two runs on ``devices``, ``cooldown`` s apart, with ``extra`` TOML lines: a program
    of 10 ms steps (tests/programs/steps.py; the engine's pause is under test)."""
    def text(devices: list[str], cooldown: int, extra: str = "") -> str:
        return profile_text({
            "frameworks": ["command"], "models": ["steps"], "batch_sizes": [8],
            "devices": devices, "iterations": 2, "warmup": 1, "repeats": 2,
            "cooldown_s": cooldown,
            "command": [sys.executable, str(STEPS), "{total}", "0.01"],
        }, extra=extra)

    return text


@pytest.mark.slow
def test_fixed_pause_between_runs_is_recorded(tmp_path: Path, profile: Any) -> None:
    prof = tmp_path / "p.toml"
    prof.write_text(profile(["cpu:1"], 2))
    res = subprocess.run([sys.executable, "-m", "dltop", "run", str(prof), "--db",
                          str(tmp_path / "d.db"), "--headless"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    conn = sqlite3.connect(tmp_path / "d.db")
    waited = [r[0] for r in conn.execute("select cooldown_waited_s from runs order by id")]
    conn.close()
    # The first run starts at once; the second only after the 2 s pause. No upper bound:
    # the pause can only overrun on a loaded machine, and the loop's end is cooldown_s.
    assert waited[0] < 2.0 <= waited[1]


class HotThenCool:
    """Stands in for the sampler's last readings (the hardware boundary)."""

    def __init__(self, cool_after: int = 4, idle_after: int = 0) -> None:
        self.calls = 0
        self.power_calls = 0
        self.cool_after = cool_after
        self.idle_after = idle_after

    def temperatures(self) -> dict[int, float]:
        self.calls += 1
        return {0: 80.0 if self.calls < self.cool_after else 55.0, 1: 50.0}

    def powers(self) -> dict[int, float]:
        self.power_calls += 1
        return {0: 400.0 if self.power_calls < self.idle_after else 90.0, 1: 700.0}


async def test_waits_until_gpus_are_cool(profile: Any) -> None:
    job = parse(profile(["gpu:1"], 30, "cooldown_temp_c = 60"), "p", "p").jobs[0]
    engine = Engine(Store(memory_db()), 1, "x", logs_dir=Path("/nonexistent"),
                    db_label="mem")
    fake: Any = HotThenCool()
    runs = engine._runs  # the run's lifecycle does the cool-down
    runs._sampler = fake  # the cooldown reads only temperatures()
    runs._ran_one = True
    waited, temp, power = await runs._cooldown(job, (0,))
    assert temp == 55.0 and fake.calls >= 4  # polled until the fourth reading was cool
    # three hot polls 0.25 s apart; the reading, not the 30 s cap, ended the wait
    assert 0.5 <= waited < job.cooldown_s
    assert power == 90.0  # GPU 1 (700 W) is not the job's


@pytest.mark.slow  # over 1.5 s on an idle 2-core machine
async def test_waits_until_both_temperature_and_power_settle(profile: Any) -> None:
    job = parse(profile(["gpu:1"], 30, "cooldown_temp_c = 60\ncooldown_power_w = 100"),
                "p", "p").jobs[0]
    assert job.cooldown_power_w == 100.0
    engine = Engine(Store(memory_db()), 1, "x", logs_dir=Path("/nonexistent"),
                    db_label="mem")
    fake: Any = HotThenCool(cool_after=2, idle_after=8)  # cool first, idle much later
    runs = engine._runs
    runs._sampler = fake
    runs._ran_one = True
    waited, temp, power = await runs._cooldown(job, (0,))
    assert (temp, power) == (55.0, 90.0)
    # it kept polling for the power after the GPU was cool, and stopped on that reading
    assert fake.power_calls >= 8 and 1.25 <= waited < job.cooldown_s


def test_bad_cooldown_values(profile: Any) -> None:
    from dltop.errors import UserError

    with pytest.raises(UserError, match="cooldown_s"):
        parse(profile(["cpu:1"], -1), "p", "p")
    with pytest.raises(UserError, match="cooldown_temp_c"):
        parse(profile(["cpu:1"], 1, "cooldown_temp_c = 0"), "p", "p")
    with pytest.raises(UserError, match=r"p: matrix\[0\]\.cooldown_power_w"):
        parse(profile(["cpu:1"], 1, 'cooldown_power_w = "x"'), "p", "p")
