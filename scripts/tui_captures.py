"""Re-take the text captures in docs/captures/ by driving ``dltop`` in tmux, as a user would.

A real CPU campaign (PyTorch runs on this machine) runs in a background engine
while viewers with 8 simulated GPUs attach, switch screens, open dialogs and
resize; a second, packed campaign shows two runs at once. Every capture is
``tmux capture-pane`` text.

    .venv/bin/python scripts/tui_captures.py [--out docs/captures]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

LONG_CPU = """
name = "cpu-sweep"
[[matrix]]
frameworks = ["torch"]
models = ["fcn-r", "alexnet-r"]
batch_sizes = [64]
devices = ["cpu:1", "cpu:2"]
iterations = 400
warmup = 10
"""


def dltop(*args: str) -> list[str]:
    return [sys.executable, "-m", "dltop", *args]


def run(argv: list[str]) -> None:
    res = subprocess.run(argv, capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed: {res.stderr}")


class Pane:
    """One tmux session running one command."""

    def __init__(self, name: str, cmd: str, size: tuple[int, int]) -> None:
        self.name = name
        subprocess.run(["tmux", "kill-session", "-t", name], capture_output=True)
        subprocess.run(["tmux", "new-session", "-d", "-s", name, "-x", str(size[0]),
                        "-y", str(size[1]), cmd], check=True)

    def text(self) -> str:
        return subprocess.run(["tmux", "capture-pane", "-p", "-t", self.name],
                              capture_output=True, text=True, check=True).stdout

    def wait_for(self, cond: Callable[[str], bool], timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not cond(self.text()):
            if time.monotonic() > deadline:
                sys.exit(f"{self.name}: the screen never showed what was expected:\n"
                         f"{self.text()}")
            time.sleep(0.2)

    def keys(self, *keys: str, settle: float = 1.0) -> None:
        subprocess.run(["tmux", "send-keys", "-t", self.name, *keys], check=True)
        time.sleep(settle)

    def resize(self, size: tuple[int, int]) -> None:
        subprocess.run(["tmux", "resize-window", "-t", self.name, "-x", str(size[0]),
                        "-y", str(size[1])], check=True)
        time.sleep(1.5)

    def save(self, out: Path, file: str) -> None:
        (out / file).write_text(self.text())
        print(f"wrote {out / file}")

    def close(self) -> None:
        subprocess.run(["tmux", "kill-session", "-t", self.name], capture_output=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("docs/captures"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="dltop-captures-"))
    db, packed_db = tmp / "d.db", tmp / "packed.db"
    (tmp / "cpu-sweep.toml").write_text(LONG_CPU)
    viewer = f"TERM=xterm-256color {' '.join(dltop('tui', '--fake-gpus', '8'))}"
    try:
        run(dltop("run", "quick", "--db", str(db), "--headless", "--no-telemetry"))
        run(dltop("run", str(tmp / "cpu-sweep.toml"), "--db", str(db), "--detach"))
        main_pane = Pane("cap-main", f"{viewer} --db {db}", (100, 32))
        main_pane.wait_for(lambda t: "iteration" in t and "SIM" in t)
        time.sleep(3)  # sparklines fill
        main_pane.save(args.out, "main-fake8-100x32.txt")
        main_pane.resize((80, 24))
        main_pane.save(args.out, "main-fake8-80x24.txt")
        main_pane.resize((100, 32))
        main_pane.keys("a")
        main_pane.save(args.out, "add-profile-picker.txt")
        # Escape alone: followed at once by a key, a terminal reads it as Alt+key.
        main_pane.keys("Escape")
        main_pane.keys("q")
        main_pane.save(args.out, "quit-dialog.txt")
        main_pane.keys("Escape")
        main_pane.keys("?")
        main_pane.save(args.out, "help-100x32.txt")
        main_pane.keys("Escape")
        main_pane.keys("3", settle=2.0)
        main_pane.save(args.out, "history-100x32.txt")
        # Open the finished `quick` campaign (3 frameworks), then its results.
        main_pane.keys("Down")
        main_pane.keys("Enter", settle=2.0)  # opens it on the results screen
        main_pane.save(args.out, "results-100x32.txt")
        main_pane.keys("q")  # the campaign shown is finished: no question
        main_pane.close()

        again = Pane("cap-again", f"{viewer} --db {db}", (100, 32))
        again.wait_for(lambda t: "iteration" in t)
        time.sleep(2)
        again.save(args.out, "main-reattached-100x32.txt")
        again.resize((70, 20))
        again.save(args.out, "too-small-70x20.txt")
        again.close()

        cpu_only = Pane("cap-cpu", f"TERM=xterm-256color {' '.join(dltop('tui'))} --db {db}",
                        (100, 32))
        cpu_only.wait_for(lambda t: "iteration" in t)
        time.sleep(2)
        cpu_only.save(args.out, "main-cpu-only-100x32.txt")
        cpu_only.close()
        run(dltop("cancel", "--db", str(db)))

        run(dltop("run", str(tmp / "cpu-sweep.toml"), "--db", str(packed_db), "--detach",
                  "--pack"))
        packed = Pane("cap-packed", f"{viewer} --db {packed_db}", (100, 32))
        packed.wait_for(lambda t: "more running" in t and t.count("cpu:1") >= 1)
        time.sleep(3)
        packed.save(args.out, "main-packed-100x32.txt")
        packed.close()
        run(dltop("cancel", "--db", str(packed_db)))
    finally:
        for name in ("cap-main", "cap-again", "cap-cpu", "cap-packed"):
            subprocess.run(["tmux", "kill-session", "-t", name], capture_output=True)
        for d in (db, packed_db):
            if d.exists():
                subprocess.run(dltop("cancel", "--db", str(d)), capture_output=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
