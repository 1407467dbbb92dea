"""The data orders `memtui build` knows, one line each, in `build --help`'s order. Adding an order: a module in
``memtui.orders.kinds`` and a line here (docs/architecture.md, "How to add a data order")."""

from __future__ import annotations

from memtui.orders.base import Order
from memtui.orders.kinds.amber import Amber
from memtui.orders.kinds.datadecide import DataDecide
from memtui.orders.kinds.levanter import Levanter
from memtui.orders.kinds.memmap import Memmap
from memtui.orders.kinds.nanoset import Nanoset
from memtui.orders.kinds.neox import Neox
from memtui.orders.kinds.olmo import Olmo, OlmoCore
from memtui.orders.kinds.pico import Pico
from memtui.orders.kinds.table import Table

ORDERS: dict[str, Order] = {
    "memmap": Memmap(),
    "table": Table(),
    "neox": Neox(),
    "olmo": Olmo(),
    "olmo-core": OlmoCore(),
    "datadecide": DataDecide(),
    "amber": Amber(),
    "pico": Pico(),
    "nanoset": Nanoset(),
    "levanter": Levanter(),
}
