"""`memtui serve`: the workbench in a web browser, through textual-serve (the optional ``serve`` extra).

textual-serve runs a web server whose page is a terminal emulator; every browser tab that opens it starts its own
``memtui app`` process (with the panels given here) and talks to it over a websocket. The server has no login: whoever
can reach the port runs the workbench with this user's files and permissions (it can launch extraction jobs). Hence
loopback by default, and a warning when asked to listen anywhere else; reach a remote machine's server through an SSH
tunnel (``ssh -L 8000:127.0.0.1:8000 HOST``) rather than by opening the port.
"""

from __future__ import annotations

import errno
import ipaddress
import shlex
import socket
import sys
from pathlib import Path

from memtui.cli import app as app_verb
from memtui.core.errors import MemtuiError

SUMMARY = "serve the workbench to a web browser (textual-serve; this machine only unless --host says otherwise)"
DESCRIPTION = (
    "Serves the workbench at http://HOST:PORT/: each browser tab runs its own `memtui app` on the same panels. "
    "There is no login, so whoever reaches the port can use the workbench with your files and permissions; it listens "
    "on 127.0.0.1 (this machine only) unless --host says otherwise. From another machine, tunnel: "
    "`ssh -L 8000:127.0.0.1:8000 HOST`, then open http://127.0.0.1:8000/. Needs the serve extra: "
    "pip install 'memtui[serve]'. Ctrl-c stops the server and the workbenches it runs."
)


def add_arguments(p) -> None:
    app_verb.add_arguments(p)  # the same panels as `memtui`
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on; any but a loopback one lets other machines run the workbench as you",
    )
    p.add_argument("--port", type=int, default=8000, help="port to listen on")
    p.add_argument(
        "--public-url",
        help="the address browsers reach the server by, when it is not http://HOST:PORT (behind a proxy) "
        "[default: http://HOST:PORT, with this machine's name for 0.0.0.0 or ::]",
    )


def run(args) -> int:
    paths = app_verb.panel_paths(args)
    check_panels(paths)
    paths = [path.resolve() for path in paths]  # the apps' working folder is the server's, but say it once
    if not 0 < args.port < 65536:
        raise MemtuiError(f"--port {args.port} is not a port number (1-65535).")
    loopback = is_loopback(args.host)
    check_can_listen(args.host, args.port)
    try:
        from textual_serve.server import Server
    except ImportError:
        raise MemtuiError("memtui serve needs textual-serve: pip install 'memtui[serve]'.") from None
    if not loopback:
        print(
            f"memtui: warning: listening on {args.host}, not only on this machine: whoever reaches port {args.port} "
            "can run the workbench with your files and permissions (there is no login).",
            file=sys.stderr,
            flush=True,
        )
    server = Server(
        app_command(paths),
        host=args.host,
        port=args.port,
        title="memtui",
        public_url=args.public_url or public_url(args.host, args.port),
    )
    try:
        server.serve()
    except OSError as exc:  # taken between the check and now
        if exc.errno in _CANNOT_LISTEN:
            raise MemtuiError(f"cannot listen on {args.host} port {args.port} ({exc.strerror}).") from None
        raise
    return 0


_CANNOT_LISTEN = (errno.EADDRINUSE, errno.EACCES, errno.EADDRNOTAVAIL)


def check_can_listen(host: str, port: int) -> None:
    """A port that is taken (or privileged) refused in one line now, before textual-serve prints its banner; bound
    the way aiohttp binds (SO_REUSEADDR), so a port in TIME_WAIT that aiohttp can take passes."""
    try:
        for family, kind, proto, _, address in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
            with socket.socket(family, kind, proto) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                probe.bind(address)
    except OSError as exc:
        if exc.errno in _CANNOT_LISTEN:
            raise MemtuiError(f"cannot listen on {host} port {port} ({exc.strerror}).") from None
        raise


def app_command(paths: list[Path]) -> str:
    """The shell command textual-serve runs for each browser tab: this Python's ``memtui app`` on ``paths``."""
    return shlex.join([sys.executable, "-m", "memtui.cli", "app", *(str(path) for path in paths)])


def check_panels(paths: list[Path]) -> None:
    """The panels' one-line error now, in the terminal, rather than a blank page in every browser tab."""
    from memtui.app.reading import read_for_app

    for path in paths:
        read_for_app(path)
    if len(paths) > 1:
        from memtui.estimation.suite import load_suite

        load_suite(paths)  # panels that do not form a suite: its one-line error


def is_loopback(host: str) -> bool:
    """Whether ``host`` is this machine only: a loopback address, or a name that resolves to loopback ones only."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except (socket.gaierror, UnicodeError):
        raise MemtuiError(f"--host {host}: no such address or host name.") from None
    return all(ipaddress.ip_address(info[4][0].split("%")[0]).is_loopback for info in infos)


def public_url(host: str, port: int) -> str:
    """http://HOST:PORT as a browser must write it: IPv6 in brackets, and this machine's name for the wildcard address
    (a browser cannot connect to 0.0.0.0 on another machine)."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return f"http://{host}:{port}"
    if address.is_unspecified:
        return f"http://{socket.getfqdn()}:{port}"
    return f"http://[{address}]:{port}" if address.version == 6 else f"http://{address}:{port}"
