"""Issue 33 §1: `memtui serve` let any web page in. A page on any origin could open the workbench's websocket on
127.0.0.1 (cross-site WebSocket hijacking), or reach it by a name of its own pointed at 127.0.0.1 (DNS rebinding), and
each connection started a workbench with the user's files and permissions.

One real server (module-scoped: starting one costs seconds on a loaded machine) is sent, as an attacker would send
them, requests that must all get 403 and start no workbench process: a foreign ``Origin``, a rebinding ``Host``, a
missing, wrong or non-ASCII token, on the page, the websocket (a real websocket client) and the static files, and
paths that climb out of the static folder. The right token from the right origin works: the page here, the websocket
in tests/cli/test_serve.py's end-to-end test. The gate's rules and --public-url's refusals run in-process."""

from __future__ import annotations

import asyncio
import time

import pytest
from serve_process import apps_on, entry_url, free_port, start, stop

from memtui.panel.synthetic import Simulation, write_synthetic

pytest.importorskip("textual_serve")
aiohttp = pytest.importorskip("aiohttp")

SETTLE_S = 2  # after the refusals: time a started workbench would have had to show up in /proc


class Served:
    def __init__(self, server, panel, port: int, token: str) -> None:
        self.server, self.panel, self.port, self.token = server, panel, port, token
        self.us = f"127.0.0.1:{port}"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    folder = tmp_path_factory.mktemp("serve")
    # its path names this server's workbenches in /proc
    panel = write_synthetic(folder / "attacked.h5", Simulation(n_cohorts=3, per_cohort=5, n_never=10, n_checkpoints=4))
    port = free_port()
    server = start(panel, port, folder / "serve.log")
    try:
        url = entry_url(server, folder / "serve.log")
        yield Served(server, panel, port, url.split("?token=")[1])
    finally:
        stop(server, panel)


