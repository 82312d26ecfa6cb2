"""Presets for known programs, and dltop_report.HFCallback.

Each preset's regex is checked against lines of the real program (quoted from its
source or its own documentation), then run end to end with ``dltop run`` against a
program in tests/programs/ that prints like the real one and writes the seconds it
really measured to a truth file: what dltop stored must match within 2 %.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from dltop.profiles.loader import parse
from dltop.profiles.presets import PRESET_KEYS, PRESETS
from dltop.runners.registry import CHILD_DIR

from .conftest import CommandRun, RunJob, assert_close, program, run_profile

REPORT = CHILD_DIR / "report" / "dltop_report.py"




def blocks(truth: list[float], ends: list[int],
           mean: Callable[[list[float]], float] = lambda b: sum(b) / len(b)) -> list[float]:
    """Each step's value when a line covers the steps up to each of ``ends`` (1-based)."""
    out, start = [], 0
    for end in ends:
        out += [mean(truth[start:end])] * (end - start)
        start = end
    return out


# the regexes against the real programs' lines ------------------------------------------
# dllogger's own examples/example_resnet_log.json (NVIDIA/dllogger), verbatim:
DLLL_TRAIN = ('DLLL {"timestamp": "1570716921.842053", "datetime": "2019-10-10 14:15:21.842053'
              '+00:00", "type": "LOG", "step": [0, 5], "data": {"train.loss": 8.56640625, '
              '"train.total_ips": 545.2730241953889}}')
DLLL_VERBOSE = ('DLLL {"timestamp": "1570716921.84219", "datetime": "2019-10-10 14:15:21.842190'
                '+00:00", "type": "LOG", "step": [0, 5], "data": {"lr": 0.1, "train.compute_ips":'
                ' 547.1155618593889, "train.data_time": 0.0024609088897705076, '
                '"train.compute_time": 1.1351056098937988}}')
DLLL_VAL = ('DLLL {"timestamp": "1570716925.976676", "datetime": "2019-10-10 14:15:25.976676'
            '+00:00", "type": "LOG", "step": [0, 25, 5], "data": {"val.top1": 0.0, "val.top5": '
            '0.0, "val.loss": 980.1, "val.total_ips": 1899.5387923262765}}')
DLLL_SUMMARY = ('DLLL {"timestamp": "1570716934.289014", "datetime": "2019-10-10 14:15:34.289014'
                '+00:00", "type": "LOG", "step": [], "data": {"train.loss": 8.34140625, '
                '"train.total_ips": 661.9801574510492, "val.top1": 0.0}}')
