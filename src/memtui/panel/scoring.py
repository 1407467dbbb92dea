"""How each checkpoint's column was scored: the device type, the model body's dtype and the scorer's path, as
extraction records them in ``checkpoints/scoring`` (docs/panel-format.md), and the note an estimate gives when the
checkpoints it reads were scored in different ways.

Why it is recorded: on one H100 a 2,049-token row's loglik differed by up to 3.83 nats between a bf16 and an fp32
body, and by up to 3.95 nats between the padded fast path's batches in bf16 (docs/extraction.md, "Batch
invariance"). A panel resumed on another machine or with another ``--dtype`` mixes such columns without a trace: the
differences across them are then partly rounding, not memorisation.
"""

from __future__ import annotations

from collections import Counter

from memtui.core.text import clean

SCORING_BYTES = 64  # "cuda bfloat16 batch-invariant + cpu float32 batch-invariant" fits
PATHS = {True: "batch-invariant", False: "fast path"}


def describe(device_type: str, dtype: str, invariant: bool) -> str:
    """One checkpoint's scoring in words, e.g. ``cuda bfloat16 batch-invariant``."""
    return f"{device_type} {str(dtype).removeprefix('torch.')} {PATHS[bool(invariant)]}"


def combine(scorings: list[str]) -> str:
    """The scoring of a column whose parts were scored by several workers: their distinct ways joined by `` + ``
    (older parts record none and add nothing)."""
    return " + ".join(sorted({s for s in scorings if s}))


def counts(scorings: list[str], done) -> Counter:
    """How many completed checkpoints were scored each way (those that record none left out)."""
    return Counter(s.strip() for s, d in zip(scorings, done, strict=False) if d and s.strip())


def listed(seen: Counter, most: int, pattern: str = "{way} ({n})") -> str:
    """The ``most`` commonest ways of ``seen`` with their counts, each as ``pattern`` says, cleaned for the terminal."""
    return "; ".join(pattern.format(way=clean(s, SCORING_BYTES), n=n) for s, n in seen.most_common(most))


def mixed_note(scorings: list[str], done) -> str | None:
    """The estimate's note when its completed checkpoints were scored in more than one way (or one column by
    several); None when they agree or record nothing."""
    seen = counts(scorings, done)
    if len(seen) < 2 and not any(" + " in s for s in seen):
        return None
    shown = listed(seen, 4, "{way}: {n}")
    return (
        f"the checkpoints were scored in different ways ({shown} checkpoint(s)): one row's scores differ between "
        "such ways (bf16 against fp32: up to 1.2e-4 of a row's loglik on an H100), which adds noise to every "
        "difference across them; extract every checkpoint one way (--dtype, --batch-invariant)"
    )


def resume_warning(scorings: list[str], done, way: str) -> str | None:
    """A worker's one line when the panel's completed checkpoints were scored otherwise than it will score the rest
    (``way``): a resume on another machine, with another ``--dtype`` or ``--batch-invariant``; None when they agree or
    nothing is recorded."""
    seen = counts(scorings, done)
    if not seen or set(seen) == {way}:
        return None
    shown = listed(seen, 3)
    return (
        f"warning: this panel's completed checkpoints were scored {shown}, and this worker scores {way}: the panel "
        "will mix them, which adds noise to every difference across them (match --device, --dtype and "
        "--batch-invariant to keep one way)"
    )
