"""The PyTorch word-language-model example's log line: the mean ms/batch of the last
``log_interval`` (2) batches: ``| epoch   1 |     2/   40 batches | lr 20.00 | ms/batch
30.512 | loss  7.63 | ppl  2063.51``."""

from cmd_common import indices, step, steps_and_truth

steps, truth = steps_and_truth()
interval, elapsed = 2, 0.0
for i in indices(steps):
    elapsed += step(i, truth)
    if (i + 1) % interval == 0:
        print("| epoch   1 | %5d/%5d batches | lr 20.00 | ms/batch %5.3f | loss %5.2f | "
              "ppl %8.2f" % (i + 1, steps, elapsed * 1000 / interval, 7.63, 2063.51), flush=True)
        elapsed = 0.0