LINES: list[tuple[str, str, dict[str, str] | None]] = [
    # imagenet/main.py's ProgressMeter ('\t'.join), Time ':6.3f', Loss ':.4e'
    ("pytorch-imagenet", "Epoch: [0][  11/5005]\tTime  0.512 ( 0.601)\tData  0.101 ( 0.120)\t"
     "Loss 6.9078e+00 (6.9101e+00)\tAcc@1   0.00 (  0.10)\tAcc@5   0.39 (  0.49)",
     {"seconds": "0.512", "loss": "6.9078e+00"}),
    ("pytorch-imagenet", "Epoch: [12][5001/5005]\tTime 12.345 (11.000)\tData  0.001 ( 0.002)\t"
     "Loss nan (nan)\tAcc@1   0.00 (  0.10)", {"seconds": "12.345", "loss": "nan"}),
    # its 2018 format: '{batch_time.val:.3f} ({batch_time.avg:.3f})', loss '.4f'
    ("pytorch-imagenet", "Epoch: [0][10/5005]\tTime 0.512 (0.601)\tData 0.101 (0.120)\t"
     "Loss 6.9078 (6.9101)\tPrec@1 0.000 (0.100)", {"seconds": "0.512", "loss": "6.9078"}),
    ("pytorch-imagenet", "Test: [ 11/196]\tTime  0.512 ( 0.601)\tLoss 6.9078e+00 (6.9101e+00)",
     None),
    ("pytorch-imagenet", " *   Acc@1 0.100 Acc@5 0.500", None),
    # tf_cnn_benchmarks: '%i\t%s\t%.*f'; the spaced line is from its own test_util.py
    ("tf-cnn-benchmarks", "10\timages/sec: 123.4 +/- 0.5 (jitter = 1.2)\t7.123",
     {"step": "10", "samples_per_s": "123.4", "loss": "7.123"}),
    ("tf-cnn-benchmarks", "10 images/sec: 14.2 +/- 0.0 (jitter = 0.0) 7.020",
     {"step": "10", "samples_per_s": "14.2", "loss": "7.020"}),
    ("tf-cnn-benchmarks", "1\timages/sec: 0.2 +/- 0.0 (jitter = 0.0)\t6.908\t0.500\t1.000",
     {"step": "1", "samples_per_s": "0.2", "loss": "6.908"}),
    ("tf-cnn-benchmarks", "total images/sec: 1234.56", None),
    ("tf-cnn-benchmarks", "100\t12.5 examples/sec", None),
    ("tf-cnn-benchmarks", "Step\tImg/sec\ttotal_loss", None),
    ("dllogger", DLLL_TRAIN, {"step": "5", "samples_per_s": "545.2730241953889",
                              "loss": "8.56640625"}),
    ("dllogger", DLLL_VERBOSE, None),  # the same step's second line: never counted twice
    ("dllogger", DLLL_VAL, None),
    ("dllogger", DLLL_SUMMARY, None),
    ("dllogger", 'DLLL {"timestamp": "1", "datetime": "x", "elapsedtime": "0.5", "type": "LOG",'
     ' "step": [0, 20], "data": {"train.loss": 6.9, "train.compute_ips": 1300.0, '
     '"train.total_ips": 1234.5, "train.lr": 0.256}}',
     {"step": "20", "samples_per_s": "1234.5", "loss": "6.9"}),
    # TF ConvNets' benchmark hook and MXNet's fit.py keys; NaN as json.dumps writes it
    ("dllogger", 'DLLL {"timestamp": "1", "datetime": "x", "elapsedtime": "0.5", "type": "LOG",'
     ' "step": [0, 21], "data": {"total_ips": 1.5e+03}}', {"step": "21", "samples_per_s":
                                                           "1.5e+03"}),
    ("dllogger", 'DLLL {"timestamp": "1", "datetime": "x", "elapsedtime": "0.5", "type": "LOG",'
     ' "step": [2, 19], "data": {"train.loss": NaN, "train.ips": 800.0, "train.lr": 0.1}}',
     {"step": "19", "samples_per_s": "800.0", "loss": "NaN"}),
    # PaddlePaddle's log_info prefixes its evaluation keys "val." under the same step shape
    ("dllogger", 'DLLL {"timestamp": "1", "datetime": "x", "elapsedtime": "0.5", "type": "LOG",'
     ' "step": [0, 10], "data": {"val.loss": 6.1, "val.top1": 0.1, "val.ips": 3000.0}}', None),
    ("dllogger", 'DLLL {"timestamp": "1", "datetime": "x", "type": "LOG", "step": "PARAMETER",'
     ' "data": {"ips": 1}}', None),
    ("dllogger", "DLL 2019-10-10 16:42:54.501155 - Epoch: 0 Iteration: 5  train.loss : 8.56641 "
     "None train.total_ips : 545.27 images/s", None),
    # run.py today ('{:<20} {:>20}'), and before 2023-09 (its model_analyzer readme)
    ("torchbench", "CPU Wall Time per batch:  123.456 milliseconds", {"ms": "123.456"}),
    ("torchbench", "CPU Wall Time:        123.456 milliseconds", None),
    ("torchbench", "CPU Total Wall Time:  12.137 milliseconds", {"ms": "12.137"}),
    ("torchbench", "GPU Time:             12.097 milliseconds", None),
    ("torchbench", "GPU Time per batch:    12.097 milliseconds", None),
    ("torchbench", "|         10         |       31.23        |         9          |", None),
]


@pytest.mark.parametrize("preset,line,groups", LINES,
                         ids=[f"{p}-{i}" for i, (p, _, _) in enumerate(LINES)])
def test_preset_regex_on_the_programs_lines(preset: str, line: str,
                                            groups: dict[str, str] | None) -> None:
    found = list(re.finditer(PRESETS[preset]["iteration_regex"], line))
    if groups is None:
        assert found == []
    else:
        assert len(found) == 1
        assert {k: v for k, v in found[0].groupdict().items() if v is not None} == groups


def test_every_preset_passes_the_loaders_checks(profile_text: Any) -> None:
    assert set(PRESETS) == {"pytorch-imagenet", "tf-cnn-benchmarks", "dllogger", "torchbench"}
    for name, defaults in PRESETS.items():
        assert set(defaults) <= set(PRESET_KEYS), name
        (job,) = parse(profile_text({"frameworks": ["command"], "models": ["m"],
                                     "batch_sizes": [8], "devices": ["cpu:1"],
                                     "command": ["prog"], "preset": name}), "p.toml", "p").jobs
        opts = dict(job.options)
        assert opts["iteration_regex"] == defaults["iteration_regex"], name
        assert opts["timing"] == "regex" and opts.get("cumulative", False) == defaults.get(
            "cumulative", False)
        assert job.warmup == defaults.get("warmup", 10), name


