"""``--by`` specifications: which instances form which subgroup, read from the panel's covariates.

    NAME                  one group per level of a categorical covariate (or of a numeric one with few values)
    NAME>=VALUE           a comparison (>=, <=, >, <, ==, !=): two groups, where it holds and where it does not
    NAME:quartiles        numeric bins: tertiles, quartiles, quintiles, deciles, :K (K equal-count bins) or
    NAME:bins=a,b,c       bins cut at a, b and c (below a, [a, b), [b, c), c and above)

Instances whose covariate is unknown (NaN, empty text) belong to no group (label -1). Equal-count bins are cut at
the quantiles of the instances ``among`` selects (every instance with a value, or only the treated ones where the
controls are shared and carry no dose); a bin's interval is closed on the left, the last one on both sides.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

import numpy as np

from memtui.core.errors import MemtuiError
from memtui.core.text import clean
from memtui.panel.model import Panel
from memtui.panel.names import check_covariate_name

QUANTILES = {"tertiles": 3, "quartiles": 4, "quintiles": 5, "deciles": 10}
MAX_LEVELS = 12  # a numeric covariate with at most this many values may be split by value (doses 1, 2, 4, 8, 16)
MAX_GROUPS = 64
_NAME = r"[^\s<>=!:]+"  # any word up to an operator; then held to the one covariate naming rule (panel/names.py)
_COMPARE = re.compile(rf"^\s*({_NAME})\s*(>=|<=|==|!=|>|<)\s*(\S+)\s*$")
_BINS = re.compile(rf"^\s*({_NAME})\s*:\s*(\S+)\s*$")
_LEVELS = re.compile(rf"^\s*({_NAME})\s*$")
_OPS = {">=": np.greater_equal, "<=": np.less_equal, ">": np.greater, "<": np.less, "==": np.equal, "!=": np.not_equal}


@dataclass(frozen=True)
class Groups:
    """A ``--by`` specification resolved on a panel."""

    spec: str
    covariate: str
    labels: np.ndarray  # per instance: its group, -1 for none
    names: list[str]
    ordered: bool  # groups of a numeric covariate in increasing order: a dose-response
    values: np.ndarray  # the covariate (float64 for numeric ones, str for categorical ones)

    def centres(self, among: np.ndarray) -> np.ndarray:
        """Per group, the mean covariate of its instances in ``among`` (NaN for a categorical covariate)."""
        if self.values.dtype.kind != "f":
            return np.full(len(self.names), np.nan)
        return np.array([np.mean(self.values[(self.labels == g) & among]) for g in range(len(self.names))])


def group_labels(panel: Panel, spec: str, among: np.ndarray | None = None) -> tuple[np.ndarray, list[str]]:
    """Per instance its group (-1: left out) and the groups' names, from a ``--by`` spec (module docstring)."""
    groups = resolve(panel, spec, among)
    return groups.labels, groups.names


def resolve(panel: Panel, spec: str, among: np.ndarray | None = None) -> Groups:
    """``group_labels`` with what the dose-response needs: the covariate and whether the groups are ordered."""
    among = np.ones(panel.n_instances, bool) if among is None else np.asarray(among, bool)
    m = _COMPARE.match(spec) or _BINS.match(spec) or _LEVELS.match(spec)
    if m:
        check_covariate_name(m.group(1), f"--by '{clean(spec, 60)}':")
    if m := _COMPARE.match(spec):
        groups = _comparison(spec, *m.groups(), _covariate(panel, m.group(1)))
    elif m := _BINS.match(spec):
        groups = _binned(spec, m.group(1), m.group(2), _numeric(panel, m.group(1), spec), among)
    elif m := _LEVELS.match(spec):
        groups = _levels(spec, m.group(1), _covariate(panel, m.group(1)))
    else:
        raise MemtuiError(
            f"--by '{clean(spec, 60)}' is not a subgroup spec: give NAME (its levels), NAME>=VALUE (a comparison), "
            "NAME:quartiles (or :deciles, :K, :bins=a,b,c)."
        )
    groups = _used(replace(groups, names=_distinct(groups.names)), among)
    found = np.unique(groups.labels[groups.labels >= 0])
    if len(found) < 2:
        raise MemtuiError(f"--by '{clean(spec, 60)}' makes {len(found)} group(s) on this panel; subgroups need two.")
    if len(groups.names) > MAX_GROUPS:
        raise MemtuiError(f"--by '{clean(spec, 60)}' makes {len(groups.names)} groups; at most {MAX_GROUPS}.")
    return groups


def _used(groups: Groups, among: np.ndarray) -> Groups:
    """Only the groups with an instance in ``among`` (the treated, where controls are shared), renumbered."""
    labels = groups.labels
    used = np.unique(labels[(labels >= 0) & among])
    if len(used) == len(groups.names):
        return groups
    labels = np.where(np.isin(labels, used), np.searchsorted(used, labels), -1)
    return replace(groups, labels=labels, names=[groups.names[u] for u in used])


def _covariate(panel: Panel, name: str) -> np.ndarray:
    values = panel.covariates.get(name)
    if values is None:
        have = ", ".join(clean(k, 40) for k in panel.covariates) or "none (memtui covariates PANEL computes them)"
        raise MemtuiError(f"{panel._name}: no covariate '{clean(name, 40)}' to group by; covariates: {have}.")
    values = np.asarray(values)
    if values.dtype.kind in "iuf":
        return values.astype(np.float64)
    return np.array(["" if v is None else str(v) for v in values], dtype=object)


