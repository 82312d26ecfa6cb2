"""docs/serving.md's key table states the defaults a serve entry really gets: a user who
leaves a key out reads there what was sent."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dltop.profiles.loader import parse

DOC = Path(__file__).resolve().parents[2] / "docs" / "serving.md"
ENTRY = """[[matrix]]
frameworks = ["openai"]
mode = "serve"
models = ["m"]
endpoint = "http://127.0.0.1:8000/v1"
"""


def doc_defaults() -> dict[str, str]:
    """The default column of the table under '## Keys', by key."""
    rows: dict[str, str] = {}
    for line in DOC.read_text().split("\n## Keys\n", 1)[1].splitlines():
        if line.startswith("| `"):
            key, default = (c.strip() for c in line.strip("|").split("|")[:2])
            rows[key.strip("`")] = default
        elif rows and not line.startswith("|"):
            break
    return rows


def test_the_serving_key_table_states_the_defaults_a_serve_entry_gets() -> None:
    rows = doc_defaults()
    (job,) = parse(ENTRY, "p.toml", "p", logical_cores=2).jobs
    got: dict[str, Any] = {**dict(job.options), "prompt_tokens": job.prompt_tokens,
                           "new_tokens": job.new_tokens, "iterations": job.iterations,
                           "warmup": job.warmup, "request_rate": job.request_rate,
                           "concurrency": job.concurrency, "seed": job.seed,
                           "batch_sizes": [job.batch_size],
                           "devices": [job.device.label]}
    literal = {k: json.loads(v.strip("`")) for k, v in rows.items()
               if k in got and not v.startswith(("absent", "required"))}
    # every plain default of the table is checked (a table that lost its rows fails)
    assert set(literal) >= {"api", "arrival", "burstiness", "max_error_rate", "prompt_tokens",
                            "new_tokens", "iterations", "warmup", "request_rate",
                            "concurrency", "seed", "batch_sizes", "devices"}
    assert {k: got[k] for k in literal} == literal
    for key, default in rows.items():
        if default.startswith("absent ("):  # absent, read as this value: stored as absent
            assert job.to_json_dict().get(key) is None, key
