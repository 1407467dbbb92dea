"""Checkpoint names on the hub, per family: a step's revision without knowing the family's naming.

A revision template is text with ``{step}`` (Python format syntax, so ``ckpt_{step:03d}`` pads) and, for the OLMo
names that carry the tokens seen, ``{tokens_ceil*T}`` or ``{tokens_round*T}``: ``step · T / 1e9`` rounded up or to
the nearest whole number, T the tokens per step. The two roundings are what the hub's names show:

- OLMo 1 (``allenai/OLMo-1B``, ``OLMo-7B``): to the nearest, ``step20000-tokens84B`` (83.9 B),
  ``step100000-tokens419B`` (419.4 B) for 1B's 2048 x 2048 tokens per step;
- OLMo 2 (``allenai/OLMo-2-1124-7B``): up, ``stage1-step928646-tokens3896B`` (3895.03 B) for 1024 x 4096, as the
  upload scripts compute ``math.ceil(step * tokens_per_step / 1e9)``.

The hub's names come from the trainer's token counter: where one differs, resolve the names against the repo's
branches (``memtui.orders.olmo.match_revisions``).
"""

from __future__ import annotations

import math
import re

from memtui.core.errors import MemtuiError

_TOKENS = re.compile(r"\{tokens_(ceil|round)\*(\d+)\}")

# preset -> (template, whether it needs the tokens per step)
PRESETS: dict[str, str] = {
    "pythia": "step{step}",
    "polypythia": "step{step}",
    "hubble": "step{step}",
    "olmo1": "step{step}-tokens{tokens_round*T}B",
    "olmo2-stage1": "stage1-step{step}-tokens{tokens_ceil*T}B",
    "amber": "ckpt_{step:03d}",
}


def _billions(tokens: int, rounding: str) -> int:
    if rounding == "ceil":
        return -(-tokens // 10**9)  # exact integer ceiling (no float error at 4e12 tokens)
    return math.floor(tokens / 10**9 + 0.5)


def revision_name(template: str, step: int) -> str:
    """The revision of ``step`` under ``template`` (one-line refusal for a template that cannot be filled)."""
    text = _TOKENS.sub(lambda m: str(_billions(int(step) * int(m[2]), m[1])), template)
    try:
        return text.format(step=int(step))
    except (KeyError, IndexError, ValueError, AttributeError) as exc:
        raise MemtuiError(
            f"cannot use revision template '{template}' ({type(exc).__name__}: {exc}); use {{step}} for the step, "
            "e.g. step{step}, and {tokens_ceil*T} / {tokens_round*T} for billions of tokens at T tokens per step."
        ) from None


def preset_template(preset: str, tokens_per_step: int | None = None) -> str:
    """The revision template of a family preset; the OLMo presets need the run's tokens per step."""
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
    return template
