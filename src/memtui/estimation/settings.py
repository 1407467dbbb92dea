"""The settings of one estimate: a frozen record that cannot be invalid (every construction checks it)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import ClassVar

from memtui.core.errors import MemtuiError
from memtui.engine.band_registry import BANDS, DEFAULT_BAND, BandName
from memtui.estimation.choices import SETTING_CHOICES

DEFAULT_DRAWS = 1000  # multiplier-bootstrap draws of an estimate; the CLI's -B and `plan` read it here

# The bands' alpha: at most 0.5 (a band covering less than half the time says nothing), at least 0.0001 (a 99.99%
# band: its critical value is the bootstrap's 1 - alpha quantile, which 1000 draws already cannot place beyond their
# largest, and below ~1e-16 the normal quantile itself is 1 - alpha = 1 in floating point).
ALPHA_MIN, ALPHA_MAX = 0.0001, 0.5
ALPHA_RANGE = f"from {ALPHA_MIN:g} to {ALPHA_MAX:g}"


def check_alpha(alpha: float, name: str = "alpha") -> None:
    """One-line refusal of an alpha outside [ALPHA_MIN, ALPHA_MAX] (NaN included)."""
    if not ALPHA_MIN <= alpha <= ALPHA_MAX:
        raise MemtuiError(
            f"{name} must be {ALPHA_RANGE} (a {1 - ALPHA_MAX:.0%} to {1 - ALPHA_MIN:.2%} band), not {alpha:g}."
        )


def coverage(alpha: float) -> str:
    """A band's coverage in words, exact for every allowed alpha: 0.05 -> '95%', 0.0001 -> '99.99%' (never '100%')."""
    return f"{100 * (1 - alpha):.6g}%"


@dataclass(frozen=True)
class Settings:
    metric: str = "loglik"
    # "did" (Callaway & Sant'Anna ATT(g,c)), "difference" (paper's estimator 1) or "extractable" (the cohort's mean
    # metric at c, taken as memorisation: the counterfactual is assumed zero, as extraction-based measures do)
    estimator: str = "did"
    base_period: str = "varying"  # pre-treatment cells: "varying" (checkpoint before c) or "universal" (before g)
    control_group: str = "never_treated"  # or "not_yet_treated"
    draws: int = DEFAULT_DRAWS  # bootstrap draws B (permutations P under band permutation); 0 = analytic, pointwise
    multiplier: str = "rademacher"  # or "mammen"
    seed: int = 0
    alpha: float = 0.05
    family: str = "post"  # cells sharing one simultaneous band: "post" (c >= g; pre cells get their own) or "all"
    final_step: int | None = None  # residual memorisation checkpoint; None = last completed
    engine: str = "memtui"  # or "differences" (the paper's pipeline; slow)
    # the simultaneous band, by name (engine.band_registry: the bootstrap-t band by default, R did's classic one)
    band: BandName = DEFAULT_BAND
    # per-instance covariates of doubly robust DiD (engine.drdid; R did's xformla with est_method "dr"); () = none
    covariates: tuple[str, ...] = ()
    # clustered bootstrap (R did's clustervars): "" (none), "batch" (instances of one optimizer step) or a categorical
    # covariate's name; one multiplier per cluster, never-treated controls each their own (estimation.clusters)
    cluster: str = ""

    # the allowed values of every categorical setting: the CLI's choices and the settings dialog read them here
    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = SETTING_CHOICES

    def __post_init__(self) -> None:
        """A Settings cannot be invalid: every construction (and ``dataclasses.replace``) checks it."""
        for name, allowed in self.CHOICES.items():
            allowed = tuple(BANDS) if name == "band" else allowed  # the registry as it is now
            if getattr(self, name) not in allowed:
                raise MemtuiError(f"{name} must be one of {', '.join(allowed)}, not '{getattr(self, name)}'.")
        check_alpha(self.alpha)
        object.__setattr__(self, "covariates", tuple(self.covariates))  # a list (JSON, a caller) reads as a tuple
        if self.covariates:
            _check_covariates(self)
        if self.draws < 0 or 0 < self.draws < 20:
            raise MemtuiError(f"draws must be 0 (no bootstrap) or at least 20, not {self.draws}.")
        if self.seed < 0:
            raise MemtuiError(f"seed must be 0 or a positive integer, not {self.seed}.")
        refusal = BANDS[self.band].refusal(self)  # what the band supports (multipliers, engines, covariates)
        if refusal:
            raise MemtuiError(refusal)

        if self.cluster:
            self._check_cluster()

    def _check_cluster(self) -> None:
        """A clustered bootstrap needs draws (the calibrated band re-estimates each draw's variance cluster by
        cluster: ``engine.bands.clustered_variances``)."""
        if self.draws == 0:
            raise MemtuiError(
                "clustered standard errors come from the bootstrap: use -B 1000 (or at least 20) with --cluster."
            )
        if self.engine == "differences":
            raise MemtuiError("engine differences does not take --cluster here; use --engine memtui.")

    def validate(self) -> Settings:
        """Kept for callers written before construction checked: a Settings is always valid."""
        return self

    def key(self) -> dict:
        # covariates as a list: the key must equal itself read back from JSON (the cache compares them)
        return {**asdict(self), "covariates": list(self.covariates)}


