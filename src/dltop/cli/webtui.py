"""textual-serve's server, adjusted for ``dltop serve``.

The changes to :class:`textual_serve.server.Server`, each for a reason:

- it is locked (servelock.py): every request carries the token (the page's in its
  query, ``?token=``, which the page passes on to the URLs of its assets; the
  WebSocket's in its path, ``/ws/TOKEN``, since textual.js appends its own
  ``?width=&height=`` to the URL it is given), and the WebSocket's ``Origin`` must be
  the server's own; anything else is answered 403 by a middleware, before any handler,
  so a refused request never starts a terminal session. Failed tokens are limited per
  source (429 after ten in a minute) and logged once a minute per source. No cookie
  is set: cookies are not scoped by port, so any other server on 127.0.0.1 would
  receive it. The page
  says whether the viewer is read-only or can steer, and textual-serve's download
  route (unused by dltop) is left out;
- the page's URLs (websocket, static files) come from the request's ``Host``, not from
  the bind address: through ``ssh -L 9000:127.0.0.1:8000`` the browser is at
  ``127.0.0.1:9000``, and a server bound to ``0.0.0.0`` has no address a browser can use;
- the page works offline: textual-serve's template loads a font from
  fonts.googleapis.com, which a machine without internet fails to fetch (a console
  error, a delay); the same font ships in textual-serve's static files and is used from
  there (and the page names an empty icon, so no ``/favicon.ico`` 404 is logged);
- a malformed WebSocket handshake is answered 400 before textual-serve's handler,
  which would log a traceback;
- no banner and quiet logs: ``dltop serve`` prints its own start-up lines;
- on stop, the server waits for the TUI processes (each told to quit as its socket
  closed) to exit before the event loop closes: otherwise asyncio reaps them after,
  and prints "Event loop is closed" tracebacks on the way out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp_jinja2
import jinja2
from aiohttp import hdrs, web
from textual_serve.server import Server, to_int

from dltop.cli.servelock import Guesses, refusal
from dltop.textsafe import one_line

TEMPLATE = "app_index.html"
log = logging.getLogger("dltop.serve")
SESSION_EXIT_S = 10.0
"""How long a stopping server waits for its TUI processes before terminating them."""
_FONT_LINK = re.compile(r"<link[^>]*fonts\.googleapis\.com[^>]*>", re.S)
_LOCAL_FONT = (
    '<style>@font-face { font-family: "Roboto Mono"; '
    'src: url("{{ config.static.url }}fonts/RobotoMono-VariableFont_wght.ttf"); }</style>'
    '<link rel="icon" href="data:,">')  # no /favicon.ico request, which would be a 404


_STATIC_URL = re.compile(r"(\{\{ config\.static\.url \}\}[\w./-]+)")
_MODE = (
    "<title>{{ application.name }}</title>"
    '<style>#dltop-mode { position: fixed; top: 0; right: 0; z-index: 30; padding: 0 6px; '
    "font: 12px/16px 'Roboto Mono', monospace; color: #0c181f; background: #e0c060; "
    "pointer-events: none; }</style>")
_MODE_BADGE = '<div id="dltop-mode" data-mode="{{ mode }}">{{ mode_text }}</div>'
MODE_TEXT = {False: "read-only: watch only (dltop serve --control steers)",
             True: "control: this page can steer dltop"}
"""What the page says of its mode (its title and a badge), by ``control``."""


def offline_template() -> str:
    """textual-serve's page: its web font loaded from its own static files, every asset
    URL with the token, and the viewer's mode in its title and a badge."""
    import textual_serve

    text = (Path(textual_serve.__file__).parent / "templates" / TEMPLATE).read_text("utf-8")
    text = _FONT_LINK.sub(_LOCAL_FONT, text)
    text = _STATIC_URL.sub(r"\1?token={{ token }}", text)
    text = text.replace("<head>", "<head>" + _MODE, 1)
    return text.replace("</body>", _MODE_BADGE + "</body>", 1)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class TuiServer(Server):
    """Serves ``command`` (a ``dltop tui``), one process per browser connection.

    Args:
        command: the shell command of one session (``dltop tui --db ...``).
        host: address to bind.
        port: port to bind.
        token: the secret every request must carry.
        control: whether the sessions can steer (only said on the page here: the
            command's ``--read-only`` is what locks the viewer).
    """

    def __init__(self, command: str, host: str, port: int, *, token: str,
                 control: bool = False) -> None:
        self.token, self.control = token, control
        self._guesses = Guesses()
        super().__init__(command, host=host, port=port,
                         title=f"dltop ({MODE_TEXT[control].split(':')[0]})")

    def initialize_logging(self) -> None:
        logging.basicConfig(level=logging.WARNING, format="dltop serve: %(message)s")

    async def on_startup(self, app: web.Application) -> None:
        """Nothing: ``dltop serve`` printed its own lines."""

    async def _make_app(self) -> web.Application:
        app = web.Application(middlewares=[self._lock])
        aiohttp_jinja2.setup(app, loader=jinja2.DictLoader({TEMPLATE: offline_template()}))
        app.add_routes([
            web.get("/", self.handle_index, name="index"),
            web.get("/ws/{token}", self.handle_websocket, name="websocket"),
            web.static("/static", self.statics_path, name="static"),
        ])
        app.on_response_prepare.append(_private_headers)
        app.on_startup.append(self.on_startup)
        app.on_shutdown.append(self.on_shutdown)
        app.on_cleanup.append(self._end_sessions)  # runs after the socket handlers ended
        return app

    @web.middleware
    async def _lock(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Answer 403 to a request without the token, or a WebSocket from elsewhere,
        before its handler (so before any terminal session) runs; 429 to a source over
        its failed attempts for the minute (servelock.Guesses)."""
        if request.path == "/favicon.ico" and request.method in ("GET", "HEAD"):
            # A browser asks for it beside any page, the 403 page too: answered empty
            # (it holds nothing), so that it is neither a failed guess nor a console error.
            return web.Response(status=204)
        source, now = request.remote or "unknown", time.monotonic()
        if self._guesses.blocked(source, now):
            self._guesses.refused_blocked(source, now)
            raise web.HTTPTooManyRequests(
                text=f"dltop serve: more than {self._guesses.limit} wrong tokens from "
                     f"{source} within a minute: refused until the minute is over\n")
        given = request.match_info.get("token") or request.query.get("token")
        why = refusal(token=self.token, given=given,
                      websocket=request.headers.get(hdrs.UPGRADE, "").lower() == "websocket",
                      origin=request.headers.get(hdrs.ORIGIN), scheme=request.scheme,
                      host=request.headers.get(hdrs.HOST))
        if why is None:
            return await handler(request)
        path = "/ws/..." if "token" in request.match_info else request.path
        origin = request.headers.get(hdrs.ORIGIN)
        what = (f"refused {one_line(f'{request.method} {path}')} (403, {why}"
                f"{f': Origin {one_line(origin)}' if origin and 'origin' in why else ''}) "
                f"from {one_line(source)}")
        if why in ("no token", "wrong token"):  # a guess: logged once per source a minute
            before = self._guesses.failed(source, now)
            if before is not None:
                log.warning("%s%s; its further refusals this minute are counted, not logged",
                            what, f" ({before} more refused in its minute before)"
                            if before else "")
        else:
            log.warning("%s", what)
        raise web.HTTPForbidden(text=f"dltop serve: {why}: open the URL that dltop serve "
                                     "printed (it holds the token)\n")

    async def handle_websocket(self, request: web.Request) -> web.WebSocketResponse:
        """textual-serve's handler, behind a handshake check: a malformed upgrade (no
        key, a wrong version, no ``Connection: Upgrade``) gets a plain 400, not the
        traceback textual-serve logs when ``prepare`` fails."""
        if not web.WebSocketResponse().can_prepare(request).ok:
            raise web.HTTPBadRequest(text="dltop serve: not a valid WebSocket handshake "
                                          "(RFC 6455)\n")
        return await super().handle_websocket(request)

    async def _end_sessions(self, app: web.Application) -> None:
        import psutil

        me = psutil.Process()
        # Polled in a thread, never reaped here: asyncio's child watcher reaps them.
        if not await asyncio.to_thread(_children_gone, me, SESSION_EXIT_S):
            for child in me.children():  # the sessions' shells and TUIs, nothing else
                with contextlib.suppress(psutil.Error):
                    child.terminate()
            await asyncio.to_thread(_children_gone, me, 5.0)
        await asyncio.sleep(0.1)  # the child watcher's callbacks run on this loop

    @aiohttp_jinja2.template(TEMPLATE)
    async def handle_index(self, request: web.Request) -> dict[str, Any]:
        base = f"{request.scheme}://{request.host}"
        ws = ("wss:" if request.scheme == "https" else "ws:") + base.split(":", 1)[1]
        static = str(request.app.router["static"].url_for(filename="/")).rstrip("/") + "/"
        return {
            "font_size": to_int(request.query.get("fontsize", "16"), 16),
            "app_websocket_url":
                f"{ws}{request.app.router['websocket'].url_for(token=self.token)}",
            "config": {"static": {"url": f"{base}{static}"}},
            "application": {"name": self.title},
            "token": self.token,
            "mode": "control" if self.control else "read-only",
            "mode_text": MODE_TEXT[self.control],
        }


async def _private_headers(request: web.Request, response: web.StreamResponse) -> None:
    """The page's URL holds the token: no ``Referer`` carries it away, no cache keeps
    it, no other site frames the page."""
    response.headers["Referrer-Policy"] = "no-referrer"
    response.headers["Cache-Control"] = "no-store"
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["Content-Security-Policy"] = "frame-ancestors 'none'"


def _children_gone(me: Any, timeout_s: float) -> bool:
    """Wait until process ``me`` has no child left (reaped); False after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while me.children():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True
