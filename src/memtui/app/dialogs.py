"""Modal dialogs: export, settings, quit confirmation and the key list.

Every field is one line high (Textual's Select and bordered Inputs take three), so the dialogs fit 80 x 24.
"""

from __future__ import annotations

import dataclasses
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path

from rich.text import Text
from textual import events, on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.reactive import reactive
from textual.screen import ModalScreen
from textual.widget import Widget
from textual.widgets import Button, Checkbox, Input, Label, Static
from textual.widgets.input import Selection

from memtui.app.backdrop import DimmedBackdrop
from memtui.app.keybar import KeyBar
from memtui.app.occlusion import OccludingScreen
from memtui.app.spares import SpareScreen
from memtui.core.errors import MemtuiError
from memtui.core.text import clean
from memtui.estimation.estimate import ESTIMATORS, SCOPES, EstimateResult
from memtui.estimation.settings import Settings
from memtui.report.export import default_name, export_csv


class Choice(Widget, can_focus=True):
    """A one-line selector: ``‹ value ›``; left/right (or h/l, space, enter) step through the options."""

    BINDINGS = [
        # not enter: in a dialog enter applies the whole form, whichever field has the focus
        Binding("right,l,space", "step(1)", "Next option", show=False),
        Binding("left,h", "step(-1)", "Previous option", show=False),
    ]
    DEFAULT_CSS = """
    Choice { height: 1; width: 1fr; padding: 0 1; background: $boost; }
    Choice:focus { background: $accent 30%; text-style: bold; }
    """

    index: reactive[int] = reactive(0)

    class Changed(Message):
        def __init__(self, choice: Choice) -> None:
            super().__init__()
            self.choice = choice

        @property
        def control(self) -> Choice:
            return self.choice

    def __init__(self, options: Sequence[tuple[str, object]], value: object = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.options = list(options)
        values = [v for _, v in self.options]
        self.set_reactive(Choice.index, values.index(value) if value in values else 0)

    @property
    def value(self) -> object:
        return self.options[self.index][1]

    def render(self) -> Text:
        return Text(f"‹ {self.options[self.index][0]} ›")

    def action_step(self, step: int) -> None:
        self.index = (self.index + step) % len(self.options)
        self.post_message(self.Changed(self))

    def on_click(self) -> None:
        self.action_step(1)


# Textual's Input binds enter (submit) with show=False, so while a field has the focus the footer showed only esc.
# A dialog's fields rebind it under the dialog's own name for it; submitting runs the same action as the key would.
class ApplyField(Input):
    BINDINGS = [Binding("enter", "submit", "Apply", tooltip="Apply the settings (checked first)")]


class WriteField(Input):
    """The export's path. Selected whole when focused (typing replaces it), as Input does, but with the cursor at its
    start: Input put it at the end and scrolled there, so a path one cell wider than the field lost its first
    letter, a longer one its start, which is what names the file."""

    BINDINGS = [Binding("enter", "submit", "Write", tooltip="Write the CSV (asks first if the file exists)")]

    def _on_focus(self, event: events.Focus) -> None:
        # Textual calls each class's handler, this one first: Input's, after it, selects with the cursor at the end
        self.call_later(self.show_start)

    def show_start(self) -> None:
        self.selection = Selection(len(self.value), 0)  # the cursor is a selection's end


def _row(label: str, widget: Widget) -> Horizontal:
    return Horizontal(Label(label, classes="field-label"), widget, classes="field")


class ExportDialog(OccludingScreen, DimmedBackdrop, SpareScreen, ModalScreen[str | None]):
    """Path, scope and significant-only; writes through ``memtui.report.export.export_csv`` like `memtui export`, asking
    first when the file exists."""

    BINDINGS = [
        Binding("enter", "write", "Write", tooltip="Write the CSV (asks first if the file exists)"),
        Binding("escape", "cancel", "Cancel", tooltip="Close without writing"),
    ]

    def __init__(self, result: EstimateResult, panel_path: Path, scope: str = "profile") -> None:
        super().__init__()
        self.result = result
        self.panel_path = panel_path
        self.scope = scope

    def default_path(self, scope: str) -> str:
        return default_name(self.result, self.panel_path, scope)

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog", classes="dialog") as box:
            box.border_title = "Export estimates to CSV"
            yield _row("path", WriteField(self.default_path(self.scope), id="export-path"))
            yield _row("scope", Choice([(s, s) for s in SCOPES], self.scope, id="export-scope"))
            yield _row("rows", Checkbox(f"significant only{self._pointwise()}", True, id="export-significant"))
            yield Static("", id="export-error", classes="error", markup=False)
            with Horizontal(classes="buttons"):
                yield Button("Write", variant="primary", id="export-write")
                yield Button("Cancel", id="export-cancel")
            yield Static(f"relative paths are under {clean(Path.cwd())}", classes="hint", markup=False)
        yield KeyBar()

    @on(Choice.Changed, "#export-scope")
    def _scope_changed(self, event: Choice.Changed) -> None:
        path = self.query_one("#export-path", WriteField)
        if path.value == self.default_path(self.scope):  # keep a path the user typed
            path.value = self.default_path(event.choice.value)
            path.show_start()
        self.scope = event.choice.value

    @on(Input.Submitted)
    @on(Button.Pressed, "#export-write")
    def action_write(self) -> None:
        path = Path(self.query_one("#export-path", Input).value.strip() or ".").expanduser()
        if path.is_file():

            def answer(yes: bool | None) -> None:
                if yes:
                    self.write(path)

            question = f"{clean(path.resolve(), 200)} exists. Overwrite it?"
            self.app.push_screen(ConfirmDialog(question, yes="Overwrite"), answer)
            return
        self.write(path)

    def write(self, path: Path) -> None:
        only = self.query_one("#export-significant", Checkbox).value
        try:
            rows = export_csv(self.result, path, self.scope, only)
        except MemtuiError as exc:
            self.query_one("#export-error", Static).update(clean(exc))
            return
        which = f"significant{self._pointwise()} " if only else ""
        self.dismiss(clean(f"Wrote {rows} {which}{self.scope} rows to {path.resolve()}"))

    def _pointwise(self) -> str:
        """Without bootstrap draws there is no simultaneous band: "significant" is each row's pointwise interval."""
        return " (pointwise: 0 draws)" if self.result.settings.draws == 0 else ""

    @on(Button.Pressed, "#export-cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)


class SettingsDialog(OccludingScreen, DimmedBackdrop, SpareScreen, ModalScreen[Settings | None]):
    """Estimator, band family, alpha, bootstrap draws and the residual checkpoint; validated before closing. With
    ``check_by``, also the split by group: a choice of the specs the panel's covariates offer, which fills the spec
    field (any spec can be typed there: ``length>=300``); after Apply the spec is ``by``."""

    BINDINGS = [
        Binding("enter", "apply", "Apply", tooltip="Apply the settings (checked first)"),
        Binding("escape", "cancel", "Cancel", tooltip="Close, keeping the settings as they were"),
    ]

    def __init__(
        self,
        settings: Settings,
        checkpoints: Sequence[int],
        *,
        by: str = "",
        by_options: Sequence[str] = ("",),
        check_by: Callable[[str], None] | None = None,
    ) -> None:
        super().__init__()
        self.settings = settings
        self.checkpoints = [int(c) for c in checkpoints]
        self.by = by
        self.by_options = list(by_options)
        self.check_by = check_by

    def compose(self) -> ComposeResult:
        s = self.settings
        last = f"last completed ({self.checkpoints[-1]})" if self.checkpoints else "last completed"
        finals = [(last, None), *((str(c), c) for c in self.checkpoints)]
        with Vertical(id="dialog", classes="dialog") as box:
            box.border_title = "Estimation settings"
            yield _row("estimator", Choice([(e, e) for e in ESTIMATORS], s.estimator, id="set-estimator"))
            yield _row("band", Choice([(b, b) for b in Settings.CHOICES["band"]], s.band, id="set-band"))
            yield _row(
                "band family", Choice([("post (c ≥ g)", "post"), ("all cells", "all")], s.family, id="set-family")
            )
            yield _row("alpha", ApplyField(f"{s.alpha:g}", id="set-alpha"))
            yield _row("bootstrap draws", ApplyField(str(s.draws), id="set-draws"))
            yield _row("final checkpoint", Choice(finals, s.final_step, id="set-final"))
            yield _row(
                "control group",
                Choice([(c, c) for c in ("never_treated", "not_yet_treated")], s.control_group, id="set-control"),
            )
            yield _row("base period", Choice([(b, b) for b in ("varying", "universal")], s.base_period, id="set-base"))
            yield _row("seed", ApplyField(str(s.seed), id="set-seed"))
            if self.check_by is not None:  # one row: the offered specs, and the spec itself (any can be typed)
                offered = [(clean(o, 60) or "none", o) for o in self.by_options]
                chosen = self.by if self.by in self.by_options else ""
                hint = "or type NAME>=VALUE"
                yield Horizontal(
                    Label("split by", classes="field-label"),
                    Choice(offered, chosen, id="set-by-choice"),
                    ApplyField(self.by, placeholder=hint, id="set-by"),
                    classes="field",
                )
            yield Static("", id="settings-error", classes="error", markup=False)
            with Horizontal(classes="buttons"):
                yield Button("Apply", variant="primary", id="settings-apply")
                yield Button("Cancel", id="settings-cancel")
        yield KeyBar()

    def read(self) -> Settings:
        """The settings in the form, validated; a MemtuiError says which field is wrong."""

        def number(field: str, kind, name: str):
            text = self.query_one(field, Input).value.strip()
            try:
                return kind(text)
            except ValueError:
                raise MemtuiError(f"{name} must be a number, not '{text}'.") from None

        return dataclasses.replace(
            self.settings,
            estimator=self.query_one("#set-estimator", Choice).value,
            band=self.query_one("#set-band", Choice).value,
            family=self.query_one("#set-family", Choice).value,
            alpha=number("#set-alpha", float, "alpha"),
            draws=number("#set-draws", int, "draws"),
            final_step=self.query_one("#set-final", Choice).value,
            control_group=self.query_one("#set-control", Choice).value,
            base_period=self.query_one("#set-base", Choice).value,
            seed=number("#set-seed", int, "seed"),
        ).validate()

    def on_resize(self) -> None:
        """No blank line between the fields where the terminal is short (80 x 24): the buttons stay on screen."""
        self.query_one("#dialog").set_class(self.size.height < 28, "-tight")

    @on(Choice.Changed, "#set-by-choice")
    def _by_chosen(self, event: Choice.Changed) -> None:
        self.query_one("#set-by", Input).value = event.choice.value

    @on(Input.Submitted)
    @on(Button.Pressed, "#settings-apply")
    def action_apply(self) -> None:
        try:
            settings = self.read()
            if self.check_by is not None:
                by = self.query_one("#set-by", Input).value.strip()
                self.check_by(by)
                self.by = by
        except MemtuiError as exc:
            self.query_one("#settings-error", Static).update(clean(exc))
            return
        self.dismiss(settings)

    @on(Button.Pressed, "#settings-cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)


class ConfirmDialog(OccludingScreen, DimmedBackdrop, ModalScreen[bool]):
    """A yes/no question (quitting while an estimate is computed, overwriting a file, cancelling a job)."""

    BINDINGS = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n,escape", "answer(False)", "No"),
    ]

    def __init__(self, question: str, yes: str = "Yes") -> None:
        super().__init__()
        self.question = question
        self.yes = yes

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog", classes="dialog confirm"):
            yield Static(self.question, id="question", markup=False)
            with Horizontal(classes="buttons"):
                yield Button(f"{self.yes} (y)", variant="error", id="yes")
                yield Button("No (n)", variant="primary", id="no")
        yield KeyBar()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, answer: bool) -> None:
        self.dismiss(answer)

    def ask(self, question: str) -> None:
        """Ask anew while open: the question follows what it asks about (the estimate being computed changed)."""
        self.question = question
        if self.is_mounted:
            self.query_one("#question", Static).update(question)


class HelpScreen(OccludingScreen, DimmedBackdrop, SpareScreen, ModalScreen[None]):
    """Every key, by where it works (built from the widgets' BINDINGS, so it cannot fall out of date)."""

    BINDINGS = [Binding("escape,question_mark,q", "close", "Close", key_display="esc")]

    def __init__(self, sections: Sequence[tuple[str, Sequence[tuple[str, str]]]]) -> None:
        super().__init__()
        self.sections = sections

    def compose(self) -> ComposeResult:
        text = Text()
        # one key column for every section, as wide as the longest key plus a gap, so no key runs into its words;
        # a description too long for the rest of the line wraps under itself, not under the keys
        width = max((len(key) for _, keys in self.sections for key, _ in keys), default=8) + 2
        room = max(20, min(90, self.app.size.width) - 6 - width)
        for title, keys in self.sections:
            text.append(f"{title}\n", style="bold underline")
            for key, description in keys:
                text.append(f"  {key:<{width}}", style="bold")
                lines = textwrap.wrap(description, room) or [""]
                text.append(("\n" + " " * (width + 2)).join(lines) + "\n")
            text.append("\n")
        text.append("ctrl+p opens the command palette with every action; esc, ? or q closes this list.", style="dim")
        with VerticalScroll(id="help", classes="dialog") as box:
            box.border_title = "Keys"
            yield Static(text, id="help-text")
        yield KeyBar()

    def action_close(self) -> None:
        self.dismiss(None)
