"""``dltop serve`` (the TUI in a browser, textual-serve) and ``dltop exporter`` (Prometheus).

``serve`` runs an aiohttp server that starts one ``dltop tui`` per browser connection
(textual-serve's model: each websocket gets its own app process, driven through
Textual's web driver over stdin/stdout). It is locked (servelock.py): a token per
start, printed once in the URL to open, and the WebSocket's Origin checked; and its
viewers are read-only unless ``--control``. Both bind to 127.0.0.1 unless told
otherwise: the way in from elsewhere is an SSH tunnel.

``dltop agent --out FILE [--hz H] [--gpus LIST] [--fake-gpus N]``: one node's telemetry.
The core is :mod:`dltop.telemetry.agent`; this only maps the options. It prints
nothing while it samples (a Slurm job's output is the runner's), and one line to
stderr when it stops.
"""

from __future__ import annotations

import argparse
import errno
import ipaddress
import os
import shlex
import signal
import socket
import sys
from pathlib import Path
from typing import Any

from dltop.errors import UserError
from dltop.textsafe import one_line

LOOPBACK = "127.0.0.1"


def check_host(host: str, flag: str = "--host") -> bool:
    """Whether ``host`` resolves to loopback addresses only.

    Raises:
        UserError: ``host`` does not resolve.
    """
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise UserError(f"{flag} {host!r}: not an address this host can bind "
                        f"({getattr(exc, 'strerror', None) or exc})") from None
    return all(ipaddress.ip_address(str(i[4][0]).split("%")[0]).is_loopback for i in infos)


def check_port(host: str, port: int, flag: str) -> None:
    """Fail before starting anything when ``host:port`` cannot be bound.

    Binds (with ``SO_REUSEADDR``, as aiohttp and prometheus_client do, so a port in
    ``TIME_WAIT`` passes) every address ``host`` resolves to, then lets go.

    Raises:
        UserError: the port is out of range, in use, or not ours to bind.
    """
    if not 1 <= port <= 65535:
        raise UserError(f"{flag} {port}: expected a port number from 1 to 65535")
    for family, kind, proto, _name, addr in socket.getaddrinfo(host, port,
                                                               type=socket.SOCK_STREAM):
        with socket.socket(family, kind, proto) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(addr)
            except OSError as exc:
                if exc.errno == errno.EADDRNOTAVAIL:  # the host is wrong, not the port
                    raise UserError(f"--host {one_line(host)}: {addr[0]} is not an address "
                                    f"of this host ({exc.strerror}); bind one of its own "
                                    "addresses, 127.0.0.1 (the default) or 0.0.0.0") from None
                why = ("is already in use" if exc.errno == errno.EADDRINUSE
                       else f"cannot be bound ({exc.strerror})")
                raise UserError(f"{flag} {port}: {addr[0]}:{port} {why}; pick another "
                                f"port with {flag}") from None


def _warn_if_exposed(host: str, what: str, can: str) -> None:
    if not check_host(host):
        print(f"dltop: warning: --host {one_line(host)} is reachable from the network and "
              f"{what} has "
              f"no authentication: anyone who can reach it can {can}. The default "
              f"127.0.0.1 with an SSH tunnel keeps it private.", file=sys.stderr)


def _url_host(host: str) -> str:
    # As the user typed it (a name resolves whatever else it holds), shown, never sent.
    return f"[{one_line(host)}]" if ":" in host else one_line(host)


def _wait_for_signal() -> None:
    """Block until SIGINT or SIGTERM."""
    from dltop.procs import SignalCatcher

    with SignalCatcher().installed((signal.SIGINT, signal.SIGTERM)) as caught:
        caught.wait(poll_s=0.5)


def _metrics_source(args: argparse.Namespace, db_path: Path | None) -> Any:
    from dltop.live.exporter import MetricsSource
    from dltop.telemetry import open_gpu_backend

    if getattr(args, "no_gpu_metrics", False):  # dcgm-exporter serves this host's GPUs
        if args.fake_gpus is not None:
            raise UserError("--fake-gpus with --no-gpu-metrics: simulated GPUs would not "
                            "be served; pass one or the other")
        return MetricsSource(None, db_path, gpu_series=False).start()
    return MetricsSource(open_gpu_backend(getattr(args, "fake_gpus", None)), db_path).start()


def _start_metrics(source: Any, host: str, port: int) -> Any:
    from dltop.live.exporter import start_metrics_server

    try:
        return start_metrics_server(source, host, port)
    except OSError as exc:  # taken between the check and now
        raise UserError(f"--metrics-port {port}: {exc.strerror or exc}") from None


def _check_db_to_wait_for(path: Path) -> None:
    """Refuse a ``--db`` that can never become a database: a file that is not SQLite
    (``dltop run`` refuses it too), or a path under a file. An empty file is one being
    created, and nothing there at all is waited for (``dltop run`` makes the folders).

    Raises:
        UserError: naming the path and what is wrong.
    """
    if path.is_file():
        with path.open("rb") as f:
            head = f.read(16)
        if not b"SQLite format 3\x00".startswith(head):  # empty: being created
            raise UserError(f"--db {one_line(str(path))}: not a SQLite database (its first "
                            "bytes are not SQLite's); expected a dltop database, or a path "
                            "with nothing there yet")
        return
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise UserError(f"--db {one_line(str(path))}: {one_line(str(parent))} is not a "
                        "directory: no database can be created there")


