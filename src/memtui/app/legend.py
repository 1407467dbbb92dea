"""Legend lines above plots (never drawn over the data): coloured swatches with names, packed into lines of the
width they get, a line breaking only between two entries. The Compare pane names its models with them, the split by
group its groups."""

from __future__ import annotations

from rich.color import Color
from rich.style import Style
from rich.text import Text


def pack(head: Text, items: list[Text], width: int, indent: int = 2, gap: int = 2) -> Text:
    """``head`` then ``items`` on as many lines of ``width`` cells as they need, a line breaking only between two
    items (an interval or a legend entry never wraps in the middle); lines after the first are indented."""
    out = head.copy()
    used = head.cell_len
    for n, item in enumerate(items):
        space = 1 if n == 0 else gap  # "intervals: 1–2 […]  1–3 […]"
        if used > indent and used + space + item.cell_len > width:
            out.append("\n" + " " * indent)
            used = indent
        elif used > 0 and used != indent:
            out.append(" " * space)
            used += space
        out.append_text(item)
        used += item.cell_len
    return out


def legend(names: list[str], colours: tuple, width: int) -> Text:
    """Each model's colour swatch and name, then what the dots are; packed to ``width``."""
    items = [Text.assemble(("━━", Style(color=swatch(colours[i % len(colours)]))), f" {name}")
             for i, name in enumerate(names)]  # fmt: skip
    items.append(Text("··· its band", style="dim"))
    return pack(Text(), items, width)


def swatch(value) -> Color:
    """A plot colour (an RGB triple, or an ANSI number for the ANSI themes) as a rich colour for text."""
    return Color.from_ansi(value) if isinstance(value, int) else Color.from_rgb(*value)
