"""The rules of ``dltop serve``'s lock (cli/servelock.py), without a server: the token is
compared whole, the WebSocket's Origin must be the server's own as the browser reached it."""

from __future__ import annotations

from pathlib import Path

from dltop.cli.serve import tui_command
from dltop.cli.servelock import TOKEN_MIN_CHARS, new_token, origin_ok, refusal, token_ok


def test_tokens_are_fresh_url_safe_and_long() -> None:
    a, b = new_token(), new_token()
    assert a != b and len(a) >= 43 and len(a) >= TOKEN_MIN_CHARS
    assert all(c.isalnum() or c in "-_" for c in a)


def test_a_token_matches_only_whole() -> None:
    t = new_token()
    assert token_ok(t, t)
    assert not token_ok(None, t) and not token_ok("", t)
    assert not token_ok(t[:-1], t) and not token_ok(t + "x", t) and not token_ok(t.upper(), t)
    assert not token_ok("é" * 43, t)  # not ASCII: refused, no exception


def test_the_origin_must_be_the_servers_own_as_reached() -> None:
    assert origin_ok("http://127.0.0.1:8000", "http", "127.0.0.1:8000")
    assert origin_ok("http://LOCALHOST:9000", "http", "localhost:9000")  # an SSH tunnel's port
    assert not origin_ok("http://evil.example", "http", "127.0.0.1:8000")
    assert not origin_ok("http://127.0.0.1:8001", "http", "127.0.0.1:8000")  # another port
    assert not origin_ok("https://127.0.0.1:8000", "http", "127.0.0.1:8000")
    assert not origin_ok("null", "http", "127.0.0.1:8000")  # a sandboxed frame or file://
    assert not origin_ok(None, "http", "127.0.0.1:8000")
    assert not origin_ok("http://127.0.0.1:8000", "http", None)


def test_refusal_names_the_first_reason() -> None:
    t = new_token()
    own = {"scheme": "http", "host": "127.0.0.1:8000"}
    assert refusal(token=t, given=None, websocket=False, origin=None, **own) == "no token"
    assert refusal(token=t, given="x", websocket=True, origin="http://evil.example",
                   **own) == "wrong token"
    assert refusal(token=t, given=t, websocket=False, origin=None, **own) is None  # the page
    assert refusal(token=t, given=t, websocket=True, origin=None, **own) == "no Origin"
    assert refusal(token=t, given=t, websocket=True, origin="http://evil.example",
                   **own) == "wrong origin"
    assert refusal(token=t, given=t, websocket=True, origin="http://127.0.0.1:8000",
                   **own) is None


def test_served_viewers_are_read_only_unless_control(tmp_path: Path) -> None:
    assert tui_command(tmp_path / "x.db", None).endswith(" --read-only")
    assert "--read-only" not in tui_command(tmp_path / "x.db", 2, control=True)