def test_profile_keys_override_preset_defaults(profile_text: Any) -> None:
    keys = {"frameworks": ["command"], "models": ["m"], "batch_sizes": [8],
            "devices": ["cpu:1"], "command": ["prog"], "preset": "torchbench"}
    (job,) = parse(profile_text(keys), "p.toml", "p").jobs
    assert (job.iterations, job.warmup, dict(job.options)["steps_per_match"]) == (10, 0, 10)
    (job,) = parse(profile_text({**keys, "iterations": 20, "steps_per_match": 20, "warmup": 2,
                                 "iteration_regex": r"^GPU Time:\s+(?P<ms>[0-9.]+)"}),
                   "p.toml", "p").jobs
    opts = dict(job.options)
    assert (job.iterations, job.warmup, opts["steps_per_match"]) == (20, 2, 20)
    assert opts["iteration_regex"] == r"^GPU Time:\s+(?P<ms>[0-9.]+)"


# end to end ----------------------------------------------------------------------------
def dltop_run(tmp_path: Path, profile_text: Any, **keys: Any) -> CommandRun:
    """``dltop run`` of one command job with exactly ``keys`` (no iterations/warmup added,
    so a preset's own defaults apply)."""
    prof = tmp_path / "p.toml"
    prof.write_text(profile_text({"frameworks": ["command"], "models": ["my-net"],
                                  "batch_sizes": [32], "devices": ["cpu:1"], "timeout_s": 60,
                                  **keys}))
    return run_profile(prof, 180)


@pytest.mark.slow
@pytest.mark.parametrize("print_freq", [1, 2])
def test_pytorch_imagenet(tmp_path: Path, command_job: RunJob, print_freq: int) -> None:
    # 5 batches an epoch, a validation in between: 10 printed batches span epochs
    truth = tmp_path / "truth"
    r = command_job(program("imagenet_like.py", truth, print_freq), preset="pytorch-imagenet",
                    iterations=8, warmup=2)
    assert r.run["status"] == "ok", r.run
    assert r.run["n_iterations"] == 8 and r.warmup == [True] * 2 + [False] * 8
    assert_close(r.seconds, r.truth(truth)[:10])
    assert r.run["final_loss"] is not None


@pytest.mark.slow
def test_tf_cnn_benchmarks(tmp_path: Path, profile_text: Any) -> None:
    # lines after step 1 and every 5th, each the mean images/sec of all steps so far
    truth = tmp_path / "truth"
    r = dltop_run(tmp_path, profile_text, preset="tf-cnn-benchmarks", iterations=20,
                  command=program("tf_cnn_like.py", "{total}", truth, "{batch}", 5))
    assert r.run["status"] == "ok", r.run
    assert r.warmup == [False] * 20  # its own warm-up is never printed
    assert_close(r.seconds, blocks(r.truth(truth), [1, 5, 10, 15, 20]))
    assert r.run["final_loss"] == pytest.approx(7.31)


@pytest.mark.slow
def test_a_profile_key_overrides_the_presets_warmup(tmp_path: Path,
                                                    profile_text: Any) -> None:
    truth = tmp_path / "truth"
    r = dltop_run(tmp_path, profile_text, preset="tf-cnn-benchmarks", iterations=20,
                  warmup=5, command=program("tf_cnn_like.py", "{total}", truth, "{batch}", 5))
    assert r.run["status"] == "ok", r.run
    assert r.warmup == [True] * 5 + [False] * 20 and r.run["n_iterations"] == 20
    assert_close(r.seconds, blocks(r.truth(truth), [1, 5, 10, 15, 20, 25]))


