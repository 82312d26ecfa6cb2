"""Command jobs: each timing mode and unit against a program that prints like a real one.

Every program (tests/programs/cmd_*.py) writes the seconds it really measured
for each step to a truth file; what dltop stored must match within 2 %: step by
step where the program prints each step, block by block (the block's mean)
where one line covers several steps.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from .conftest import RunJob, assert_close, program

pytestmark = pytest.mark.slow





def block_means(truth: list[float], ends: list[int]) -> list[float]:
    """Each step's value when a line covers the steps up to each of ``ends`` (1-based)."""
    out, start = [], 0
    for end in ends:
        block = truth[start:end]
        out += [sum(block) / len(block)] * len(block)
        start = end
    return out


def test_seconds_per_step(tmp_path: Path, command_job: RunJob) -> None:
    truth = tmp_path / "truth"
    r = command_job(program("cmd_seconds.py", "{total}", truth),
                    iteration_regex=r"took (?P<seconds>[0-9.]+)s loss (?P<loss>\S+)")
    assert r.run["status"] == "ok", r.run
    assert r.run["n_iterations"] == 6 and r.warmup == [True] * 2 + [False] * 6
    assert_close(r.seconds, r.truth(truth))
    assert r.run["final_loss"] == pytest.approx(0.125)


def test_ms_per_batch_over_a_log_interval(tmp_path: Path, command_job: RunJob) -> None:
    # word_language_model: every 2nd batch prints the mean ms/batch of the last 2
    truth = tmp_path / "truth"
    r = command_job(program("cmd_ms_per_batch.py", "{total}", truth), steps_per_match=2,
                    iteration_regex=r"ms/batch (?P<ms>[0-9.]+) \| loss +(?P<loss>[0-9.]+)")
    assert r.run["status"] == "ok", r.run
    t = r.truth(truth)
    assert_close(r.seconds, block_means(t, [2, 4, 6, 8]))


def test_running_mean_images_per_sec(tmp_path: Path, command_job: RunJob) -> None:
    # tf_cnn_benchmarks: images/sec over every step so far, after step 1 and every 5th
    truth = tmp_path / "truth"
    r = command_job(program("cmd_images_per_sec.py", "{total}", truth, "{batch}"),
                    iterations=14, warmup=1, cumulative=True,
                    iteration_regex=r"^(?P<step>\d+)\timages/sec: (?P<samples_per_s>[0-9.]+)")
    assert r.run["status"] == "ok", r.run
    t = r.truth(truth)
    assert_close(r.seconds, block_means(t, [1, 5, 10, 15]))


def test_tqdm_bar_redrawn_with_carriage_returns(tmp_path: Path, command_job: RunJob) -> None:
    truth = tmp_path / "truth"
    r = command_job(program("cmd_tqdm.py", "{total}", truth),
                    iteration_regex=r"(?P<it_per_s>[0-9.]+)it/s\]")
    assert r.run["status"] == "ok", r.run
    assert_close(r.seconds, r.truth(truth))


def test_coloured_output_is_matched_as_a_terminal_shows_it(tmp_path: Path,
                                                          command_job: RunJob) -> None:
    # Keras 3's bar wraps "3/8" and every field in ANSI colours: a regex written from
    # what the terminal shows must match (it never did: the escapes split "3/8 ").
    truth = tmp_path / "truth"
    # Its backspaces end each redraw: a loss read as \S+ kept them and was no number
    # (the program runs past the 8 steps dltop stores, so the last one stored has them).
    r = command_job(program("cmd_keras.py", 12, truth, "step"),
                    iteration_regex=r"(?P<step>\d+)/\d+ .*? (?P<ms>[0-9.]+)ms/step"
                                    r" - loss: (?P<loss>\S+)")
    assert r.run["status"] == "ok", r.run
    assert_close(r.seconds, r.truth(truth)[:8])
    assert r.run["final_loss"] == pytest.approx(0.5)


def test_a_running_mean_that_leaves_step_one_out_is_refused(tmp_path: Path,
                                                            command_job: RunJob) -> None:
    # Keras's ms/step is the mean of steps 2..k: read as a running mean, the block after
    # step 1 has a negative time. It used to be clamped to 0, refused as a protocol
    # error per step, and end "runner reported done without any measured iteration".
    r = command_job(program("cmd_keras.py", "{total}", tmp_path / "truth", "keras"),
                    cumulative=True,
                    iteration_regex=r"(?P<step>\d+)/\d+ .*? (?P<ms>[0-9.]+)ms/step")
    assert r.run["status"] == "crashed"
    message = str(r.run["error_message"])
    assert message.startswith("cumulative = true, but the value matched at step 2 ")
    assert "Keras" in message and "last output lines" in message


def test_dllogger_json_lines(tmp_path: Path, command_job: RunJob) -> None:
    truth = tmp_path / "truth"
    r = command_job(program("cmd_dllogger.py", "{total}", truth, "{batch}"),
                    iteration_regex=r'^DLLL .*"train.compute_ips": (?P<samples_per_s>[0-9.e+]+)')
    assert r.run["status"] == "ok", r.run
    assert_close(r.seconds, r.truth(truth))


def test_one_summary_line(tmp_path: Path, command_job: RunJob) -> None:
    truth = tmp_path / "truth"
    r = command_job(program("cmd_summary.py", "{total}", truth),
                    iteration_regex=r"trained (?P<count>\d+) steps in (?P<total_seconds>[0-9.]+) s")
    assert r.run["status"] == "ok", r.run
    t = r.truth(truth)
    assert_close(r.seconds, block_means(t, [len(t)]))
    assert r.warmup == [True] * 2 + [False] * 6  # the line's steps, warm-up first