def _numeric(panel: Panel, name: str, spec: str) -> np.ndarray:
    values = _covariate(panel, name)
    if values.dtype.kind != "f":
        raise MemtuiError(f"--by '{clean(spec, 60)}': covariate '{clean(name, 40)}' is categorical; bins need numbers.")
    return values


def _known(values: np.ndarray) -> np.ndarray:
    return np.isfinite(values) if values.dtype.kind == "f" else np.array([v not in ("", "nan") for v in values])


def _comparison(spec: str, name: str, op: str, text: str, values: np.ndarray) -> Groups:
    known = _known(values)
    if values.dtype.kind == "f":
        bound = _finite(text, spec)
        holds = np.zeros(len(values), bool)
        holds[known] = _OPS[op](values[known], bound)
    elif op in ("==", "!="):
        holds = (values == text) if op == "==" else (values != text)
    else:
        raise MemtuiError(f"--by '{clean(spec, 60)}': covariate '{clean(name, 40)}' is categorical; use == or !=.")
    labels = np.where(known, np.where(holds, 0, 1), -1)
    names = [f"{name}{op}{text}", f"not {name}{op}{text}"]
    return Groups(spec, name, labels, names, ordered=False, values=values)


def _levels(spec: str, name: str, values: np.ndarray) -> Groups:
    known = _known(values)
    levels, codes = np.unique(values[known], return_inverse=True)
    if values.dtype.kind == "f" and len(levels) > MAX_LEVELS:
        raise MemtuiError(
            f"--by '{clean(spec, 60)}': numeric covariate '{clean(name, 40)}' has {len(levels)} values; bin it "
            f"({name}:quartiles, {name}:bins=a,b) or compare it ({name}>=VALUE)."
        )
    labels = np.full(len(values), -1, dtype=np.int64)
    labels[known] = codes
    numeric = values.dtype.kind == "f"
    names = [f"{name}={v:g}" if numeric else f"{name}={clean(str(v), 40)}" for v in levels]
    if numeric and len(set(names)) < len(names):  # values alike in 6 digits: as many as tell them apart
        names = [f"{name}={v!r}" for v in levels.tolist()]
    return Groups(spec, name, labels, names, ordered=numeric, values=values)


def _distinct(names: list[str]) -> list[str]:
    """Names that tell the groups apart: groups alike in what is shown (levels alike in their first 40 characters,
    bins whose edges print alike) get ``#1``, ``#2``, ... in their order (two groups of one name read as one)."""
    seen: dict[str, int] = {}
    for n in names:
        seen[n] = seen.get(n, 0) + 1
    count: dict[str, int] = {}
    out = []
    for n in names:
        if seen[n] > 1:
            count[n] = count.get(n, 0) + 1
            n = f"{n} #{count[n]}"
        out.append(n)
    return out


def _binned(spec: str, name: str, how: str, values: np.ndarray, among: np.ndarray) -> Groups:
    known = np.isfinite(values)
    if how.startswith("bins="):
        cuts = np.array(sorted({_finite(x, spec) for x in how.removeprefix("bins=").split(",")}))
    else:  # ASCII digits only: str.isdigit() also takes '²' and '٣', which int() then refuses or reads
        k = QUANTILES.get(how) or (int(how) if re.fullmatch(r"[0-9]{1,4}", how) else 0)
        if not 2 <= k <= MAX_GROUPS:
            raise MemtuiError(
                f"--by '{clean(spec, 60)}': bin by {', '.join(QUANTILES)}, a count from 2 to {MAX_GROUPS}, or "
                "bins=a,b,c."
            )
        sample = values[known & among]
        if not len(sample):
            raise MemtuiError(f"--by '{clean(spec, 60)}': no instance has a value of '{clean(name, 40)}'.")
        cuts = np.unique(np.quantile(sample, np.linspace(0, 1, k + 1)[1:-1]))
    labels = np.full(len(values), -1, dtype=np.int64)
    labels[known] = np.searchsorted(cuts, values[known], side="right")
    edges = [-np.inf, *cuts, np.inf]
    names = [_interval(name, lo, hi) for lo, hi in zip(edges[:-1], edges[1:], strict=True)]
    # bins no instance falls in (ties at a quantile, cuts beyond the data) are dropped, the rest renumbered
    used = np.unique(labels[known])
    labels[known] = np.searchsorted(used, labels[known])
    return Groups(spec, name, labels, [names[u] for u in used], ordered=True, values=values)


def _finite(text: str, spec: str) -> float:
    """A finite number of a --by spec (a comparison's bound, a bin's edge): not nan, inf or 1e400."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not np.isfinite(value):
        raise MemtuiError(f"--by '{clean(spec, 60)}': '{clean(text, 30)}' is not a finite number.")
    return value


def _interval(name: str, lo: float, hi: float) -> str:
    if np.isinf(lo):
        return f"{name}<{hi:.4g}"
    if np.isinf(hi):
        return f"{name}>={lo:.4g}"
    return f"{name} in [{lo:.4g}, {hi:.4g})"
