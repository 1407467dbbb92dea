"""Calibrated simultaneous bands: a studentised (bootstrap-t) multiplier bootstrap of the sup-t statistic.

The classic band (R `did`, csdid, `differences`; ``band="classic"``) takes the (1 - alpha) quantile of
max_k |draw_k / se_k| with the draws and se fixed: a Gaussian-like law for statistics whose standard errors were
estimated from tens of instances. The sample's studentised cells have heavier tails (a t-like law with about n_g - 1
degrees of freedom), and a maximum over thousands of cells lives in those tails: at 30 instances per cohort a 95 % band
flags a cell in a third of panels without any effect (docs/calibration-study.md).

The calibrated band studentises every draw by its own standard error, re-estimated from the bootstrap sample (the
bootstrap-t of Efron 1981 and Hall 1992, in its wild/multiplier form: Liu 1988, Mammen 1993, Davidson & Flachaire
2008; applied to the sup-t statistic as in Chernozhukov, Chetverikov & Kato 2013). In the bootstrap world instance i
of a cell's cohort contributes v_i z_i (z_i its centred change) and the estimator re-centres at the bootstrap mean
T* = sum v_i z_i / n_T, so the re-estimated variance of that part is

    (sum (v_i z_i - T*)^2) / (n_T (n_T - 1)) = var_T - T*^2 / (n_T - 1),

and likewise for the control set. With Rademacher multipliers sum (v_i z_i)^2 is the same in every draw, so only the
re-centring moves the variance; that is exactly what makes the draw a Student-type statistic: for one group,
t* = U sqrt((n - 1) / (n - U^2)) with U the sign-flipped self-normalised sum (Efron 1969), the statistic whose
sign-flip law is exact for symmetric errors. The critical value is the (1 - alpha) quantile of max_k |D*_k / se*_k|
and the band is estimate +- crit * se with se the analytic (influence-function) standard error with the n / (n - 1)
correction per group (HC1-type; the Welch standard error), so that sample and bootstrap statistics are studentised
the same way.

Summaries (persistent memorisation by event time, the overall average) are weighted sums of cells; their draws come
from ``summaries.aggregate`` as for the classic band and their per-draw variance subtracts the re-centring of each
cell's parts: sum_k w_k^2 T*_k^2 / n_T,k for the cohorts (each event time has one cell per cohort) and
(sum_k w_k C*_k / sqrt(n_C,k))^2 for the control set (exact for never-treated controls; not-yet-treated control sets
differ between cells and this is then an approximation of a term of order 1/n_C).

The draws are made by ``did.bootstrap_shared`` itself (its per-chunk callback forms the studentised maxima), so the
cell draws returned are those of the classic bootstrap with the same seed, bit for bit (for one layout and for a
suite's layouts alike), and every other summary (correlations of a suite, aggregate draws) is unchanged; the
studentised maxima are formed chunk by chunk, never a cells x draws array beyond the draws the classic bootstrap
already holds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from memtui.core.errors import MemtuiError
from memtui.engine import did, kernels
from memtui.engine.blas import over_cores
from memtui.engine.layout import Layout
from memtui.engine.multipliers import JointMultipliers
from memtui.engine.summaries import _runs, _weights, analytic_se

_QUANTILE_BYTES = 256 << 10  # the temporaries of pointwise_aggregate_crit's block of aggregates


@dataclass
class CellVariances:
    """Per cell, the variance of the treated and control parts of the estimate (analytic, per-group ddof 1 when
    ``hc``) and the group sizes the bootstrap re-centres with (0: no control set)."""

    var_t: np.ndarray
    var_c: np.ndarray
    n_t: np.ndarray
    n_c: np.ndarray
    hc: bool

    @property
    def se(self) -> np.ndarray:
        return np.sqrt(self.var_t + self.var_c)


def group_changes(lay: Layout):
    """Per cohort group with cells, its cells and its rows' centred changes y_c - y_b for them (rows x cells): what the
    cells' variances sum the squares of."""
    cells = _cells_of_groups(lay)
    for k in range(lay.n_groups):
        if len(cells[k]):
            yield cells[k], group_change(lay, k, cells[k])


def _cells_of_groups(lay: Layout) -> list[np.ndarray]:
    g = lay.cell_group
    order = np.argsort(g, kind="stable")
    bounds = np.searchsorted(g[order], np.arange(lay.n_groups + 1))
    return [order[bounds[k] : bounds[k + 1]] for k in range(lay.n_groups)]


def group_change(lay: Layout, k: int, idx: np.ndarray) -> np.ndarray:
    """Group ``k``'s rows' centred changes for its cells ``idx`` (``group_changes``)."""
    z = lay.y[lay.rows(k)] - lay.means[k]
    return z[:, lay.cell_t[idx]] - z[:, lay.cell_b[idx]]


