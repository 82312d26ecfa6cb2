"""The lock on ``dltop serve``: a token per start, and the WebSocket's ``Origin``.

Binding to 127.0.0.1 keeps the network out, not the other users of the machine, and
not the web pages the user opens: a browser lets any page open a WebSocket to
``ws://127.0.0.1:8000``. So, as Jupyter does, every request must carry a secret token
(printed once, in the URL the user opens), and a WebSocket must come from the server's
own origin. A request that fails either is answered 403 before anything starts.

A token of one's own (``--token-file``) must hold at least :data:`MIN_TOKEN_BITS` bits
by a conservative estimate (:func:`token_bits`). Failed token attempts are counted per
source address (:class:`Guesses`): after :data:`MAX_FAILURES_PER_MIN` in a minute, that
source gets 429 for the rest of the minute, and each source's refusals are logged once
a minute, not once per request.
"""

from __future__ import annotations

import hmac
import math
import re
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

from dltop.errors import UserError

TOKEN_BYTES = 32
"""Random bytes in a generated token (43 URL-safe characters)."""
TOKEN_MIN_CHARS = 16
_TOKEN = re.compile(r"[A-Za-z0-9._~-]+")  # URL-unreserved: travels in a path or a query as is
MIN_TOKEN_BITS = 128
_CLASSES = (("a-z", 26, str.islower), ("A-Z", 26, str.isupper), ("0-9", 10, str.isdigit),
            ("-_.~", 4, lambda c: c in "-_.~"))
MAX_FAILURES_PER_MIN = 10
"""Failed token attempts a source may make in a minute before it gets 429."""
WINDOW_S = 60.0
_GENERATE = "python3 -c 'import secrets; print(secrets.token_urlsafe())'"


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
    bits, why = token_bits(text)
    if bits < MIN_TOKEN_BITS:
        raise UserError(f"{where}: the token is guessable ({why}: about {bits:.0f} bits); "
                        f"expected at least {MIN_TOKEN_BITS} bits of randomness, for example "
                        f"the output of: {_GENERATE}")
    return text


def token_bits(text: str) -> tuple[float, str]:
    """A conservative estimate of the bits of randomness in ``text``, and what it rests on.

    Length times log2 of the character sets actually used (a-z, A-Z, 0-9, ``-_.~``),
    unless the text shows it was not drawn at random: a repeated pattern (``abcabc``),
    few different characters, runs like ``abcd``, or one character far more often than
    chance: those count
    as no randomness at all. ``secrets.token_urlsafe()`` (43 characters) estimates at
    about 250 bits; 32 hex digits at 165.
    """
    pool = sum(size for _name, size, used in _CLASSES if any(used(c) for c in text))
    sets = "+".join(name for name, _size, used in _CLASSES if any(used(c) for c in text))
    n, distinct = len(text), len(set(text))
    period = next((p for p in range(1, n // 2 + 1)
                   if n % p == 0 and text == text[:p] * (n // p)), None)
    if period is not None:
        return 0.0, f"a pattern of {period} character(s) repeated"
    if distinct < 8:
        return 0.0, f"only {distinct} different character(s)"
    steps = sum(ord(text[i]) - ord(text[i - 1]) == ord(text[i - 1]) - ord(text[i - 2])
                for i in range(2, n))
    if steps * 4 > n:
        return 0.0, f"{steps} of its {n} characters continue a sequence (abc, 123)"
    top = max(text.count(c) for c in set(text))
    if top * 3 > n:
        return 0.0, f"one character makes {top} of its {n}"
    return n * math.log2(pool), f"{n} characters from {sets}"


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


@dataclass
class _Window:
    start_s: float
    failures: int = 0
    unlogged: int = 0
    unlogged_before: int = 0
    """Refusals left unlogged in the source's previous window (said in its next line)."""


class Guesses:
    """Failed token attempts per source address, in fixed one-minute windows.

    Each source's first refusal in a window is logged (with how many went unlogged in
    its previous window); after :data:`MAX_FAILURES_PER_MIN` failures every request of
    that source is answered 429 until its window ends, the right token included, so
    the limit cannot be used as an oracle. At most ``max_sources`` are remembered.
    """

    def __init__(self, limit: int = MAX_FAILURES_PER_MIN, window_s: float = WINDOW_S,
                 max_sources: int = 4096) -> None:
        self.limit, self.window_s, self.max_sources = limit, window_s, max_sources
        self._seen: dict[str, _Window] = {}

    def _window(self, source: str, now: float) -> _Window:
        w = self._seen.get(source)
        if w is None or now - w.start_s >= self.window_s:
            if len(self._seen) >= self.max_sources:  # forget the sources gone quiet
                self._seen = {k: v for k, v in self._seen.items()
                              if now - v.start_s < self.window_s}
            w = self._seen[source] = _Window(now, unlogged_before=w.unlogged if w else 0)
        return w

    def blocked(self, source: str, now: float) -> bool:
        """Whether ``source`` is over the limit in its current window (answer 429)."""
        w = self._seen.get(source)
        return w is not None and now - w.start_s < self.window_s and w.failures >= self.limit

    def failed(self, source: str, now: float) -> int | None:
        """Count a failed attempt of ``source``. When it is to be logged (its first in
        the window): how many refusals went unlogged before it; else None."""
        w = self._window(source, now)
        w.failures += 1
        if w.failures == 1:
            return w.unlogged_before
        w.unlogged += 1
        return None

    def refused_blocked(self, source: str, now: float) -> None:
        """A request answered 429: not logged, counted in the next line."""
        self._window(source, now).unlogged += 1
