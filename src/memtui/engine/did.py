"""ATT(g,c) point estimates, influence-function standard errors and the multiplier bootstrap, without ever forming
the N x cells influence matrix.

For a cell with cohort k, checkpoint t and base b, the influence function of unit i (scaled as in R `did`) is
    n * [ 1{i in k} (dY_i - dM_k) / n_k  -  1{i in C} (dY_i - dmu_C) / n_C ],    dY_i = y_it - y_ib,
so a multiplier-bootstrap draw (1/n) sum_i v_i psi_i is a difference of multiplier-weighted sums of cohort-centred
outcomes. With R_g = sum_{i in g} v_i y_i (one matrix product per group per chunk of draws) and W_g = sum v_i, every
cell's draw is a handful of gathers from R and W.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from memtui.engine import kernels, torch_bootstrap
from memtui.engine.blas import one_blas_thread, over_cores
from memtui.engine.layout import Layout
from memtui.engine.multipliers import JointMultipliers

# R `did` treats a bootstrap se at or below sqrt(eps) * 10 (~1.5e-7) as degenerate. That is absolute: an outcome in
# units of 1e-8 would have nothing significant, one in units of 1e8 would keep rounding noise as a "standard error".
# memtui applies the same number relative to the outcome's standard deviation (R's rule for an outcome with sd 1).
SE_FLOOR_REL = float(np.sqrt(np.finfo(float).eps) * 10)
_IQR_NORMAL = 1.3489795003921634  # norm.ppf(0.75) - norm.ppf(0.25)
_SLAB = 1024  # rows per block when scanning the draws
_THREADED_SUMS = 1 << 20  # rows x columns of a stack's outcomes from which its group sums are spread over the cores
_SHARED_GROUP_ROWS = 64  # rows from which a group that several stacks hold is summed once for all (_share_groups)
_CELL_BLOCK = 2048  # cells per block of a chunk's cell draws: a block's few (cells x chunk) temporaries stay in cache


@dataclass
class CellEstimates:
    att: np.ndarray
    se: np.ndarray  # analytic (influence function)
    n_treated: np.ndarray
    n_control: np.ndarray
    dmu: np.ndarray  # control change per cell (needed by the bootstrap)
    dm: np.ndarray  # treated change per cell


def _prefix_sums(arr: np.ndarray, upto: int) -> np.ndarray:
    """out[p] = sum of the first p entries along axis 0, for p = 0..upto."""
    out = np.zeros((upto + 1, *arr.shape[1:]), dtype=arr.dtype)
    np.cumsum(arr[:upto], axis=0, out=out[1:])
    return out


def point_estimates(lay: Layout) -> CellEstimates:
    g, t, b, p, own = lay.cell_group, lay.cell_t, lay.cell_b, lay.cell_prefix, lay.cell_own
    m, n = lay.means, lay.group_n.astype(float)
    upto = int(p.max()) if len(p) else 1
    cum_n = _prefix_sums(n, upto)
    cum_nm = _prefix_sums(n[:, None] * m, upto)

    n_t = n[g]
    n_c = cum_n[p] - own * n_t
    dm = m[g, t] - m[g, b]
    # a cell without controls (the extractable estimator) has a control change of 0 and no control variance
    has_c = n_c > 0
    inv_c = np.divide(1, n_c, out=np.zeros_like(n_c), where=has_c)
    mu_t = (cum_nm[p, t] - own * n_t * m[g, t]) * inv_c
    mu_b = (cum_nm[p, b] - own * n_t * m[g, b]) * inv_c
    dmu = mu_t - mu_b

    # Sums of squared centred changes: per group from Z'Z (only the columns cells use), plus between-group spread.
    # Control groups are always among the first `upto` groups: only their products are kept (qc); every other group's
    # is read for its own cells while it is in cache (a subgroup's layout has 144 groups: all of them, 24 MB, were
    # written then gathered from at random). Each group's centred rows Z are made where its product reads them (the
    # values of y minus the repeated means, element for element), never the whole N x T array (two at 1 M rows)
    width = lay.y.shape[1]
    qc = np.empty((min(upto, lay.n_groups), width, width))
    ss_treated = np.empty(len(g))
    order = np.argsort(g, kind="stable")
    bounds = np.searchsorted(g[order], np.arange(lay.n_groups + 1))

    def products(ks: list[int]) -> None:
        buf = np.empty((width, width))
        for k in ks:
            zk = lay.y[lay.rows(k)] - m[k]
            qk = qc[k] if k < len(qc) else buf
            np.matmul(zk.T, zk, out=qk)
            mine = order[bounds[k] : bounds[k + 1]]
            tk, bk = t[mine], b[mine]
            ss_treated[mine] = qk[tk, tk] + qk[bk, bk] - 2 * qk[tk, bk]

    # BLAS on one thread (engine.blas): the products are small (width x width), and a 1 M-instance panel's spent
    # 16 s of CPU across 2 threads on a busy machine against 1.2 s on one, the same values (each output element is
    # one thread's sum in both); large layouts spread the groups over the cores, each product whole on one thread
    over_cores(products, list(range(lay.n_groups)), lay.n_units * width)
    ss_group = qc[:, t, t] + qc[:, b, b] - 2 * qc[:, t, b]  # (upto, cells)
    dm_all = m[:upto, t] - m[:upto, b]
    in_ctrl = np.arange(upto)[:, None] < p[None, :]
    in_ctrl[g[own], np.flatnonzero(own)] = False
    ss_control = (in_ctrl * (ss_group + n[:upto, None] * (dm_all - dmu) ** 2)).sum(axis=0)
    se = np.sqrt(ss_treated / n_t**2 + ss_control * inv_c**2)
    level = lay.level if lay.level is not None else np.zeros(lay.y.shape[1])
    return CellEstimates(
        att=dm - dmu + level[t] - level[b],
        se=se,
        n_treated=n_t.astype(np.int64),
        n_control=n_c.astype(np.int64),
        dmu=dmu,
        dm=dm,
    )


def multipliers(
    rng: np.random.Generator, shape: tuple[int, int], kind: str, dtype=np.float64, scratch: np.ndarray | None = None
) -> np.ndarray:
    """``shape`` multipliers of ``kind``. ``scratch`` (Rademacher only; flat, contiguous, of ``dtype``): memory the
    result may be written into, overwriting the last chunk's multipliers: a fresh 0.5 GB array a chunk (1 M rows)
    cost more CPU in page faults than in drawing."""
    if kind == "rademacher":
        return _expanded(rademacher_bits(rng, shape), shape, np.dtype(dtype), scratch)
    if kind == "mammen":
        s5 = np.sqrt(5.0)
        low = rng.random(shape) < (s5 + 1) / (2 * s5)
        return np.where(low, (1 - s5) / 2, (1 + s5) / 2).astype(dtype)
    raise ValueError(f"unknown multiplier {kind!r}")


def rademacher_bits(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    """The random bytes of ``shape`` Rademacher multipliers (uint8): bit j, most significant first, is multiplier j
    of the row-major block, 2 * bit - 1 (the stream every memtui version has drawn for a seed)."""
    return np.frombuffer(rng.bytes((shape[0] * shape[1] + 7) // 8), dtype=np.uint8)


def _expanded(raw: np.ndarray, shape: tuple[int, int], dtype: np.dtype, scratch: np.ndarray | None) -> np.ndarray:
    """The -1/+1 multipliers of ``rademacher_bits``, in ``scratch`` where it fits."""
    n = shape[0] * shape[1]
    fits = scratch is not None and scratch.dtype == dtype and scratch.flags.c_contiguous
    if dtype == np.float32 and kernels.expands():  # one pass in the compiled loop, the same values
        out = scratch.reshape(-1)[:n] if fits and scratch.size >= n else np.empty(n, np.float32)
        kernels.rademacher_rows(raw, shape[1], 0, out.reshape(shape))
        return out.reshape(shape)
    # each random byte's eight bits, most significant first, as eight -1/+1 values in one gather (the values
    # 2 * bit - 1 of unpacking the bits, exactly, as that made them in three passes: twice the CPU)
    table = _rademacher_table(dtype)
    if not fits or scratch.size < 8 * len(raw):
        return table[raw].reshape(-1)[:n].reshape(shape)
    into = scratch.reshape(-1)[: 8 * len(raw)]
    # the table's rows copied as 64-bit words: the same bytes, in fewer, wider moves than per float
    np.take(table.view(np.uint64), raw, axis=0, out=into.view(np.uint64).reshape(len(raw), -1))
    return into[:n].reshape(shape)


def _float32(y: np.ndarray) -> np.ndarray:
    """``y.astype(np.float32)``, a block of rows at a time on every core for a large layout (each value rounded on
    its own: the same array)."""
    out = np.empty(y.shape, np.float32)

    def cast(starts: list[int]) -> None:
        for lo in starts:
            out[lo : lo + _SLAB * 8] = y[lo : lo + _SLAB * 8]

    over_cores(cast, list(range(0, len(y), _SLAB * 8)), y.size)
    return out


def _chunk_multipliers(rng: np.random.Generator, shape: tuple[int, int], kind: str, scratch: _Scratch):
    """A chunk's multipliers: Rademacher ones as their bytes, expanded where they are read (``_Stack.sums``)."""
    if kind == "rademacher":
        return RademacherChunk(rademacher_bits(rng, shape), shape, scratch)
    return multipliers(rng, shape, kind, np.float32)