def cell_variances(
    lay: Layout, est: did.CellEstimates, hc: bool = True, clusters: np.ndarray | None = None
) -> CellVariances:
    """Split each cell's influence-function variance into its cohort's and its control set's parts.

    The cohort's part is summed directly (one pass over the treated rows, n_T x cells-of-the-cohort per group); the
    control part is the rest of ``est.se``^2 (the control part is the smaller one where the cohort is small, so the
    difference loses nothing that matters). With ``clusters`` (``layout_clusters``), the cluster-robust parts
    (``clustered_variances``)."""
    if clusters is not None:
        return clustered_variances(lay, est, clusters, hc)
    n_t = est.n_treated.astype(float)
    n_c = est.n_control.astype(float)
    ss_t = np.zeros(len(n_t))
    cells = _cells_of_groups(lay)

    def groups(ks: list[int]) -> None:  # each group's own cells: large layouts' groups on every core
        for k in ks:
            if len(cells[k]):
                d = group_change(lay, k, cells[k])
                ss_t[cells[k]] = np.einsum("ij,ij->j", d, d)

    over_cores(groups, list(range(lay.n_groups)), lay.y.size)
    var_t = ss_t / n_t**2
    var_c = np.clip(est.se**2 - var_t, 0, None)
    if not lay.controls:
        var_c[:] = 0
    if hc:
        var_t = var_t * np.divide(n_t, n_t - 1, out=np.full_like(n_t, np.nan), where=n_t > 1)
        var_c = var_c * np.divide(n_c, n_c - 1, out=np.where(n_c > 0, np.nan, 0.0), where=n_c > 1)
    return CellVariances(var_t=var_t, var_c=var_c, n_t=n_t, n_c=n_c, hc=hc)


def layout_clusters(lay: Layout, source: JointMultipliers | None) -> np.ndarray | None:
    """Per layout row, its cluster (0 .. K-1) under the keyed multipliers ``source``; None where every row is its own
    cluster (no source, or one key per instance): the instance-level band, unchanged. The calibrated band needs each
    cluster inside one group (a cohort, the never-treated, a not-yet-treated group): its variance parts are per
    group."""
    if source is None or lay.source_rows is None:
        return None
    codes = np.unique(source.keys[lay.source_rows], return_inverse=True)[1].astype(np.int64)
    n_clusters = int(codes.max()) + 1 if len(codes) else 0
    if n_clusters == len(codes):
        return None
    group = np.repeat(np.arange(lay.n_groups), lay.group_n)
    if len(np.unique(codes * lay.n_groups + group)) != n_clusters:
        raise MemtuiError(
            "the calibrated band needs every cluster inside one cohort (or among the never-trained controls), and "
            "some cluster spans several; use --band classic with this --cluster."
        )
    return codes


def _cluster_moments(lay: Layout, clusters: np.ndarray):
    """Per group h, over its clusters c (sums S_c of the rows' centred outcomes, sizes m_c): sum_c S_c S_c' (columns x
    columns), sum_c m_c S_c and sum_c m_c^2."""
    width = lay.y.shape[1]
    q = np.empty((lay.n_groups, width, width))
    lin = np.empty((lay.n_groups, width))
    m2 = np.empty(lay.n_groups)
    for k in range(lay.n_groups):
        rows = lay.rows(k)
        codes = clusters[rows]
        order = np.argsort(codes, kind="stable")
        starts = np.flatnonzero(np.r_[True, np.diff(codes[order]) != 0])
        sizes = np.diff(np.r_[starts, len(order)]).astype(float)
        sums = np.add.reduceat(lay.y[rows][order] - lay.means[k], starts, axis=0)
        q[k] = sums.T @ sums
        lin[k] = sizes @ sums
        m2[k] = sizes @ sizes
    return q, lin, m2


def clustered_variances(lay: Layout, est: did.CellEstimates, clusters: np.ndarray, hc: bool = True) -> CellVariances:
    """``cell_variances`` with the influence summed within clusters (nested in the groups; ``layout_clusters``).

    A cell's cohort part is sum_c S_c^2 / n_T^2 over the cohort's clusters (S_c: the cluster's sum of centred changes);
    its control part sum_c (S_c + m_c delta_h)^2 / n_C^2 over the control set's clusters (delta_h: the change of the
    cluster's group mean less the control set's). In the bootstrap world cluster c contributes v_c S_c and the
    estimator re-centres each instance at T*: the re-estimated cohort part is (sum_c S_c^2 - 2 T* sum_c m_c v_c S_c +
    T*^2 sum_c m_c^2) / n_T^2, which for clusters of equal size m is var_T - T*^2 / G (G = n_T / m clusters). The
    returned sizes are the effective numbers of clusters n^2 / sum_c m_c^2 (G for equal sizes, n for singletons), so
    the bootstrap's re-centring k = 1 / (G - 1) and the HC factor G / (G - 1) are the cluster-level ones; for unequal
    sizes this replaces the draw's sum_c m_c v_c S_c by its regression on T* (an approximation)."""
    q, lin, m2 = _cluster_moments(lay, clusters)
    g, t, b, p, own = lay.cell_group, lay.cell_t, lay.cell_b, lay.cell_prefix, lay.cell_own
    n_t = est.n_treated.astype(float)
    n_c = est.n_control.astype(float)
    var_t = (q[g, t, t] + q[g, b, b] - 2 * q[g, t, b]) / n_t**2
    eff_t = n_t**2 / m2[g]
    upto = int(p.max()) if len(p) else 0
    in_ctrl = np.arange(upto)[:, None] < p[None, :]
    in_ctrl[g[own], np.flatnonzero(own)] = False
    delta = (lay.means[:upto, t] - lay.means[:upto, b]) - est.dmu
    ss = q[:upto, t, t] + q[:upto, b, b] - 2 * q[:upto, t, b] + 2 * delta * (lin[:upto, t] - lin[:upto, b])
    ss += delta**2 * m2[:upto, None]
    has_c = (n_c > 0) & lay.controls
    var_c = np.where(has_c, (in_ctrl * ss).sum(axis=0) / np.where(has_c, n_c, 1) ** 2, 0.0)
    m2_c = (in_ctrl * m2[:upto, None]).sum(axis=0)
    eff_c = np.divide(n_c**2, m2_c, out=np.zeros_like(n_c), where=has_c & (m2_c > 0))
    if hc:
        var_t = var_t * np.divide(eff_t, eff_t - 1, out=np.full_like(eff_t, np.nan), where=eff_t > 1 + 1e-9)
        var_c = var_c * np.divide(eff_c, eff_c - 1, out=np.where(eff_c > 0, np.nan, 0.0), where=eff_c > 1 + 1e-9)
    return CellVariances(var_t=var_t, var_c=var_c, n_t=eff_t, n_c=eff_c, hc=hc)