def test_line_gap_for_a_program_that_prints_no_time(tmp_path: Path,
                                                    command_job: RunJob) -> None:
    truth = tmp_path / "truth"
    # One more print than iterations: the first matching line only starts the clock.
    # 40 gaps (about 1.2 s): two reads' latencies stay within 2 % of the sum
    r = command_job(program("cmd_silent.py", 41, truth), iterations=38, warmup=2,
                    timing="line-gap", iteration_regex=r"^step \d+$")
    assert r.run["status"] == "ok", r.run
    t = r.truth(truth)
    # dltop times the lines as it reads them, each a pipe's latency after the print:
    # the sum over the run is what is within 2 %; single gaps carry the jitter.
    assert sum(r.seconds) == pytest.approx(sum(t), rel=0.02)
    assert_close(r.seconds, t, rel=0.5)


def test_helper_events_only_with_timing_helper(tmp_path: Path, command_job: RunJob) -> None:
    # The program both prints times and calls dltop_report: never counted twice.
    prog = ("from dltop_report import step\nimport time\n"
            "for i in range({total}):\n"
            "    with step(samples=8):\n        time.sleep(0.02)\n"
            "    print('step %d took 1.5s' % i, flush=True)\n")
    regex = r"took (?P<seconds>[0-9.]+)s"
    r = command_job([sys.executable, "-c", prog], timing="helper", iteration_regex=regex)
    assert r.run["status"] == "ok", r.run
    assert len(r.seconds) == 8 and all(0.02 <= s < 1.0 for s in r.seconds)
    assert r.spec["options"]["timing"] == "helper"
    (tmp_path / "d.db").unlink()
    r = command_job([sys.executable, "-c", prog.replace("took 1.5s", "took 0.0215s")],
                    iteration_regex=regex)
    assert r.run["status"] == "ok", r.run
    assert r.seconds == [0.0215] * 8


@pytest.mark.parametrize("printed,group", [("ms", "seconds"), ("images/sec", "seconds")])
def test_unit_error_is_caught_by_the_wall_time(tmp_path: Path, command_job: RunJob,
                                               printed: str, group: str) -> None:
    # a program printing 30 ms (or 1066 images/s) read as seconds: 30 s a step is
    # impossible in a run that took a second
    value = "30.0" if printed == "ms" else "1066.7"
    prog = (f"import time\nfor i in range({{total}}):\n    time.sleep(0.03)\n"
            f"    print('step took {value} {printed}', flush=True)\n")
    r = command_job([sys.executable, "-c", prog],
                    iteration_regex=rf"took (?P<{group}>[0-9.]+)")
    assert r.run["status"] == "crashed" and r.code == 1
    message = str(r.run["error_message"])
    assert "add up to" in message and "(?P<ms>" in message and "samples_per_s" in message


def test_several_matches_per_line_and_float_samples(tmp_path: Path,
                                                    command_job: RunJob) -> None:
    prog = ("for i in range({total} // 2):\n"
            "    print('a: 0.01s n=8.0 | b: 0.02s n=8.0', flush=True)\n")
    r = command_job([sys.executable, "-c", prog],
                    iteration_regex=r"(?P<seconds>[0-9.]+)s n=(?P<samples>[0-9.]+)")
    assert r.run["status"] == "ok", r.run
    assert r.seconds == [0.01, 0.02] * 4
    assert r.samples == [8] * 8


def test_line_gap_shares_a_reads_gap_among_its_lines(tmp_path: Path,
                                                     command_job: RunJob) -> None:
    # Lines that come in one read (output buffered, or a log printed at the end) showed
    # no gap between them: they share the gap since the previous read, never get 0 s
    # each (which dltop refused, leaving a crash that blamed "no iteration").
    truth = tmp_path / "truth"
    r = command_job(program("cmd_bursts.py", 20, truth, 4), iterations=12, warmup=4,
                    timing="line-gap", iteration_regex=r"^step \d+$")
    assert r.run["status"] == "ok", r.run
    t = r.truth(truth)
    # the first write only starts the clock: 3 lines untimed, then 4 writes of 4 steps
    assert len(r.seconds) == 16 and min(r.seconds) > 0.015
    assert_close(r.seconds, block_means(t[4:], [4, 8, 12, 16]), rel=0.3)
    assert sum(r.seconds) == pytest.approx(sum(t[4:]), rel=0.05)
    (tmp_path / "d.db").unlink()
    r = command_job(program("cmd_bursts.py", 9, truth, 0), iterations=6, warmup=2,
                    timing="line-gap", iteration_regex=r"^step \d+$")
    assert r.run["status"] == "crashed" and r.code == 1, r.run
    assert 'saw 9 matching lines, but all came at once' in str(r.run["error_message"])
    assert "buffered" in str(r.run["error_message"])


def test_a_repeated_step_number_is_one_step(tmp_path: Path, command_job: RunJob) -> None:
    # Every rank of a data-parallel program printing its own line for each step: the
    # step group used to take the second line for a restarted counter, `step` steps.
    prog = ("import time\nfor i in range(1, {total} + 1):\n    time.sleep(0.01)\n"
            "    for rank in (0, 1):\n"
            "        print('[rank%d] step %d took 0.0%d1s' % (rank, i, rank + 1), flush=True)\n")
    r = command_job([sys.executable, "-c", prog], iterations=6, warmup=2,
                    iteration_regex=r"step (?P<step>\d+) took (?P<seconds>[0-9.]+)s")
    assert r.run["status"] == "ok", r.run
    assert r.seconds == [0.011] * 8  # rank 0's lines: each rank 1 line repeats its step
    log = Path(str(r.run["log_path"])).read_text()
    assert "matched lines repeated the previous match's step number" in log
