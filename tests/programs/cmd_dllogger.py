"""NVIDIA DeepLearningExamples' dllogger JSON lines, one per step, throughput in
``train.compute_ips`` (samples/s of the step)."""

import json
import sys
import time

from cmd_common import indices, step, steps_and_truth

steps, truth = steps_and_truth()
batch = int(sys.argv[3])
for i in indices(steps):
    dt = step(i, truth)
    print("DLLL " + json.dumps({"timestamp": "%.6f" % time.time(), "elapsedtime": 0.0,
                                "datetime": "2026-11-23 12:00:00", "type": "LOG",
                                "step": [0, i], "data": {"train.loss": 6.5,
                                                         "train.compute_ips": batch / dt}}),
          flush=True)
