"""``dltop serve`` is locked: a token per start, the WebSocket's Origin, read-only viewers.

Raw WebSocket clients (aiohttp, textual-serve's own library) and a client run as another
local user (``nobody``) are refused with 403 and start no terminal session; the right
token from the right origin gets a read-only viewer that refuses a steering key. Chromium:
the printed URL shows the viewer, and a page from another origin cannot drive it, not
even with the token.
"""

from __future__ import annotations

import asyncio
import functools
import http.server
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from dltop.cli.servelock import new_token
from dltop.store import connect

from .serving import Served, free_port, seed, serving, tuis_of
from .test_serve import RECORD_WEBSOCKETS


def db_state(db: Path) -> list[list[dict[str, Any]]]:
    conn = connect(db, create=False)
    try:
        return [list(conn.query(f"select * from {t} order by id"))
                for t in ("campaigns", "jobs", "runs")]
    finally:
        conn.close()


def refusals(served: Served) -> list[str]:
    return [line for line in served.logged().splitlines() if "refused" in line]


@pytest.fixture
def token_file() -> Iterator[tuple[Path, str]]:
    """(a 0600 file, the token in it), in a directory every user can enter (so that only
    the file's mode keeps another user out)."""
    where = Path(tempfile.mkdtemp(prefix="dltop-token-"))
    where.chmod(0o755)
    path, token = where / "token", new_token()
    path.write_text(token + "\n")
    path.chmod(0o600)
    try:
        yield path, token
    finally:
        shutil.rmtree(where)


async def refused_status(http: aiohttp.ClientSession, url: str, origin: str | None) -> int:
    with pytest.raises(aiohttp.WSServerHandshakeError) as err:
        await http.ws_connect(url, origin=origin)
    return err.value.status


async def read_until(ws: aiohttp.ClientWebSocketResponse, seen: list[str], text: str,
                     timeout_s: float) -> None:
    """Read the terminal's bytes into ``seen`` until ``text`` is among them."""
    async def loop() -> None:
        while text not in "".join(seen):
            msg = await ws.receive()
            if msg.type == aiohttp.WSMsgType.BINARY:
                seen.append(msg.data.decode("utf-8", "replace"))
            elif msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED,
                              aiohttp.WSMsgType.ERROR):
                raise AssertionError(f"the session ended before {text!r}: {''.join(seen)}")
    await asyncio.wait_for(loop(), timeout_s)


SYSTEM_PYTHON = "/usr/bin/python3"
# Another local user's client: it cannot read the 0600 token file, and without the token
# its WebSocket is refused. Standard library only (it runs as nobody, on the system Python).
NOBODY_CLIENT = r"""
import json, socket, sys
port, token_file = int(sys.argv[1]), sys.argv[2]
out = {}
try:
    open(token_file).read()
    out["token_file"] = "read"
except OSError as exc:
    out["token_file"] = type(exc).__name__
def handshake(path):
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    origin = "http://127.0.0.1:%d" % port
    s.sendall(("GET %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nOrigin: %s\r\nUpgrade: websocket\r\n"
               "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
               "Sec-WebSocket-Version: 13\r\n\r\n" % (path, port, origin)).encode())
    status = s.makefile("rb").readline().decode().split()[1]
    s.close()
    return status
out["ws"] = handshake("/ws")
out["ws_guessed_token"] = handshake("/ws/" + "A" * 43)
print(json.dumps(out))
"""


