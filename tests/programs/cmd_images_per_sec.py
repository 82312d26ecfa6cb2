"""tf_cnn_benchmarks' lines: after step 1 and every 5th, images/sec over *all* steps so
far (batch / mean step time): ``10\timages/sec: 987.65 +/- 1.2 (jitter = 3.4)\t7.234``."""

import sys

from cmd_common import indices, step, steps_and_truth

steps, truth = steps_and_truth()
batch = int(sys.argv[3])
times = []
print("Step\tImg/sec\ttotal_loss", flush=True)
for i in indices(steps):
    times.append(step(i, truth))
    n = i + 1
    if n == 1 or n % 5 == 0:
        rate = batch / (sum(times) / len(times))
        print("%i\timages/sec: %.2f +/- %.1f (jitter = %.1f)\t%.3f" % (n, rate, 0.0, 0.0, 7.2),
              flush=True)
