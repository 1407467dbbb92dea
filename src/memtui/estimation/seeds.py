"""The pooled estimate of a seed suite (``memtui compare SUITE --pooled``): one model's panels over the same instances
under several data orders (seeds), each instance trained at another step under each seed.

Every seed's panel is estimated as ``estimate`` does, with one multiplier source keyed by **instance id**
(``engine.multipliers``): instance i has the same multiplier in draw b of every seed's bootstrap, whatever its row or
its cohort in that seed. The seed is a block: the instance is the sampling unit, and its outcomes under all seeds are
one observation. The pooled profile is the mean over seeds of tau_s(g, c), per (cohort, checkpoint) cell every seed
estimates, and its draws are the mean of the seeds' draws, so its standard error carries the covariance between seeds
that shared instances create (the same never-trained controls in every seed; the same treated instances in every
seed's persistent and overall summaries). Treating the seeds as independent (``independent_se``; ``shared=False``
draws independent multipliers per seed) misses it.

Bands: the **classic** simultaneous band (R did's: sup-t over the pooled draws studentised by their robust bootstrap
standard errors), whatever ``settings.band`` says. The calibrated band is a bootstrap-t that studentises each draw by
that draw's analytic (HC1) standard error, formed from each group's sums of squares inside one layout; the pooled
cell's variance also holds the cross-seed covariance of an instance that is treated in one seed and a control or in
another cohort in another, which no single layout forms, so its studentisation does not carry over. Each seed's own
estimate keeps its band.

Agreement between seeds (how much of memorisation is data order): per scope, the spread across seeds, and a test that
every seed estimates the same profile: the largest studentised deviation max_s,k |tau_s,k - pooled_k| / se(s, k) over
the scope's cells k and the seeds s, calibrated by the same joint draws (d_s,k - mean_s d_s,k is the deviation's noise
under the hypothesis that the seeds agree; its sup-t law gives the p-value). benchmarks/seeds.py measures the band's
coverage and the test's level and power on simulated suites with a known truth (docs/suites.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import polars as pl

from memtui.core.errors import MemtuiError
from memtui.core.text import clean
from memtui.engine import did
from memtui.engine.band_classic import CLASSIC
from memtui.engine.band_registry import get_band
from memtui.engine.multipliers import JointMultipliers
from memtui.estimation.estimate import estimate_parts
from memtui.estimation.results import EstimateResult, Progress, final_index, z_value
from memtui.estimation.settings import Settings
from memtui.panel.model import Panel

HEADLINE_EVENTS = (1, 5, 10)  # persistent memorisation this many checkpoints after training (as compare's table)
SMALL_COHORT = 50  # below this many treated instances per cohort the per-cell agreement tests over-reject
_SLAB = 256  # cells per pass over the seeds' draws (seeds x slab x B float64 at a time)


@dataclass
class Summary:
    """One scalar summary pooled across seeds: its estimate with a pointwise interval (``low``, ``high``) from the
    joint draws' standard error, the standard error if the seeds were independent, and each seed's own value."""

    name: str
    estimate: float
    std_error: float
    independent_se: float
    low: float
    high: float
    seeds: np.ndarray

    @property
    def sd(self) -> float:
        """The standard deviation across seeds (ddof 1)."""
        return float(np.std(self.seeds, ddof=1)) if len(self.seeds) > 1 else math.nan

    @property
    def min(self) -> float:
        return float(np.min(self.seeds))

    @property
    def max(self) -> float:
        return float(np.max(self.seeds))


@dataclass
class Agreement:
    """The test that every seed estimates the same ``scope``: the largest studentised deviation of a seed from the
    pooled value (``statistic``, reached by seed ``seed``) over ``n`` cells or event times, its critical value and
    p-value from the joint draws; ``spread``: the mean over them of the standard deviation across seeds, beside the
    pooled estimate's mean standard error ``std_error``."""

    scope: str
    n: int
    statistic: float
    crit: float
    p_value: float
    seed: str
    spread: float
    std_error: float

    @property
    def rejected(self) -> bool:
        return bool(math.isfinite(self.statistic) and math.isfinite(self.crit) and self.statistic > self.crit)


