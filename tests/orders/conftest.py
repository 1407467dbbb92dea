"""The order tests' fixtures: a byte-range file server on 127.0.0.1 (order_files.RangeServer), and jax's two threefry
settings for the Levanter tests."""

from __future__ import annotations

import pytest
from order_files import RangeServer

from memtui.orders import levanter_prng


@pytest.fixture(params=levanter_prng.MODES)
def mode(request):
    """Each of jax's two threefry settings, restored afterwards (jax imported here only: a Levanter test asks)."""
    import jax

    before = jax.config.jax_threefry_partitionable
    jax.config.update("jax_threefry_partitionable", request.param == "partitionable")
    yield request.param
    jax.config.update("jax_threefry_partitionable", before)


@pytest.fixture
def range_server(tmp_path):
    root = tmp_path / "served"
    root.mkdir()
    with RangeServer(root) as server:
        yield server
