"""The gate in front of textual-serve: what `memtui serve` lets in, and the server that enforces it.

Loopback is no boundary against the user's own browser: any page it shows can open a websocket to 127.0.0.1
(cross-site WebSocket hijacking) or point a name of its own at 127.0.0.1 (DNS rebinding), and on a shared machine
every other user can reach the port too. Each of those would start a workbench, which can open and write files as
this user. So every request must name this server in ``Host`` (a rebound name does not), must come from this server's
page when a browser says where it comes from (``Origin``), and, except the static files of the page, must carry the
launch's secret token, which only the terminal that ran `memtui serve` is told. Anything else gets 403 before a
handler runs, so a refused websocket starts no process.

The token reaches the websocket through the page: the page is served only to a request that carries the token, and
its ``data-session-websocket-url`` carries it as the websocket's last path segment (``/ws/TOKEN``; textual-serve's
script appends ``?width=…&height=…`` to that URL, so it cannot be a query parameter). A cookie set on the page load
would also work, but cookies are not scoped by port: the browser would send this token to every other server on
127.0.0.1 (another user's among them) and two servers would overwrite each other's. A page from another origin cannot
read ours (same-origin policy; the Host check stops a rebound name from becoming "ours"), so the token stays between
the terminal, the browser's address bar and this page.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import secrets
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

import aiohttp_jinja2
from aiohttp import web
from textual_serve.server import Server

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
DEFAULT_PORTS = {"http": 80, "https": 443}


def new_token() -> str:
    """A per-launch secret: 32 random bytes (256 bits), URL-safe."""
    return secrets.token_urlsafe(32)


def netloc(host: str, port: int | None) -> str:
    """``host[:port]`` as it appears in ``Host`` and ``Origin``: lower case, an IPv6 literal in brackets, compressed."""
    host = host.lower().strip("[]")
    try:
        address = ipaddress.ip_address(host)
        host = f"[{address.compressed}]" if address.version == 6 else address.compressed
    except ValueError:
        pass
    return host if port is None else f"{host}:{port}"


def split_netloc(value: str) -> tuple[str, int | None] | None:
    """``Host``'s ``host[:port]`` as (host, port), or None where it is not one (then it names nothing of ours)."""
    try:
        parts = urlsplit(f"//{value}")
        return parts.hostname or "", parts.port
    except ValueError:
        return None


@dataclass(frozen=True)
class Gate:
    """What may reach the server: ``hosts`` are the ``Host`` values that name it, ``origins`` the ``Origin`` values of
    its own page, ``any_address`` whether any IP address on ``port`` names it (it listens on all of them), ``token``
    the launch's secret."""

    token: str
    port: int
    hosts: frozenset[str]
    origins: frozenset[str]
    any_address: bool = False

    @classmethod
    def serving(cls, host: str, port: int, public_url: str, token: str, loopback: bool) -> Gate:
        """The gate for a server listening on ``host``:``port`` that browsers reach at ``public_url``."""
        address = _address(host)
        any_address = address is not None and address.is_unspecified
        names = {host} | set(_resolved(host) if address is None else ())
        if loopback or any_address:  # the loopback names reach a server listening on all addresses too
            names |= set(LOOPBACK_NAMES)
        if any_address:
            names |= {socket.getfqdn(), socket.gethostname()}
        hosts = {netloc(name, port) for name in names}
        if port == 80:  # a browser leaves the default port out of Host and Origin
            hosts |= {netloc(name, None) for name in names}
        origins = {f"http://{value}" for value in hosts}
        public = urlsplit(public_url)
        default = DEFAULT_PORTS[public.scheme]
        hosts |= {netloc(public.hostname, public.port or default)}
        if (public.port or default) == default:
            hosts.add(netloc(public.hostname, None))
        origins.add(f"{public.scheme}://{netloc(public.hostname, public.port if public.port != default else None)}")
        return cls(token, port, frozenset(hosts), frozenset(origins), any_address)

    def names_us(self, value: str) -> bool:
        """Whether a ``Host`` value (``host[:port]``) is this server: one of its names, or, when it listens on every
        address, an IP literal on its port (a rebinding attack needs a name, which it controls; an address it does
        not)."""
        parts = split_netloc(value)
        if parts is None:
            return False
        if netloc(*parts) in self.hosts:
            return True
        return self.any_address and parts[1] == self.port and _address(parts[0]) is not None

    def from_us(self, origin: str) -> bool:
        """Whether an ``Origin`` value is this server's page."""
        if origin.lower() in self.origins:
            return True
        return self.any_address and origin.lower().startswith("http://") and self.names_us(origin[len("http://") :])

    def refusal(self, hosts: list[str], origins: list[str], token: str | None, needs_token: bool) -> str | None:
        """Why a request with these ``Host`` and ``Origin`` headers and this token is refused, or None if it is not."""
        if len(hosts) != 1 or not self.names_us(hosts[0]):
            return "this server is not reached by that name (Host)"
        if len(origins) > 1 or (origins and not self.from_us(origins[0])):
            return "only this server's own page may call it (Origin)"
        if needs_token and not (token and hmac.compare_digest(token.encode(), self.token.encode())):
            return "open the address `memtui serve` printed in its terminal: it ends in ?token=…"
        return None


