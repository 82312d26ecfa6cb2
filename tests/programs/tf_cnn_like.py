"""tensorflow/benchmarks' tf_cnn_benchmarks.py, as it prints (benchmark_cnn.py): an
unprinted warm-up, then after step 1 and every DISPLAY_EVERY steps
``10\\timages/sec: 1234.5 +/- 3.2 (jitter = 4.1)\\t7.234``, images/sec being batch over
the mean of *all* step times so far; the run ends with ``total images/sec: ...``.

``tf_cnn_like.py NUM_BATCHES TRUTH BATCH [DISPLAY_EVERY]``: TRUTH gets each measured
step's seconds (time.perf_counter, as the real one times its steps).
"""

import math
import sys
import time

num_batches = int(sys.argv[1])
truth = open(sys.argv[2], "w")
batch = int(sys.argv[3])
display_every = int(sys.argv[4]) if len(sys.argv) > 4 else 10
num_warmup_batches = 3


def one_step(i):
    start = time.perf_counter()
    time.sleep(0.02 + 0.01 * (i % 3))
    return time.perf_counter() - start


print("TensorFlow:  2.15")
print("Model:       resnet50")
print("Dataset:     imagenet (synthetic)")
print("Mode:        BenchmarkMode.TRAIN")
print("Batch size:  %s global" % batch)
print("             %s per device" % batch)
print("Num batches: %d" % num_batches)
print("==========")
print("Generating training model")
print("Running warm up")
for i in range(num_warmup_batches):
    one_step(i)
print("Done warm up")
print("Step\tImg/sec\ttotal_loss")
times = []
loop_start = time.perf_counter()
for step in range(num_batches):
    t = one_step(step)
    times.append(t)
    truth.write("%r\n" % t)
    truth.flush()
    if step == 0 or (step + 1) % display_every == 0:
        speeds = [batch / x for x in times]
        mean = sum(speeds) / len(speeds)
        uncertainty = math.sqrt(sum((s - mean) ** 2 for s in speeds) / len(speeds)) / math.sqrt(
            len(speeds))
        speed_mean = batch / (sum(times) / len(times))
        print("%i\t%s\t%.*f" % (step + 1, "images/sec: %.1f +/- %.1f (jitter = %.1f)" % (
            speed_mean, uncertainty, 0.0), 3, 7.5 - 0.01 * step))
elapsed = time.perf_counter() - loop_start
print("-" * 64)
print("total images/sec: %.2f" % (num_batches * batch / elapsed))
print("-" * 64)