@dataclass
class PooledResult:
    """The pooled estimate of a seed suite: ``cells`` (the profile over the cells every seed estimates; post-treatment
    cells share one simultaneous band, placebo cells another, or one for all with ``family="all"``),
    ``instantaneous`` (c = g) and ``residual`` (the final checkpoint) cells with their own bands, ``persistent`` (the
    mean over seeds of each seed's event-study curve, with its band over c - g >= 0), scalar ``summaries``
    (instantaneous and residual means, persistent k checkpoints after training, overall), ``agreement`` per scope,
    and each seed's own estimate (``seeds``). Every frame has ``independent_se`` (the standard error if the seeds were
    independent) and ``seed_sd``/``seed_min``/``seed_max`` (the spread of the seeds' estimates)."""

    settings: Settings
    names: list[str]
    seeds: dict[str, EstimateResult]
    cells: pl.DataFrame
    instantaneous: pl.DataFrame
    persistent: pl.DataFrame
    residual: pl.DataFrame
    summaries: dict[str, Summary]
    agreement: dict[str, Agreement]
    crit: float  # the band's critical value over the post-treatment cells
    shared: bool = True  # False: each seed drew its own multipliers (the seeds treated as independent)
    notes: list[str] = field(default_factory=list)


def estimate_pooled(
    panels: Sequence[Panel],
    settings: Settings,
    names: Sequence[str] | None = None,
    *,
    shared: bool = True,
    progress: Progress | None = None,
) -> PooledResult:
    """Estimate every seed's panel with one multiplier per instance shared across seeds and pool them (module
    docstring). ``names``: the seeds' names (default: each panel's ``seed`` attribute, else seed0, seed1, ...);
    ``shared=False`` gives each seed independent multipliers (seed ``settings.seed + k``), the comparison that treats
    the seeds as independent. Refused in one line where the panels are not one instance set over one set of
    checkpoints, or the settings have no bootstrap."""
    settings = _checked_settings(settings)
    panels = list(panels)
    names = _names(panels, names)
    keys = _instance_keys(panels, names)
    report = progress or (lambda fraction, message: None)
    results, parts = {}, []
    for k, (name, panel) in enumerate(zip(names, panels, strict=True)):
        source = JointMultipliers(keys=keys[k], n_keys=len(keys[0]))
        mine = settings if shared else replace(settings, seed=settings.seed + k)

        def tell(fraction: float, message: str, k=k, name=name) -> None:
            report(0.9 * (k + fraction) / len(panels), f"{name}: {message}")

        try:
            results[name], cells = estimate_parts(panel, mine, tell, source=source)
        except MemtuiError as exc:
            raise MemtuiError(f"{name}: {exc}") from None
        parts.append(cells)
    report(0.9, "pooling")
    out = _pooled(settings, names, results, parts, shared)
    report(1.0, "done")
    return out


def _checked_settings(settings: Settings) -> Settings:
    settings = settings.validate()
    if settings.engine != "memtui":
        raise MemtuiError("the pooled estimate is memtui's engine; use --engine memtui with --pooled.")
    if not settings.draws:
        raise MemtuiError("the pooled estimate needs bootstrap draws (its seeds share them); use -B 1000.")
    if settings.cluster:  # a cluster (a batch) is one seed's: no key is the same cluster under every seed
        raise MemtuiError("--cluster is not available with --pooled: each seed's batches hold other instances.")
    return settings


def _names(panels: list[Panel], names: Sequence[str] | None) -> list[str]:
    if len(panels) < 2:
        raise MemtuiError("a pooled estimate needs the panels of two seeds or more.")
    if names is None:
        labels = [clean(str(p.attrs.get("seed", "")), 40) for p in panels]
        names = labels if all(labels) and len(set(labels)) == len(labels) else [f"seed{k}" for k in range(len(panels))]
    names = list(names)
    if len(names) != len(panels) or len(set(names)) != len(names):
        raise MemtuiError("give one distinct name per seed's panel.")
    return names