@dataclass
class AggregateSpec:
    """Weighted averages of cells (``summaries`` weights) whose studentised draws the bootstrap also follows."""

    members: list[np.ndarray]
    ase: np.ndarray  # analytic standard errors (summaries.analytic_se), unfloored
    treated: object  # sparse (aggregates x cells): w_k^2 / n_T,k
    control: object  # sparse (aggregates x cells): w_k / sqrt(n_C,k)
    weights: object = None  # sparse (aggregates x cells): w_k in float32, summaries.aggregate's weights of the draws


def aggregate_spec(
    lay: Layout, est: did.CellEstimates, members: list[np.ndarray], var: CellVariances | None = None,
    clusters: np.ndarray | None = None,
) -> AggregateSpec:  # fmt: skip
    """The aggregates' analytic standard errors and re-centring coefficients; with ``clusters``, cluster-robust ones
    re-centred by the effective numbers of clusters ``var.n_t``, ``var.n_c`` (``clustered_variances``)."""
    from scipy import sparse

    weights = _weights(lay, est.att, members)
    w_vals = weights[1]
    rows = np.concatenate([np.full(len(m), a) for a, m in enumerate(members)])
    cols = np.concatenate(members)
    w = np.concatenate(w_vals)
    sizes = (var.n_t, var.n_c) if clusters is not None else (est.n_treated, est.n_control)
    n_t = sizes[0][cols].astype(float)
    n_c = sizes[1][cols].astype(float)
    shape = (len(members), len(est.att))
    treated = sparse.csr_array(((w**2 / n_t).astype(np.float32), (rows, cols)), shape=shape)
    ctrl_coef = np.divide(w, np.sqrt(n_c), out=np.zeros_like(w), where=n_c > 0)
    control = sparse.csr_array((ctrl_coef.astype(np.float32), (rows, cols)), shape=shape)
    ase = analytic_se(lay, est, members, clusters=clusters, weights=weights)
    plain = sparse.csr_array((w.astype(np.float32), (rows, cols)), shape=shape)  # as summaries.aggregate makes it
    return AggregateSpec(members=members, ase=ase, treated=treated, control=control, weights=plain)


@dataclass
class StudentLaws:
    """What the studentised bootstrap gives one layout: the classic draws (as ``did.bootstrap``), the law of the
    studentised maximum over each mask of cells, and the aggregates' per-draw variance correction."""

    boot: did.BootstrapDraws
    tmax: list[np.ndarray]  # per mask: (B,) max_k |D*_k / se*_k| over the mask's usable cells
    agg_correction: np.ndarray | None  # (aggregates, B): what re-centring takes off each aggregate's variance
    agg_weighted: np.ndarray | None = None  # (aggregates, B) float32: sum_k w_k D*_k where the compiled loop made it


def _labels(masks: list[np.ndarray], usable: np.ndarray) -> tuple[list[np.ndarray], list[int]]:
    member = np.zeros(len(usable), dtype=np.int64)
    for i, mask in enumerate(masks):
        member |= (np.asarray(mask, bool) & usable).astype(np.int64) << i
    labels = [int(x) for x in np.unique(member[member > 0])]
    return [np.flatnonzero(member == label) for label in labels], labels


def _in_block(c: dict, block: slice) -> list[tuple[int, np.ndarray]]:
    """The cell groups with cells in ``block``, and those cells' positions in the block (cached per block)."""
    found = c["blocks"].get(block.start)
    if found is None:
        found = []
        for i, idx in enumerate(c["groups"]):
            lo, hi = np.searchsorted(idx, [block.start, block.stop])
            if hi > lo:
                found.append((i, idx[lo:hi] - block.start))
        c["blocks"][block.start] = found
    return found