def cmd_exporter(args: argparse.Namespace) -> int:
    """``dltop exporter``: Prometheus metrics only, until Ctrl-C or SIGTERM."""
    from dltop.store.db import database_file, resolve_db_path

    host, port = args.host, args.port
    _warn_if_exposed(host, "the metrics endpoint", "read it")
    check_port(host, port, "--port")
    db_path = resolve_db_path(args.db)
    # Refused as every command refuses it (a link, dangling or not, a directory, a
    # special file): only nothing there at all is a database to wait for.
    database_file(db_path)
    _check_db_to_wait_for(db_path)
    source = _metrics_source(args, db_path)
    server = _start_metrics(source, host, port)
    # A monitoring daemon starts before any campaign: no database yet is not an error.
    # The devices are served meanwhile; the runs appear once 'dltop run' creates it.
    waiting = "" if db_path.is_file() else ", not there yet: waiting for it"
    print(f"dltop exporter: Prometheus metrics on http://{_url_host(host)}:{port}/metrics "
          f"(database {one_line(str(db_path))}{waiting}; Ctrl-C stops it)", flush=True)
    try:
        _wait_for_signal()
    finally:
        server.shutdown()
        source.stop()
    return 0


def tui_command(db_path: Path, fake_gpus: int | None, control: bool = False) -> str:
    """The shell command textual-serve runs per connection: this interpreter's ``dltop tui``
    (``--read-only`` unless ``control``)."""
    argv = [sys.executable, "-m", "dltop", "tui", "--db", str(db_path.resolve())]
    if fake_gpus is not None:
        argv += ["--fake-gpus", str(fake_gpus)]
    if not control:
        argv.append("--read-only")
    return shlex.join(argv)


def cmd_serve(args: argparse.Namespace) -> int:
    """``dltop serve``: the TUI in a browser (and ``--metrics-port``: Prometheus too)."""
    from dltop.cli.servelock import new_token, read_token_file
    from dltop.store import connect
    from dltop.store.db import DB_ENV, resolve_db_path

    host, port, mport, control = args.host, args.port, args.metrics_port, args.control
    if not check_host(host):
        print(f"dltop: warning: --host {one_line(host)} is reachable from the network, "
              "over plain "
              "HTTP: the token travels in clear text, and anyone who sees it can "
              + ("control dltop (start, pause, cancel campaigns)" if control else
                 "watch dltop") + ". The default 127.0.0.1 with an SSH tunnel keeps it "
              "private.", file=sys.stderr)
    token = read_token_file(Path(args.token_file)) if args.token_file else new_token()
    check_port(host, port, "--port")
    if mport is not None:
        if mport == port:
            raise UserError(f"--metrics-port {mport}: the same port as --port")
        check_port(host, mport, "--metrics-port")
    db_path = resolve_db_path(args.db)
    # As `dltop tui`: a database named by the user must exist; the default one is created.
    connect(db_path, create=not (args.db or os.environ.get(DB_ENV)))
    from dltop.cli.webtui import TuiServer

    server = TuiServer(tui_command(db_path, args.fake_gpus, control), host, port,
                       token=token, control=control)
    source = metrics = None
    if mport is not None:
        source = _metrics_source(args, db_path)
        metrics = _start_metrics(source, host, mport)
    # The only place the token is shown (as Jupyter does): the URL to open.
    url = f"http://{_url_host(host)}:{port}/?token={token}"
    mode = ("control: the page can steer dltop" if control else
            "read-only: watch only; --control lets the page steer")
    lines = [f"dltop serve: the TUI in a browser at {url}",
             f"  {mode}; database {one_line(str(db_path))}; Ctrl-C stops it"]
    if check_host(host):
        lines.append(f"  from another machine, through an SSH tunnel: ssh -L {port}:{LOOPBACK}:"
                     f"{port} user@{socket.gethostname()}, then open the same URL there")
    if mport is not None:
        lines.append(f"  Prometheus metrics: http://{_url_host(host)}:{mport}/metrics")
    print("\n".join(lines), flush=True)
    try:
        server.serve()
    finally:
        if metrics is not None:
            metrics.shutdown()
        if source is not None:
            source.stop()
    return 0


def cmd_agent(args: argparse.Namespace) -> int:
    """Sample this node until SIGTERM / SIGINT or until the parent process is gone."""
    from dltop.telemetry.agent import AgentOptions, parse_gpus, run_agent

    options = AgentOptions(out=args.out, hz=args.hz,
                           gpus=parse_gpus(args.gpus) if args.gpus is not None else None,
                           node=args.node or "")
    reason = run_agent(options, fake_gpus=args.fake_gpus)
    print(f"dltop agent: stopped ({reason}), samples in {one_line(str(args.out))}", file=sys.stderr)
    return 0
