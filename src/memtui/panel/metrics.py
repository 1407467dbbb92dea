"""The metric registry: every metric memtui knows by name, its sign, label and unit, and what computes it.

This is the one list. Extraction's columns and part files (``extract/units.py``), the scorer's record
(``extract/scoring.Scores``), the presets, a new panel's datasets, the sign a panel without one gets, the labels
``memtui info`` and the workbench show, the workbench's metric cycle (``m``), the default metric and the table in
docs/panel-format.md all read it. A panel may hold metrics that are not here (an imported table's own columns):
:func:`get` describes them as imported, higher is better, labelled by their name (the panel's stored sign wins).

Adding a metric that extraction computes: one entry in ``REGISTRY`` below, its field and its computation in
``extract/scoring.py`` (``Scores``, ``per_instance``), its row in docs/panel-format.md and its tests
(docs/architecture.md, "How to add a metric").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

# What computes a metric's values:
# - "logits": extraction, reduced per instance from each target's log-probability, rank and entropy under the logits;
# - "extractability": extraction, from the targets in the (k, l) suffix window: their top-1 flags (Carlini et al.'s
#   extractability) or their sampling probabilities (Hayes et al.'s probabilistic extraction); its datasets carry the
#   attributes ``k`` and ``l`` and rows shorter than k + l stay NaN;
# - "goldfish": extraction, like "logits" but over the targets the run trained on only: a panel built from a run with
#   a token-level loss mask (Apertus's Goldfish loss: ``build --goldfish K,H``) records the mask's k, h and pad id in
#   its attributes (``goldfish_k``, ``goldfish_h``, ``goldfish_pad``), and the masked targets are left out. Only
#   such a panel has these metrics (``STANDARD`` below is what every other panel gets);
# - "import": nothing in memtui; only a table (``memtui import``) brings values.
ComputedBy = Literal["logits", "extractability", "goldfish", "import"]
COMPUTED_BY: tuple[ComputedBy, ...] = ("logits", "extractability", "goldfish", "import")


@dataclass(frozen=True)
class Metric:
    """One metric. ``sign`` is +1 where a higher value means the model predicts better, so memorisation
    tau = sign * ATT is positive for "does better on what it trained on"."""

    name: str
    sign: Literal[1, -1]
    label: str  # one line, as `memtui info`, the workbench and `memtui estimate` show it
    unit: str
    computed_by: ComputedBy

    @property
    def extracted(self) -> bool:
        """Whether `memtui extract` computes it (from a model's logits)."""
        return self.computed_by != "import"


# In this order: the workbench's metric cycle, extraction's part-file columns, a new panel's datasets, and the order
# the default metric is looked for in (loglik first: the paper's headline metric).
REGISTRY: Mapping[str, Metric] = MappingProxyType(
    {
        m.name: m
        for m in (
            Metric("loglik", 1, "sequence log-likelihood", "nats, summed over targets", "logits"),
            Metric("accuracy", 1, "mean token accuracy", "share of targets that are top-1 (0..1)", "logits"),
            Metric("rank", -1, "mean rank of the true token", "vocabulary entries above the target (mean)", "logits"),
            Metric("entropy", -1, "mean predictive entropy", "nats (mean over targets)", "logits"),
            Metric(
                "extractable",
                1,
                "(k, l)-extractable: greedy decoding from k tokens reproduces the next l",
                "0 or 1",
                "extractability",
            ),
            Metric(
                "extractable_len",
                1,
                "suffix tokens greedy decoding reproduces before its first mismatch",
                "tokens (0..l)",
                "extractability",
            ),
            Metric(
                "sampled_logp",
                1,
                "log p that top-40 sampling (T 1) from k tokens reproduces the next l",
                "nats (<= 0; -690.8 = p below 1e-300)",
                "extractability",
            ),
            Metric(
                "loglik_trained",
                1,
                "sequence log-likelihood over the trained targets (the goldfish-masked ones left out)",
                "nats, summed over the targets the loss trained",
                "goldfish",
            ),
            Metric(
                "accuracy_trained",
                1,
                "mean token accuracy over the trained targets (the goldfish-masked ones left out)",
                "share of the trained targets that are top-1 (0..1)",
                "goldfish",
            ),
        )
    }
)

# The sampling scheme of ``sampled_logp`` (Hayes et al. 2024, "Measuring memorization in language models via
# probabilistic extraction"): top-k sampling with k = 40 at temperature 1, the scheme of their experiments; recorded on
# the metric's dataset (attributes ``top_k`` and ``temperature``). A suffix token outside the top k has probability 0:
# the sequence's log-probability is then -inf, stored as the floor ln(1e-300) (any p below 1e-300 is stored so), which
# keeps every mean finite and every (n, p) conclusion for n < 1e290 exact (docs/panel-format.md).
SAMPLING_TOP_K = 40
SAMPLING_TEMPERATURE = 1.0
SAMPLED_LOGP_FLOOR = -690.7755278982137  # ln(1e-300)

NAMES: tuple[str, ...] = tuple(REGISTRY)
EXTRACTED: tuple[str, ...] = tuple(m.name for m in REGISTRY.values() if m.extracted)  # what extraction can fill
FROM_LOGITS: tuple[str, ...] = tuple(m.name for m in REGISTRY.values() if m.computed_by == "logits")
EXTRACTABILITY: tuple[str, ...] = tuple(m.name for m in REGISTRY.values() if m.computed_by == "extractability")
GOLDFISH: tuple[str, ...] = tuple(m.name for m in REGISTRY.values() if m.computed_by == "goldfish")
STANDARD: tuple[str, ...] = tuple(m for m in EXTRACTED if m not in GOLDFISH)  # a new panel's, without a loss mask


def get(name: str) -> Metric:
    """The registry's metric, or an imported one (higher is better, labelled by its name) for any other name."""
    metric = REGISTRY.get(name)
    return metric if metric is not None else Metric(name, 1, name, "as imported", "import")


def sign(name: str) -> int:
    return get(name).sign


def label(name: str) -> str:
    return get(name).label


def ordered(names: Iterable[str]) -> list[str]:
    """``names`` in the registry's order, then those the registry does not know, in their own order."""
    names = list(names)
    present = set(names)
    return [m for m in NAMES if m in present] + [m for m in names if m not in REGISTRY]


def default_metric(names: Iterable[str], has_values: Callable[[str], bool]) -> str:
    """The metric shown and estimated when none is named: the first of :func:`ordered` that has values (loglik where
    it has), else the first of them. The one rule: the CLI and the workbench both come here (``Panel.default_metric``).
    ``names`` must not be empty."""
    candidates = ordered(names)
    return next((m for m in candidates if has_values(m)), candidates[0])


def docs_table() -> str:
    """The metric table of docs/panel-format.md, generated from the registry (a test checks the doc holds it)."""
    rows = ["| metric | better | unit | computed by | label |", "| --- | --- | --- | --- | --- |"]
    for m in REGISTRY.values():
        better = "higher" if m.sign > 0 else "lower"
        rows.append(f"| `{m.name}` | {better} | {m.unit} | {m.computed_by} | {m.label} |")
    return "\n".join(rows)