def _studentise_numpy(c: dict, running: np.ndarray, block: slice, treated, ctrl, out, squares: bool) -> None:
    """The studentising part of the compiled loop (``kernels.cell_draws`` with ``studentise``) in numpy passes, the
    fallback: one block's studentised squares folded into each cell group's ``running`` maximum (the chunk's
    columns), and with ``squares`` the aggregates' T*^2 and C*."""
    treated *= c["unit"]
    ctrl *= c["unit"]
    if squares:
        np.multiply(treated, treated, out=c["squares"][0][block])
        c["squares"][1][block] = ctrl
    # studentised squares: D*^2 / (var - k_t T*^2 - k_c C*^2), in place over the temporaries
    np.multiply(treated, treated, out=treated)
    treated *= c["k_t"][block]
    np.multiply(ctrl, ctrl, out=ctrl)
    ctrl *= c["k_c"][block]
    den = np.subtract(c["var"][block], treated, out=treated)
    den -= ctrl
    np.maximum(den, 0, out=den)  # float32 rounding; 0 gives inf: a draw that studentises to no spread
    with np.errstate(divide="ignore", invalid="ignore"):
        d = np.multiply(out, c["unit"])
        t2 = np.divide(np.multiply(d, d, out=d), den, out=ctrl)
    t2[np.isnan(t2)] = 0  # 0 / 0: a cell whose draw and spread are both nil
    for i, local in _in_block(c, block):
        np.maximum(running[i], t2[local].max(axis=0), out=running[i])


class _Studentiser:
    """``did.bootstrap_shared``'s per-block callback for the calibrated band: each cell group's running studentised
    maximum, and after a chunk's last block the aggregates' correction (one product over the chunk's cells).

    Called with a block's parts (``on_chunk``), it studentises them in numpy passes (``_studentise_numpy``); where the
    compiled loop runs, the stack asks ``fused(j, start, block, bc)`` for the loop's arguments instead, draws and
    studentises the block in one pass, and then calls ``block_done``: the same operations, bit for bit."""

    def __init__(self, per_job: list[dict], group_max: list[np.ndarray], agg_corr: list, aggregates: list) -> None:
        self.per_job, self.group_max, self.agg_corr, self.aggregates = per_job, group_max, agg_corr, aggregates
        self.columns = [_columns(spec) for spec in aggregates]
        # per layout, the aggregates' weighted draws sum_k w_k D*_k (float32, aggregates x draws) where the compiled
        # loop made them (``summaries.aggregate`` then skips its product), else None
        self.weighted: list[np.ndarray | None] = [None] * len(aggregates)

    def _squares(self, j: int, block: slice, bc: int) -> bool:
        """Whether layout j has aggregates; at a chunk's first block, the numpy path's arrays of the chunk's T*^2 and
        C* (cells x chunk) that ``block_done`` multiplies by the aggregates' matrices."""
        c = self.per_job[j]
        if self.aggregates[j] is not None and block.start == 0:
            c["squares"] = np.empty((c["n"], bc), dtype=np.float32), np.empty((c["n"], bc), dtype=np.float32)
        return self.aggregates[j] is not None

    def __call__(self, j: int, start: int, block: slice, treated: np.ndarray, ctrl: np.ndarray, out: np.ndarray):
        bc = out.shape[1]
        squares = self._squares(j, block, bc)
        _studentise_numpy(self.per_job[j], self.group_max[j][:, start : start + bc], block, treated, ctrl, out, squares)
        self.block_done(j, start, block)

    def fused(self, j: int, start: int, block: slice, bc: int) -> kernels.Studentise | None:
        """The compiled loop's arguments for this block (None: the aggregates' matrices are not in the order the
        loop adds in, and the numpy passes run instead)."""
        c, spec, cols = self.per_job[j], self.aggregates[j], self.columns[j]
        if spec is not None and cols is None:
            return None
        sums = None
        if spec is not None:
            if block.start == 0:
                c["sums"] = tuple(np.zeros((len(spec.members), bc), dtype=np.float32) for _ in range(3))
            ptr, row, *coefs = cols
            sums = kernels.AggregateSums(ptr[block.start : block.stop + 1], row, *coefs, *c["sums"])
        return kernels.Studentise(
            unit=c["unit"], k_t=c["k_t"][block], k_c=c["k_c"][block], var=c["var"][block], label=c["label"][block],
            group_max=self.group_max[j][:, start : start + bc], aggregates=sums,
        )  # fmt: skip

    def block_done(self, j: int, start: int, block: slice) -> None:
        c, spec = self.per_job[j], self.aggregates[j]
        if spec is not None and block.stop == c["n"]:
            if "sums" in c:  # the compiled loop's: the very sums of the two products below
                corr, parts, weighted = c.pop("sums")
                corr += parts**2
                if start == 0:
                    self.weighted[j] = np.empty((len(spec.members), self.group_max[j].shape[1]), dtype=np.float32)
                self.weighted[j][:, start : start + corr.shape[1]] = weighted
            else:
                squares, parts = c.pop("squares")
                corr = spec.treated @ squares
                corr += (spec.control @ parts) ** 2
            kept = self.agg_corr[j][:, start : start + corr.shape[1]]
            kept[:] = corr
            kept *= c["unit2"]  # back to the outcome's units, in float64


def _columns(spec: AggregateSpec | None):
    """``spec``'s three sparse matrices (aggregates x cells: re-centring of T*^2 and of C*, weights of the draws) by
    cell, for the compiled loop: offsets, aggregate rows, the three coefficients. Only where all three have one pattern
    and each row lists its cells in ascending order (scipy's canonical form), so that the loop, visiting cells in
    order, adds as scipy's products add; else None."""
    if spec is None:
        return None
    matrices = (spec.treated, spec.control, spec.weights)
    if spec.weights is None or not all(m.has_canonical_format for m in matrices):
        return None
    t, c, w = (m.tocsc() for m in matrices)
    if not all(np.array_equal(t.indptr, m.indptr) and np.array_equal(t.indices, m.indices) for m in (c, w)):
        return None
    as_i64 = (np.ascontiguousarray(x, dtype=np.int64) for x in (t.indptr, t.indices))
    return *as_i64, *(np.ascontiguousarray(m.data, np.float32) for m in (t, c, w))