class _Scratch:
    """A float32 array of ``size`` elements, allocated when first asked for, then the same one."""

    def __init__(self, size: int) -> None:
        self.size, self._array = size, None

    def array(self) -> np.ndarray:
        if self._array is None:
            self._array = np.empty(self.size, dtype=np.float32)
        return self._array


@dataclass
class RademacherChunk:
    """A chunk's Rademacher multipliers as their random bytes (``rademacher_bits``): a stack without a keyed source
    expands each group's rows where its product reads them (``_Stack.group_sums``), never the rows x chunk array,
    which ``dense`` makes (once) for the others."""

    raw: np.ndarray
    shape: tuple[int, int]
    scratch: _Scratch | None = None
    _dense: np.ndarray | None = None

    def dense(self) -> np.ndarray:
        if self._dense is None:
            pad = self.scratch.array() if self.scratch is not None else None
            self._dense = _expanded(self.raw, self.shape, np.dtype(np.float32), pad)
        return self._dense


@functools.cache
def _rademacher_table(dtype: np.dtype) -> np.ndarray:
    """(256, 8): byte b's bits, most significant first (np.unpackbits' order), as -1.0 / +1.0."""
    bits = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1).astype(dtype)
    table = np.multiply(bits, 2, out=bits) - 1
    table.flags.writeable = False
    return table


