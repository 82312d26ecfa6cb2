"""Text data does not change a transformer's tokens/s: synthetic ids against a byte-level text.

Both sides are ``dltop run`` of PyTorch gpt-tiny training (AdamW, the model's
``seq_len``), the same batch, threads and iterations, in fresh processes; one reads the
single synthetic batch made once on the device (``data = "synthetic"``), the other a
text file cut into windows drawn in a seeded order (``data = "real"``, ``data_dir`` the
text: docs/data.md). Rounds alternate the two so machine noise hits both alike. The
figure is each side's median over rounds of the run's tokens/s (``runs.samples_per_s``:
measured tokens over measured seconds) and the ratio text / synthetic. Goal: within the
rounds' spread of 1.0 (the text's batch is an index into a tensor already in memory).

    .venv/bin/python benchmarks/lm_text_data.py [--rounds 3] [--iterations 30]
        [--batch 4] [--threads 1] [--text FILE]

``--text`` defaults to a PTB-like text ``dltop data synth ptb`` writes (60 000 words).

A second, in-process part takes the machine's noise out (a shared host's load moves
a whole run by tens of %): one process builds the runner's two batch sources (the
synthetic ``torch_lm_steps.synthetic`` and the text's ``torch_data.real`` over
``datasets.real_split``, as ``torch_runner._data`` does) and one gpt-tiny with its
AdamW, then alternates training steps fed by each (``--steps`` of each, interleaved),
and times each source's ``next_batch()`` alone. It prints the median step of each,
their ratio, and the fetch's share of a step. A third source, a fixed batch of random
ids below 256, tells the data path from the ids' range: byte ids touch 256 rows of
the embedding and its gradient, random ones up to 512 of 10 000.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

PROFILE = """name = "lm-text-{data}"
[[matrix]]
frameworks = ["torch"]
models = ["gpt-tiny"]
batch_sizes = [{batch}]
devices = ["cpu:{threads}"]
iterations = {iterations}
warmup = 5
optimizer = "adamw"
lr = 3e-4
data = "{data}"
{data_dir}
"""


def _dltop(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "dltop", *args], check=True, capture_output=True,
                   text=True)


def tokens_per_s(data: str, text: Path, args: argparse.Namespace, work: Path) -> float:
    prof = work / f"{data}.toml"
    prof.write_text(PROFILE.format(
        data=data, batch=args.batch, threads=args.threads, iterations=args.iterations,
        data_dir=f'data_dir = "{text}"' if data == "real" else ""))
    db = work / "bench.db"
    _dltop("run", str(prof), "--db", str(db), "--headless")
    conn = sqlite3.connect(db)
    try:
        (rate,) = conn.execute("select samples_per_s from runs where status = 'ok' "
                               "order by id desc limit 1").fetchone()
    finally:
        conn.close()
    return float(rate)


IN_PROCESS = """
import json, os, statistics, sys, time
os.sched_setaffinity(0, {{min(os.sched_getaffinity(0))}})
import torch
sys.path.insert(0, {child!r})
import convergence, datasets, lm_catalog, torch_data, torch_lm, torch_lm_steps
torch.set_num_threads(1)
torch.manual_seed(0)
cpu = torch.device("cpu")
batch, seq = {batch}, 128
synth = torch_lm_steps.synthetic("gpt-tiny", batch, seq, cpu, False)
ids = torch.randint(0, 256, (batch, seq + 1), generator=torch.Generator().manual_seed(0))
bytes_batch = (ids[:, :-1], ids[:, 1:])
synth256 = lambda: bytes_batch
kind, shape, train, _ = datasets.real_split("gpt-tiny", {text!r}, seq_len=seq)
n = train[2]
order = convergence.EpochOrder(n, True, 0).order
text, _ = torch_data.real(kind, shape, train, cpu, "device", 0,
                          lambda dev: torch_data.Order(n, batch, batch, 0, order, dev))
model = torch_lm.build("gpt-tiny", "fused", cpu).train()
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.0)
loss_fn = torch_lm.loss_fn(10000)

def step(next_batch):
    t0 = time.perf_counter()
    x, y = next_batch()
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()
    loss.item()
    return time.perf_counter() - t0

sources = [("synthetic", synth), ("text", text), ("synthetic<256", synth256)]
for _ in range(5):
    for _, src in sources:
        step(src)
times = {{name: [] for name, _ in sources}}
for i in range({steps}):
    for name, src in sources[i % 3:] + sources[:i % 3]:
        times[name].append(step(src))
fetch = {{}}
for name, src in sources:
    t0 = time.perf_counter()
    for _ in range(1000):
        src()
    fetch[name] = (time.perf_counter() - t0) / 1000
print(json.dumps({{"steps": times, "fetch": fetch}}))
"""


def in_process(text: Path, args: argparse.Namespace) -> None:
    child = Path(__file__).resolve().parents[1] / "src" / "dltop" / "runners" / "child"
    code = IN_PROCESS.format(child=str(child), text=str(text), batch=args.batch,
                             steps=args.steps)
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    got = json.loads(out.stdout.strip().splitlines()[-1])
    med = {k: statistics.median(v) for k, v in got["steps"].items()}
    tokens = args.batch * 128
    print(f"in one process, {args.steps} steps of each interleaved (1 thread):")
    for name in ("synthetic", "text", "synthetic<256"):
        print(f"{name:13s} step median {1000 * med[name]:8.2f} ms = "
              f"{tokens / med[name]:8.0f} tokens/s; next_batch() "
              f"{1e6 * got['fetch'][name]:7.1f} us "
              f"({100 * got['fetch'][name] / med[name]:.3f} % of a step)")
    print(f"ratio text / synthetic tokens/s: {med['synthetic'] / med['text']:.3f}; "
          f"text / synthetic ids < 256: {med['synthetic<256'] / med['text']:.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=30)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--text", type=Path, default=None)
    ap.add_argument("--steps", type=int, default=40,
                    help="training steps of each source in the in-process part")
    ap.add_argument("--in-process-only", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="dltop-lmtext-") as tmp:
        work = Path(tmp)
        text = args.text
        if text is None:
            _dltop("data", "synth", "ptb", str(work / "ptb"))
            text = work / "ptb" / "ptb.train.txt"
        size = text.stat().st_size
        in_process(text, args)
        if args.in_process_only:
            return
        rates: dict[str, list[float]] = {"synthetic": [], "real": []}
        for r in range(args.rounds):
            for data in (("synthetic", "real") if r % 2 == 0 else ("real", "synthetic")):
                rates[data].append(tokens_per_s(data, text, args, work))
        print(f"torch gpt-tiny batch={args.batch} seq_len=128 cpu:{args.threads} "
              f"iterations={args.iterations} warmup=5 rounds={args.rounds} (alternating)")
        print(f"text: {text.name}, {size} bytes = {size} byte-level tokens")
        for data, values in rates.items():
            shown = " ".join(f"{v:.0f}" for v in values)
            print(f"{data:10s} tokens/s median {statistics.median(values):8.0f}  "
                  f"rounds: {shown}")
        ratio = statistics.median(rates["real"]) / statistics.median(rates["synthetic"])
        spread = max(max(v) / min(v) for v in rates.values()) - 1
        print(f"ratio text / synthetic: {ratio:.3f} (largest within-side spread "
              f"{100 * spread:.1f} %)")


if __name__ == "__main__":
    main()
