"""A minimal Hugging Face hub on 127.0.0.1: just what ``huggingface_hub.snapshot_download`` asks for a revision.

What huggingface_hub (2.x) requests, read from its source (``_snapshot_download.py``, ``hf_api.py``,
``file_download.py``):

- ``GET /api/models/{repo}/revision/{rev}`` (``repo_info``; ``?blobs=True`` with ``files_metadata``): JSON with
  ``id``, ``sha`` (the commit, 40 hex digits) and ``siblings`` (``rfilename``, ``size``, ``blobId``, ``lfs``).
  An unknown revision is a 404 with ``X-Error-Code: RevisionNotFound``.
- ``GET /api/models/{repo}/tree/{commit}?recursive=True&expand=False`` (``list_repo_tree``): a JSON list of
  ``{"type": "file", "path", "size", "oid", "lfs": {"oid", "size", "pointerSize"}}``; one page (no ``Link`` header).
- ``HEAD /{repo}/resolve/{commit}/{file}`` (``get_hf_file_metadata``): needs ``X-Repo-Commit``, ``ETag`` (the blob's
  name in the cache) and ``Content-Length``; a missing file is a 404 with ``X-Error-Code: EntryNotFound``.
- ``GET`` of the same URL, with ``Range: bytes=N-`` when ``http_get`` resumes after a dropped connection (answered
  206 with ``Content-Range``).

Failures can be injected per revision (an HTTP status for everything about it) and per file (the first GET drops
the connection half-way through the body, or answers an HTTP status). Every request is recorded.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit


class QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # a client that hangs up mid-body (the tests make them) is not an error of the fake hub


@dataclass
class Request:
    method: str
    path: str
    range: str | None
    authorization: str | None


@dataclass
class FakeHub:
    repo: str
    revisions: dict[str, dict[str, bytes]]  # revision name -> file name -> content
    fail: dict[str, int] = field(default_factory=dict)  # revision name -> HTTP status for all its requests
    drop_once: set[str] = field(default_factory=set)  # file names whose first full GET stops half-way
    refuse_once: dict[str, int] = field(default_factory=dict)  # file name -> HTTP status of its first GET
    slow: float = 0.0  # seconds between 1 KB pieces of a file's body (a slow link)
    token: str | None = None  # when set, requests without `Authorization: Bearer <token>` get 401
    requests: list[Request] = field(default_factory=list)

    def __post_init__(self):
        self.commits = {rev: hashlib.sha1(f"{self.repo}@{rev}".encode()).hexdigest() for rev in self.revisions}
        self.by_commit = {c: rev for rev, c in self.commits.items()}
        self.lock = threading.Lock()
        self.server: ThreadingHTTPServer | None = None

    # -- what the hub knows about a file -------------------------------------------------------------------------

    @staticmethod
    def is_lfs(name: str) -> bool:
        return name.endswith((".safetensors", ".bin", ".pt"))

    def entry(self, name: str, content: bytes) -> dict:
        oid = hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()  # git's blob id
        info = {"size": len(content), "oid": oid}
        if self.is_lfs(name):
            info["lfs"] = {"oid": hashlib.sha256(content).hexdigest(), "size": len(content), "pointerSize": 134}
        return info

    def etag(self, name: str, content: bytes) -> str:
        # the hub's ETag: the sha256 for LFS files, the git blob id for the others
        info = self.entry(name, content)
        return info["lfs"]["oid"] if "lfs" in info else info["oid"]

    # -- server ---------------------------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        assert self.server is not None
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> FakeHub:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = 10  # a stuck client cannot hold a handler thread for longer

            def log_message(self, *args):  # keep test output clean
                pass

            def do_HEAD(self):
                hub.handle(self, head=True)

            def do_GET(self):
                hub.handle(self, head=False)

        self.server = QuietServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        assert self.server is not None
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)

    # -- requests -------------------------------------------------------------------------------------------------

    def handle(self, h: BaseHTTPRequestHandler, head: bool) -> None:
        path = urlsplit(h.path).path
        with self.lock:
            self.requests.append(Request(h.command, path, h.headers.get("Range"), h.headers.get("Authorization")))
        repo = re.escape(self.repo)
        if self.token is not None and h.headers.get("Authorization") != f"Bearer {self.token}":
            return self.send(h, 401, b'{"error": "Invalid username or password."}', head)
        if m := re.fullmatch(rf"/api/models/{repo}/revision/([^/]+)", path):
            return self.revision_info(h, unquote(m.group(1)), head)
        if m := re.fullmatch(rf"/api/models/{repo}/tree/([^/]+)", path):
            return self.tree(h, unquote(m.group(1)), head)
        if m := re.fullmatch(rf"/{repo}/resolve/([^/]+)/(.+)", path):
            return self.resolve(h, unquote(m.group(1)), unquote(m.group(2)), head)
        if re.match(r"/api/models/", path):
            return self.send(h, 404, b'{"error": "Repository not found"}', head, {"X-Error-Code": "RepoNotFound"})
        return self.send(h, 404, b"not found", head)

    def find(self, revision: str) -> str | None:
        """The revision name for a revision or a commit hash."""
        return revision if revision in self.revisions else self.by_commit.get(revision)

    def refused(self, h, rev: str | None, head: bool) -> bool:
        if rev is not None and rev in self.fail:
            self.send(h, self.fail[rev], b'{"error": "refused"}', head)
            return True
        return False

    def revision_info(self, h, revision: str, head: bool) -> None:
        rev = self.find(revision)
        if self.refused(h, rev, head):
            return
        if rev is None:
            return self.send(h, 404, b'{"error": "Invalid rev id"}', head, {"X-Error-Code": "RevisionNotFound"})
        siblings = []
        for name, content in sorted(self.revisions[rev].items()):
            info = self.entry(name, content)
            sibling = {"rfilename": name, "size": info["size"], "blobId": info["oid"]}
            if "lfs" in info:
                sibling["lfs"] = {"sha256": info["lfs"]["oid"], "size": info["size"], "pointerSize": 134}
            siblings.append(sibling)
        body = {"id": self.repo, "modelId": self.repo, "sha": self.commits[rev], "private": False, "siblings": siblings}
        self.send(h, 200, json.dumps(body).encode(), head, {"Content-Type": "application/json"})

    def tree(self, h, revision: str, head: bool) -> None:
        rev = self.find(revision)
        if self.refused(h, rev, head):
            return
        if rev is None:
            return self.send(h, 404, b'{"error": "Invalid rev id"}', head, {"X-Error-Code": "RevisionNotFound"})
        listing = [
            {"type": "file", "path": name, **self.entry(name, content)}
            for name, content in sorted(self.revisions[rev].items())
        ]
        self.send(h, 200, json.dumps(listing).encode(), head, {"Content-Type": "application/json"})

    def resolve(self, h, revision: str, name: str, head: bool) -> None:
        rev = self.find(revision)
        if self.refused(h, rev, head):
            return
        if rev is None:
            return self.send(h, 404, b"Invalid rev id", head, {"X-Error-Code": "RevisionNotFound"})
        headers = {"X-Repo-Commit": self.commits[rev]}
        if name not in self.revisions[rev]:
            return self.send(h, 404, b"Entry not found", head, {**headers, "X-Error-Code": "EntryNotFound"})
        content = self.revisions[rev][name]
        headers.update({"ETag": f'"{self.etag(name, content)}"', "Accept-Ranges": "bytes"})
        start = 0
        if not head and (spec := h.headers.get("Range")):
            m = re.fullmatch(r"bytes=(\d+)-", spec.strip())
            if m is None or int(m.group(1)) >= len(content):
                return self.send(h, 416, b"", head, {**headers, "Content-Range": f"bytes */{len(content)}"})
            start = int(m.group(1))
            headers["Content-Range"] = f"bytes {start}-{len(content) - 1}/{len(content)}"
        if not head and name in self.refuse_once:
            with self.lock:
                status = self.refuse_once.pop(name)
            return self.send(h, status, b"try again later", head)
        if not head and start == 0 and name in self.drop_once:
            with self.lock:
                self.drop_once.discard(name)
            # announce the whole file, send half of it, and close: what a network cut looks like to the client
            h.send_response(200)
            for k, v in {**headers, "Content-Length": str(len(content))}.items():
                h.send_header(k, v)
            h.end_headers()
            h.wfile.write(content[: len(content) // 2])
            h.wfile.flush()
            h.close_connection = True
            return
        if not head and self.slow:
            body = content[start:]
            h.send_response(206 if start else 200)
            for k, v in {**headers, "Content-Length": str(len(body))}.items():
                h.send_header(k, v)
            h.end_headers()
            for i in range(0, len(body), 1024):
                time.sleep(self.slow)
                h.wfile.write(body[i : i + 1024])
                h.wfile.flush()
            return
        self.send(h, 206 if start else 200, content[start:], head, headers)

    @staticmethod
    def send(h, status: int, body: bytes, head: bool, headers: dict | None = None) -> None:
        h.send_response(status)
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if not head:
            h.wfile.write(body)


def checkpoint_files(folder: Path) -> dict[str, bytes]:
    """The files of a saved checkpoint folder, by name."""
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}
