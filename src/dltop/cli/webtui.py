"""textual-serve's server, adjusted for ``dltop serve``.

Three changes to :class:`textual_serve.server.Server`, each for a reason:

- the page's URLs (websocket, static files) come from the request's ``Host``, not from
  the bind address: through ``ssh -L 9000:127.0.0.1:8000`` the browser is at
  ``127.0.0.1:9000``, and a server bound to ``0.0.0.0`` has no address a browser can use;
- the page works offline: textual-serve's template loads a font from
  fonts.googleapis.com, which a machine without internet fails to fetch (a console
  error, a delay); the same font ships in textual-serve's static files and is used from
  there (and the page names an empty icon, so no ``/favicon.ico`` 404 is logged);
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
from pathlib import Path
from typing import Any

import aiohttp_jinja2
import jinja2
from aiohttp import web
from textual_serve.server import Server, to_int

TEMPLATE = "app_index.html"
SESSION_EXIT_S = 10.0
"""How long a stopping server waits for its TUI processes before terminating them."""
_FONT_LINK = re.compile(r"<link[^>]*fonts\.googleapis\.com[^>]*>", re.S)
_LOCAL_FONT = (
    '<style>@font-face { font-family: "Roboto Mono"; '
    'src: url("{{ config.static.url }}fonts/RobotoMono-VariableFont_wght.ttf"); }</style>'
    '<link rel="icon" href="data:,">')  # no /favicon.ico request, which would be a 404


def offline_template() -> str:
    """textual-serve's page with its web font loaded from its own static files."""
    import textual_serve

    text = (Path(textual_serve.__file__).parent / "templates" / TEMPLATE).read_text("utf-8")
    return _FONT_LINK.sub(_LOCAL_FONT, text)


class TuiServer(Server):
    """Serves ``command`` (a ``dltop tui``), one process per browser connection."""

    def __init__(self, command: str, host: str, port: int) -> None:
        super().__init__(command, host=host, port=port, title="dltop")

    def initialize_logging(self) -> None:
        logging.basicConfig(level=logging.WARNING, format="dltop serve: %(message)s")

    async def on_startup(self, app: web.Application) -> None:
        """Nothing: ``dltop serve`` printed its own lines."""

    async def _make_app(self) -> web.Application:
        app: web.Application = await super()._make_app()
        aiohttp_jinja2.setup(app, loader=jinja2.DictLoader({TEMPLATE: offline_template()}))
        app.on_cleanup.append(self._end_sessions)  # runs after the socket handlers ended
        return app

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
            "app_websocket_url": f"{ws}{request.app.router['websocket'].url_for()}",
            "config": {"static": {"url": f"{base}{static}"}},
            "application": {"name": self.title},
        }


def _children_gone(me: Any, timeout_s: float) -> bool:
    """Wait until process ``me`` has no child left (reaped); False after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while me.children():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True
