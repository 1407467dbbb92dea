"""Checkpoint names on the hub, per family: a step's revision without knowing the family's naming.

A revision template is text with ``{step}`` (Python format syntax, so ``ckpt_{step:03d}`` pads) and, for the OLMo
names that carry the tokens seen, ``{tokens_ceil*T}`` or ``{tokens_round*T}``: ``step · T / 1e9`` rounded up or to
the nearest whole number, T the tokens per step. The two roundings are what the hub's names show:

- OLMo 1 (``allenai/OLMo-1B``, ``OLMo-7B``): to the nearest, ``step20000-tokens84B`` (83.9 B),
  ``step100000-tokens419B`` (419.4 B) for 1B's 2048 x 2048 tokens per step;
- OLMo 2 (``allenai/OLMo-2-1124-7B``): up, ``stage1-step928646-tokens3896B`` (3895.03 B) for 1024 x 4096, as the
  upload scripts compute ``math.ceil(step * tokens_per_step / 1e9)``.

A stage that restarts its step count (OLMo 2's stage-2 "ingredients", trained after stage 1's last step) names its
checkpoints by the steps *within the stage*: ``{step-O}`` stands for ``step - O`` (O the stage's first panel step,
``build --step-offset``), and the tokens fields then count the stage's tokens too, as the hub's names do
(``allenai/OLMo-2-0325-32B``: ``stage2-ingredient1-step11921-tokens101B`` for 11,921 x 2048 x 4096 = 100.0006 B).

The hub's names come from the trainer's token counter: where one differs, resolve the names against the repo's
branches (``memtui.orders.olmo.match_revisions``).
"""

from __future__ import annotations

import math
import re

from memtui.core.errors import MemtuiError

_TOKENS = re.compile(r"\{tokens_(ceil|round)\*(\d+)\}")
_OFFSET = re.compile(r"\{step-(\d+)\}")
_STAGE2 = "stage2-ingredient{k}-step{{step-O}}-tokens{{tokens_ceil*T}}B"

# preset -> (template, whether it needs the tokens per step)
PRESETS: dict[str, str] = {
    "pythia": "step{step}",
    "polypythia": "step{step}",
    "hubble": "step{step}",
    "olmo1": "step{step}-tokens{tokens_round*T}B",
    "olmo2-stage1": "stage1-step{step}-tokens{tokens_ceil*T}B",
    # OLMo 2's mid-training mixes (one panel per ingredient: build --stage-name stage2-ingredientK --step-offset N)
    **{f"olmo2-stage2-ingredient{k}": _STAGE2.format(k=k) for k in (1, 2, 3)},
    "amber": "ckpt_{step:03d}",
}


def _billions(tokens: int, rounding: str) -> int:
    if rounding == "ceil":
        return -(-tokens // 10**9)  # exact integer ceiling (no float error at 4e12 tokens)
    return math.floor(tokens / 10**9 + 0.5)


def revision_name(template: str, step: int) -> str:
    """The revision of ``step`` under ``template`` (one-line refusal for a template that cannot be filled)."""
    offsets = {int(m) for m in _OFFSET.findall(template)}
    if len(offsets) > 1:
        raise MemtuiError(f"revision template '{template}' names two stage offsets ({{step-N}}); give one.")
    offset = offsets.pop() if offsets else 0
    if int(step) < offset:
        raise MemtuiError(
            f"step {int(step)} comes before the stage whose names template '{template}' gives (its steps start after "
            f"{offset}); extract that stage's steps only."
        )
    step = int(step) - offset
    text = _TOKENS.sub(lambda m: str(_billions(step * int(m[2]), m[1])), _OFFSET.sub("{step}", template))
    try:
        return text.format(step=step)
    except (KeyError, IndexError, ValueError, AttributeError) as exc:
        raise MemtuiError(
            f"cannot use revision template '{template}' ({type(exc).__name__}: {exc}); use {{step}} for the step, "
            "e.g. step{step}, and {tokens_ceil*T} / {tokens_round*T} for billions of tokens at T tokens per step."
        ) from None


def preset_template(preset: str, tokens_per_step: int | None = None, step_offset: int | None = None) -> str:
    """The revision template of a family preset; the OLMo presets need the run's tokens per step, and the stage-2
    ones the stage's first step (the panel records both: attributes ``tokens_per_step`` and ``step_offset``)."""
    if preset not in PRESETS:
        raise MemtuiError(f"--revisions: unknown preset '{preset}'; choose one of {', '.join(PRESETS)}.")
    template = PRESETS[preset]
    if "*T}" in template:
        if not tokens_per_step or tokens_per_step < 1:
            raise MemtuiError(
                f"--revisions {preset}: the names carry the tokens seen, so the tokens per step are needed; the panel "
                "records them when built with --order olmo or olmo-core (attribute tokens_per_step)."
            )
        template = template.replace("*T}", f"*{int(tokens_per_step)}}}")
    if "{step-O}" in template:
        if step_offset is None or step_offset < 0:
            raise MemtuiError(
                f"--revisions {preset}: a stage-2 ingredient counts its own steps, so its stage's first step is "
                "needed; "
                "the panel records it when built with --order olmo --step-offset N (attribute step_offset)."
            )
        template = template.replace("{step-O}", f"{{step-{int(step_offset)}}}")
    return template