async def _raw(port: int, target: str, headers: list[tuple[str, str]]) -> tuple[int, bytes]:
    """One HTTP/1.1 GET written byte for byte (no client normalises the path or fills in a Host): status and body."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    lines = [f"GET {target} HTTP/1.1", *(f"{k}: {v}" for k, v in headers), "Connection: close", "", ""]
    writer.write("\r\n".join(lines).encode("utf-8"))
    await writer.drain()
    reply = await asyncio.wait_for(reader.read(), 60)
    writer.close()
    head, _, body = reply.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


OURS = object()  # get()'s default Host: the address the server listens on


def get(served: Served, target: str, host: str | None = OURS, origin: str | None = None) -> tuple[int, bytes]:
    """GET ``target`` with this ``Host`` (None: none at all) and ``Origin`` (None: none)."""
    headers = [] if host is None else [("Host", served.us if host is OURS else host)]
    if origin is not None:
        headers.append(("Origin", origin))
    return asyncio.run(_raw(served.port, target, headers))


def websocket_status(served: Served, path: str, origin: str | None, host: str | None = None) -> int:
    """The status of a websocket handshake to ``path`` (101 when the server took it), from a real client."""

    async def connect() -> int:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
            headers = {"Host": host} if host else {}
            try:
                async with session.ws_connect(f"ws://{served.us}{path}", origin=origin, headers=headers) as ws:
                    await ws.close()
                    return 101
            except aiohttp.WSServerHandshakeError as refused:
                return refused.status

    return asyncio.run(connect())


FOREIGN = ["http://evil.example", f"http://127.0.0.1:{1}", "null", "https://127.0.0.1", "http://localhost.evil.example"]


def test_the_right_token_from_the_right_origin_gets_the_page(served):
    """The contrast for every refusal below: the same request with nothing foreign in it is served."""
    for origin in (None, f"http://127.0.0.1:{served.port}", f"http://localhost:{served.port}"):
        status, body = get(served, f"/?token={served.token}", origin=origin)
        assert status == 200 and f"/ws/{served.token}".encode() in body
    assert get(served, f"/?token={served.token}", host=f"localhost:{served.port}")[0] == 200
    assert get(served, "/static/js/textual.js")[0] == 200  # the page's own script needs no token


def test_websocket_from_a_foreign_origin_is_refused_and_starts_nothing(served):
    for origin in [*FOREIGN, f"http://127.0.0.1:{served.port + 1}"]:
        assert websocket_status(served, f"/ws/{served.token}?width=80&height=24", origin) == 403, origin
        assert websocket_status(served, f"/ws?token={served.token}", origin) == 403, origin
    _assert_no_workbench(served)


def test_websocket_without_the_right_token_is_refused_and_starts_nothing(served):
    origin = f"http://127.0.0.1:{served.port}"
    wrong = served.token[:-1] + ("A" if served.token[-1] != "A" else "B")
    for path in ("/ws", "/ws?width=80&height=24", f"/ws/{wrong}", f"/ws?token={wrong}", "/ws/%C3%A9", "/ws?token="):
        assert websocket_status(served, path, origin) == 403, path
        assert websocket_status(served, path, None) == 403, path  # a client that sends no Origin at all
    assert websocket_status(served, f"/ws/{wrong}?token={served.token}", origin) == 403  # the path's token counts
    _assert_no_workbench(served)


def test_websocket_by_a_rebinding_name_is_refused_and_starts_nothing(served):
    for host in (f"evil.example:{served.port}", "evil.example", f"127.0.0.1:{served.port + 1}"):
        origin = f"http://{host}"  # a rebound page's own origin
        assert websocket_status(served, f"/ws/{served.token}", origin, host=host) == 403, host
        assert websocket_status(served, f"/ws/{served.token}", None, host=host) == 403, host
    _assert_no_workbench(served)


@pytest.mark.parametrize(
    "target", ["/", "/?token=", "/?token=wrong", "/?token=%C3%A9", "/?TOKEN={token}x", "/download/x", "/nothing"]
)
def test_the_page_without_the_right_token_is_refused(served, target):
    status, body = get(served, target.format(token=served.token))
    assert status == 403 and b"?token=" in body  # the refusal says which address to open
    assert b"data-session-websocket-url" not in body


@pytest.mark.parametrize("origin", FOREIGN)
def test_the_page_for_a_foreign_origin_is_refused_even_with_the_token(served, origin):
    assert get(served, f"/?token={served.token}", origin=origin)[0] == 403


@pytest.mark.parametrize("target", ["/?token={token}", "/static/js/textual.js", "/static/", "/nothing"])
def test_a_rebinding_host_is_refused_on_every_route(served, target):
    target = target.format(token=served.token)
    for host in (f"evil.example:{served.port}", "EVIL.example", f"127.0.0.1.evil.example:{served.port}", "", "a b"):
        assert get(served, target, host=host)[0] in (400, 403), host  # 400: aiohttp's own refusal of a bad Host
    assert get(served, target, host=None)[0] in (400, 403)  # no Host at all


def test_two_host_headers_are_refused(served):
    headers = [("Host", served.us), ("Host", f"evil.example:{served.port}")]
    assert asyncio.run(_raw(served.port, f"/?token={served.token}", headers))[0] in (400, 403)


@pytest.mark.parametrize(
    "target",
    [
        "/static/../../../../../../etc/passwd",
        "/static/..%2f..%2f..%2f..%2f..%2f..%2fetc/passwd",
        "/static/%2e%2e/%2e%2e/%2e%2e/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
        "/static//etc/passwd",
        "/static/%2fetc/passwd",
        "/static/js/../../../../../../../etc/passwd",
        "/static/..\\..\\..\\..\\..\\..\\etc\\passwd",
    ],
)
def test_no_path_climbs_out_of_the_static_folder(served, target):
    for query in ("", f"?token={served.token}"):  # with the token too: the static route itself refuses
        status, body = get(served, target + query)
        assert status in (403, 404) and b"root:" not in body, (target, status)


def _assert_no_workbench(served: Served) -> None:
    time.sleep(SETTLE_S)
    assert served.server.poll() is None  # the server still runs: the refusals did not end it
    assert apps_on(served.panel, served.server.pid) == [], "a refused request started a workbench"


# --- the gate's rules, in-process ---


def _gate(host="127.0.0.1", port=8000, public_url=None, loopback=True):
    from memtui.cli.serve import public_url as default_url
    from memtui.cli.serve_guard import Gate

    return Gate.serving(host, port, public_url or default_url(host, port), "t" * 43, loopback)


def test_the_gate_names_the_served_address_and_its_loopback_names_only():
    gate = _gate()
    assert all(gate.names_us(h) for h in ("127.0.0.1:8000", "localhost:8000", "LocalHost:8000", "[::1]:8000"))
    refused = ["127.0.0.1", "127.0.0.1:80", "127.0.0.2:8000", "evil.example:8000", "localhost.:8000", "0.0.0.0:8000"]
    assert not any(gate.names_us(h) for h in refused)
    assert gate.from_us("http://127.0.0.1:8000") and not gate.from_us("https://127.0.0.1:8000")
    assert not gate.from_us("http://127.0.0.1:8000/") and not gate.from_us("null")


def test_on_every_address_an_ip_literal_on_the_port_names_it_but_no_foreign_name_does():
    gate = _gate("0.0.0.0", 8000, loopback=False)
    assert gate.names_us("192.0.2.7:8000") and gate.names_us("[2001:db8::1]:8000") and gate.names_us("localhost:8000")
    assert gate.from_us("http://192.0.2.7:8000") and not gate.from_us("https://evil.example:8000")
    assert not gate.names_us("192.0.2.7:8001") and not gate.names_us("evil.example:8000")


def test_port_80_is_named_without_its_port_as_browsers_send_it():
    gate = _gate(port=80)
    assert gate.names_us("127.0.0.1") and gate.from_us("http://localhost") and not gate.names_us("127.0.0.1:8000")


def test_a_wrong_token_is_refused_by_the_gate_however_it_is_written():
    gate = _gate()
    assert gate.refusal(["127.0.0.1:8000"], [], "t" * 43, needs_token=True) is None
    for token in (None, "", "t" * 42, "t" * 44, "T" * 43, "é" * 43, "t" * 43 + "\x00"):
        assert gate.refusal(["127.0.0.1:8000"], [], token, needs_token=True), repr(token)


@pytest.mark.parametrize(
    "url",
    [
        "example.org",
        "ftp://example.org",
        "http://",
        "http:///path",
        "http://example.org:99999",
        "http://example.org:port",
        "http://user:pw@example.org",
        "http://example.org/?x=1",
        "http://example.org/#top",
        "javascript:alert(1)",
        "",
    ],
)
def test_a_public_url_that_is_no_http_address_is_refused(cli, small_panel, url, monkeypatch):
    from memtui.cli import serve_guard

    served = []
    monkeypatch.setattr(serve_guard, "GatedServer", lambda *a, **k: served.append(k))  # never listen for real
    code, out, err = cli("serve", small_panel, "--port", free_port(), "--public-url", url)
    assert code == 2 and out == "" and len(err.splitlines()) == 1 and "--public-url" in err
    assert served == []
