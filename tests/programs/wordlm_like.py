"""pytorch/examples word_language_model/main.py, as it prints: every LOG_INTERVAL batches
(batch counted from 0, printed when ``batch % log_interval == 0 and batch > 0``)::

    | epoch   1 |     2/   12 batches | lr 20.00 | ms/batch 31.42 | loss  7.56 | ppl  1920.32

with ms/batch the time since the last line over log_interval; so the first line of an
epoch covers batches 0..log_interval, one more than it divides by. After each epoch a
``| end of epoch ...`` line.

``wordlm_like.py TRUTH [LOG_INTERVAL [BATCHES]]``, runs until stopped; TRUTH gets each
batch's seconds (time.perf_counter).
"""

import math
import sys
import time

truth = open(sys.argv[1], "w")
log_interval = int(sys.argv[2]) if len(sys.argv) > 2 else 2
batches = int(sys.argv[3]) if len(sys.argv) > 3 else 12
lr = 20.0
epoch = 0
while True:
    epoch += 1
    epoch_start = time.perf_counter()
    total_loss = 0.0
    start_time = prev = time.perf_counter()
    for batch in range(batches):
        time.sleep(0.02 + 0.01 * (batch % 3))
        # a batch's truth runs from the previous one's end, as the program's elapsed does
        now = time.perf_counter()
        truth.write("%r\n" % (now - prev))
        truth.flush()
        prev = now
        total_loss += 7.5
        if batch % log_interval == 0 and batch > 0:
            cur_loss = total_loss / log_interval
            elapsed = time.perf_counter() - start_time
            print("| epoch {:3d} | {:5d}/{:5d} batches | lr {:02.2f} | ms/batch {:5.2f} | "
                  "loss {:5.2f} | ppl {:8.2f}".format(
                      epoch, batch, batches, lr, elapsed * 1000 / log_interval, cur_loss,
                      math.exp(cur_loss)))
            total_loss = 0
            start_time = prev = time.perf_counter()
    print("-" * 89)
    print("| end of epoch {:3d} | time: {:5.2f}s | valid loss {:5.2f} | valid ppl {:8.2f}".format(
        epoch, time.perf_counter() - epoch_start, 5.63, 278.11))
    print("-" * 89)