def _address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host.strip("[]").split("%")[0])
    except ValueError:
        return None


def _resolved(host: str) -> list[str]:
    """The addresses a host name resolves to, as literals (the served address may be typed as either)."""
    try:
        return [info[4][0].split("%")[0] for info in socket.getaddrinfo(host, None)]
    except (OSError, UnicodeError):
        return []


class GatedServer(Server):
    """textual-serve's server behind a ``Gate``: its app gets one middleware that refuses with 403 before any handler
    runs, the websocket route that carries the token in its path, and a page whose websocket URL holds the token."""

    def __init__(self, command: str, *, gate: Gate, **kwargs) -> None:
        super().__init__(command, **kwargs)
        self.gate = gate
        self.public_url = self.public_url.rstrip("/")  # textual-serve appends paths that start with /

    @property
    def entry_url(self) -> str:
        """The address to open: the page, with the token."""
        return f"{self.public_url}/?token={self.gate.token}"

    async def _make_app(self) -> web.Application:
        app = await super()._make_app()
        app.router.add_get("/ws/{token}", self.handle_websocket, name="websocket-token")
        app.middlewares.append(self._guard)
        app.on_response_prepare.append(_no_referrer)
        return app

    @web.middleware
    async def _guard(self, request: web.Request, handler):
        resource = request.match_info.route.resource
        reason = self.gate.refusal(
            request.headers.getall("Host", []),
            request.headers.getall("Origin", []),
            request.match_info.get("token") or request.query.get("token"),
            # all but the page's script, styles and font; textual-serve's /download/KEY too, which the page opens
            # without the token (memtui's workbench delivers no files; one that does must add it to that URL)
            needs_token=resource is None or resource.name != "static",
        )
        if reason is not None:
            return web.Response(status=403, text=f"memtui serve refused this request: {reason}\n")
        return await handler(request)

    @aiohttp_jinja2.template("app_index.html")
    async def handle_index(self, request: web.Request) -> dict:
        context = await Server.handle_index.__wrapped__(self, request)  # textual-serve's page, undecorated
        context["app_websocket_url"] += f"/{self.gate.token}"
        return context

    def initialize_logging(self) -> None:
        super().initialize_logging()
        # aiohttp's access log prints every request line, and the page's and the websocket's hold the token: the
        # terminal shows it once, in the banner, not in every line of a log that gets pasted into bug reports
        logging.getLogger("aiohttp.access").addFilter(self._redact)

    def _redact(self, record: logging.LogRecord) -> bool:
        record.msg = str(record.msg).replace(self.gate.token, "TOKEN")
        return True

    async def on_startup(self, app: web.Application) -> None:
        # printed plainly (textual-serve's rich console wraps the long URL at 80 columns when piped)
        print(f"Serving the workbench at {self.entry_url}", flush=True)
        print("Open that address; its token is this launch's key. Ctrl-c stops the server.", flush=True)


async def _no_referrer(request: web.Request, response: web.StreamResponse) -> None:
    """The page's address holds the token: a browser must not send it on to the font server as a Referer."""
    response.headers["Referrer-Policy"] = "no-referrer"
