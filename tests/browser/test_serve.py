"""``dltop serve``: a real server process, the real Chromium, the TUI drawn in the page.

``DLTOP_UPDATE_CAPTURES=1`` also writes the screenshot to docs/captures/serve.png (the
README's picture).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from .serving import free_port, listening, seed, tuis_of

CAPTURE = Path(__file__).resolve().parents[2] / "docs" / "captures" / "serve.png"

# Records what the page's websockets receive (the terminal's byte stream): xterm draws
# on a canvas, so the stream is where the TUI's text can be read back.
RECORD_WEBSOCKETS = """
(() => {
  window.__wsText = [];
  const Orig = window.WebSocket;
  const decoder = new TextDecoder();
  const keep = (data) => {
    if (typeof data === 'string') window.__wsText.push(data);
    else if (data instanceof ArrayBuffer) {
      window.__wsText.push(decoder.decode(data, {stream: true}));
    }
    else if (data instanceof Blob) data.arrayBuffer().then(keep);
  };
  function Recorded(url, protocols) {
    const ws = protocols === undefined ? new Orig(url) : new Orig(url, protocols);
    ws.addEventListener('message', (ev) => keep(ev.data));
    return ws;
  }
  Recorded.prototype = Orig.prototype;
  Object.assign(Recorded, {CONNECTING: 0, OPEN: 1, CLOSING: 2, CLOSED: 3});
  window.WebSocket = Recorded;
})();
"""
# Distinct colours on a grid over a PNG (base64): a blank page has one or two.
COLOURS = """
const done = arguments[arguments.length - 1];
const img = new Image();
img.onload = () => {
  const c = document.createElement('canvas');
  c.width = img.width; c.height = img.height;
  const ctx = c.getContext('2d');
  ctx.drawImage(img, 0, 0);
  const d = ctx.getImageData(0, 0, c.width, c.height).data;
  const seen = new Set();
  for (let i = 0; i < d.length; i += 4 * 31) seen.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]);
  done(seen.size);
};
img.onerror = () => done(-1);
img.src = 'data:image/png;base64,' + arguments[0];
"""


def test_serve_draws_the_tui_in_chromium(tmp_path: Path, browser, stand_in_engine: int,
                                         wait_until: Callable[..., None]) -> None:
    db = seed(tmp_path, stand_in_engine)
    port, mport = free_port(), free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "dltop", "serve", "--db", str(db), "--port", str(port),
         "--fake-gpus", "2", "--metrics-port", str(mport)], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert server.stdout is not None
        # Its lines: the URL (with the token), the mode, the tunnel, the metrics. Read here:
        # communicate() reads the pipe itself, past what readline() buffered.
        first = "".join(server.stdout.readline() for _ in range(4))
        url = first.splitlines()[0].split(" at ", 1)[-1].strip()
        assert url.startswith(f"http://127.0.0.1:{port}/?token="), first
        token = url.split("?token=", 1)[1]
        wait_until(lambda: listening(port) or server.poll() is not None, 60,
                   "dltop serve to listen")
        assert server.poll() is None, server.communicate()
        browser.driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument",
                                       {"source": RECORD_WEBSOCKETS})
        browser.open(url)

        def received() -> str:
            return "".join(browser.script("return window.__wsText || []"))

        # The TUI draws in several writes: the GPU rows may come before the campaign's.
        wait_until(lambda: all(w in received() for w in (
            "Simulated GPU", "dltop", "serve-demo", "alexnet-r")), 90,
            "the TUI's GPU rows and its campaign on the wire")
        assert "-first-byte" in browser.script("return document.body.className")
        assert browser.script("return document.querySelectorAll("
                              "'#terminal .xterm-screen canvas').length") >= 1

        def colours() -> int:
            png = browser.driver.get_screenshot_as_base64()
            return int(browser.driver.execute_async_script(COLOURS, png))

        wait_until(lambda: colours() > 8, 60, "the terminal to be drawn (not blank)")
        shot = browser.screenshot(tmp_path / "serve.png")
        if os.environ.get("DLTOP_UPDATE_CAPTURES"):
            CAPTURE.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(shot, CAPTURE)
        errors = browser.console_errors()
        assert errors == [], errors
        assert tuis_of(db), "no `dltop tui` process started for the connection"

        # --metrics-port: the same server process answers Prometheus scrapes
        with urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=30) as r:
            metrics = r.read().decode()
        assert 'DCGM_FI_DEV_GPU_UTIL{Hostname=' in metrics and 'simulated="true"' in metrics
        assert 'model="alexnet-r"' in metrics and "dltop_run_iterations_done{" in metrics

        # Offline page; its addresses follow the URL the browser used (an SSH tunnel's
        # local port), not the bind address.
        assert "googleapis" not in browser.driver.page_source
        req = urllib.request.Request(url, headers={"Host": "127.0.0.1:9999"})
        with urllib.request.urlopen(req, timeout=30) as r:
            page = r.read().decode()
        assert f'data-session-websocket-url="ws://127.0.0.1:9999/ws/{token}"' in page, page
        assert f":{port}" not in page

        # Closing the tab (leaving the page) ends its TUI; the server goes on.
        browser.open("about:blank")
        wait_until(lambda: not tuis_of(db), 60, "the tab's TUI to end when it closed")
        assert server.poll() is None
        browser.open(url)  # a session open when the server stops
        wait_until(lambda: "Simulated GPU" in received(), 90, "the second session's TUI")
    finally:
        server.send_signal(signal.SIGINT)
        try:
            out, err = server.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            out, err = server.communicate()
    out = first + out
    assert server.returncode == 0, err
    assert out.count(token) == 1, out  # printed once, in the URL to open
    assert "read-only: watch only" in out
    assert f"ssh -L {port}:127.0.0.1:{port}" in out
    assert f"http://127.0.0.1:{mport}/metrics" in out
    assert "Traceback" not in err and "Event loop is closed" not in err, err
    wait_until(lambda: not tuis_of(db), 30, "the served TUIs to end with the server")


@pytest.mark.parametrize("argv", [
    ["serve", "--port", "{port}"],
    ["serve", "--port", "{free}", "--metrics-port", "{port}"],
    ["exporter", "--port", "{port}"],
])
def test_a_port_in_use_is_exit_2_with_a_message(tmp_path: Path, argv: list[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        args = [a.format(port=port, free=free_port()) for a in argv]
        res = subprocess.run([sys.executable, "-m", "dltop", *args, "--db",
                              str(tmp_path / "none.db"), "--fake-gpus", "1"],
                             capture_output=True, text=True, timeout=60)
    assert res.returncode == 2, res
    assert f"127.0.0.1:{port} is already in use" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr and not (tmp_path / "none.db").exists()


def test_a_network_host_warns_that_the_token_travels_in_clear_text(tmp_path: Path) -> None:
    with socket.socket() as taken:  # the port is taken so that nothing starts
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        res = subprocess.run([sys.executable, "-m", "dltop", "serve", "--host", "0.0.0.0",
                              "--port", str(port), "--db", str(tmp_path / "x.db")],
                             capture_output=True, text=True, timeout=60)
    assert res.returncode == 2
    assert "warning: --host 0.0.0.0 is reachable from the network" in res.stderr
    assert "the token travels in clear text" in res.stderr
    assert "is already in use" in res.stderr


def test_an_unknown_host_is_exit_2(tmp_path: Path) -> None:
    res = subprocess.run([sys.executable, "-m", "dltop", "exporter", "--host",
                          "no-such-host.invalid", "--port", str(free_port())],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "--host 'no-such-host.invalid'" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr


def test_a_missing_database_is_exit_2(tmp_path: Path) -> None:
    # (the exporter waits for a missing one instead: tests/telemetry/test_exporter.py)
    res = subprocess.run([sys.executable, "-m", "dltop", "serve", "--port", str(free_port()),
                          "--db", str(tmp_path / "none.db")],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2, res
    assert "none.db" in res.stderr and "no such database" in res.stderr, res.stderr
    assert not (tmp_path / "none.db").exists()


@pytest.mark.parametrize("command", ["serve", "exporter"])
def test_a_db_through_a_dangling_link_or_a_directory_is_refused(tmp_path: Path,
                                                                command: str) -> None:
    """Like every other command (store/db.py's checks): nothing waited for, nothing created."""
    link = tmp_path / "link.db"
    link.symlink_to(tmp_path / "target.db")
    for db, said in ((link, f"{link}: a symbolic link to {tmp_path / 'target.db'}, not a "
                            "database file"),
                     (tmp_path, f"{tmp_path} is a directory, not a database file")):
        res = subprocess.run([sys.executable, "-m", "dltop", command, "--port",
                              str(free_port()), "--db", str(db)],
                             capture_output=True, text=True, timeout=60)
        assert res.returncode == 2, res
        (line,) = res.stderr.splitlines()
        assert line.startswith(f"dltop: error: {said}"), res.stderr
        assert "waiting" not in res.stdout + res.stderr
    assert not (tmp_path / "target.db").exists()


def test_a_host_is_echoed_shown_never_sent() -> None:
    from dltop.cli.serve import _url_host

    assert _url_host("::1") == "[::1]" and _url_host("127.0.0.1") == "127.0.0.1"
    assert _url_host("h\x1b]0;x\x07") == "h\\x1b]0;x\\x07"
