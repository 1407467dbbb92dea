"""The allowed values of every categorical estimation setting, in one place that imports nothing heavy: the
command line builds its options from them at start-up, Settings checks against them, the dialogs offer them."""

from __future__ import annotations

# Every estimator, in the order the workbench's `d` cycles them: the causal one, the paper's naive difference, and
# "extractable" (the cohort's level, counterfactual taken as zero), shown beside the other two by `compare`
ESTIMATORS = ("did", "difference", "extractable")

SETTING_CHOICES: dict[str, tuple[str, ...]] = {
    "estimator": ESTIMATORS,
    "base_period": ("varying", "universal"),
    "control_group": ("never_treated", "not_yet_treated"),
    "multiplier": ("rademacher", "mammen"),
    "family": ("post", "all"),
    # the simultaneous band: "calibrated" (studentised bootstrap-t, holds its level with small cohorts; the default)
    # or "classic" (R did's, csdid's and the paper's); kept equal to memtui.engine.bands.BANDS (a test checks)
    "band": ("calibrated", "classic"),
    "engine": ("memtui", "differences"),
}
