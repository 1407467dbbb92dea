"""The bootstrap's group sums through torch, on a CUDA device for large panels (or on the CPU, to check it).

Of the multiplier bootstrap's work, one part grows with the panel: each group's multiplier-weighted sums
R_g = Y_g' V_g, B x N x T multiply-adds in all (``did._Stack.group_sums``: one float32 matrix product per group and
chunk of draws). Everything after it (the cells' draws, the calibrated band's studentised maxima, the aggregates:
``did._Stack.cell_draws`` and the compiled loop) works on cells x draws, whatever the number of instances: at the
full Pythia shape (about 20,000 cells, B = 1000) it is the same few seconds at 16 k instances as at 1 M. This module
makes those products with torch, on the device the engine setting names, with the same layouts (a group's rows are a
contiguous slice), the same float32 operands and the same multipliers (drawn by numpy from the same seed: the draws
do not depend on the device); the sums come back to the host and the rest runs as before.

The products are float32 GEMMs as numpy's are, but another GEMM (cuBLAS, or torch's own CPU BLAS) blocks and orders
the additions differently: the results equal the compiled path's within float32 rounding, not bit for bit
(tests/engine/test_torch_bootstrap.py states and checks the tolerance). So the torch path is used only when asked for
(``cuda``, ``torch-cpu``) or, under ``auto`` (the default), when a CUDA device is present and the panel is large.

The setting: ``MEMTUI_ENGINE_DEVICE`` in the environment, or ``using(...)`` around a call (the CLI's
``--engine-device``). torch is imported inside the functions that need it, never when the engine is imported
(the import-linter contract that keeps torch out of the engine lists this module's function-level import).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import threading
from collections.abc import Iterator

import numpy as np

from memtui.core.errors import MemtuiError

DEVICES = ("auto", "cpu", "torch-cpu", "cuda")
# rows x columns of a stack's outcomes from which ``auto`` sends the group sums to a CUDA device: below it the upload
# and the launches cost more than the CPU's products (at 16 k instances x 145 columns the products are ~1 s of CPU)
AUTO_CUDA_ELEMENTS = 1 << 24

_chosen: str | None = None  # set by ``using``; None: the environment's, else auto


def setting() -> str:
    """The engine device asked for: ``using``'s, else ``MEMTUI_ENGINE_DEVICE``, else ``auto``."""
    name = _chosen if _chosen is not None else os.environ.get("MEMTUI_ENGINE_DEVICE", "auto").strip().lower() or "auto"
    if name not in DEVICES:
        raise MemtuiError(f"engine device must be one of {', '.join(DEVICES)}, not {name!r}.")
    return name


@contextlib.contextmanager
def using(name: str | None) -> Iterator[None]:
    """The engine device for the bootstraps run inside (None: leave the setting as it is)."""
    global _chosen
    if name is not None and name not in DEVICES:
        raise MemtuiError(f"engine device must be one of {', '.join(DEVICES)}, not {name!r}.")
    before = _chosen
    _chosen = name if name is not None else before
    try:
        yield
    finally:
        _chosen = before


def check(name: str) -> None:
    """Refuse a device this machine cannot give (before anything is computed)."""
    if name in ("torch-cpu", "cuda") and importlib.util.find_spec("torch") is None:
        raise MemtuiError(f"engine device {name} needs torch; install it (pip install torch) or use engine device cpu.")
    if name == "cuda" and not _cuda_available():
        raise MemtuiError("engine device cuda: torch finds no CUDA device here; use --engine-device auto or cpu.")


# a GPU driver's traces (NVIDIA's, or ROCm's, which torch.cuda also drives): without them there is no CUDA device, and
# ``auto`` need not import torch (seconds) to learn it
_GPU_DRIVERS = ("/proc/driver/nvidia/version", "/dev/nvidiactl", "/dev/kfd")


def _cuda_available() -> bool:
    if importlib.util.find_spec("torch") is None or not any(os.path.exists(p) for p in _GPU_DRIVERS):
        return False
    import torch

    return bool(torch.cuda.is_available())


def device_for(elements: int) -> str | None:
    """The torch device for a stack of ``elements`` outcomes (rows x columns), or None: the numpy/compiled path."""
    name = setting()
    if name == "cpu":
        device = None
    elif name == "auto":
        device = "cuda" if elements >= AUTO_CUDA_ELEMENTS and _cuda_available() else None
    else:
        check(name)
        device = "cpu" if name == "torch-cpu" else "cuda"
    _record(device)
    return device


