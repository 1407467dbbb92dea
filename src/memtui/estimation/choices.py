"""The allowed values of every categorical estimation setting, in one place that imports nothing heavy (the bands'
registry imports their modules, whose numerics load inside their methods): the
command line builds its options from them at start-up, Settings checks against them, the dialogs offer them."""

from __future__ import annotations

from memtui.engine.band_registry import band_names

# Every estimator, in the order the workbench's `d` cycles them: the causal one, the paper's naive difference, and
# "extractable" (the cohort's level, counterfactual taken as zero), shown beside the other two by `compare`
ESTIMATORS = ("did", "difference", "extractable")

SETTING_CHOICES: dict[str, tuple[str, ...]] = {
    "estimator": ESTIMATORS,
    "base_period": ("varying", "universal"),
    "control_group": ("never_treated", "not_yet_treated"),
    "multiplier": ("rademacher", "mammen"),
    "family": ("post", "all"),
    # the simultaneous bands, default first: read from their registry (memtui.engine.band_registry); Settings checks
    # the registry itself, so a band registered later is a valid choice too
    "band": band_names(),
    "engine": ("memtui", "differences"),
}
