"""NVIDIA DeepLearningExamples' PyTorch ConvNets (image_classification/logger.py) logging
through dllogger, its JSON log pointed at stdout (``--raport-file /dev/stdout``) next to
dllogger's StdOutBackend, both as they print::

    DLLL {"timestamp": "...", "datetime": "...", "elapsedtime": "...", "type": "LOG",
          "step": [0, 2], "data": {"train.loss": 6.9, "train.compute_ips": ..., ...}}
    DLL 2024-01-01 12:00:00.000000 - Epoch: 0 Iteration: 2  train.loss : 6.90000 None ...

Every PRINT_FREQ iterations the interval's mean of each metric (the mean of the per-step
images/s, as the real Meter does), every epoch an epoch summary (step [epoch]) and
validation lines (step [epoch, it, val_it]), at exit a run summary (step []).

``dllogger_like.py TRUTH BATCH [PRINT_FREQ [ITERS_PER_EPOCH]]``, runs until stopped;
TRUTH gets each iteration's seconds (time.perf_counter, as total_ips measures it). An
interval's steps sleep alike (20, 30 or 40 ms by interval), so the mean of their rates
is the rate of their mean time.
"""

import json
import sys
import time
from datetime import datetime

truth = open(sys.argv[1], "w")
batch = int(sys.argv[2])
print_freq = int(sys.argv[3]) if len(sys.argv) > 3 else 10
iters_per_epoch = int(sys.argv[4]) if len(sys.argv) > 4 else 6
start = datetime.now()
META = {"train.loss": {"unit": None, "format": ":.5f"},
        "train.compute_ips": {"unit": "images/s", "format": ":.2f"},
        "train.total_ips": {"unit": "images/s", "format": ":.2f"},
        "train.lr": {}, "val.total_ips": {"unit": "images/s", "format": ":.2f"}}


def json_line(step, data):
    now = datetime.now()
    print("DLLL {}".format(json.dumps(dict(
        timestamp=str(now.timestamp()), datetime=str(now.astimezone()),
        elapsedtime=str((now - start).total_seconds()), type="LOG", step=step, data=data))))


def stdout_line(step, data):
    def fmt(m, v):
        meta = META.get(m, {})
        f = "{" + meta["format"] + "}" if "format" in meta else "{}"
        return "{} : {} {}".format(m, f.format(v), meta["unit"] if "unit" in meta else "")
    s = "Epoch: {} ".format(step[0])
    if len(step) > 1:
        s += "Iteration: {} ".format(step[1])
    if len(step) > 2:
        s += "Validation Iteration: {} ".format(step[2])
    if not step:
        s = "Summary:"
    print("DLL {} - {} {}".format(datetime.now(), s, " ".join(fmt(m, v) for m, v in data.items())))


def log(step, data):
    json_line(step, data)
    stdout_line(step, data)


print("DLLL {}".format(json.dumps(dict(
    timestamp=str(datetime.now().timestamp()), datetime=str(datetime.now().astimezone()),
    elapsedtime="0.0", type="LOG", step="PARAMETER",
    data={"arch": "resnet50", "batch_size": batch, "print_freq": print_freq}))))
for metric, meta in META.items():
    print("DLLL {}".format(json.dumps(dict(
        timestamp=str(datetime.now().timestamp()), datetime=str(datetime.now().astimezone()),
        elapsedtime="0.0", type="METADATA", metric=metric, metadata=meta))))

step_no = 0
epoch = -1
while True:
    epoch += 1
    interval, epoch_ips = [], []
    for iteration in range(1, iters_per_epoch + 1):
        end = time.perf_counter()
        time.sleep(0.02 + 0.01 * ((step_no // print_freq) % 3))
        it_time = time.perf_counter() - end
        step_no += 1
        truth.write("%r\n" % it_time)
        truth.flush()
        interval.append(batch / it_time)
        epoch_ips.append(batch / it_time)
        if iteration % print_freq == 0:
            ips = sum(interval) / len(interval)
            json_line((epoch, iteration), {"train.loss": 6.9 - 0.01 * step_no,
                                           "train.compute_ips": ips * 1.05,
                                           "train.total_ips": ips, "train.lr": 0.256})
            stdout_line((epoch, iteration), {"train.loss": 6.9, "train.compute_ips": ips * 1.05,
                                             "train.total_ips": ips, "train.lr": 0.256})
            json_line((epoch, iteration), {"train.data_time": 0.001, "train.compute_time": 0.03})
            interval = []
    log((epoch, iteration, 1), {"val.total_ips": 99999.0})
    log((epoch,), {"train.loss": 6.8, "train.total_ips": sum(epoch_ips) / len(epoch_ips)})