@pytest.mark.slow  # over 1.5 s on an idle 2-core machine
async def test_websocket_clients_need_the_token_and_the_origin(
        tmp_path: Path, stand_in_engine: int, token_file: tuple[Path, str],
        wait_until: Callable[..., None]) -> None:
    db = seed(tmp_path, stand_in_engine)
    path, in_file = token_file
    with serving(db, tmp_path / "serve.log", wait_until, "--token-file", str(path)) as srv:
        token, base = srv.token, f"ws://127.0.0.1:{srv.port}"
        assert token == in_file
        own = f"http://127.0.0.1:{srv.port}"
        async with aiohttp.ClientSession() as http:
            cases = [(f"{base}/ws", own), (f"{base}/ws/{new_token()}", own),
                     (f"{base}/ws/{token}", "http://evil.example"),
                     (f"{base}/ws/{token}", f"http://127.0.0.1:{free_port()}"),
                     (f"{base}/ws/{token}", None)]
            for url, origin in cases:
                assert await refused_status(http, url, origin) == 403, (url, origin)
            async with http.get(f"http://127.0.0.1:{srv.port}/") as page:
                assert page.status == 403
            async with http.get(f"http://127.0.0.1:{srv.port}/static/js/textual.js") as js:
                assert js.status == 403
            # what a browser asks beside the 403 page: empty, neither refused nor logged
            async with http.get(f"http://127.0.0.1:{srv.port}/favicon.ico") as icon:
                assert (icon.status, await icon.read()) == (204, b"")

            # Another local user, without the token.
            runas = shutil.which("runuser")
            assert runas is not None and os.geteuid() == 0, "needs root and runuser"
            # The system Python: the test's own may live where nobody cannot enter (~root).
            argv = [runas, "-u", "nobody", "--", SYSTEM_PYTHON, "-c", NOBODY_CLIENT,
                    str(srv.port), str(path)]
            res = await asyncio.to_thread(subprocess.run, argv, capture_output=True,
                                          text=True, timeout=60, cwd="/")
            assert res.returncode == 0, res.stderr
            assert json.loads(res.stdout) == {"token_file": "PermissionError", "ws": "403",
                                              "ws_guessed_token": "403"}

            logged = refusals(srv)
            # 6 token failures from 127.0.0.1 are one line (once per source a minute)
            assert len(logged) == 4, srv.logged()
            assert sum("no token" in x or "wrong token" in x for x in logged) == 1
            assert sum("wrong origin: Origin http://evil.example" in x for x in logged) == 1
            assert sum("(403, no Origin)" in x for x in logged) == 1
            assert token not in srv.logged()
            assert tuis_of(db) == []  # nothing refused started a session

            # The right token from the right origin: a read-only viewer.
            before = db_state(db)
            ws = await http.ws_connect(f"{base}/ws/{token}?width=110&height=30", origin=own)
            seen: list[str] = []
            try:
                await read_until(ws, seen, "read-only", 90)
                (tui,) = tuis_of(db)
                assert "--read-only" in tui.cmdline()
                for key in ("p", "a"):  # pause; add a profile (a `command` job runs anything)
                    await ws.send_json(["stdin", key])
                await read_until(ws, seen, "read-only viewer:", 60)
            finally:
                await ws.close()
    assert db_state(db) == before
    wait_until(lambda: not tuis_of(db), 30, "the session's TUI to end")


