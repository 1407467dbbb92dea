"""The top bar's title: which panel, the settings, how many checkpoints, in the fullest wording that fits its width.

At 80 columns the whole line of a suite's model (``suite-neox-858k.h5 (4/4) │ loglik · did │ α 0.05 · 1000 draws ·
post │ 41/41 ckpts``) does not fit, and a cut at the right edge took the checkpoint count. Each shorter wording drops
what is least needed first: the suite models' shared start (``…-858k (4/4)``, as the Compare tables name them), the
word ``ckpts``, the band's family, the bootstrap settings."""

from __future__ import annotations

import os

from rich.cells import cell_len
from rich.text import Text
from textual.widgets import Static

SEP = " │ "


def short_names(names: list[str]) -> list[str]:
    """Each name without the start every name shares, from its last separator on (``suite-neox-41k.h5`` beside
    ``suite-neox-858k.h5``: ``…-41k``), and without the file suffix; the names as they are where nothing is shared."""
    stems = [os.path.splitext(n)[0] for n in names]
    common = os.path.commonprefix(stems)
    cut = max(common.rfind(c) for c in "-_. ")  # keep the separator: `…-41k` reads as the tail of a name
    if len(stems) < 2 or cut <= 0 or any(len(s) <= cut + 1 for s in stems):
        return list(names)
    return ["…" + s[cut:] for s in stems]


def title_wordings(
    name: str, short: str, what: str, settings: tuple[str, str], checkpoints: tuple[int, int]
) -> tuple[str, ...]:
    """The title from the fullest wording to the shortest. ``name``: the panel (with ``(i/n)`` in a suite) and
    ``short`` its shortened form; ``what``: metric, estimator, split; ``settings``: (α and draws, family)."""
    boot, family = settings
    done, total = checkpoints
    count, bare = f"{done}/{total} ckpts", f"{done}/{total}"
    out = []
    for n in dict.fromkeys((name, short)):  # the full name while anything else can go first, then the short one
        out += [SEP.join((n, what, f"{boot} · {family}", count)), SEP.join((n, what, f"{boot} · {family}", bare))]
    out += [SEP.join((short, what, boot, bare)), SEP.join((short, what, bare)), SEP.join((short, what))]
    return tuple(dict.fromkeys(out))


class TitleBar(Static):
    """A one-line Static that draws the first of its wordings that fits its width (the last one, cut, if none)."""

    def __init__(self, **kwargs) -> None:
        super().__init__("", markup=False, **kwargs)
        self.wordings: tuple[str, ...] = ("",)

    def show(self, wordings: tuple[str, ...]) -> None:
        self.wordings = wordings
        self.refresh()

    def render(self) -> Text:
        width = self.content_region.width or self.app.size.width - 2
        return Text(next((w for w in self.wordings if cell_len(w) <= width), self.wordings[-1]), no_wrap=True)