def _check_covariates(s: Settings) -> None:
    """What doubly robust DiD with covariates supports, refused in one line otherwise."""
    if s.estimator != "did" or s.engine != "memtui":
        raise MemtuiError(
            f"covariates need the did estimator and the memtui engine, not estimator {s.estimator} / engine {s.engine}."
        )


# the data orders (``memtui build --order``) whose training order is a seeded uniform shuffle of the instances:
# GPT-NeoX / Megatron's shuffle index (Pythia, PolyPythias), OLMo's and OLMo-core's global indices, Amber's chunks
SHUFFLED_ORDERS = ("neox", "olmo", "olmo-core", "amber")


def order_not_shuffled(panel) -> str | None:
    """Why ``panel``'s cohorts are not known to be assigned at random (None where they are): its provenance does not
    name a uniformly shuffled order (a panel built before provenance, imported from a table, a memmap token file of
    unknown order), or some instances were inserted at chosen steps (non-random timing)."""
    order = panel.attrs.get("order", "")
    if order not in SHUFFLED_ORDERS:
        known = f"its order is {order!r}" if order else "it records no data order (imported, or built before it did)"
        return f"the panel's training order is not known to be a uniform shuffle ({known})"
    if "insertion_steps" in panel.provenance or "duplicates" in panel.provenance or "inserted_config" in panel.attrs:
        return "some instances were inserted at chosen steps: their timing is not random"
    return None


def design_not_permutable(control_group: str, covariates, cluster: str, engine: str) -> str | None:
    """Why the permutation band cannot serve these settings on any panel (None where it can): the reasons its
    ``refusal`` gives, in the words of a default that falls back."""
    if control_group != "never_treated":
        return "not-yet-treated controls move with the cohort labels"
    if covariates:
        return "--covariates (doubly robust DiD) is not permuted"
    if cluster:
        return "--cluster: the permutation band permutes instances, not clusters"
    if engine != "memtui":
        return f"engine {engine} has only the classic band"
    return None


def controls_not_in_order(panel) -> str | None:
    """Why ``panel``'s never-trained controls are not part of its randomised order (None where they are): the
    permutation band permutes their label with the cohorts', which is exact by design only where they were drawn from
    the shuffled order past the last trained step (``--controls beyond``: every one has a position in the order), not
    from a held-out set (position -1) or from an unrecorded source."""
    import numpy as np

    from memtui.panel.model import NEVER

    position = panel.provenance.get("position")
    never = np.asarray(panel.treatment) == NEVER
    if position is None:
        return "the panel does not record where its never-trained controls come from (no positions in the order)"
    if never.any() and (np.asarray(position)[never] < 0).any():
        return (
            "its never-trained controls are held out, not drawn from the shuffled order: not part of its randomisation"
        )
    return None


# why a shuffled-order panel whose controls were drawn from the order gets the permutation band by default
# (benchmarks/placebo.py, benchmarks/permutation_constructions.py;
# docs/calibration-study.md, "The permutation band's constructions")
PERMUTATION_DEFAULT = (
    "the training order is a uniform shuffle and the controls were drawn from it, so the labels were assigned at "
    "random: exact under no memorisation whatever the noise (skewed null, 30 per cohort: 7.0 % post, 5.0 % pre-trend "
    "against the calibrated band's 16.0 and 43.0 %), with the calibrated band's power within 1.4 points (38.8 against "
    "40.2 % of the true cells, 100 per cohort, effect 0.2)"
)


def default_band(panel, *, draws: int, control_group: str, covariates, cluster: str, engine: str) -> tuple[str, str]:
    """The band a run gets without --band, and why: the permutation band where the panel's order is a uniform shuffle,
    its controls were drawn from that order and the design allows it (``PERMUTATION_DEFAULT``); the calibrated band
    (``DEFAULT_BAND``) elsewhere, with why the permutation band could not run."""
    if not draws:
        return DEFAULT_BAND, "no draws: pointwise bands"
    why = (
        order_not_shuffled(panel)
        or design_not_permutable(control_group, covariates, cluster, engine)
        or controls_not_in_order(panel)
    )
    return (DEFAULT_BAND, why) if why else ("permutation", PERMUTATION_DEFAULT)