@dataclass
class BootstrapDraws:
    cells: np.ndarray  # (cells, B): draws of ATT(g,c) - its estimate
    group_w: np.ndarray  # (G, B): sum of multipliers per group (for the weight influence of aggregates)


def bootstrap(
    lay: Layout,
    est: CellEstimates,
    *,
    draws: int,
    seed: int,
    multiplier: str = "rademacher",
    chunk: int = 128,
    progress: Callable[[float], None] | None = None,
    source: JointMultipliers | None = None,
) -> BootstrapDraws:
    """B multiplier-bootstrap draws of every cell: about B*N*T multiply-adds, chunked over draws to bound memory.
    ``source``: multipliers keyed by panel instance or cluster (``bootstrap_shared``)."""
    return bootstrap_shared(
        [lay], [est], draws=draws, seed=seed, multiplier=multiplier, chunk=chunk, progress=progress, source=source
    )[0]


def same_cells(a: Layout, b: Layout) -> bool:
    """Whether two layouts have the same groups (sizes and treatment) and the same cells, so one multiplier per row
    serves both (``bootstrap_shared``)."""
    fields = ("group_start", "group_index", "cell_group", "cell_t", "cell_b", "cell_prefix", "cell_own")
    return a.y.shape[1] == b.y.shape[1] and all(np.array_equal(getattr(a, f), getattr(b, f)) for f in fields)