def studentized_bootstrap(
    lays: list[Layout],
    ests: list[did.CellEstimates],
    variances: list[CellVariances],
    masks: list[list[np.ndarray]],
    *,
    draws: int,
    seed: int,
    multiplier: str = "rademacher",
    chunk: int = 128,
    aggregates: list[AggregateSpec | None] | None = None,
    usable: list[np.ndarray] | None = None,
    progress: Callable[[float], None] | None = None,
    source: JointMultipliers | None = None,
    pool: did.DrawsPool | None = None,
) -> list[StudentLaws]:
    """``did.bootstrap_shared`` (its very loop: same multipliers, same draws, bit for bit) that also returns, per
    layout, the studentised sup-t law of every mask in ``masks[j]`` (cells with a finite standard error only, or
    ``usable[j]``), and the variance correction of ``aggregates[j]``. Memory: the classic draws plus a few cells x
    chunk arrays."""
    if multiplier != "rademacher":
        # with other multipliers sum (v_i z_i)^2 moves from draw to draw: the re-estimated variance would need every
        # cell's sum of v_i^2-weighted squared changes, which the group sums do not give
        raise ValueError("the calibrated band needs Rademacher multipliers")
    f32 = np.float32
    aggregates = aggregates or [None] * len(lays)
    usable = usable or [np.isfinite(v.se) for v in variances]

    def constants(j: int, est: did.CellEstimates, var: CellVariances) -> dict:
        # re-centring: var* = var_t - k_t T*^2 + var_c - k_c C*^2, k = 1/(n - 1) with the HC correction, else 1/n
        shift = 1.0 if var.hc else 0.0
        k_t = np.divide(1, var.n_t - shift, out=np.zeros_like(var.n_t), where=var.n_t - shift > 0)
        k_c = np.divide(1, var.n_c - shift, out=np.zeros_like(var.n_c), where=var.n_c - shift > 0)
        groups, labels = _labels(masks[j], usable[j])
        label = np.full(len(var.n_t), -1, dtype=np.int64)  # each cell's group of cells (the compiled loop's)
        for i, idx in enumerate(groups):
            label[idx] = i
        # squares of float32 draws overflow beyond ~1e19 and underflow below ~1e-19 (memtui takes outcomes with a
        # standard deviation from 1e-30 to 1e30): the squares are formed in units of the outcome's sd
        scale = float(lays[j].scale) if lays[j].scale > 0 else 1.0
        return {
            "unit": f32(1 / scale),
            "unit2": scale * scale,
            "var": ((var.var_t + var.var_c) / (scale * scale)).astype(f32)[:, None],
            "k_t": k_t.astype(f32)[:, None],
            "k_c": k_c.astype(f32)[:, None],
            "groups": groups,
            "labels": labels,
            "label": label,
            "n": len(var.n_t),
            "blocks": {},
        }

    per_job = [constants(j, est, var) for j, (est, var) in enumerate(zip(ests, variances, strict=True))]
    group_max = [np.zeros((len(c["groups"]), draws), dtype=f32) for c in per_job]
    agg_corr = [None if a is None else np.empty((len(a.members), draws), dtype=np.float64) for a in aggregates]

    studentise = _Studentiser(per_job, group_max, agg_corr, aggregates)

    boots = did.bootstrap_shared(
        lays,
        ests,
        draws=draws,
        seed=seed,
        multiplier=multiplier,
        chunk=chunk,
        progress=progress,
        on_chunk=studentise,
        source=source,
        pool=pool,
    )
    out = []
    for j, boot in enumerate(boots):
        c = per_job[j]
        laws = []
        for i in range(len(masks[j])):
            rows = [k for k, label in enumerate(c["labels"]) if label >> i & 1]
            if rows:
                laws.append(np.sqrt(group_max[j][rows].max(axis=0)).astype(np.float64))
            else:
                laws.append(np.full(draws, np.nan))
        out.append(StudentLaws(boot, laws, agg_corr[j], studentise.weighted[j]))
    return out


def aggregate_laws(
    agg_draws: np.ndarray, ase: np.ndarray, correction: np.ndarray, masks: list[np.ndarray]
) -> list[np.ndarray]:
    """Studentised sup laws of aggregates: per draw, max over each mask of |A* / se*|, se*^2 = ase^2 - correction.
    Two (mask x draws) temporaries per mask, never one over every aggregate."""
    out = []
    for mask in masks:
        m = np.asarray(mask, bool) & np.isfinite(ase) & (ase > 0)
        if not m.any():
            out.append(np.full(agg_draws.shape[1], np.nan))
            continue
        sd = ase[m, None] ** 2 - correction[m]
        np.maximum(sd, 0, out=sd)
        np.sqrt(sd, out=sd)
        t = np.abs(agg_draws[m])
        with np.errstate(divide="ignore", invalid="ignore"):
            np.divide(t, sd, out=t)
        t[np.isnan(t)] = 0
        out.append(t.max(axis=0))
    return out