def permutation_device() -> str | None:
    """The torch device for the permutation band's sums (``engine.torch_permutation``), or None: the compiled path.
    Only a device named (``torch-cpu``, ``cuda``) sends them there: under ``auto`` the band keeps the compiled path
    (its torch path is opt-in until a GPU run has measured it against the compiled one)."""
    name = setting()
    device = None
    if name in ("torch-cpu", "cuda"):
        check(name)
        device = "cpu" if name == "torch-cpu" else "cuda"
    _record(device)
    return device


def _record(device: str | None) -> None:
    """Add the engine device a bootstrap or permutation run used to every ``recording`` open."""
    with _RECORD_LOCK:
        for used in _recorders:
            used.add("cpu" if device is None else "torch-cpu" if device == "cpu" else device)


_recorders: list[set[str]] = []
_RECORD_LOCK = threading.Lock()


@contextlib.contextmanager
def recording() -> Iterator[set[str]]:
    """The engine devices (``DEVICES`` but auto) that the bootstraps (their group sums) and permutation bands (their
    sums) run inside, on any thread, used: what a cached estimate says it was computed by (``estimation.cache``).
    Empty: no bootstrap ran."""
    used: set[str] = set()
    with _RECORD_LOCK:
        _recorders.append(used)
    try:
        yield used
    finally:
        with _RECORD_LOCK:
            _recorders.remove(used)


class TorchSums:
    """One stack's outcomes on the device, and each chunk's group sums from them (``did._Stack.group_sums``)."""

    def __init__(self, device: str, ys: list[np.ndarray], slices: list[slice], width: int) -> None:
        import torch

        self.torch = torch
        self.device = torch.device(device)
        # the outcomes are uploaded once (float32, as the CPU path's operands), every chunk reuses them
        self.ys = [torch.from_numpy(np.ascontiguousarray(y, dtype=np.float32)).to(self.device) for y in ys]
        self.slices = slices
        self.width = width

    def sums(self, v: np.ndarray, bc: int) -> np.ndarray:
        """(G, stride, bc) float32: each group's multiplier-weighted sums of every layout's columns, on the device,
        returned to the host."""
        vd = self.torch.from_numpy(np.ascontiguousarray(v, dtype=np.float32)).to(self.device, non_blocking=True)
        return self._products(vd, bc).cpu().numpy()

    def rademacher_sums(self, raw: np.ndarray, bc: int) -> tuple[np.ndarray, np.ndarray]:
        """``sums`` and each group's multiplier sums (G, bc) of the chunk's Rademacher multipliers given by their
        random bytes (``did.rademacher_bits``): the bytes go to the device (an eighth of a float32 per multiplier) and
        are expanded there, bit j (most significant first) to multiplier j, 2 * bit - 1, the host's values. The
        multiplier sums are integers, exact in float32: the host's bit for bit."""
        torch = self.torch
        rows = self.slices[-1].stop if self.slices else 0
        bits = torch.from_numpy(np.array(raw, dtype=np.uint8)).to(self.device)  # a copy: torch wants it writable
        shifts = torch.arange(7, -1, -1, dtype=torch.uint8, device=self.device)
        flat = torch.bitwise_and(torch.bitwise_right_shift(bits[:, None], shifts), 1).reshape(-1)[: rows * bc]
        vd = flat.reshape(rows, bc).to(torch.float32).mul_(2).sub_(1)
        w = torch.stack([vd[s].sum(dim=0) for s in self.slices]) if self.slices else vd.new_empty((0, bc))
        return self._products(vd, bc).cpu().numpy(), w.cpu().numpy()

    def _products(self, vd, bc: int):
        torch = self.torch
        out = torch.empty((len(self.slices), self.width * len(self.ys), bc), dtype=torch.float32, device=self.device)
        # TF32 (10-bit mantissas on Ampere and later, where a user may have switched it on) is not float32 rounding
        tf32 = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False
        try:
            for k, rows in enumerate(self.slices):
                vk = vd[rows]
                for j, y in enumerate(self.ys):
                    torch.matmul(y[rows].T, vk, out=out[k, j * self.width : (j + 1) * self.width])
        finally:
            torch.backends.cuda.matmul.allow_tf32 = tf32
        return out