def bootstrap_shared(
    lays: list[Layout],
    ests: list[CellEstimates],
    *,
    draws: int,
    seed: int,
    multiplier: str = "rademacher",
    chunk: int = 128,
    progress: Callable[[float], None] | None = None,
    on_chunk: Callable[[int, int, slice, np.ndarray, np.ndarray, np.ndarray], None] | None = None,
    source: JointMultipliers | list[JointMultipliers] | None = None,
    pool: DrawsPool | None = None,
) -> list[BootstrapDraws]:
    """``bootstrap`` of several layouts with the same groups and cells (``same_cells``: one panel's instances scored
    by several models, or several metrics) at once. The multipliers are drawn once, as ``bootstrap`` draws them for
    one layout, and each group's multiplier-weighted sums are one matrix product over every layout's columns side by
    side; so each result is ``bootstrap`` of that layout alone with the same seed, bit for bit: every layout's group
    sums are the very products (same shapes, same operands, BLAS on one thread) a lone bootstrap makes, whatever the
    BLAS kernel or the number of cores. The draws of all layouts are joint (same multiplier per row).

    ``on_chunk(j, start, cells, treated, ctrl, out)`` is called for layout j after each block of cells (``cells``, a
    slice; blocks in order, the last ending at the layout's last cell) of each chunk of draws starting at draw
    ``start``, with the cohort's and the control set's parts of the block's draws (block x chunk, float32
    temporaries it may overwrite; draw = treated - ctrl) and the draws themselves (a view into the result: read
    only). It runs on the thread that formed the block; the calibrated band (``engine.bands``) forms its studentised
    maxima there.

    ``source`` (``engine.multipliers``): each chunk's multipliers are drawn one per key (panel instance or cluster)
    and looked up by each layout's ``source_rows``, so bootstraps of layouts built on subsets of one panel with the
    same source and seed share the multiplier of every instance in every draw. A list gives each layout its own
    source (subgroups: each group's subset of one source): the layouts then need not have the same cells, the
    multipliers are drawn once per chunk for all of them, and each layout's draws are those of its lone bootstrap
    with its source, bit for bit (layouts with the same cells and the same source share their group sums as above).
    Without it (the default) the multipliers are drawn one per layout row, as they always were. ``pool``: where the
    cells' draws arrays come from when a caller recycles them (``DrawsPool``); every element is written."""
    stacks = _stacks(lays, ests, source, exact_weights=multiplier == "rademacher")
    keys = {stack.source.n_keys for stack in stacks if stack.source is not None}
    if len(stacks) > 1 and (len(keys) != 1 or any(stack.source is None for stack in stacks)):
        raise ValueError("bootstrap_shared needs layouts with the same groups and cells, or one keyed source each")
    _share_groups(stacks)
    rows = keys.pop() if keys else lays[0].n_units
    rng = np.random.default_rng(seed)
    # float32: the draws only need a few digits (their Monte-Carlo error is ~1/sqrt(B)); halves the traffic
    cells = (pool.take if pool is not None else _draws_arrays)([(len(lay.cell_group), draws) for lay in lays])
    group_w = [np.empty((stack.first.n_groups, draws)) for stack in stacks]
    cores = os.cpu_count() or 1
    scratch = _Scratch(8 * ((rows * min(chunk, draws) + 7) // 8))  # every chunk's multipliers, where expanded whole
    for start in range(0, draws, chunk):
        bc = min(chunk, draws - start)
        drawn = _chunk_multipliers(rng, (rows, bc), multiplier, scratch)

        # stack after stack, each spread over the cores as a lone bootstrap is (stacks side by side on the cores were
        # slower: their cell draws are bound by memory bandwidth, which they then compete for)
        products: dict = {}  # this chunk's sums of groups that several stacks hold (``_share_groups``)
        for s, stack in enumerate(stacks):
            stack.chunk(drawn, start, bc, cells, group_w[s], on_chunk, cores, products)
        if progress:
            progress((start + bc) / draws)
    return [BootstrapDraws(cells=cells[j], group_w=group_w[s]) for s, stack in enumerate(stacks) for j in stack.jobs]


def _draws_arrays(shapes: list[tuple[int, int]]) -> list[np.ndarray]:
    """The cells' draws (float32), allocated without numpy's transparent-huge-page advice. They are the bootstrap's
    largest arrays (80 MB a layout at the paper's size, one per subgroup under --by) and are first touched a chunk of
    columns at a time; where the kernel must compact memory to find huge pages (a busy machine) that first touch
    stalled: with the advice off for these arrays alone `estimate --by` with 8 groups ran 25-30 % faster on the
    shared development machine (docs/internals.md, "Subgroups"). Other arrays keep numpy's default."""
    multiarray = getattr(getattr(np, "_core", None), "multiarray", None)  # numpy 2; numpy 1: np.core
    multiarray = multiarray or getattr(getattr(np, "core", None), "multiarray", None)
    advise = getattr(multiarray, "_set_madvise_hugepage", None)  # private; absent: numpy's default stands
    before = advise(False) if advise is not None else None
    try:
        return [np.empty(shape, dtype=np.float32) for shape in shapes]
    finally:
        if advise is not None:
            advise(before)


class DrawsPool:
    """Cells' draws arrays that a caller is done with, handed to its next bootstrap of the same shapes.

    A fresh draws array is mapped page by page on its first touch, and on the development VM a 4 KiB page fault costs
    ~7 us: the suite benchmark's 32 estimates (1.2 GB of draws, one metric after another) spent ~2 s of CPU in the
    kernel on them. The suite gives each metric's draws back once its frames are made (unless it keeps them), and the
    next metric's bootstrap writes over them. Give back only arrays nothing else refers to: they are overwritten."""

    def __init__(self) -> None:
        self._free: list[np.ndarray] = []

    def give(self, arrays: Sequence[np.ndarray]) -> None:
        self._free.extend(a for a in arrays if a.dtype == np.float32 and a.flags.c_contiguous and a.flags.writeable)

    def take(self, shapes: list[tuple[int, int]]) -> list[np.ndarray]:
        out: list[np.ndarray | None] = [None] * len(shapes)
        for i, shape in enumerate(shapes):
            found = next((k for k, a in enumerate(self._free) if a.shape == shape), None)
            if found is not None:
                out[i] = self._free.pop(found)
        fresh = iter(_draws_arrays([shape for shape, a in zip(shapes, out, strict=True) if a is None]))
        return [a if a is not None else next(fresh) for a in out]


def _stacks(lays: list[Layout], ests: list[CellEstimates], source, exact_weights: bool = False) -> list[_Stack]:
    """Runs of layouts that share one multiplier per row and so their group sums: the same cells, the same source.
    One source for all (or none): every layout must have the first one's cells. ``exact_weights``: the multipliers
    are -1/+1 (``_Stack.weight_sums``)."""
    several = isinstance(source, list | tuple)
    sources = list(source) if several else [source] * len(lays)
    if len(sources) != len(lays):
        raise ValueError("one multiplier source per layout")
    stacks: list[_Stack] = []
    for j, (lay, src) in enumerate(zip(lays, sources, strict=True)):
        last = stacks[-1] if stacks else None
        if last is not None and last.source is src and same_cells(last.first, lay):
            last.jobs.append(j)
        elif last is not None and not several:
            raise ValueError("bootstrap_shared needs layouts with the same groups and cells")
        else:
            stacks.append(_Stack(first=lay, source=src, jobs=[j]))
    for stack in stacks:
        stack.prepare([lays[j] for j in stack.jobs], [ests[j] for j in stack.jobs])
        stack.exact_weights = exact_weights
    return stacks


def _share_groups(stacks: list[_Stack]) -> None:
    """Groups that several stacks hold whole, the same instances (so the same multipliers in every draw) with the
    same outcomes bit for bit: their sums are the same product, made once a chunk by the first stack that holds the
    group and copied by the others. Subgroups with shared controls all hold the never-treated controls: one product
    instead of one per group, each group's draws unchanged."""
    first_seen: dict = {}
    for s, stack in enumerate(stacks):
        stack.reuse, stack.keep = {}, {}
        if stack.source is None or stack.first.source_rows is None:
            continue
        for k, rows in enumerate(stack.slices):
            if rows.stop - rows.start < _SHARED_GROUP_ROWS:  # a product too small to be worth a look-up
                continue
            sig = (stack.stride, stack.source.keys[stack.first.source_rows[rows]].tobytes())
            owner = first_seen.setdefault(sig, (s, k))
            if owner != (s, k) and _same_outcomes(stacks[owner[0]], owner[1], stack, k):
                stack.reuse[k] = sig
                stacks[owner[0]].keep[owner[1]] = sig


def _same_outcomes(a: _Stack, ka: int, b: _Stack, kb: int) -> bool:
    """Whether group ``ka`` of stack ``a`` and group ``kb`` of stack ``b`` have the same outcomes, bit for bit."""
    return all(
        np.array_equal(ya[a.slices[ka]].view(np.uint32), yb[b.slices[kb]].view(np.uint32))
        for ya, yb in zip(a.ys, b.ys, strict=True)
    )


@dataclass
class _Stack:
    """Layouts with the same groups and cells and the same multipliers (``jobs``: their indices among all layouts):
    one product per group over their columns side by side, then each layout's cell draws, block by block."""

    first: Layout
    source: JointMultipliers | None
    jobs: list[int]

    def prepare(self, lays: list[Layout], ests: list[CellEstimates]) -> None:
        first, f32 = self.first, np.float32
        g, t, b, p = first.cell_group, first.cell_t, first.cell_b, first.cell_prefix
        self.width = first.y.shape[1]
        self.stride = len(lays) * self.width  # columns of one group's stacked sums: layout j's column c is j*width+c
        self.upto = int(p.max()) if len(p) else 1
        self.inv_nt = (1 / first.group_n.astype(f32)[g])[:, None]
        # the rows of the sums each cell gathers (layout 0's columns; layout j adds j * width)
        self.index = tuple(
            np.ascontiguousarray(x, dtype=np.int64)
            for x in (g * self.stride + t, g * self.stride + b, p * self.stride + t, p * self.stride + b)
        )
        # what the compiled loop (``kernels.cell_draws``) reads per cell
        self.group, self.prefix = (np.ascontiguousarray(x, dtype=np.int64) for x in (g, p))
        self.own = np.ascontiguousarray(first.cell_own, dtype=bool)
        self.consts = []
        for est in ests:
            n_c = est.n_control.astype(float)
            inv_nc = np.divide(1, n_c, out=np.zeros_like(n_c), where=n_c > 0).astype(f32)[:, None]  # 0: no controls
            self.consts.append((inv_nc, est.dm.astype(f32)[:, None], est.dmu.astype(f32)[:, None]))
        # one contiguous matrix per layout, never the layouts side by side: a wider product may be blocked differently
        # by BLAS (another kernel for the edge columns), which changed the last float32 bits on some CPUs
        self.ys = [_float32(lay.y) for lay in lays]
        # each group's rows and its outcomes' transposes, the products' operands, made once for every chunk (a
        # subgroup's layout has 144 groups of a dozen rows: building the views each chunk cost a fifth of its sums)
        self.slices = [first.rows(k) for k in range(first.n_groups)]
        self.yts = [[yj[rows].T for yj in self.ys] for rows in self.slices]
        self.reuse: dict[int, tuple] = {}  # groups whose sums another stack makes (``_share_groups``)
        self.keep: dict[int, tuple] = {}  # groups whose sums other stacks copy
        self.pads: dict[int, np.ndarray] = {}  # per thread, the buffer of a group's multipliers (``pad``)
        self.exact_weights = False  # the multipliers are -1/+1 (``weight_sums``); ``_stacks`` says
        # the group sums through torch on the engine setting's device (``engine.torch_bootstrap``), or None
        device = torch_bootstrap.device_for(first.n_units * self.stride)
        self.on_device = None if device is None else torch_bootstrap.TorchSums(device, self.ys, self.slices, self.width)

    def chunk(self, drawn, start: int, bc: int, cells, group_w, on_chunk, cores: int, products: dict) -> None:
        """One chunk of draws of every layout of the stack from the chunk's multipliers ``drawn`` (``products``: the
        chunk's sums of groups other stacks hold too)."""
        first = self.first
        r, w = self.sums(drawn, bc, cores, products)  # (G, stride, bc), (G, bc)
        group_w[:, start : start + bc] = w
        cum_r = _prefix_sums(r, self.upto).reshape(-1, bc)
        cum_w = _prefix_sums(w, self.upto)
        r = r.reshape(-1, bc)

        # a callback that offers the compiled loop its arguments (``bands._Studentiser.fused``) is run inside it
        fused = getattr(on_chunk, "fused", None) if kernels.available() else None

        def one(i: int) -> None:
            job = self.jobs[i]
            for lo in range(0, len(first.cell_group), _CELL_BLOCK):
                block = slice(lo, min(lo + _CELL_BLOCK, len(first.cell_group)))
                out = cells[job][block, start : start + bc]
                studentise = fused(job, start, block, bc) if fused is not None else None
                if studentise is not None:
                    self.cell_draws(i, block, r, cum_r, w, cum_w, out, studentise=studentise)
                    on_chunk.block_done(job, start, block)
                elif on_chunk is not None:
                    on_chunk(job, start, block, *self.cell_draws(i, block, r, cum_r, w, cum_w, out), out)
                else:  # nothing reads the parts: the compiled loop does not write them
                    self.cell_draws(i, block, r, cum_r, w, cum_w, out, parts=False)

        if len(self.jobs) == 1 or cores <= 1:
            for i in range(len(self.jobs)):
                one(i)
        else:  # one layout per task: its temporaries stay in cache, and numpy releases the GIL
            with ThreadPoolExecutor(min(len(self.jobs), cores)) as pool:
                list(pool.map(one, range(len(self.jobs))))

    def pad(self, slot: int, size: int) -> np.ndarray:
        """Thread ``slot``'s buffer of at least ``size`` float32 (a group's expanded multipliers), kept for the next
        chunk: a fresh one per chunk was first touched page by page."""
        found = self.pads.get(slot)
        if found is None or found.size < size:
            found = self.pads[slot] = np.empty(size, np.float32)
        return found

    def sums(self, drawn, bc: int, cores: int, products: dict) -> tuple[np.ndarray, np.ndarray]:
        """The chunk's group sums and multiplier sums (``group_sums``, ``weight_sums``) from its multipliers
        ``drawn``: an array, or a ``RademacherChunk`` whose bytes a stack without a keyed source expands group by
        group (the same values, and so the same sums bit for bit: each group's product has the same operands)."""
        if isinstance(drawn, RademacherChunk):
            # one multiplier per row (no keyed source, no group summed by another stack), weight sums exact
            by_group = self.source is None and not (self.reuse or self.keep) and max(self.first.group_n) < 1 << 24
            if by_group and self.on_device is not None:
                return self.on_device.rademacher_sums(drawn.raw, bc)
            if by_group and kernels.expands():
                return self.group_sums(None, bc, cores, products, raw=drawn.raw)
            drawn = drawn.dense()
        v = drawn if self.source is None else self.source.take(drawn, self.first.source_rows)
        return self.group_sums(v, bc, cores, products), self.weight_sums(v)

    def weight_sums(self, v: np.ndarray) -> np.ndarray:
        """(G, bc): each group's sums of its multipliers, as ``np.add.reduceat`` over the groups' rows makes them.
        Rademacher multipliers (``exact_weights``) sum to integers, exact in float32 below 2^24 rows in any order:
        numpy's sum of each group's slice then gives reduceat's values bit for bit in a tenth of its CPU time."""
        if not self.exact_weights or max(self.first.group_n, default=0) >= 1 << 24:
            return np.add.reduceat(v, self.first.group_start[:-1], axis=0)
        w = np.empty((len(self.slices), v.shape[1]), dtype=v.dtype)
        for k, rows in enumerate(self.slices):
            np.sum(v[rows], axis=0, out=w[k])
        return w

    def group_sums(self, v: np.ndarray | None, bc: int, cores: int, products: dict, raw=None):
        """(G, stride, bc): each group's multiplier-weighted sums of every layout's columns; a group another stack
        has summed already this chunk (``products``) is copied. With ``raw`` (``rademacher_bits`` of the chunk, ``v``
        None) each group's multipliers are expanded into a buffer of the thread's just before its product, and the
        groups' multiplier sums come with them: returns (sums, multiplier sums)."""
        first, width = self.first, self.width
        if self.on_device is not None:  # every group on the device (within float32 rounding of the products below)
            r = self.on_device.sums(v, bc)
            for k, sig in self.keep.items():
                products[sig] = r[k].copy()
            return r
        r = np.empty((first.n_groups, self.stride, bc), dtype=np.float32)
        w = np.empty((first.n_groups, bc), dtype=np.float32) if raw is not None else None
        for k, sig in self.reuse.items():
            r[k] = products[sig]
        todo = [k for k in range(first.n_groups) if k not in self.reuse]

        cores = min(cores, len(todo)) if first.n_units * self.stride >= _THREADED_SUMS else 1
        lists = [todo[i::cores] for i in range(cores)]
        pads = [None if raw is None else self.pad(i, max((first.group_n[k] for k in ks), default=0) * bc)
                for i, ks in enumerate(lists)]  # fmt: skip

        def sums(i: int) -> None:
            ks, pad = lists[i], pads[i]
            for k in ks:
                rows, rk = self.slices[k], r[k]
                if raw is None:
                    vk = v[rows]
                else:  # the group's rows of the chunk's multipliers, and their sums, from the bytes
                    vk = pad[: (rows.stop - rows.start) * bc].reshape(-1, bc)
                    kernels.rademacher_rows(raw, bc, rows.start, vk, w[k])
                for j, yt in enumerate(self.yts[k]):
                    np.matmul(yt, vk, out=rk[j * width : (j + 1) * width])

        # BLAS on one thread, the groups' products in a thread per core: each product is computed whole by one
        # thread, so the draws do not depend on the number of cores or on how BLAS would split a product. Small
        # stacks (a subgroup's: a few thousand rows) stay on one thread: starting and waking threads for a few
        # milliseconds of products cost more than they saved
        with one_blas_thread():
            if cores <= 1:
                sums(0)
            else:
                with ThreadPoolExecutor(cores) as pool:
                    list(pool.map(sums, range(cores)))
        for k, sig in self.keep.items():
            products[sig] = r[k].copy()
        return r if raw is None else (r, w)

    def cell_draws(self, i: int, block: slice, r, cum_r, w, cum_w, out: np.ndarray, studentise=None, parts=True):
        """Layout i's draws of the cells ``block`` into ``out``; returns the cohort's and the control set's parts, or
        with ``studentise`` (``kernels.Studentise``: the compiled loop only) does that work on them instead. Without
        ``parts`` the compiled loop keeps them to itself (None)."""
        first = self.first
        own = first.cell_own[block]
        col = i * self.width
        inv_nc, dm, dmu = (x[block] for x in self.consts[i])
        if kernels.available():  # the same operations in one pass, bit for bit
            kept = (np.empty(out.shape, np.float32), np.empty(out.shape, np.float32))
            kept = kept if parts and studentise is None else (None, None)
            kernels.cell_draws(
                r, cum_r, w, cum_w, tuple(idx[block] for idx in self.index), col, self.group[block],
                self.prefix[block], self.own[block], bool(own.any()), self.inv_nt[block], inv_nc, dm, dmu, out,
                *kept, studentise=studentise,
            )  # fmt: skip
            return kept if kept[0] is not None else None
        own_t, own_b, ctrl_t, ctrl_b = (idx[block] + col for idx in self.index)
        w_own = np.take(w, first.cell_group[block], axis=0)
        ctrl_w = np.take(cum_w, first.cell_prefix[block], axis=0)
        own_col = own[:, None]
        if own.any():
            ctrl_w = ctrl_w - own_col * w_own
        d_own = np.take(r, own_t, axis=0) - np.take(r, own_b, axis=0)
        treated = (d_own - w_own * dm) * self.inv_nt[block]
        ctrl = np.take(cum_r, ctrl_t, axis=0) - np.take(cum_r, ctrl_b, axis=0)
        if own.any():
            ctrl -= own_col * d_own
        ctrl -= ctrl_w * dmu
        ctrl *= inv_nc
        np.subtract(treated, ctrl, out=out)
        return treated, ctrl


def se_floor(scale: float) -> float:
    """The standard error at or below which a cell has no sampling variation, for outcomes of sd ``scale``."""
    return SE_FLOOR_REL * scale


def floored(se: np.ndarray, floor: float) -> np.ndarray:
    """``se`` with values at or below ``floor`` (and non-finite ones) as NaN: no band, never significant."""
    se = np.array(se, dtype=float)
    se[~(se > floor)] = np.nan
    return se


def bootstrap_bytes(
    draws: int, n_cells: int, n_groups: int, n_aggregates: int, n_units: int = 0, width: int = 0, chunk: int = 128
) -> int:
    """Peak memory of a bootstrap of ``draws`` draws and its summaries, from how this module and summaries.py hold them.

    Held throughout: the cells' float32 draws and the groups' float64 multiplier sums. On top of them, the larger of
    the float32 slab every thread of ``bootstrap_se`` partitions (``sup_t`` takes one slab) and, for the summaries,
    the persistent aggregates' float64 draws plus the copy ``bootstrap_se`` partitions. Per chunk of draws,
    ``bootstrap`` holds the multipliers, the group sums and their prefix sums, and a few cells x chunk arrays.
    """
    threads = os.cpu_count() or 1
    held = 4 * n_cells + 8 * n_groups
    partition = 4 * min(n_cells, _SLAB * threads)
    summaries = 8 * n_aggregates + 8 * min(n_aggregates, _SLAB * threads)
    per_chunk = 4 * chunk * (n_units + 2 * (n_groups + 1) * width + 8 * n_cells)
    return int(draws) * (held + max(partition, summaries)) + per_chunk + (32 << 20)


def available_memory() -> int | None:
    """Bytes this process can still allocate: MemAvailable, capped by a cgroup limit; None where unknown."""
    have = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    have = int(line.split()[1]) * 1024
    except (OSError, ValueError):
        try:
            have = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, AttributeError):
            have = None
    try:
        cgroup = Path("/sys/fs/cgroup")
        limit = (cgroup / "memory.max").read_text().strip()
        used = int((cgroup / "memory.current").read_text())
        if limit != "max":
            room = int(limit) - used
            have = room if have is None else min(have, room)
    except (OSError, ValueError):
        pass
    return have


def bootstrap_se(draws: np.ndarray, floor: float = SE_FLOOR_REL) -> np.ndarray:
    """Robust bootstrap standard error per row, as R `did`: IQR of the draws over the normal IQR (type-1 quantiles);
    NaN at or below ``floor`` (see ``se_floor``)."""
    nb = draws.shape[1]
    k25, k75 = int(np.ceil(nb * 0.25)) - 1, int(np.ceil(nb * 0.75)) - 1

    def iqr(start: int) -> np.ndarray:
        # the same order statistics as a two-point partition; numpy's vectorised row sort is several times faster
        part = np.sort(draws[start : start + _SLAB], axis=1)
        return part[:, k75].astype(float) - part[:, k25]

    if len(draws) <= _SLAB:  # one slab (an aggregate's draws, a difference's): no threads to start for it
        spread = iqr(0) if len(draws) else np.empty(0)
    else:  # sort releases the GIL: row slabs on every core
        with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
            spread = np.concatenate(list(pool.map(iqr, range(0, len(draws), _SLAB))))
    return floored(spread / _IQR_NORMAL, floor)


def sup_t(draws: np.ndarray, se: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
    """Per draw, the largest |draw / se| over ``rows`` (all by default) with a usable se: the sup-t statistic's law."""
    return sup_t_many(draws, se, [np.ones(len(se), bool) if rows is None else rows])[0]


def sup_t_many(draws: np.ndarray, se: np.ndarray, masks: list[np.ndarray]) -> list[np.ndarray]:
    """``sup_t`` over several row subsets of the same draws in one pass (an estimate's bands need five or so).

    Rows are grouped by which subsets hold them; each group's maximum is taken once, over contiguous slabs scaled in
    place (never a full cells x B temporary), and each subset's law is the maximum over its groups."""
    usable = np.isfinite(se)
    masks = [np.asarray(m, bool) & usable for m in masks]
    out = [np.zeros(draws.shape[1], dtype=draws.dtype) if m.any() else np.full(draws.shape[1], np.nan) for m in masks]
    member = np.zeros(len(se), dtype=np.int64)  # bit i set: the row is in subset i
    for i, mask in enumerate(masks):
        member |= mask.astype(np.int64) << i
    for label in np.unique(member[member > 0]):
        idx = np.flatnonzero(member == label)
        tmax = np.zeros(draws.shape[1], dtype=draws.dtype)
        scale = (1 / se[idx]).astype(draws.dtype)[:, None]
        for start in range(0, len(idx), _SLAB):
            part = draws[idx[start : start + _SLAB]]  # a copy: abs and scale in place, one slab at a time
            np.abs(part, out=part)
            part *= scale[start : start + _SLAB]
            np.maximum(tmax, part.max(axis=0), out=tmax)
        for i, law in enumerate(out):
            if label >> i & 1:
                np.maximum(law, tmax, out=law)
    return out


def critical_value(tmax: np.ndarray, alpha: float) -> float:
    """(1 - alpha) quantile of the sup-t draws (type-1, as R `did`)."""
    if not np.isfinite(tmax).any():
        return float("nan")
    return float(np.quantile(tmax, 1 - alpha, method="inverted_cdf"))


def ease_terms(lay: Layout, ref: Layout) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The cells of ``ref`` (a DiD layout) as linear functionals of the group means of ``lay`` (the extractable
    estimator's layout of the same panel and metric): naive minus DiD, the part of the naive estimate that is not
    memorisation. For a DiD cell (g, c, base b, controls C) it is

        Ybar_c(g) - [(Ybar_c(g) - Ybar_b(g)) - (Ybar_c(C) - Ybar_b(C))] = Ybar_b(g) + Ybar_c(C) - Ybar_b(C),

    the cohort's level at the base plus the controls' change. Returns (cell, flat group-column index, coefficient on
    that group's *sum*, i.e. already divided by the group size) triplets and the point estimates (raw units).
    ``ref``'s groups must be the first groups of ``lay`` (DiD only leaves out the cohort at the first checkpoint,
    which sorts last)."""
    k = ref.n_groups
    if not (np.array_equal(lay.group_index[:k], ref.group_index) and np.array_equal(lay.group_n[:k], ref.group_n)):
        raise ValueError("the DiD layout's groups are not a prefix of the extractable layout's")
    width = lay.y.shape[1]
    level = lay.level
    n = lay.group_n.astype(float)
    cells, cols, coef = [], [], []
    point = np.empty(len(ref.cell_group))
    for i, (g, t, b, p, own) in enumerate(
        zip(ref.cell_group, ref.cell_t, ref.cell_b, ref.cell_prefix, ref.cell_own, strict=True)
    ):
        ctrl = np.array([h for h in range(p) if not (own and h == g)], dtype=np.int64)
        n_c = n[ctrl].sum()
        cells += [i] * (1 + 2 * len(ctrl))
        cols += [g * width + b, *(ctrl * width + t), *(ctrl * width + b)]
        coef += [1 / n[g], *np.full(len(ctrl), 1 / n_c), *np.full(len(ctrl), -1 / n_c)]
        mu = (n[ctrl] @ (lay.means[ctrl, t] - lay.means[ctrl, b])) / n_c
        point[i] = lay.means[g, b] + level[b] + mu + level[t] - level[b]
    return np.array(cells), np.array(cols), np.array(coef), point


def linear_bootstrap(
    lay: Layout, cells: np.ndarray, cols: np.ndarray, coef: np.ndarray, n_cells: int, *, draws: int, seed: int,
    multiplier: str = "rademacher", chunk: int = 128, on_chunk: Callable | None = None,
    source: JointMultipliers | None = None,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Analytic standard errors and multiplier-bootstrap draws (n_cells x B, float32) of linear functionals of the
    group means, theta = sum coef * (sum of group h's column): a draw is sum coef * (R_h[col] - W_h * mean_h[col]).
    ``on_chunk(start, d, drawn)``: called per chunk with the groups' centred multiplier sums d ((groups x columns) x
    chunk) and the chunk's draws (``bands.linear_studentized`` studentises them); the draws are the same with or
    without it. ``source``: multipliers keyed by cluster (``engine.multipliers``; the layout's ``source_rows`` look
    them up), as the cells' bootstrap draws them; the analytic standard errors stay the instance-level ones."""
    from scipy import sparse

    width = lay.y.shape[1]
    s = sparse.csr_array((coef, (cells, cols)), shape=(n_cells, lay.n_groups * width))
    # analytic: sum over instances of (sum_col coef (y_i,col - mean_h,col))^2, group by group, in row blocks
    var = np.zeros(n_cells)
    for h in range(lay.n_groups):
        block = s[:, h * width : (h + 1) * width]
        if not block.nnz:
            continue
        z = lay.y[lay.rows(h)] - lay.means[h]
        for start in range(0, len(z), 512):
            c = block @ z[start : start + 512].T  # (cells, rows)
            var += (c * c).sum(axis=1)
    se = np.sqrt(var)
    out = np.empty((n_cells, draws), dtype=np.float32)
    rng = np.random.default_rng(seed)
    y = lay.y.astype(np.float32)
    flat_means = lay.means.reshape(-1)[:, None]
    group_of = np.repeat(np.arange(lay.n_groups), width)
    for start in range(0, draws, chunk):
        bc = min(chunk, draws - start)
        if source is None:
            v = multipliers(rng, (lay.n_units, bc), multiplier, np.float32)
        else:
            v = source.take(multipliers(rng, (source.n_keys, bc), multiplier, np.float32), lay.source_rows)
        r = np.empty((lay.n_groups, width, bc), dtype=np.float32)
        for k in range(lay.n_groups):
            rows = lay.rows(k)
            np.matmul(y[rows].T, v[rows], out=r[k])
        w = np.add.reduceat(v, lay.group_start[:-1], axis=0)  # (G, bc)
        d = r.reshape(-1, bc) - flat_means * w[group_of]
        out[:, start : start + bc] = s @ d
        if on_chunk is not None:
            on_chunk(start, d, out[:, start : start + bc])
    return se, out
