"""Token files for the order tests, and a file server on 127.0.0.1 that answers HEAD and byte ranges."""

from __future__ import annotations

import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np


def write_tokens(folder: Path, lengths, dtype, seed: int = 0, vocab: int = 50, repeats: float = 0.0, seq_len=16):
    """Headerless token files (OLMo's ``.npy`` layout) of the given token counts; with ``repeats`` > 0, that share of
    instance slots holds a short pattern repeated (what the instance filter drops)."""
    rng = np.random.default_rng(seed)
    paths = []
    for i, n in enumerate(lengths):
        tokens = rng.integers(0, vocab, size=n).astype(dtype)
        for start in range(0, n - seq_len + 1, seq_len):
            if rng.random() < repeats:
                period = int(rng.integers(1, 4))
                tokens[start : start + seq_len] = np.resize(rng.integers(0, vocab, size=period), seq_len)
        path = folder / f"part-{i:02d}.npy"
        tokens.tofile(path)
        paths.append(str(path))
    return paths


class RangeServer:
    """Serves a folder over HTTP with HEAD and single byte ranges; records every request (method, path, range)."""

    def __init__(self, root: Path):
        self.root = root
        self.requests: list[tuple[str, str, str | None]] = []

    def __enter__(self) -> RangeServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_HEAD(self):
                self.answer(head=True)

            def do_GET(self):
                self.answer(head=False)

            def answer(self, head):
                spec = self.headers.get("Range")
                server.requests.append((self.command, self.path, spec))
                path = server.root / self.path.lstrip("/")
                if not path.is_file():
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                data = path.read_bytes()
                status, body = 200, data
                if spec and not head:
                    a, b = map(int, re.fullmatch(r"bytes=(\d+)-(\d+)", spec).groups())
                    status, body = 206, data[a : b + 1]
                self.send_response(status)
                self.send_header("Content-Length", str(len(body) if not head else len(data)))
                self.send_header("Accept-Ranges", "bytes")
                self.end_headers()
                if not head:
                    self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        return self

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)
