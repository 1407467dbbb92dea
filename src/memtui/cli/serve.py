"""`memtui serve`: the workbench in a web browser, through textual-serve (the optional ``serve`` extra).

textual-serve runs a web server whose page is a terminal emulator; every browser tab that opens it starts its own
``memtui app`` process (with the panels given here) and talks to it over a websocket. Whoever gets a workbench runs it
with this user's files and permissions (it opens panels, writes CSVs, launches extraction jobs), so the server lets
in only requests that carry a per-launch secret token (printed in the address to open), name the server in ``Host``
and come from its own page when they say where from (``Origin``); serve_guard.py has the threat model. Loopback by
default too, and a warning when asked to listen anywhere else: there the token is all that stands between the network
and the workbench, and it crosses the network in clear text; reach a remote machine's server through an SSH tunnel
(``ssh -L 8000:127.0.0.1:8000 HOST``) rather than by opening the port.

No ``--token`` option: a token given on the command line is readable by every user of the machine (``ps``,
/proc/PID/cmdline), who are among those it keeps out; a fresh one per launch costs only re-opening the printed address.
"""

from __future__ import annotations

import errno
import ipaddress
import shlex
import socket
import sys
from pathlib import Path
from urllib.parse import urlsplit

from memtui.cli import app as app_verb
from memtui.core.errors import MemtuiError

SUMMARY = "serve the workbench to a web browser (textual-serve; this machine only unless --host says otherwise)"
DESCRIPTION = (
    "Serves the workbench at http://HOST:PORT/: each browser tab runs its own `memtui app` on the same panels, with "
    "your files and permissions. Open the address it prints, which ends in ?token=...: a secret made for this launch; "
    "a request without it, or from another site's page (Origin), or by a name that is not this server's (Host, as in "
    "DNS rebinding), is refused with 403 and starts nothing. It listens on 127.0.0.1 (this machine only) unless --host "
    "says otherwise. From another machine, tunnel: `ssh -L 8000:127.0.0.1:8000 HOST`, then open the printed address "
    "locally. Needs the serve extra: pip install 'memtui[serve]'. Ctrl-c stops the server and the workbenches it runs."
)


def add_arguments(p) -> None:
    app_verb.add_arguments(p)  # the same panels as `memtui`
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on; any but a loopback one lets other machines reach the server, and only the token "
        "(sent in clear text) keeps them from running the workbench as you",
    )
    p.add_argument("--port", type=int, default=8000, help="port to listen on")
    p.add_argument(
        "--public-url",
        help="the address browsers reach the server by, when it is not http://HOST:PORT (behind a proxy): "
        "http(s)://NAME[:PORT][/PATH]; requests naming it (Host, Origin) are let in too "
        "[default: http://HOST:PORT, with this machine's name for 0.0.0.0 or ::]",
    )


def run(args) -> int:
    paths = app_verb.panel_paths(args)
    check_panels(paths)
    paths = [path.resolve() for path in paths]  # the apps' working folder is the server's, but say it once
    if not 0 < args.port < 65536:
        raise MemtuiError(f"--port {args.port} is not a port number (1-65535).")
    loopback = is_loopback(args.host)
    url = public_url(args.host, args.port) if args.public_url is None else check_public_url(args.public_url)
    check_can_listen(args.host, args.port)
    try:
        from memtui.cli.serve_guard import Gate, GatedServer, new_token
    except ImportError:
        raise MemtuiError("memtui serve needs textual-serve: pip install 'memtui[serve]'.") from None
    if not loopback:
        print(
            f"memtui: warning: listening on {args.host}, not only on this machine: only the token keeps whoever "
            f"reaches port {args.port} from running the workbench with your files and permissions, and it crosses "
            "the network in clear text (an SSH tunnel does not).",
            file=sys.stderr,
            flush=True,
        )
    gate = Gate.serving(args.host, args.port, url, new_token(), loopback)
    server = GatedServer(app_command(paths), gate=gate, host=args.host, port=args.port, title="memtui", public_url=url)
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
        from memtui.estimation.suite_load import load_suite

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


def check_public_url(url: str) -> str:
    """--public-url as an http(s) address of a host (a path prefix allowed, for a proxy that serves under one), without
    a trailing slash; anything else refused, since the page's addresses and the Host/Origin check are made from it."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 -- raises on a port that is not a number or out of range
    except ValueError:
        parts = None
    if (
        parts is None
        or parts.scheme not in ("http", "https")
        or not parts.hostname
        or parts.username is not None
        or parts.query
        or parts.fragment
        or "?" in url
        or "#" in url
    ):
        raise MemtuiError(
            f"--public-url {url}: not an http(s) address of a host; give http://NAME[:PORT][/PATH], e.g. "
            "https://example.org/memtui."
        )
    return url.rstrip("/")


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
