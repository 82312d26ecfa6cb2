"""``dltop serve`` against malformed handshakes and token guessing (issue 38).

A real server: a malformed WebSocket upgrade is a plain 400 (no traceback on its
stderr, no session started); wrong tokens from one source are answered 403 ten times,
then 429 for the rest of the minute (the right token included), while another source
is untouched; the refusals are logged once per source, not once per guess.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest

from dltop.cli.servelock import MAX_FAILURES_PER_MIN, Guesses, new_token, token_bits

from .serving import seed, serving, tuis_of


def handshake(port: int, path: str, headers: dict[str, str]) -> str:
    """The status line's code of a raw WebSocket upgrade request."""
    lines = [f"GET {path} HTTP/1.1", f"Host: 127.0.0.1:{port}",
             f"Origin: http://127.0.0.1:{port}", "Upgrade: websocket",
             *(f"{k}: {v}" for k, v in headers.items())]
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        return s.makefile("rb").readline().decode().split()[1]


KEY = {"Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}
MALFORMED = [
    {"Connection": "Upgrade", "Sec-WebSocket-Version": "13"},  # no key
    {"Connection": "Upgrade", "Sec-WebSocket-Version": "12", **KEY},
    {"Connection": "keep-alive", "Sec-WebSocket-Version": "13", **KEY},
    {"Connection": "Upgrade", "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "short"},
]


@pytest.mark.slow  # a served TUI: about 2 s
async def test_malformed_upgrades_get_400_and_guesses_429(
        tmp_path: Path, stand_in_engine: int, wait_until: Callable[..., None]) -> None:
    db = seed(tmp_path, stand_in_engine)
    with serving(db, tmp_path / "serve.log", wait_until) as srv:
        for headers in MALFORMED:
            assert handshake(srv.port, f"/ws/{srv.token}", headers) == "400", headers
        assert tuis_of(db) == []

        page = f"http://127.0.0.1:{srv.port}/?token="
        t0 = time.monotonic()
        async with aiohttp.ClientSession() as http:
            codes = []
            for _ in range(100):
                async with http.get(page + new_token()) as r:
                    codes.append(r.status)
            async with http.get(page + srv.token) as r:
                assert r.status == 429  # blocked: the right token says nothing either
        assert codes == [403] * MAX_FAILURES_PER_MIN + [429] * (100 - MAX_FAILURES_PER_MIN)
        assert time.monotonic() - t0 < 30
        # Another source address (loopback is a /8): not blocked.
        other = aiohttp.TCPConnector(local_addr=("127.0.0.2", 0))
        async with aiohttp.ClientSession(connector=other) as http, \
                http.get(page + srv.token) as r:
            assert r.status == 200
        logged = srv.logged()
    assert "Traceback" not in logged and "Error handling request" not in logged, logged
    refused = [line for line in logged.splitlines() if "refused" in line]
    assert len(refused) == 1 and "wrong token" in refused[0], logged
    assert "from 127.0.0.1" in refused[0] and srv.token not in logged


def test_guesses_are_counted_per_source_per_minute() -> None:
    g = Guesses(limit=3, window_s=60)
    assert [g.failed("a", 0.0) for _ in range(3)] == [0, None, None]
    assert g.blocked("a", 1.0) and not g.blocked("b", 1.0)
    g.refused_blocked("a", 2.0)
    assert not g.blocked("a", 60.5)  # a new minute
    assert g.failed("a", 61.0) == 3  # its line says what went unlogged before


@pytest.mark.parametrize(("token", "ok"), [
    ("a" * 44, False), ("ab" * 22, False), ("abcdefghijklmnopqrstuvwxyz0123", False),
    ("qmxkdlwprtzsbvnhjc", False),  # 18 lower-case letters: 85 bits
    ("aaaaaaaaaaaaaaaaaaaaaaaaaaaabcdefghijXYZ", False),
    ("9f86d081884c7d659a2feaa0c55ad015", True),  # 32 hex digits
])
def test_a_token_needs_128_bits(token: str, ok: bool) -> None:
    assert (token_bits(token)[0] >= 128) is ok, token_bits(token)


def test_tokens_dltop_makes_pass_its_own_rule() -> None:
    """(Made inside the test: a random parameter differs between xdist workers.)"""
    for _ in range(50):
        token = new_token()
        assert token_bits(token)[0] >= 128, (token, token_bits(token))
