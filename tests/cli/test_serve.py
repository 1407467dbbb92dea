"""`memtui serve`: the workbench in a browser through textual-serve. A real server on a free loopback port is opened
at the address it prints (with its token) over HTTP (the textual-serve page) and driven over the page's websocket as
the page's script does (the app starts and paints the panel); then it is stopped, with every workbench it started,
within a bound. The options' checks run in-process against a stand-in server, so no test listens anywhere but on
127.0.0.1. What the server refuses is in tests/adversarial/test_round4_serve.py."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
from serve_process import START_S, STOP_S, apps_on, entry_url, free_port, start, stop, wait_for_no_apps

PAINT_S = 120


class FakeServer:
    """Stands in for memtui's GatedServer (textual-serve's behind the gate): records what `memtui serve` asked for and
    serves nothing."""

    made: list[dict] = []

    def __init__(self, command, **kwargs) -> None:
        FakeServer.made.append({"command": command, **kwargs})

    def serve(self) -> None:
        pass


@pytest.fixture
def fake_server(monkeypatch):
    pytest.importorskip("textual_serve.server")
    from memtui.cli import serve_guard

    FakeServer.made = []
    monkeypatch.setattr(serve_guard, "GatedServer", FakeServer)
    return FakeServer.made


def test_serves_on_loopback_by_default_without_a_warning(cli, small_panel, fake_server):
    code, _, err = cli("serve", small_panel, "--port", free_port())
    assert code == 0 and err == ""
    (made,) = fake_server
    assert made["host"] == "127.0.0.1" and made["public_url"].startswith("http://127.0.0.1:")
    # each tab runs this Python's `memtui app` on the panel, by its absolute path (the shell reads the command)
    assert made["command"].split()[-3:] == ["memtui.cli", "app", str(small_panel.resolve())]


def test_a_host_other_than_loopback_is_served_with_a_warning_line(cli, small_panel, fake_server):
    code, _, err = cli("serve", small_panel, "--host", "0.0.0.0", "--port", free_port())
    assert code == 0
    assert len(err.splitlines()) == 1 and "warning" in err and "0.0.0.0" in err and "token" in err
    assert fake_server[0]["host"] == "0.0.0.0"
    assert "0.0.0.0" not in fake_server[0]["public_url"]  # a browser elsewhere cannot connect to the wildcard
    code, _, err = cli("serve", small_panel, "--host", "localhost", "--port", free_port())
    assert code == 0 and err == ""  # a name that resolves to loopback only


def test_each_launch_has_its_own_token_of_256_bits(cli, small_panel, fake_server):
    for _ in range(2):
        assert cli("serve", small_panel, "--port", free_port())[0] == 0
    first, second = (made["gate"].token for made in fake_server)
    assert first != second and len(base64.urlsafe_b64decode(first + "=")) == 32


def test_public_url_is_the_page_s_address_and_a_name_the_server_answers_to(cli, small_panel, fake_server):
    code, _, err = cli("serve", small_panel, "--port", free_port(), "--public-url", "https://Example.org/memtui/")
    assert code == 0 and err == ""
    (made,) = fake_server
    assert made["public_url"] == "https://Example.org/memtui"  # textual-serve appends /ws, /static/...
    gate = made["gate"]
    assert gate.names_us("example.org") and gate.from_us("https://example.org")  # the proxy's name and page
    assert gate.names_us(f"127.0.0.1:{made['port']}")  # and the address it listens on (a proxy may pass that)
    assert not gate.from_us("http://example.org")  # not the same origin: another scheme


def test_takes_the_same_panel_arguments_as_memtui(cli, tmp_path, fake_server):
    from memtui.panel.samples import SUITE, sample_path

    assert cli("serve", "--sample", "suite", "--port", free_port())[0] == 0
    assert fake_server[0]["command"].split()[-len(SUITE) :] == [str(sample_path(n).resolve()) for n in SUITE]
    code, _, err = cli("serve", tmp_path / "missing.h5")
    assert code == 2 and "no such file" in err and len(err.splitlines()) == 1
    code, _, err = cli("serve", tmp_path / "missing.h5", "--sample", "synthetic")
    assert code == 2 and "not both" in err
    assert len(fake_server) == 1  # no server for a bad panel: the error is in the terminal, not in every tab


def test_a_taken_port_is_one_line(cli, small_panel, fake_server):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        code, out, err = cli("serve", small_panel, "--port", taken.getsockname()[1])
    assert code == 2 and "cannot listen" in err and len(err.splitlines()) == 1 and out == ""
    code, _, err = cli("serve", small_panel, "--port", "70000")
    assert code == 2 and "not a port number" in err
    assert fake_server == []


def _listening_addresses(port: int) -> set[str]:
    """The local addresses of the TCP sockets listening on ``port`` (from /proc/net/tcp and tcp6, hex as there)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                found.add(address)
    return found


