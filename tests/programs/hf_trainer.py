"""A real ``transformers.Trainer`` run with ``HFCallback``: a 2-layer GPT-2 on random tokens.

``hf_trainer.py OUT_DIR PER_DEVICE_BATCH ACCUMULATION MAX_STEPS``, CPU only, as a
user's fine-tuning script would call it (the stand-in is tests/programs/hf_like.py).
"""

import sys

import torch
from dltop_report import HFCallback
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

out, batch, accumulation, max_steps = sys.argv[1], *map(int, sys.argv[2:5])
torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=128,
                                   n_positions=32))


class Tokens(torch.utils.data.Dataset):
    def __len__(self):
        return 4096

    def __getitem__(self, i):
        ids = torch.randint(0, 128, (16,))
        return {"input_ids": ids, "labels": ids}


args = TrainingArguments(output_dir=out, per_device_train_batch_size=batch,
                         gradient_accumulation_steps=accumulation, max_steps=max_steps,
                         logging_steps=1, report_to=[], save_strategy="no", use_cpu=True)
Trainer(model=model, args=args, train_dataset=Tokens(), callbacks=[HFCallback()]).train()
