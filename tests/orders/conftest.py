"""The order tests' fixtures: a byte-range file server on 127.0.0.1 (order_files.RangeServer)."""

from __future__ import annotations

import pytest
from order_files import RangeServer


@pytest.fixture
def range_server(tmp_path):
    root = tmp_path / "served"
    root.mkdir()
    with RangeServer(root) as server:
        yield server
