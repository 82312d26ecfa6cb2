"""pytorch/benchmark's run.py, as it prints: 3 unprinted warm-up calls, 10 timed ones
(run_one_step), then printResultSummaryTime's median, once::

    Running train method from resnet50 on cpu in eager mode with input batch size 32 ...
    CPU Wall Time per batch:   31.234 milliseconds
    CPU Wall Time:             31.234 milliseconds
    CPU Peak Memory:                0.5000 GB

``torchbench_like.py TRUTH [old]``: TRUTH gets the 10 timed calls' milliseconds; ``old``
prints the format of run.py before 2023-09 (``CPU Total Wall Time:``).
"""

import sys
import time

truth = open(sys.argv[1], "w")
old = len(sys.argv) > 2 and sys.argv[2] == "old"


def func(i):
    time.sleep(0.02 + 0.01 * (i % 3))


print("Running train method from resnet50 on cpu in eager mode with input batch size 32 and "
      "precision fp32.")
for i in range(3):
    func(i)
result = []
for i in range(10):
    t0 = time.time_ns()
    func(i)
    t1 = time.time_ns()
    result.append((t1 - t0) / 1000000)
    truth.write("%r\n" % result[-1])
    truth.flush()
values = sorted(result)
median = (values[4] + values[5]) / 2  # numpy.median of 10 values
if old:
    print("{:<20} {:>20}".format("CPU Total Wall Time:", "%.3f milliseconds" % median))
else:
    print("{:<20} {:>20}".format("CPU Wall Time per batch:", "%.3f milliseconds" % median))
    print("{:<20} {:>20}".format("CPU Wall Time:", "%.3f milliseconds" % median))
print("{:<20} {:>20}".format("Time to first batch:", "%.4f ms" % result[0]))
print("{:<20} {:>20}".format("CPU Peak Memory:", "%.4f GB" % 0.5))
