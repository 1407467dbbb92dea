"""memtui's own vectorised difference-in-differences engine (Callaway & Sant'Anna ATT(g,t) with never-treated or
not-yet-treated controls, the paper's difference estimator, and the multiplier bootstrap)."""