@dataclass
class CalibratedBands:
    """Everything an estimate's calibrated bands need: the classic draws (unchanged), the studentising standard
    errors, the studentised sup laws of the cell masks, and the aggregates' standard errors and correction."""

    boot: did.BootstrapDraws
    se: np.ndarray  # per cell: HC1 influence-function standard error, NaN at or below the floor
    tmax: dict[str, np.ndarray]  # per mask name: the studentised sup law
    agg_se: np.ndarray | None  # per aggregate: analytic standard error, NaN at or below the floor
    agg_correction: np.ndarray | None  # (aggregates, B)
    var: CellVariances | None = None  # the cells' variance parts (the pointwise intervals' Welch degrees of freedom)
    agg_weighted: np.ndarray | None = None  # the aggregates' weighted draws, float32 (``StudentLaws``), or None


def calibrated_bootstrap(
    lay: Layout,
    est: did.CellEstimates,
    masks: dict[str, np.ndarray],
    *,
    draws: int,
    seed: int,
    floor: float,
    multiplier: str = "rademacher",
    members: list[np.ndarray] | None = None,
    progress: Callable[[float], None] | None = None,
    source: JointMultipliers | None = None,
) -> CalibratedBands:
    """One layout's calibrated bootstrap: ``did.bootstrap``'s draws (bitwise the same for the same seed) plus the
    studentised sup law of every mask in ``masks`` and, with ``members``, of the aggregates (``summaries``)."""
    return calibrated_bootstraps(
        [lay], [est], [masks], draws=draws, seed=seed, floors=[floor], multiplier=multiplier, members=[members],
        progress=progress, source=source,
    )[0]  # fmt: skip


CalibratedParts = tuple[CellVariances, np.ndarray, "AggregateSpec | None"]


def calibrated_parts(
    lay: Layout, est: did.CellEstimates, floor: float, members: list[np.ndarray] | None = None,
    source: JointMultipliers | None = None,
) -> CalibratedParts:  # fmt: skip
    """What one layout's calibrated bootstrap needs before its draws: the cells' variance parts, their floored HC1
    standard errors and, with ``members``, the aggregates' standard errors and re-centring (``aggregate_spec``)."""
    clusters = layout_clusters(lay, source)
    var = cell_variances(lay, est, clusters=clusters)
    spec = aggregate_spec(lay, est, members, var, clusters) if members is not None else None
    return var, did.floored(var.se, floor), spec


def calibrated_bootstraps(
    lays: list[Layout],
    ests: list[did.CellEstimates],
    masks: list[dict[str, np.ndarray]],
    *,
    draws: int,
    seed: int,
    floors: list[float],
    multiplier: str = "rademacher",
    members: list[list[np.ndarray] | None] | None = None,
    progress: Callable[[float], None] | None = None,
    mapper: Callable | None = None,
    source: JointMultipliers | None = None,
    pool: did.DrawsPool | None = None,
    prepared: list[CalibratedParts] | None = None,
) -> list[CalibratedBands]:
    """``calibrated_bootstrap`` of several layouts with the same groups and cells (a suite's models or metrics) from
    one set of multipliers (``did.bootstrap_shared``): each result is that layout's lone ``calibrated_bootstrap``,
    bit for bit, and the draws are joint. ``mapper(fn, items)``: how the per-layout preparation (variances, the
    aggregates' analytic standard errors) is spread over cores (default: one after another). ``source``: multipliers
    keyed by panel instance or cluster and ``pool``, recycled draws arrays (``did.bootstrap_shared``). ``prepared``:
    each layout's ``calibrated_parts``, made beforehand (a suite makes the next metric's while this one's bootstrap
    runs), the same as made here."""
    members = members or [None] * len(lays)

    sources = source if isinstance(source, list | tuple) else [source] * len(lays)

    def prepare(j: int) -> CalibratedParts:
        return calibrated_parts(lays[j], ests[j], floors[j], members[j], sources[j])

    parts = prepared if prepared is not None else list((mapper or map)(prepare, range(len(lays))))
    laws = studentized_bootstrap(
        lays, ests, [p[0] for p in parts], [list(m.values()) for m in masks], draws=draws, seed=seed,
        multiplier=multiplier, aggregates=[p[2] for p in parts], usable=[np.isfinite(p[1]) for p in parts],
        progress=progress, source=source, pool=pool,
    )  # fmt: skip
    return [
        CalibratedBands(
            boot=law.boot,
            se=se,
            tmax=dict(zip(mask, law.tmax, strict=True)),
            agg_se=did.floored(spec.ase, floor) if spec is not None else None,
            agg_correction=law.agg_correction,
            var=var,
            agg_weighted=law.agg_weighted,
        )
        for (var, se, spec), law, mask, floor in zip(parts, laws, masks, floors, strict=True)
    ]


