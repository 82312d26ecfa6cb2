"""The peer client of ``benchmarks/serve_client.py``: NVIDIA AIPerf, in a virtual
environment of its own that this module makes on first use
(``~/.cache/dltop-bench/peer-venv``, reused when present; never dltop's). guidellm
was not taken: it requires torch. AIPerf needs a tokenizer: a word-level one is built
in that environment (every word the fake server or the prompts use is one token), no
download. Given as a local path without ``HF_HUB_OFFLINE``: AIPerf 0.13's offline
mode takes a local path for a hub repository id and fails.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PEER_VENV = Path.home() / ".cache" / "dltop-bench" / "peer-venv"
PEER = "aiperf==0.13.0"
"""Pinned: its flags and its JSON export's names are read here."""


def peer_python() -> Path:
    """The peer's environment, made and filled on first use (``pip install PEER``).

    Raises:
        RuntimeError: it cannot be made or installed (pip's output's tail).
    """
    python = PEER_VENV / "bin" / "python"
    if (PEER_VENV / "bin" / "aiperf").exists():
        return python
    PEER_VENV.parent.mkdir(parents=True, exist_ok=True)
    base = getattr(sys, "_base_executable", sys.executable)
    for cmd in ([base, "-m", "venv", str(PEER_VENV)],
                [str(python), "-m", "pip", "install", "-q", PEER]):
        print("peer: " + " ".join(cmd), flush=True)
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed: {(res.stdout + res.stderr)[-800:]}")
    return python


TOKENIZER = """
import json, sys
from tokenizers import Tokenizer, models, pre_tokenizers, decoders
words = ["[UNK]", "tok"] + sys.argv[2:]
tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
tok.decoder = decoders.WordPiece(prefix="##")
tok.save(sys.argv[1] + "/tokenizer.json")
json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]",
           "model_max_length": 1000000}, open(sys.argv[1] + "/tokenizer_config.json", "w"))
"""


def write_tokenizer(python: Path, folder: Path, words: tuple[str, ...]) -> Path:
    """A word-level tokenizer of ``"tok"`` and ``words`` in ``folder``, made with the
    peer's ``tokenizers``.

    Raises:
        subprocess.CalledProcessError: it could not be made.
    """
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run([str(python), "-c", TOKENIZER, str(folder), *words], check=True)
    return folder


def aiperf_command(python: Path, base: str, tok: Path, prompts: Path, work: Path, *,
                   rate_per_s: float, concurrency: int, requests: int, warmup: int,
                   new_tokens: int, seed: int) -> list[str]:
    """``aiperf profile`` for the load dltop's client is given: the same prompts (a
    JSONL of ``{"text": ...}``), Poisson arrivals (its default), output tokens counted
    from the server's usage, as dltop's client counts them."""
    return [str(python.parent / "aiperf"), "profile", "--model", "fake", "--url", base,
            "--endpoint-type", "chat", "--streaming", "--tokenizer", str(tok),
            "--use-server-token-count", "--input-file", str(prompts),
            "--custom-dataset-type", "single_turn", "--request-rate", str(rate_per_s),
            "--concurrency", str(concurrency), "--request-count", str(requests),
            "--warmup-request-count", str(warmup), "--osl", str(new_tokens),
            "--extra-inputs", f"max_tokens:{new_tokens}", "--random-seed", str(seed),
            "--ui", "none", "--artifact-dir", str(work)]


def parse_aiperf(doc: dict[str, object]) -> tuple[float, float, int]:
    """(TTFT p50 ms, ITL p50 ms, requests) from AIPerf's ``profile_export_aiperf.json``.

    Raises:
        ValueError: a figure is missing or not in milliseconds.
    """
    out = []
    for key in ("time_to_first_token", "inter_token_latency", "request_count"):
        metric = doc.get(key)
        if not isinstance(metric, dict):
            raise ValueError(f"AIPerf's export has no {key}")
        if key == "request_count":
            out.append(int(metric.get("avg") or 0))
            continue
        if metric.get("unit") != "ms" or not isinstance(metric.get("p50"), int | float):
            raise ValueError(f"AIPerf's {key} has no p50 in ms: {metric}")
        out.append(float(metric["p50"]))
    return out[0], out[1], int(out[2])
