"""The lock on ``dltop serve``: a token per start, and the WebSocket's ``Origin``.

Binding to 127.0.0.1 keeps the network out, not the other users of the machine, and
not the web pages the user opens: a browser lets any page open a WebSocket to
``ws://127.0.0.1:8000``. So, as Jupyter does, every request must carry a secret token
(printed once, in the URL the user opens), and a WebSocket must come from the server's
own origin. A request that fails either is answered 403 before anything starts.
"""

from __future__ import annotations

import hmac
import re
import secrets
import stat
from pathlib import Path

from dltop.errors import UserError

TOKEN_BYTES = 32
"""Random bytes in a generated token (43 URL-safe characters)."""
TOKEN_MIN_CHARS = 16
_TOKEN = re.compile(r"[A-Za-z0-9._~-]+")  # URL-unreserved: travels in a path or a query as is


def new_token() -> str:
    """A fresh random token (``secrets.token_urlsafe``)."""
    return secrets.token_urlsafe(TOKEN_BYTES)


def read_token_file(path: Path) -> str:
    """The token in ``path`` (``--token-file``): one line, the file private to its owner.

    Raises:
        UserError: the file is missing, not a regular file, readable or writable by
            group or others, empty, or holds something that is not a token.
    """
    where = f"--token-file {path}"
    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):
            raise UserError(f"{where}: not a regular file; expected a file holding the token")
        if st.st_mode & 0o077:
            raise UserError(f"{where}: readable or writable by group or others (mode "
                            f"{stat.S_IMODE(st.st_mode):04o}); expected mode 0600 "
                            f"(chmod 600 {path})")
        text = path.read_text("utf-8").strip()
    except FileNotFoundError:
        raise UserError(f"{where}: no such file; expected a file holding the token") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{where}: cannot be read ({getattr(exc, 'strerror', None) or exc})"
                        ) from None
    if not text:
        raise UserError(f"{where}: the file is empty; expected a token (for example the "
                        "output of: python3 -c 'import secrets; print(secrets.token_urlsafe())')")
    if len(text) < TOKEN_MIN_CHARS or not _TOKEN.fullmatch(text):
        raise UserError(f"{where}: expected one line of at least {TOKEN_MIN_CHARS} characters "
                        "from A-Z a-z 0-9 - _ . ~ (the token goes into URLs as it is)")
    return text


def token_ok(given: str | None, token: str) -> bool:
    """Whether ``given`` is ``token`` (compared in constant time)."""
    return given is not None and hmac.compare_digest(given.encode("utf-8", "replace"),
                                                     token.encode("utf-8"))


def origin_ok(origin: str | None, scheme: str, host: str | None) -> bool:
    """Whether a WebSocket's ``Origin`` is the server's own, as the browser reached it.

    The browser's origin is ``scheme://Host`` (the ``Host`` it sent: through an SSH
    tunnel that is the tunnel's local port). A missing ``Origin`` is refused too: every
    browser sends one on a WebSocket, and a non-browser client can send the right one.
    """
    if not origin or not host:
        return False
    return origin.strip().lower() == f"{scheme}://{host}".lower()


def refusal(*, token: str, given: str | None, websocket: bool, origin: str | None,
            scheme: str, host: str | None) -> str | None:
    """Why a request is refused (None: let it in).

    Args:
        token: the server's token.
        given: the token the request carried (None: none).
        websocket: the request asks for a WebSocket (the terminal session).
        origin: its ``Origin`` header.
        scheme: ``http`` or ``https``, as the server was reached.
        host: its ``Host`` header.
    """
    if not token_ok(given, token):
        return "no token" if not given else "wrong token"
    if websocket and not origin_ok(origin, scheme, host):
        return "no Origin" if not origin else "wrong origin"
    return None