def bootstrap_bytes(
    draws: int,
    n_cells: int,
    n_groups: int,
    n_aggregates: int,
    n_units: int = 0,
    width: int = 0,
    chunk: int = 128,
    n_masks: int = 5,
) -> int:
    """Peak memory of a calibrated bootstrap of ``draws`` draws and its summaries (``did.bootstrap_bytes`` for the
    classic band), from how this module, did.py and summaries.py hold them.

    Held throughout: the cells' float32 draws, the groups' float64 multiplier sums, per mask (and per group of cells
    sharing masks, as many at most) a float32 running maximum and a float64 law, the aggregates' float64 draws and
    variance corrections; on top of them ``aggregate_laws``' two float64 temporaries per aggregate of a mask. No IQR
    partition of the draws: the calibrated band studentises by analytic standard errors. Per chunk of draws, what
    ``did.bootstrap_shared`` holds plus one cells x chunk temporary."""
    held = 4 * n_cells + 8 * n_groups + 12 * n_masks + 20 * n_aggregates
    per_chunk = 4 * chunk * (n_units + 2 * (n_groups + 1) * width + 9 * n_cells)
    return int(draws) * (held + 16 * n_aggregates) + per_chunk + (32 << 20)


def aggregate_crit(agg_draws: np.ndarray, agg_se: np.ndarray, correction: np.ndarray, mask: np.ndarray, alpha: float):
    """Calibrated simultaneous critical value of the aggregates in ``mask`` (one aggregate: its bootstrap-t
    two-sided critical value, the calibrated replacement of the pointwise z)."""
    law = aggregate_laws(agg_draws, agg_se, correction, [mask])[0]
    return did.critical_value(law, alpha)


def welch_df(var: CellVariances) -> np.ndarray:
    """Per cell, the Welch-Satterthwaite degrees of freedom of its studentised estimate (var_t + var_c)^2 /
    (var_t^2 / (n_t - 1) + var_c^2 / (n_c - 1)); n_t - 1 without controls; NaN where a group has no variance of its
    own (one instance). With clusters, ``var.n_t``, ``var.n_c`` are the effective numbers of clusters. This is the
    small-sample law the bootstrap-t reproduces cell by cell (for one group the sign-flip t* is Student's t with
    n - 1 degrees of freedom under normal errors; Efron 1969): the pointwise intervals of the calibrated band."""
    with np.errstate(divide="ignore", invalid="ignore"):
        part_t = np.where(var.var_t > 0, var.var_t**2 / (var.n_t - 1), 0.0)
        part_c = np.where(var.var_c > 0, var.var_c**2 / (var.n_c - 1), 0.0)
        df = (var.var_t + var.var_c) ** 2 / (part_t + part_c)
    return np.where(np.isfinite(df) & (df > 0), df, np.nan)


def pointwise_t(var: CellVariances, alpha: float) -> np.ndarray:
    """Per cell, the two-sided (1 - alpha) t critical value with the cell's Welch degrees of freedom (``welch_df``)."""
    # scipy.stats.t.isf is -stdtrit(df, q) (times scale 1, plus loc 0: the same bits); scipy.stats costs ~0.5 s to
    # import, single-threaded, in every cold `memtui` run that reaches the calibrated band
    from scipy.special import stdtrit

    df = welch_df(var)
    out = np.full(len(df), np.nan)
    ok = np.isfinite(df)
    out[ok] = -stdtrit(df[ok], alpha / 2)
    return out