def _instance_keys(panels: list[Panel], names: list[str]) -> list[np.ndarray]:
    """Each panel's rows as positions in the first panel's instance order: the key of its multipliers. Refused where
    a panel repeats an id or the panels do not hold the same instances, or not the same completed checkpoints."""
    first = panels[0]
    order = np.argsort(first.ids, kind="stable")
    ref = first.ids[order]
    keys = []
    for name, panel in zip(names, panels, strict=True):
        ids = np.sort(panel.ids)
        if len(np.unique(ids)) != len(ids):
            raise MemtuiError(f"{name}: instance ids repeat; a pooled estimate keys each instance by its id.")
        if not np.array_equal(ids, ref):
            only = len(np.setdiff1d(panel.ids, first.ids)) + len(np.setdiff1d(first.ids, panel.ids))
            raise MemtuiError(
                f"{name} and {names[0]} do not hold the same instances ({only} ids in one only): a pooled estimate "
                "needs every seed's panel over the same instances (memtui build --seeds writes them)."
            )
        if not np.array_equal(panel.done_steps, first.done_steps):
            raise MemtuiError(
                f"{name} and {names[0]} have different completed checkpoints: finish extraction, or open them with "
                "memtui compare, which keeps the checkpoints every seed has."
            )
        keys.append(order[np.searchsorted(ref, panel.ids)])
    return keys


@dataclass
class _Block:
    """Rows every seed has (cells or event times): their coordinates, each seed's sign-applied estimates (seeds x K)
    and draws (per seed, K x B float32, sign applied)."""

    values: np.ndarray
    draws: list[np.ndarray]


