"""Presets for known training programs (``preset = "..."`` in a command entry).

A preset is a documented set of defaults for a ``frameworks = ["command"]``
entry's keys (``iteration_regex``, ``timing``, ``cumulative``,
``steps_per_match``, ``warmup``, ``iterations``); a key the entry (or
``[defaults]``) sets itself wins. Each regex below was written from the
program's own printing code (quoted in the comments); docs/own-programs.md
shows the lines and an example profile per preset, and tests/runners/
test_command_presets.py checks each regex against the program's lines.
"""

from collections.abc import Mapping
from typing import Any, Final

PRESET_KEYS: Final = ("iteration_regex", "timing", "cumulative", "steps_per_match", "warmup",
                      "iterations")
"""The keys a preset may give defaults for."""

PYTORCH_IMAGENET: Final[Mapping[str, Any]] = {
    # pytorch/examples imagenet/main.py, ProgressMeter.display (train only: its
    # validation lines start "Test: "):
    #   Epoch: [0][  11/5005]\tTime  0.512 ( 0.601)\tData  0.101 ( 0.120)\t
    #   Loss 6.9078e+00 (6.9101e+00)\tAcc@1   0.00 (  0.10)\tAcc@5   0.39 (  0.49)
    # Time is that one batch's seconds (data loading included), the value in
    # parentheses the epoch's running average; Loss likewise. Older versions
    # print the same fields with other widths ("Loss 6.9078 (6.9101)").
    "iteration_regex": (r"^Epoch: \[\d+\]\[\s*\d+/\d+\]\s+Time\s+(?P<seconds>[0-9.]+)\s+"
                        r"\(\s*[0-9.]+\)(?:.*?\sLoss\s+(?P<loss>[^\s(]+))?"),
    "timing": "regex",
}
"""One printed batch is one iteration: run it with ``--print-freq 1`` (``-p 1``) so every
batch is printed; with the default 10, dltop stores every 10th batch's time (a sample) and
counts printed batches."""

TF_CNN_BENCHMARKS: Final[Mapping[str, Any]] = {
    # tensorflow/benchmarks scripts/tf_cnn_benchmarks/benchmark_cnn.py,
    # benchmark_one_step: after step 1 and every --display_every steps,
    #   '%i\t%s\t%.*f' % (step + 1, 'images/sec: %.1f +/- %.1f (jitter = %.1f)', 3, loss)
    # where images/sec is batch / mean(step times of every step since its
    # warm-up): a running mean. (With --display_perf_ewma it is not a plain
    # mean: do not use that flag.) The closing "total images/sec: ..." line
    # does not start with a step number, so it never matches.
    "iteration_regex": (r"^(?P<step>\d+)\s+images/sec: (?P<samples_per_s>[0-9.]+)"
                        r"(?: \+/- [0-9.]+ \(jitter = [0-9.]+\))?\s+(?P<loss>\S+)"),
    "timing": "regex",
    "cumulative": True,
    # Its own --num_warmup_batches (default 10, or more for autotuning) run
    # before the first printed step and are never printed.
    "warmup": 0,
}
"""The step number says how many steps each line covers (1, then ``display_every`` each),
so any ``--display_every`` works without a ``steps_per_match``."""

DLLOGGER: Final[Mapping[str, Any]] = {
    # NVIDIA dllogger's JSONStreamBackend (dllogger/logger.py):
    #   "DLLL " + json.dumps(dict(timestamp=..., datetime=..., elapsedtime=...,
    #                             type="LOG", step=step, data=data))
    # DeepLearningExamples' PyTorch ConvNets log every --print-freq iterations
    # step=(epoch, iteration) with the interval's mean "train.total_ips",
    # "train.compute_ips" and "train.loss"; epoch and run summaries have
    # step=(epoch,) and (), validation lines (epoch, it, val_it): only the
    # two-number step matches. The throughput key: total_ips (the whole
    # iteration, data loading included), else ips (MXNet, PaddlePaddle), bare
    # or with "train.". Not compute_ips: older ConvNets log it on a second line
    # of the same step (dllogger's examples/example_resnet_log.json), which
    # would count the step twice.
    "iteration_regex": (r'^DLLL \{.*"type": "LOG", "step": \[\d+, (?P<step>\d+)\], "data": \{'
                        r'(?=(?:.*?"(?:train\.)?total_ips"|.*?"(?:train\.)?ips"): '
                        r'(?P<samples_per_s>[0-9.eE+-]+))'
                        r'(?:(?=.*?"(?:train\.)?loss": (?P<loss>[^,}\s]+)))?'),
    "timing": "regex",
}
"""The JSON lines go to a file unless the program is told otherwise: point its JSON log at
``/dev/stdout`` (ConvNets: ``--raport-file /dev/stdout``). Other throughput keys
(``throughput_train``, ``train.compute_ips`` alone, ...): override ``iteration_regex``."""

TORCHBENCH: Final[Mapping[str, Any]] = {
    # pytorch/benchmark run.py, printResultSummaryTime: after 3 unprinted
    # warm-up calls and 10 timed ones (run_one_step's fixed num_iter), the
    # median, once:
    #   '{:<20} {:>20}'.format("CPU Wall Time per batch:", "%.3f milliseconds" % ...)
    # (since 2023-09; before: "CPU Total Wall Time:"). The "CPU Wall Time:" line
    # that follows it today is the same median times --num_batch, not matched;
    # on CUDA a "GPU Time per batch:" line (event time) comes first.
    "iteration_regex": (r"^CPU (?:Total Wall Time|Wall Time per batch):\s+"
                        r"(?P<ms>[0-9.]+) milliseconds"),
    "timing": "regex",
    "steps_per_match": 10,
    "warmup": 0,
    "iterations": 10,
}
"""The one line stands for the 10 timed calls: stored as 10 iterations of the median (n is
10; their spread is 0 by construction, the median is TorchBench's)."""

PRESETS: Final[Mapping[str, Mapping[str, Any]]] = {
    "pytorch-imagenet": PYTORCH_IMAGENET,
    "tf-cnn-benchmarks": TF_CNN_BENCHMARKS,
    "dllogger": DLLOGGER,
    "torchbench": TORCHBENCH,
}
"""Preset name → its defaults (keys from :data:`PRESET_KEYS`)."""