def pointwise_aggregate_crit(agg_draws: np.ndarray, agg_se: np.ndarray, correction: np.ndarray, alpha: float):
    """Per aggregate, its own bootstrap-t two-sided critical value: the (1 - alpha) quantile (type-1) of |A* / se*|,
    se*^2 = agg_se^2 - correction (``aggregate_laws`` with one aggregate a mask, as the overall average's)."""
    out = np.full(len(agg_se), np.nan)
    # a few aggregates at a time: their temporaries stay under _QUANTILE_BYTES whatever the number of draws, so
    # bootstrap_bytes' per-draw count holds without them (and one quantile per aggregate cost 70 us of numpy calls)
    usable = np.flatnonzero(np.isfinite(agg_se) & (agg_se > 0))
    per_block = max(1, _QUANTILE_BYTES // (16 * max(agg_draws.shape[1], 1)))
    for lo in range(0, len(usable), per_block):
        k = usable[lo : lo + per_block]
        # each square as the scalar agg_se[k] ** 2 (libm's pow, which differs from x * x in the last bit now and
        # then): the critical values stay those of one aggregate at a time, bit for bit
        squared = np.array([agg_se[i] ** 2 for i in k])
        sd = np.sqrt(np.maximum(squared[:, None] - correction[k], 0))
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.abs(agg_draws[k]) / sd
        t[np.isnan(t)] = 0
        out[k] = np.quantile(t, 1 - alpha, axis=1, method="inverted_cdf")  # row by row: each row's own quantile
    return out


@dataclass
class LinearParts:
    """Linear functionals of group means (``did.ease_terms``) split by group: per group h with coefficients, the
    functionals it enters, their coefficients on h's columns, and the re-centring 1/(n_h - 1) of h's part."""

    blocks: list[tuple[int, np.ndarray, object, float]]  # (h, functionals, sparse (functionals x width), 1/(n_h - 1))
    var: np.ndarray  # per functional: the stratified HC1 variance, sum over groups of n_h/(n_h - 1) * ss_h


def linear_parts(
    lay: Layout, cells: np.ndarray, cols: np.ndarray, coef: np.ndarray, n_cells: int,
    clusters: np.ndarray | None = None,
) -> LinearParts:  # fmt: skip
    """Each functional theta = sum_h a_h' (group h's column sums) as a sum of independent group parts. Group h's
    part is (1/n_h) sum_i u_i with u_i = n_h a_h' y_i; its HC1 (Welch) variance is n_h/(n_h - 1) sum_i (a_h' z_i)^2
    (z_i: i's outcomes less h's means), NaN for a group of one. In the bootstrap world i contributes v_i a_h' z_i and
    re-centring at the part's bootstrap value P*_h takes P*_h^2 / (n_h - 1) off that variance, whatever a_h's scale
    (the cohort's 1/n_g, a not-yet-treated group's 1/n_C).

    With ``clusters`` (per layout row, each cluster inside one group: ``layout_clusters``) the shares are summed
    within clusters first, S_c = sum_{i in c} a_h' z_i: the variance is G/(G - 1) sum_c S_c^2 and the re-centring
    P*_h^2 / (G - 1), G = n_h^2 / sum_c m_c^2 the effective number of clusters (exact for clusters of equal size, as
    ``clustered_variances`` for the cells)."""
    from scipy import sparse

    width = lay.y.shape[1]
    s = sparse.csc_array((coef, (cells, cols)), shape=(n_cells, lay.n_groups * width))
    var = np.zeros(n_cells)
    blocks = []
    for h in range(lay.n_groups):
        block = sparse.csr_array(s[:, h * width : (h + 1) * width])
        rows = np.flatnonzero(np.diff(block.indptr))
        if not len(rows):
            continue
        block = block[rows]
        z = lay.y[lay.rows(h)] - lay.means[h]
        ss = np.zeros(len(rows))
        if clusters is None:
            for start in range(0, len(z), 512):
                c = block @ z[start : start + 512].T  # (functionals, rows)
                ss += (c * c).sum(axis=1)
            n_h = float(lay.group_n[h])
        else:
            order, starts = _runs(clusters[lay.rows(h)])
            sums = np.add.reduceat(z[order], starts, axis=0)  # each cluster's summed centred outcomes
            c = block @ sums.T  # (functionals, clusters): S_c
            ss = (c * c).sum(axis=1)
            sizes = np.diff(np.r_[starts, len(order)]).astype(float)
            n_h = float(lay.group_n[h]) ** 2 / float(sizes @ sizes)  # the effective number of clusters
        var[rows] += ss * n_h / (n_h - 1) if n_h > 1 + 1e-9 else np.nan
        blocks.append((h, rows, block, 1 / (n_h - 1) if n_h > 1 + 1e-9 else 0.0))
    return LinearParts(blocks=blocks, var=var)


def linear_studentized(
    lay: Layout, cells: np.ndarray, cols: np.ndarray, coef: np.ndarray, n_cells: int, masks: list[np.ndarray], *,
    draws: int, seed: int, floor: float, multiplier: str = "rademacher", chunk: int = 128,
    source: JointMultipliers | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[np.ndarray]]:  # fmt: skip
    """The calibrated band of linear functionals of group means (the ease of ``compare``): ``did.linear_bootstrap``'s
    draws (the same multipliers, the same draws as the classic band's) studentised draw by draw, as the cells'
    (``studentized_bootstrap``), by the re-estimated variance var - sum_h P*_h^2 / (n_h - 1) over the functional's
    group parts (``linear_parts``; the groups are strata, each re-centred at its own bootstrap mean). Returns the
    plain analytic standard errors, the HC1 ones the band studentises by (both floored), the draws and, per mask,
    the studentised sup law max |D* / se*| over the mask's functionals with a standard error. ``source``: multipliers
    keyed by cluster (``did.linear_bootstrap``); the variances are then the cluster-robust ones (``linear_parts``),
    each cluster inside one group (``layout_clusters`` refuses others)."""
    if multiplier != "rademacher":
        raise ValueError("the calibrated band needs Rademacher multipliers")
    parts = linear_parts(lay, cells, cols, coef, n_cells, layout_clusters(lay, source))
    se_hc = did.floored(np.sqrt(parts.var), floor)
    usable = np.isfinite(se_hc)
    fams = [np.flatnonzero(np.asarray(m, bool) & usable) for m in masks]
    laws = [np.zeros(draws) if len(f) else np.full(draws, np.nan) for f in fams]
    width = lay.y.shape[1]
    var = parts.var[:, None]

    def studentise(start: int, d: np.ndarray, drawn: np.ndarray) -> None:
        recentre = np.zeros((n_cells, d.shape[1]))
        d = d.astype(np.float64)  # squares in float64: outcomes of any scale
        for h, rows, block, k in parts.blocks:
            p = block @ d[h * width : (h + 1) * width]  # (functionals of h, chunk)
            p *= p
            p *= k
            recentre[rows] += p
        den = np.maximum(var - recentre, 0)  # rounding; 0 gives inf: a draw that studentises to no spread
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.abs(drawn.astype(np.float64)) / np.sqrt(den)
        t[np.isnan(t)] = 0
        for f, law in zip(fams, laws, strict=True):
            if len(f):
                law[start : start + d.shape[1]] = t[f].max(axis=0)

    ase, out = did.linear_bootstrap(
        lay, cells, cols, coef, n_cells, draws=draws, seed=seed, multiplier=multiplier, chunk=chunk,
        on_chunk=studentise, source=source,
    )  # fmt: skip
    return did.floored(ase, floor), se_hc, out, laws