async def _page(session, url: str) -> str:
    """The page at the address the server printed (it is listening once it has printed it)."""
    async with session.get(url) as response:
        assert response.status == 200
        assert response.headers["Referrer-Policy"] == "no-referrer"  # the address's token goes to no font server
        return await response.text()


async def _first_screen(ws, panel: Path) -> bytes:
    """What the app behind the websocket paints until the panel's name shows; then the page's keep-alive ping is
    answered (by the server, so it is still serving the tab)."""
    import aiohttp

    screen = b""
    deadline = time.monotonic() + PAINT_S
    while panel.name.encode() not in screen:
        left = deadline - time.monotonic()
        assert left > 0, f"the workbench painted no screen naming the panel within {PAINT_S} s"
        message = await asyncio.wait_for(ws.receive(), left)
        assert message.type in (aiohttp.WSMsgType.BINARY, aiohttp.WSMsgType.TEXT), message
        if message.type == aiohttp.WSMsgType.BINARY:
            screen += message.data
    await ws.send_str(json.dumps(["ping", "t"]))
    while (message := await asyncio.wait_for(ws.receive(), PAINT_S)).type == aiohttp.WSMsgType.BINARY:
        pass
    assert json.loads(message.data) == ["pong", "t"]
    return screen


async def _drive(server: subprocess.Popen, url: str, port: int, panel: Path) -> None:
    import aiohttp

    token = url.split("?token=")[1]
    origin = f"http://127.0.0.1:{port}"  # what a browser sends from the page: its own origin
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=START_S)) as session:
        page = await _page(session, url)
        assert "static/js/textual.js" in page  # textual-serve's page: its terminal client ...
        websocket = re.search(r'data-session-websocket-url="([^"]+)"', page).group(1)
        assert websocket == f"ws://127.0.0.1:{port}/ws/{token}"  # ... pointed at this server, the token in the path
        assert "memtui" in page  # the title shown while the app starts
        assert _listening_addresses(port) == {"0100007F"}  # 127.0.0.1 only

        # as the page's script does: the URL + ?width=&height=
        async with session.ws_connect(f"{websocket}?width=100&height=30", origin=origin) as ws:
            screen = await _first_screen(ws, panel)
            assert b"\x1b[?1049h" in screen  # the app took the (browser's) terminal over: alternate screen
            assert apps_on(panel, server.pid), "no workbench process ran while the websocket was open"
        # the tab closed: the server ends its workbench
        assert wait_for_no_apps(panel, server.pid) == [], "closing the tab left its workbench running"

        async with session.ws_connect(f"{websocket}?width=80&height=24", origin=origin) as ws:
            await _first_screen(ws, panel)
            server.send_signal(signal.SIGINT)  # ctrl-c with a tab open: the server ends, and the tab's workbench
            assert await asyncio.to_thread(server.wait, STOP_S) == 0
        assert wait_for_no_apps(panel, server.pid) == [], "stopping the server left a workbench running"


def test_serve_answers_over_http_and_its_websocket_runs_the_workbench(small_panel, tmp_path):
    pytest.importorskip("textual_serve")
    pytest.importorskip("aiohttp")
    panel = small_panel  # its path is this test's own, so the processes naming it are this server's workbenches
    port = free_port()
    log = tmp_path / "serve.log"
    server = start(panel, port, log)
    try:
        url = entry_url(server, log)
        assert re.fullmatch(rf"http://127\.0\.0\.1:{port}/\?token=[A-Za-z0-9_-]{{43}}", url)  # 256 bits
        asyncio.run(_drive(server, url, port, panel))
        log_text = log.read_text()
        assert log_text.count(url.split("?token=")[1]) == 1  # the banner shows it; the access log's lines do not
        assert "GET /?token=TOKEN" in log_text and "/ws/TOKEN" in log_text
    finally:
        stop(server, panel)