def _seed_rows(part, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return part.sign * part.est.att[idx], _signed(part.draws[idx], part.sign)


def _signed(draws: np.ndarray, sign: int) -> np.ndarray:
    draws = np.array(draws, dtype=np.float32)  # a copy: negated in place where lower is better
    if sign < 0:
        np.negative(draws, out=draws)
    return draws


def _common_cells(parts: list) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """The cells (cohort, checkpoint) every seed estimates (finite in all), in the first seed's order, and each
    seed's index of them."""
    where = []
    for p in parts:
        ok = np.isfinite(p.est.att)
        pairs = zip(p.cohort_step, p.cell_step, strict=True)
        where.append({(int(g), int(c)): i for i, (g, c) in enumerate(pairs) if ok[i]})
    keys = [key for key in where[0] if all(key in w for w in where[1:])]
    idx = [np.array([w[key] for key in keys], dtype=np.int64) for w in where]
    cohort = np.array([g for g, _ in keys], dtype=np.int64)
    checkpoint = np.array([c for _, c in keys], dtype=np.int64)
    return cohort, checkpoint, idx


def _common_events(parts: list) -> tuple[np.ndarray, _Block]:
    """Event times every seed's persistent curve has, and the block of their aggregates with the overall average
    as the last row."""
    events = [p.aggregates[0] for p in parts]
    common = events[0]
    for e in events[1:]:
        common = np.intersect1d(common, e)
    values, draws = [], []
    for p, e in zip(parts, events, strict=True):
        _, _, theta, agg_draws, _, _ = p.aggregates
        rows = np.concatenate([np.searchsorted(e, common), [len(e)]])  # the overall average is the last aggregate
        values.append(p.sign * theta[rows])
        draws.append(_signed(agg_draws[rows], p.sign))
    return common, _Block(np.stack(values), draws)


@dataclass
class _Pool:
    """What one pass over a block's draws gives: the pooled estimate, its bootstrap and independent-seeds standard
    errors, each seed's deviation standard error, and per mask the sup-t laws of the band and of the deviations and
    the draws of the mean over the mask (pooled, and per seed)."""

    estimate: np.ndarray
    se: np.ndarray
    independent_se: np.ndarray
    dev_se: np.ndarray
    band: dict[str, np.ndarray]
    dev: dict[str, np.ndarray]
    mean: dict[str, np.ndarray]
    seed_mean: dict[str, np.ndarray]


def pooled_mean(values: np.ndarray) -> np.ndarray:
    """The mean over seeds (axis 0) in a fixed float64 order: the seeds summed first to last, then divided by their
    number."""
    total = np.array(values[0], dtype=np.float64)
    for v in values[1:]:
        total += v
    return total / len(values)


def _pool(block: _Block, masks: dict[str, np.ndarray], floor: float) -> _Pool:
    n_seeds, k = block.values.shape
    b = block.draws[0].shape[1]
    se, ind, dev_se = np.full(k, np.nan), np.full(k, np.nan), np.full((n_seeds, k), np.nan)
    band = {m: np.full(b, np.nan) for m in masks}
    dev = {m: np.full(b, np.nan) for m in masks}
    mean = {m: np.zeros(b) for m in masks}
    seed_mean = {m: np.zeros((n_seeds, b)) for m in masks}
    for start in range(0, k, _SLAB):
        rows = slice(start, min(k, start + _SLAB))
        d = np.stack([dr[rows] for dr in block.draws]).astype(np.float64)  # seeds x r x B
        pooled = pooled_mean(d)
        se[rows] = did.bootstrap_se(pooled, floor)
        own = did.bootstrap_se(d.reshape(-1, b), floor).reshape(n_seeds, -1)
        ind[rows] = np.sqrt((own**2).sum(axis=0)) / n_seeds
        for name, mask in masks.items():
            m = mask[rows]
            mean[name] += pooled[m].sum(axis=0)
            seed_mean[name] += d[:, m].sum(axis=1)
        d -= pooled
        dev_se[:, rows] = did.bootstrap_se(d.reshape(-1, b), floor).reshape(n_seeds, -1)
        for name, mask in masks.items():
            m = mask[rows]
            _fold(band[name], pooled[m], se[rows][m])
            _fold(dev[name], d[:, m].reshape(-1, b), dev_se[:, rows][:, m].reshape(-1))
    for name, mask in masks.items():
        n = max(int(mask.sum()), 1)
        mean[name] /= n
        seed_mean[name] /= n
    return _Pool(pooled_mean(block.values), se, ind, dev_se, band, dev, mean, seed_mean)


def _fold(law: np.ndarray, draws: np.ndarray, se: np.ndarray) -> None:
    """law = max(law, max over rows with a finite se of |draw| / se), NaN law where no row had one yet."""
    ok = np.isfinite(se)
    if not ok.any():
        return
    part = np.max(np.abs(draws[ok]) / se[ok, None], axis=0)
    np.fmax(law, part, out=law)


def _pooled(settings: Settings, names: list[str], results: dict, parts: list, shared: bool) -> PooledResult:
    floor = min(p.floor for p in parts)
    cohort, checkpoint, idx = _common_cells(parts)
    if not len(cohort):
        raise MemtuiError("no (cohort, checkpoint) cell is estimated under every seed: nothing to pool.")
    rows = [_seed_rows(p, i) for p, i in zip(parts, idx, strict=True)]
    cells = _Block(np.stack([v for v, _ in rows]), [d for _, d in rows])
    event = checkpoint - cohort
    pre = event < 0
    final = parts[0].lay.steps[final_index(parts[0].lay.steps, settings.final_step)]
    cell_masks = {"post": ~pre, "pre": pre, "all": np.ones(len(pre), bool), "instantaneous": event == 0,
                  "residual": (checkpoint == final) & ~pre}  # fmt: skip
    cp = _pool(cells, cell_masks, floor)
    events, ev_block = _common_events(parts)
    n_ev = len(events)
    persistent_k = _headline_rows(events)
    ev_masks = {"persistent": np.append(events >= 0, False), "placebo": np.append(events < 0, False),
                "all": np.append(np.ones(n_ev, bool), False), "overall": np.append(np.zeros(n_ev, bool), True),
                **{f"persistent_{k}": np.arange(n_ev + 1) == r for k, r in persistent_k.items()}}  # fmt: skip
    ep = _pool(ev_block, ev_masks, floor)
    alpha = settings.alpha
    crit = _crits(cp, ep, pre, events, settings)
    frames = _frames(cp, ep, cells, ev_block, cohort, checkpoint, events, crit, cell_masks, alpha)
    summaries = _summaries(cp, ep, cells, ev_block, cell_masks, ev_masks, alpha)
    agreement = {
        scope: _agreement(scope, pool, block, masks, mask, names, alpha)
        for scope, pool, block, masks, mask in (
            ("profile", cp, cells, cell_masks, "post"),
            ("instantaneous", cp, cells, cell_masks, "instantaneous"),
            ("persistent", ep, ev_block, ev_masks, "persistent"),
            ("residual", cp, cells, cell_masks, "residual"),
            ("overall", ep, ev_block, ev_masks, "overall"),
        )
    }
    notes = _notes(settings, parts, len(cohort), shared)
    post = ~pre
    return PooledResult(settings=settings, names=names, seeds=results, **frames, summaries=summaries,
                        agreement=agreement, crit=float(crit["cells"][post][0]) if post.any() else math.nan,
                        shared=shared, notes=notes)  # fmt: skip


def _headline_rows(events: np.ndarray) -> dict[int, int]:
    """Row of persistent memorisation k checkpoints after training (the k-th positive event time), where it exists."""
    positive = np.flatnonzero(events > 0)
    return {k: int(positive[k - 1]) for k in HEADLINE_EVENTS if len(positive) >= k}


def _crits(cp: _Pool, ep: _Pool, pre: np.ndarray, events: np.ndarray, settings: Settings) -> dict[str, np.ndarray]:
    """Classic simultaneous critical values: the profile's cells (post and placebo families, or one), the
    instantaneous and residual cells, the persistent curve (c - g >= 0 and placebo event times, or one)."""
    a = settings.alpha

    def families(pool: _Pool, placebo: np.ndarray, post_law: str, pre_law: str) -> np.ndarray:
        out = np.full(len(placebo), np.nan)
        if settings.family == "all":
            out[:] = did.critical_value(pool.band["all"], a)
        else:
            out[~placebo] = did.critical_value(pool.band[post_law], a)
            out[placebo] = did.critical_value(pool.band[pre_law], a)
        return out

    return {
        "cells": families(cp, pre, "post", "pre"),
        "instantaneous": np.full(len(pre), did.critical_value(cp.band["instantaneous"], a)),
        "residual": np.full(len(pre), did.critical_value(cp.band["residual"], a)),
        "persistent": families(ep, events < 0, "persistent", "placebo"),
    }


def _frame(pool: _Pool, block: _Block, rows: np.ndarray, crit: np.ndarray, **coords) -> pl.DataFrame:
    est, se = pool.estimate[rows], pool.se[rows]
    half = crit * se
    values = block.values[:, rows]
    return pl.DataFrame(
        {
            **{name: pl.Series(v, dtype=pl.Int64) for name, v in coords.items()},
            "estimate": est,
            "std_error": se,
            "independent_se": pool.independent_se[rows],
            "crit": crit,
            "band_low": est - half,
            "band_high": est + half,
            "significant": np.isfinite(half) & (np.abs(est) > half),
            "seed_sd": values.std(axis=0, ddof=1),
            "seed_min": values.min(axis=0),
            "seed_max": values.max(axis=0),
        }
    )


def _frames(cp, ep, cells, ev_block, cohort, checkpoint, events, crit, masks, alpha) -> dict[str, pl.DataFrame]:
    event = checkpoint - cohort

    def cell_frame(mask: np.ndarray, c: np.ndarray) -> pl.DataFrame:
        rows = np.flatnonzero(mask)
        frame = _frame(cp, cells, rows, c[rows], cohort=cohort[rows], checkpoint=checkpoint[rows],
                       event_time=event[rows])  # fmt: skip
        return frame.with_columns(pl.Series("pre_treatment", event[rows] < 0)).sort("cohort", "checkpoint")

    ev_rows = np.arange(len(events))
    persistent = _frame(ep, ev_block, ev_rows, crit["persistent"], event_time=events)
    return {
        "cells": cell_frame(masks["all"], crit["cells"]),
        "instantaneous": cell_frame(masks["instantaneous"], crit["instantaneous"]),
        "residual": cell_frame(masks["residual"], crit["residual"]),
        "persistent": persistent.with_columns(pl.Series("pre_treatment", events < 0)),
    }


def _summaries(cp, ep, cells, ev_block, cell_masks, ev_masks, alpha) -> dict[str, Summary]:
    """Scalar summaries: means over a scope's rows, their draws the same means of the pooled (and seeds') draws."""
    z = z_value(alpha)
    out = {}
    scopes = [("instantaneous", cp, cells, cell_masks), ("residual", cp, cells, cell_masks),
              *((name, ep, ev_block, ev_masks) for name in ev_masks if name.startswith("persistent_")),
              ("overall", ep, ev_block, ev_masks)]  # fmt: skip
    floor = 0.0
    for name, pool, block, masks in scopes:
        mask = masks[name]
        if not mask.any():
            continue
        est = float(pool.estimate[mask].mean())
        se = float(did.bootstrap_se(pool.mean[name][None, :], floor)[0])
        own = did.bootstrap_se(pool.seed_mean[name], floor)
        ind = float(np.sqrt((own**2).sum()) / len(own))
        out[name] = Summary(name, est, se, ind, est - z * se, est + z * se, block.values[:, mask].mean(axis=1))
    return out


def _agreement(scope: str, pool: _Pool, block: _Block, masks: dict, mask: str, names, alpha: float) -> Agreement:
    rows = np.flatnonzero(masks[mask])
    values = block.values[:, rows]
    dev_se = pool.dev_se[:, rows]
    stat, crit, p, who = math.nan, math.nan, math.nan, ""
    ok = np.isfinite(dev_se)
    if ok.any():
        t = np.where(ok, np.abs(values - pool.estimate[rows]) / np.where(ok, dev_se, 1.0), -np.inf)
        stat = float(t.max())
        who = names[int(np.unravel_index(int(np.argmax(t)), t.shape)[0])]
        law = pool.dev[mask]
        crit = did.critical_value(law, alpha)
        p = float(np.mean(law >= stat))
    spread = float(values.std(axis=0, ddof=1).mean()) if len(rows) else math.nan
    se = float(np.nanmean(pool.se[rows])) if len(rows) and np.isfinite(pool.se[rows]).any() else math.nan
    return Agreement(scope, len(rows), stat, crit, p, who, spread, se)


def _notes(settings: Settings, parts: list, n_cells: int, shared: bool) -> list[str]:
    notes = []
    dropped = max(len(p.est.att) for p in parts) - n_cells
    if dropped > 0:
        notes.append(f"{dropped} cells estimated under some seeds but not all are left out of the pooled profile")
    if get_band(settings.band) is not CLASSIC:  # the pooled draws give the classic band only
        notes.append(
            f"the pooled bands are the classic band (R did's sup-t over the pooled draws), not the {settings.band} "
            "one: its per-draw studentisation is formed inside one seed's layout (each seed's own estimate keeps it)"
        )
    smallest = min(int(np.median(p.est.n_treated)) for p in parts)
    if smallest < SMALL_COHORT:  # measured in benchmarks/seeds.py (docs/suites.md)
        notes.append(
            f"cohorts of about {smallest} instances: the per-cell agreement tests (profile, instantaneous, residual) "
            "reject too often below ~50 per cohort (0.11-0.17 for a 5% test at 20 per cohort, simulated); the "
            "persistent and overall ones hold their level"
        )
    if not shared:
        notes.append("each seed drew its own multipliers: the seeds are treated as independent (too narrow where "
                     "they share instances)")  # fmt: skip
    return notes


__all__ = ["Agreement", "PooledResult", "Summary", "estimate_pooled", "pooled_mean"]