@pytest.mark.slow
def test_dllogger(tmp_path: Path, command_job: RunJob) -> None:
    # ConvNets: every 2nd iteration a JSON line with the interval's mean images/s, 6
    # iterations an epoch (the counter restarts), epoch summaries and validation lines
    # in between, dllogger's StdOutBackend lines too
    truth = tmp_path / "truth"
    r = command_job(program("dllogger_like.py", truth, "{batch}", 2, 6), preset="dllogger",
                    iterations=12, warmup=2)
    assert r.run["status"] == "ok", r.run
    assert r.run["n_iterations"] == 12 and r.samples == [32] * 14
    # the program averages the steps' rates: a block's time is their harmonic mean
    harmonic = lambda b: len(b) / sum(1 / x for x in b)  # noqa: E731
    assert_close(r.seconds, blocks(r.truth(truth)[:14], list(range(2, 15, 2)), harmonic))
    assert r.run["final_loss"] == pytest.approx(6.9 - 0.14)


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["today", "old"])
def test_torchbench(tmp_path: Path, profile_text: Any, fmt: str) -> None:
    truth = tmp_path / "truth"
    r = dltop_run(tmp_path, profile_text, preset="torchbench",
                  command=program("torchbench_like.py", truth, fmt))
    assert r.run["status"] == "ok", r.run
    assert r.run["n_iterations"] == 10 and r.warmup == [False] * 10
    ms = sorted(r.truth(truth))
    assert_close(r.seconds, [(ms[4] + ms[5]) / 2 / 1000] * 10)


WORDLM_RE = (r"\| epoch +\d+ \| +(?P<step>\d+)/ *\d+ batches \| lr [0-9.]+ \| "
             r"ms/batch +(?P<ms>[0-9.]+) \| loss +(?P<loss>\S+) \|")


@pytest.mark.slow
@pytest.mark.parametrize("how", ["steps_per_match", "step group"])
def test_word_language_model_docs_example(tmp_path: Path, command_job: RunJob,
                                          how: str) -> None:
    # docs/own-programs.md: ms/batch is the mean over --log-interval batches
    truth = tmp_path / "truth"
    keys: dict[str, Any] = {"iteration_regex": WORDLM_RE}
    if how == "steps_per_match":
        keys = {"iteration_regex": WORDLM_RE.replace("(?P<step>\\d+)", "\\d+"),
                "steps_per_match": 2}
    r = command_job(program("wordlm_like.py", truth, 2, 12), iterations=8, warmup=2, **keys)
    assert r.run["status"] == "ok", r.run
    t = r.truth(truth)
    # an epoch's first line times batches 0..2 and divides by the interval, 2
    first = sum(t[:3]) / 2
    assert_close(r.seconds, [first, first, *blocks(t[3:11], [2, 4, 6, 8])])


# HFCallback ------------------------------------------------------------------------------
@pytest.mark.slow
def test_hf_callback_reports_each_optimizer_step(tmp_path: Path, command_job: RunJob) -> None:
    # hf_like.py stands in for a transformers Trainer (not installed here): per-device
    # batch 4, accumulation 2, a log every 4th step
    truth = tmp_path / "truth"
    r = command_job(program("hf_like.py", truth, 4, 2, 4), iterations=6, warmup=2)
    assert r.run["status"] == "ok", r.run
    assert r.spec["options"]["timing"] == "helper"
    assert r.samples == [8] * 8  # 4 x 2 x world size 1, not the job's batch of 32
    assert_close(r.seconds, r.truth(truth)[:8])
    # step 8 was logged with the mean loss of steps 5..8 (step k's is 2 / k)
    assert r.run["final_loss"] == pytest.approx(round(sum(2 / k for k in range(5, 9)) / 4, 4))


@pytest.mark.slow
def test_hf_callback_in_a_real_transformers_trainer(tmp_path: Path,
                                                    command_job: RunJob) -> None:
    # The Trainer itself (transformers is in dltop's environment): batch 4 x accumulation
    # 2 per optimizer step, each step's loss logged, the run stopped after 2 + 4 steps.
    r = command_job(program("hf_trainer.py", tmp_path / "out", 4, 2, "{total}"),
                    iterations=4, warmup=2, timeout_s=120)
    assert r.run["status"] == "ok", r.run
    assert r.samples == [8] * 6 and r.warmup == [True] * 2 + [False] * 4
    assert all(0 < s < 5 for s in r.seconds)
    assert 3 < float(r.run["final_loss"]) < 7  # cross-entropy of 128 random tokens: ~4.9


@pytest.mark.slow
def test_keras_fit_through_the_documented_callback(tmp_path: Path,
                                                   command_job: RunJob) -> None:
    # docs/own-programs.md's Keras recipe, in real Keras (TensorFlow), stopped after 2 + 6
    r = command_job(program("keras_fit.py", "{batch}", 40), iterations=6, warmup=2,
                    timeout_s=120)
    assert r.run["status"] == "ok", r.run
    assert r.warmup == [True] * 2 + [False] * 6 and r.samples == [32] * 8
    assert all(0 < s < 5 for s in r.seconds)
    assert 0.3 < float(r.run["final_loss"]) < 1.5  # 2-class cross-entropy near ln 2


