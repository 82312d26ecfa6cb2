"""Keras 3's progress bar (keras/src/utils/progbar.py): ANSI colours, ``\\b`` and ``\\r``.

``STEPS TRUTH MODE``: ``step`` prints each step's own ms (colours around every
field, as Keras does); ``keras`` prints what Keras prints, the mean ms of steps 2
to now (step 1 left out), which no ``cumulative = true`` can undo.
"""

import sys
import time

from cmd_common import indices, step, steps_and_truth

steps, truth = steps_and_truth()
mode = sys.argv[3]
width, after_first = 0, []
for i in indices(steps):
    dt = step(i, truth)
    if i == 0 and mode == "keras":  # Keras's first step traces the model: slow
        time.sleep(0.3)
        dt += 0.3
    if i:
        after_first.append(dt)
    ms = dt * 1e3
    if mode == "keras" and after_first:
        ms = sum(after_first) / len(after_first) * 1e3
    line = ("\x1b[1m%d/%d\x1b[0m \x1b[32m━━\x1b[0m\x1b[37m━━\x1b[0m \x1b[1m1s\x1b[0m "
            "%.3fms/step - loss: 0.5" % (i + 1, steps, ms))
    sys.stdout.write("\b" * width + "\r" + line)
    sys.stdout.flush()
    width = len(line)
sys.stdout.write("\n")
