"""`memtui serve`: the workbench in a browser through textual-serve. A real server on a free loopback port is fetched
over HTTP (the textual-serve page) and driven over its websocket as the page's script does (the app starts and paints
the panel); then it is stopped, with every workbench it started, within a bound. The options' checks run in-process
against a stand-in server, so no test listens anywhere but on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

SRC = Path(__file__).parents[2] / "src"
START_S = 120  # bounds on a loaded 2-core machine (measured here under load ~10: page 9 s, first paint 29 s)
PAINT_S = 120
STOP_S = 30


class FakeServer:
    """Stands in for textual_serve.server.Server: records what `memtui serve` asked for and serves nothing."""

    made: list[dict] = []

    def __init__(self, command, **kwargs) -> None:
        FakeServer.made.append({"command": command, **kwargs})

    def serve(self) -> None:
        pass


@pytest.fixture
def fake_server(monkeypatch):
    server = pytest.importorskip("textual_serve.server")
    FakeServer.made = []
    monkeypatch.setattr(server, "Server", FakeServer)
    return FakeServer.made


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
    assert len(err.splitlines()) == 1 and "warning" in err and "0.0.0.0" in err and "no login" in err
    assert fake_server[0]["host"] == "0.0.0.0"
    assert "0.0.0.0" not in fake_server[0]["public_url"]  # a browser elsewhere cannot connect to the wildcard
    code, _, err = cli("serve", small_panel, "--host", "localhost", "--port", free_port())
    assert code == 0 and err == ""  # a name that resolves to loopback only


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


def _apps_on(path: Path, server: int) -> list[int]:
    """Pids of the processes other than ``server`` whose command line names ``path``: the workbenches (and their
    shells) the server started on it."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and str(path).encode() in (proc / "cmdline").read_bytes():
                pids.append(int(proc.name))
        except OSError:
            continue
    return [pid for pid in pids if pid != server]


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


async def _page(session, server: subprocess.Popen, port: int) -> str:
    """The index page, once the server answers."""
    import aiohttp

    deadline = time.monotonic() + START_S
    while True:
        try:
            async with session.get(f"http://127.0.0.1:{port}/") as response:
                assert response.status == 200
                return await response.text()
        except aiohttp.ClientConnectorError:
            assert server.poll() is None, f"the server ended: {server.communicate()[0].decode()[-500:]}"
            assert time.monotonic() < deadline, f"the server did not answer within {START_S} s"
            await asyncio.sleep(0.2)


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


def _wait_for_no_apps(panel: Path, server: int) -> list[int]:
    deadline = time.monotonic() + STOP_S
    while (left := _apps_on(panel, server)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


async def _drive(server: subprocess.Popen, port: int, panel: Path) -> None:
    import aiohttp

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=START_S)) as session:
        page = await _page(session, server, port)
        assert "static/js/textual.js" in page  # textual-serve's page: its terminal client ...
        assert f'data-session-websocket-url="ws://127.0.0.1:{port}/ws"' in page  # ... pointed at this server
        assert "memtui" in page  # the title shown while the app starts
        assert _listening_addresses(port) == {"0100007F"}  # 127.0.0.1 only

        async with session.ws_connect(f"ws://127.0.0.1:{port}/ws?width=100&height=30") as ws:
            screen = await _first_screen(ws, panel)
            assert b"\x1b[?1049h" in screen  # the app took the (browser's) terminal over: alternate screen
            assert _apps_on(panel, server.pid), "no workbench process ran while the websocket was open"
        # the tab closed: the server ends its workbench
        assert _wait_for_no_apps(panel, server.pid) == [], "closing the tab left its workbench running"

        async with session.ws_connect(f"ws://127.0.0.1:{port}/ws?width=80&height=24") as ws:
            await _first_screen(ws, panel)
            server.send_signal(signal.SIGINT)  # ctrl-c with a tab open: the server ends, and the tab's workbench
            assert await asyncio.to_thread(server.wait, STOP_S) == 0
        assert _wait_for_no_apps(panel, server.pid) == [], "stopping the server left a workbench running"


def test_serve_answers_over_http_and_its_websocket_runs_the_workbench(small_panel):
    pytest.importorskip("textual_serve")
    pytest.importorskip("aiohttp")
    panel = small_panel  # its path is this test's own, so the processes naming it are this server's workbenches
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    server = subprocess.Popen(
        [sys.executable, "-m", "memtui.cli", "serve", str(panel), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,  # its own process group, so a failed test can end it and its apps together
    )
    try:
        asyncio.run(_drive(server, port, panel))
        assert "Serving" in server.stdout.read().decode()
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(STOP_S)
        for pid in _apps_on(panel, server.pid):  # a workbench the server left behind
            os.kill(pid, signal.SIGKILL)
