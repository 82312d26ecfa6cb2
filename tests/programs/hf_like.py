"""A stand-in for a Hugging Face ``transformers`` Trainer (transformers is not installed
here): the training loop's callback events in the Trainer's order, each delivered the way
its CallbackHandler.call_event does, ``getattr(callback, event)(args, state, control,
model=..., processing_class=..., optimizer=..., lr_scheduler=..., train_dataloader=...,
eval_dataloader=..., **kwargs)``, to ``dltop_report.HFCallback``; events HFCallback does
not define (on_pre_optimizer_step, on_push_begin, ...) included.

``hf_like.py TRUTH PER_DEVICE_BATCH ACCUMULATION LOGGING_STEPS [NAN_AT_STEP]``: trains
until stopped; each optimizer step runs ACCUMULATION micro-batches of 10-20 ms; TRUTH
gets each step's seconds (time.perf_counter around the work between on_step_begin and
on_step_end). Logs ``{"loss": ..., "learning_rate": ..., "epoch": ...}`` every
LOGGING_STEPS steps, the loss NaN from step NAN_AT_STEP on.
"""

import sys
import time

from dltop_report import HFCallback

truth = open(sys.argv[1], "w")
per_device = int(sys.argv[2])
accumulation = int(sys.argv[3])
logging_steps = int(sys.argv[4])
nan_at = int(sys.argv[5]) if len(sys.argv) > 5 else None


class TrainingArguments(object):
    per_device_train_batch_size = per_device
    gradient_accumulation_steps = accumulation
    logging_steps = 0
    n_gpu = 0
    world_size = 1

    @property
    def train_batch_size(self):
        return self.per_device_train_batch_size * max(1, self.n_gpu)


class TrainerState(object):
    global_step = 0
    epoch = 0.0
    is_world_process_zero = True
    is_local_process_zero = True


class TrainerControl(object):
    should_log = False


callbacks = [HFCallback()]
args, state, control = TrainingArguments(), TrainerState(), TrainerControl()


def call_event(event, **kwargs):
    global control
    for callback in callbacks:
        result = getattr(callback, event)(args, state, control, model=None,
                                          processing_class=None, optimizer=None,
                                          lr_scheduler=None, train_dataloader=None,
                                          eval_dataloader=None, **kwargs)
        if result is not None:
            control = result


call_event("on_init_end")
call_event("on_train_begin")
losses = []
while True:
    call_event("on_epoch_begin")
    for _ in range(10):
        batch = [0] * per_device  # the first micro-batch is fetched before on_step_begin
        call_event("on_step_begin")
        t0 = time.perf_counter()
        for micro in range(accumulation):
            time.sleep(0.01 + 0.005 * ((state.global_step + micro) % 3))
            losses.append(float("nan") if nan_at is not None and state.global_step >= nan_at
                          else 2.0 / (state.global_step + 1))
            if micro < accumulation - 1:
                call_event("on_substep_end")
        call_event("on_pre_optimizer_step")
        time.sleep(0.005)
        call_event("on_optimizer_step")
        seconds = time.perf_counter() - t0
        state.global_step += 1
        state.epoch += 0.1
        call_event("on_step_end")
        truth.write("%r\n" % seconds)
        truth.flush()
        if state.global_step % logging_steps == 0:
            logs = {"loss": round(sum(losses) / len(losses), 4), "grad_norm": 1.0,
                    "learning_rate": 5e-05, "epoch": round(state.epoch, 2)}
            losses = []
            call_event("on_log", logs=logs)
            print(logs)
        time.sleep(0.005)  # the Trainer's own work between steps: not the step's
    call_event("on_epoch_end")
    call_event("on_push_begin")
