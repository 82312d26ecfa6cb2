"""pytorch/examples imagenet/main.py, as it prints (ProgressMeter and AverageMeter copied
in shape): ``Epoch: [0][ 1/5]\\tTime  0.061 ( 0.061)\\tData ...\\tLoss 6.9078e+00 (...)``.

``imagenet_like.py TRUTH [PRINT_FREQ [BATCHES_PER_EPOCH]]``: trains until stopped, 5
batches an epoch, each followed by an epoch's validation (``Test: [...]`` lines, which
carry a Time too); writes the seconds of every *printed* training batch (what its Time
field holds, measured with time.perf_counter) to TRUTH. Batches sleep 60-100 ms: the
printed Time has 3 decimals.
"""

import sys
import time

truth = open(sys.argv[1], "w")
print_freq = int(sys.argv[2]) if len(sys.argv) > 2 else 10
batches = int(sys.argv[3]) if len(sys.argv) > 3 else 5


class AverageMeter(object):
    def __init__(self, name, fmt=":f"):
        self.name, self.fmt = name, fmt
        self.val = self.avg = self.sum = 0.0
        self.count = 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count

    def __str__(self):
        fmtstr = "{name} {val" + self.fmt + "} ({avg" + self.fmt + "})"
        return fmtstr.format(**self.__dict__)


class ProgressMeter(object):
    def __init__(self, num_batches, meters, prefix=""):
        num_digits = len(str(num_batches // 1))
        fmt = "{:" + str(num_digits) + "d}"
        self.batch_fmtstr = "[" + fmt + "/" + fmt.format(num_batches) + "]"
        self.meters = meters
        self.prefix = prefix

    def display(self, batch):
        entries = [self.prefix + self.batch_fmtstr.format(batch)]
        entries += [str(meter) for meter in self.meters]
        print("\t".join(entries))


print("=> creating model 'resnet18'")
print("=> Dummy data is used!")
epoch = 0
while True:
    batch_time = AverageMeter("Time", ":6.3f")
    data_time = AverageMeter("Data", ":6.3f")
    losses = AverageMeter("Loss", ":.4e")
    top1 = AverageMeter("Acc@1", ":6.2f")
    top5 = AverageMeter("Acc@5", ":6.2f")
    progress = ProgressMeter(batches, [batch_time, data_time, losses, top1, top5],
                             prefix="Epoch: [{}]".format(epoch))
    end = time.perf_counter()
    for i in range(batches):
        time.sleep(0.01)  # the data loader
        data_time.update(time.perf_counter() - end)
        time.sleep(0.05 + 0.02 * (i % 3))
        losses.update(6.9 - 0.01 * i, 256)
        top1.update(0.1, 256)
        top5.update(0.5, 256)
        batch_time.update(time.perf_counter() - end)
        end = time.perf_counter()
        if i % print_freq == 0:
            truth.write("%r\n" % batch_time.val)
            truth.flush()
            progress.display(i + 1)
    val_time = AverageMeter("Time", ":6.3f")
    vprogress = ProgressMeter(2, [val_time, AverageMeter("Loss", ":.4e")], prefix="Test: ")
    for i in range(2):
        val_time.update(0.001)
        vprogress.display(i + 1)
    print(" *   Acc@1 0.100 Acc@5 0.500")
    epoch += 1
