"""Multipliers keyed by the panel's instance (or by cluster), so that several bootstraps share one set of draws.

The multiplier bootstrap of ``did.bootstrap_shared`` draws one multiplier per row of its layout, in the layout's own
row order: two layouts built on different subsets of a panel (subgroups) would get unrelated multipliers for the same
instance, and their draws could not be combined (a difference of two groups, a band over both). A
``JointMultipliers`` source draws, per chunk of draws, one multiplier per *key* from the same seeded generator, and
each layout looks its rows' multipliers up by the key of the panel instance each row came from
(``Layout.source_rows``): every bootstrap made with the same source and seed sees the same multiplier for the same
instance in the same draw, whatever subset or order its layout has.

Keys are the panel's instances (``per_instance``) or clusters (``clustered``): every instance of a cluster gets the
same multiplier, the wild cluster bootstrap (Cameron, Gelbach & Miller 2008; Callaway & Sant'Anna 2021, remark 10;
R `did`'s ``clustervars``, which sums the influence function within clusters: sum_c v_c sum_{i in c} psi_i).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class JointMultipliers:
    """One multiplier per key and draw; ``keys[i]``: the key of row i of the data the layouts are built from."""

    keys: np.ndarray  # (n,) int64 in [0, n_keys)
    n_keys: int

    @classmethod
    def per_instance(cls, n: int) -> JointMultipliers:
        return cls(keys=np.arange(n, dtype=np.int64), n_keys=n)

    @classmethod
    def clustered(cls, cluster: np.ndarray) -> JointMultipliers:
        """Keys from cluster labels (any integers); a label below 0 makes the instance a cluster of its own."""
        cluster = np.asarray(cluster, dtype=np.int64)
        alone = cluster < 0
        codes = np.empty(len(cluster), dtype=np.int64)
        _, codes[~alone] = np.unique(cluster[~alone], return_inverse=True)
        shared = int(codes[~alone].max()) + 1 if (~alone).any() else 0
        codes[alone] = shared + np.arange(int(alone.sum()))
        return cls(keys=codes, n_keys=shared + int(alone.sum()))

    @property
    def n_clusters(self) -> int:
        """Distinct keys among the instances (fewer than ``n_keys`` after ``subset``)."""
        return len(np.unique(self.keys))

    def subset(self, rows: np.ndarray) -> JointMultipliers:
        """The same source for the data restricted to ``rows`` (a subgroup's panel): keys and their count unchanged,
        so its draws are the full panel's for those instances."""
        return JointMultipliers(keys=self.keys[rows], n_keys=self.n_keys)

    def take(self, drawn: np.ndarray, source_rows: np.ndarray) -> np.ndarray:
        """The layout's multipliers (rows in layout order) from ``drawn``, one row per key (``did.multipliers`` of
        shape (n_keys, chunk))."""
        if source_rows is None:
            raise ValueError("a layout without source_rows cannot take keyed multipliers")
        return drawn[self.keys[source_rows]]