@pytest.mark.slow
def test_hf_callback_nan_loss_diverges(tmp_path: Path, command_job: RunJob) -> None:
    truth = tmp_path / "truth"
    r = command_job(program("hf_like.py", truth, 4, 1, 1, 3), iterations=6, warmup=1)
    assert r.run["status"] == "diverged", r.run
    assert len(r.seconds) == 4  # the step with the NaN loss is stored, then the run ends


@pytest.fixture
def report(monkeypatch: pytest.MonkeyPatch
           ) -> Iterator[tuple[ModuleType, Callable[[], list[Any]]]]:
    """dltop_report loaded as a program run by dltop has it, and its events so far."""
    r, w = os.pipe()
    os.set_blocking(r, False)
    monkeypatch.setenv("DLTOP_EVENT_FD", str(w))
    spec = importlib.util.spec_from_file_location("dltop_report_under_test", REPORT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)

    def events() -> list[Any]:
        try:
            data = os.read(r, 1 << 16)
        except BlockingIOError:
            return []
        return [json.loads(line) for line in data.splitlines()]

    yield module, events
    os.close(r)
    os.close(w)


def trainer_args(**kw: Any) -> SimpleNamespace:
    base = dict(per_device_train_batch_size=4, gradient_accumulation_steps=2, world_size=3)
    return SimpleNamespace(**{**base, **kw})


def call_event(cb: Any, event: str, args: Any, state: Any, **kwargs: Any) -> Any:
    """As transformers' CallbackHandler.call_event delivers an event to one callback."""
    return getattr(cb, event)(args, state, SimpleNamespace(), model=None, processing_class=None,
                              optimizer=None, lr_scheduler=None, train_dataloader=None,
                              eval_dataloader=None, **kwargs)


def test_hf_callback_steps_samples_and_losses(report: Any) -> None:
    module, events = report
    cb = module.HFCallback()
    args, state = trainer_args(), SimpleNamespace(is_world_process_zero=True)
    for event in ("on_init_end", "on_train_begin", "on_epoch_begin"):
        assert call_event(cb, event, args, state) is None
    for step in range(3):
        call_event(cb, "on_step_begin", args, state)
        call_event(cb, "on_substep_end", args, state)
        call_event(cb, "on_pre_optimizer_step", args, state)  # newer events: no-ops
        call_event(cb, "on_optimizer_step", args, state)
        call_event(cb, "on_step_end", args, state)
        if step == 1:
            call_event(cb, "on_log", args, state, logs={"loss": 0.25, "epoch": 0.1})
        call_event(cb, "on_log", args, state, logs={"eval_loss": 9.0})
    assert len(events()) == 2  # the last step waits for a log that may carry its loss
    call_event(cb, "on_train_end", args, state)
    got = events()
    assert [(e["index"], e["samples"], e["loss"]) for e in got] == [(2, 24, None)]
    assert got[0]["seconds"] >= 0 and isinstance(got[0]["t_mono_ns"], int)
    assert not hasattr(cb, "save_state") and callable(cb.on_some_future_event)


def test_hf_callback_reports_from_the_main_process_only(report: Any) -> None:
    module, events = report
    cb = module.HFCallback()
    args = trainer_args(train_batch_size=8)  # per device x DataParallel GPUs, when known
    for main in (False, True):
        state = SimpleNamespace(is_world_process_zero=main)
        call_event(cb, "on_step_begin", args, state)
        call_event(cb, "on_step_end", args, state)
        call_event(cb, "on_log", args, state, logs={"loss": 1.5})
    assert [(e["samples"], e["loss"]) for e in events()] == [(8 * 2 * 3, 1.5)]


def test_hf_callback_without_batch_arguments_reports_no_samples(report: Any) -> None:
    module, events = report
    cb = module.HFCallback()
    cb.on_step_begin(object(), object(), object())
    cb.on_step_end(object(), object(), object())
    cb.on_train_end(object(), object(), object())
    assert [e["samples"] for e in events()] == [None]  # dltop then uses the job's batch