@pytest.mark.parametrize(("content", "mode", "expected"), [
    (None, 0o600, "no such file"),
    ("", 0o600, "the file is empty"),
    ("x" * 43, 0o644, "readable or writable by group or others (mode 0644)"),
    ("short", 0o600, "expected one line of at least 16 characters"),
    ("a" * 43, 0o600, "the token is guessable (a pattern of 1 character(s) repeated"),
    ("qmxkdlwprtzsbvnhjcfg", 0o600, "the token is guessable (20 characters from a-z: "
                                    "about 94 bits); expected at least 128 bits"),
])
def test_a_bad_token_file_is_exit_2_naming_it(tmp_path: Path, content: str | None, mode: int,
                                              expected: str) -> None:
    path = tmp_path / "token"
    if content is not None:
        path.write_text(content)
        path.chmod(mode)
    port = free_port()
    res = subprocess.run([sys.executable, "-m", "dltop", "serve", "--port", str(port),
                          "--db", str(tmp_path / "none.db"), "--token-file", str(path)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2, res
    assert f"--token-file {path}: {expected}" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr and res.stdout == ""


# A page from another origin (another port: another local user's server, or any site)
# that tries to drive dltop: without the token, and with it (as if it had leaked).
EVIL_PAGE = """<!DOCTYPE html><html><body><script>
window.__evil = {};
const tryWs = (name, url) => {
  const ws = new WebSocket(url);
  ws.onopen = () => { window.__evil[name] = 'open'; ws.send(JSON.stringify(['stdin', 'a'])); };
  ws.onerror = () => { window.__evil[name] = window.__evil[name] || 'refused'; };
};
tryWs('no-token', 'ws://127.0.0.1:PORT/ws');
tryWs('with-token', 'ws://127.0.0.1:PORT/ws/TOKEN');
</script></body></html>"""


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def evil_site(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """A static site on another port of 127.0.0.1: (its folder, its port)."""
    root = tmp_path / "evil"
    root.mkdir()
    handler = functools.partial(Quiet, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield root, server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def test_chromium_the_printed_url_works_and_another_origin_cannot_drive_it(
        tmp_path: Path, browser: Any, stand_in_engine: int, evil_site: tuple[Path, int],
        wait_until: Callable[..., None]) -> None:
    db = seed(tmp_path, stand_in_engine)
    root, evil_port = evil_site
    with serving(db, tmp_path / "serve.log", wait_until) as srv:
        (root / "index.html").write_text(EVIL_PAGE.replace("PORT", str(srv.port))
                                         .replace("TOKEN", srv.token))
        browser.open(f"http://127.0.0.1:{evil_port}/index.html")
        wait_until(lambda: len(browser.script("return window.__evil") or {}) == 2, 30,
                   "the other origin's two WebSockets to end")
        assert browser.script("return window.__evil") == {"no-token": "refused",
                                                          "with-token": "refused"}
        logged = refusals(srv)
        assert len(logged) == 2, srv.logged()
        assert any("(403, no token)" in x for x in logged)
        assert any(f"wrong origin: Origin http://127.0.0.1:{evil_port}" in x for x in logged)
        assert tuis_of(db) == []

        browser.open(f"http://127.0.0.1:{srv.port}/")  # no token: the 403 page
        assert "no token" in browser.text()

        browser.driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument",
                                       {"source": RECORD_WEBSOCKETS})
        browser.console_logs()  # the refusals above logged errors: drained
        browser.open(srv.url)
        wait_until(lambda: "read-only" in "".join(browser.script(
            "return window.__wsText || []")), 90, "the read-only TUI on the wire")
        assert browser.script("return document.title") == "dltop (read-only)"
        badge = browser.script("return document.getElementById('dltop-mode').textContent")
        assert str(badge).startswith("read-only")
        assert len(tuis_of(db)) == 1
        assert browser.console_errors() == []


@pytest.mark.slow  # over 1.5 s on an idle 2-core machine
async def test_control_lets_the_page_steer_and_says_so(
        tmp_path: Path, stand_in_engine: int, wait_until: Callable[..., None]) -> None:
    """``--control``: the page says so, and the same key the read-only viewer refused
    pauses the campaign (so the read-only test above could see a change)."""
    db = seed(tmp_path, stand_in_engine)
    with serving(db, tmp_path / "serve.log", wait_until, "--control") as srv:
        own = f"http://127.0.0.1:{srv.port}"
        async with aiohttp.ClientSession() as http:
            async with http.get(srv.url) as page:
                html = await page.text()
                assert page.headers["Referrer-Policy"] == "no-referrer"
            assert "<title>dltop (control)</title>" in html
            assert 'data-mode="control"' in html and "read-only" not in html
            ws = await http.ws_connect(f"ws://127.0.0.1:{srv.port}/ws/{srv.token}"
                                       "?width=110&height=30", origin=own)
            seen: list[str] = []
            try:
                await read_until(ws, seen, "serve-demo", 90)
                (tui,) = tuis_of(db)
                assert "--read-only" not in tui.cmdline()
                await ws.send_json(["stdin", "p"])

                def paused() -> bool:
                    return db_state(db)[0][0]["control"] == "pause"

                for _ in range(600):
                    if await asyncio.to_thread(paused):
                        break
                    await asyncio.sleep(0.1)
                assert await asyncio.to_thread(paused), db_state(db)[0]
            finally:
                await ws.close()
    wait_until(lambda: not tuis_of(db), 30, "the session's TUI to end")
