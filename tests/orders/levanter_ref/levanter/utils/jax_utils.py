# Copyright 2025 The Levanter Authors
# SPDX-License-Identifier: Apache-2.0
# memtui: only key_iterator, copied from src/levanter/utils/jax_utils.py at the commit in ../../README.md

import jax
from jaxtyping import PRNGKeyArray


def key_iterator(key: PRNGKeyArray | int):
    if isinstance(key, int):
        key = jax.random.PRNGKey(key)
    while True:
        key, subkey = jax.random.split(key)
        yield subkey