def test_hf_callback_is_a_trainer_callback_once_transformers_is_imported(
        report: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import pickle

    module, events = report
    assert type(module.HFCallback()) is module.HFCallback  # no transformers imported
    # a stand-in for the program's `import transformers` (not installed here)
    trainer_callback = type("TrainerCallback", (), {"on_save": lambda self, *a, **k: None})
    monkeypatch.setitem(sys.modules, "transformers",
                        SimpleNamespace(TrainerCallback=trainer_callback))
    cb = module.HFCallback(sync=False)
    assert cb.sync is False and module.HFCallback().__class__ is type(cb)
    assert isinstance(cb, trainer_callback) and isinstance(cb, module.HFCallback)
    assert type(pickle.loads(pickle.dumps(cb))) is type(cb)
    args, state = trainer_args(), SimpleNamespace(is_world_process_zero=True)
    for event in ("on_step_begin", "on_save", "on_step_end", "on_train_end"):
        call_event(cb, event, args, state)
    assert [e["samples"] for e in events()] == [24]


def test_dltop_report_imports_neither_transformers_nor_torch() -> None:
    code = ("import sys, dltop_report; dltop_report.HFCallback()._sync(); "
            "assert not {'transformers', 'torch'} & set(sys.modules), sys.modules")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPORT.parent)})
    assert res.returncode == 0, res.stderr


def test_unknown_preset_exits_2_naming_the_key_and_writes_nothing(tmp_path: Path,
                                                                   profile_text: Any) -> None:
    r = dltop_run(tmp_path, profile_text, preset="imagenet", command=["prog"])
    assert r.code == 2 and "Traceback" not in r.stderr
    assert "matrix[0].preset: unknown preset 'imagenet'" in r.stderr
    assert "dllogger, pytorch-imagenet, tf-cnn-benchmarks, torchbench" in r.stderr
    assert not (tmp_path / "d.db").exists() and not (tmp_path / "d-runs").exists()


DOC = Path(__file__).resolve().parents[2] / "docs" / "own-programs.md"


def test_every_profile_in_the_docs_loads(profile_text: Any, tmp_path: Path) -> None:
    # whole entries as written; a snippet of keys inside a minimal command entry
    blocks_ = re.findall(r"```toml\n(.*?)```", DOC.read_text(), re.S)
    assert len(blocks_) >= 12
    base = profile_text({"frameworks": ["command"], "models": ["m"], "batch_sizes": [8],
                         "devices": ["cpu:1"], "command": ["prog"]})
    for block in blocks_:
        text = block if "[[matrix]]" in block else base + block
        prof = parse(text, "doc.toml", "doc", profile_dir=tmp_path)
        assert prof.jobs, block


@pytest.mark.parametrize("snippet,line", [
    ("it_per_s", " 45%|####5     | 45/100 [00:03<00:04, 12.34it/s]"),
    ("it_per_s", "100%|##########| 200/200 [00:08<00:00, 24.34it/s, loss=0.005]"),
    ("throughput_train", 'DLLL {"timestamp": "1", "datetime": "x", "elapsedtime": "3.5", '
     '"type": "LOG", "step": [0, 20], "data": {"throughput_train": 2345.6, "loss": 1.2}}'),
    ("ms/batch", "| epoch   1 |   200/ 2983 batches | lr 20.00 | ms/batch 50.35 | loss  7.56 | "
     "ppl  1920.32"),
    ("GPU Time", "GPU Time per batch:    12.097 milliseconds"),
    ("GPU Time", "GPU Time:             12.097 milliseconds"),
    ("total_seconds", "trained 100 steps in 12.345 s"),
    ("<seconds>", "step 12 took 0.0312 s loss 2.105"),
    ("\\| (?P<ms>", "[rank0] step 12 | loss 2.1053 | 31.20 ms"),
    ("Train Epoch", "Train Epoch: 1 [640/60000 (1%)]\tLoss: 2.301456"),
])
def test_the_docs_regexes_match_their_programs_lines(snippet: str, line: str) -> None:
    regexes = re.findall(r"iteration_regex = '(.*?)'(?:$|`)", DOC.read_text(), re.M)
    (regex,) = [r for r in regexes if snippet in r]
    assert re.search(regex, line)


def test_a_descriptor_that_was_not_inherited_never_stops_the_program(tmp_path: Path) -> None:
    # Workers of a launcher that closes inherited fds see DLTOP_EVENT_FD but not the fd.
    code = ("import dltop_report as r\n"
            "for _ in range(3):\n"
            "    r.report(0.01, samples=4)\n"
            "print('trained to the end')\n")
    env = dict(os.environ, DLTOP_EVENT_FD="97",
               PYTHONPATH=str(CHILD_DIR / "report"))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "trained to the end" in done.stdout
    assert done.stderr.count("reporting off") == 1
