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
"""

from __future__ import annotations

import argparse
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=30)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--text", type=Path, default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="dltop-lmtext-") as tmp:
        work = Path(tmp)
        text = args.text
        if text is None:
            _dltop("data", "synth", "ptb", str(work / "ptb"))
            text = work / "ptb" / "ptb.train.txt"
        size = text.stat().st_size
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
