"""The "Open panel…" dialog (as toolong's and harlequin's file pickers): a tree of the folders and panel files under
the current panel's folder, and a path field; the chosen file is read in a thread, so a large or damaged panel never
freezes the app, and a file that is not a panel is a one-line message in the dialog.

The field has the focus when the dialog opens (typing a name is the quickest way to a file), and a character typed
on the tree goes to it; a relative path is read from the folder the tree shows, not the folder memtui started in.
``enter`` opens from either, and the footer says so."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from textual import events, on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DirectoryTree, Input, Static

from memtui.app.backdrop import DimmedBackdrop
from memtui.app.keybar import KeyBar
from memtui.app.occlusion import OccludingScreen
from memtui.app.spares import SpareScreen
from memtui.core.errors import MemtuiError
from memtui.core.text import clean
from memtui.panel.model import Panel

PANEL_SUFFIXES = (".h5", ".hdf5")


# folders memtui keeps beside a panel (the estimate cache, extraction's work folder): not places to look for panels
PANEL_COMPANIONS = (".memtui-cache", ".work")


class PanelTree(DirectoryTree):
    """Folders and panel files only; hidden entries and memtui's own folders beside a panel left out. The folder is
    listed when the dialog is shown (:meth:`list_folder`), not when the tree is built: a dialog built ahead while
    the app is idle (``spares``) would otherwise show a listing as old as itself."""

    _listing = False  # the folder listed (from the dialog's first showing on)

    async def watch_path(self) -> None:
        if self._listing:
            await super().watch_path()

    def list_folder(self) -> None:
        """List the folder now (once): Textual's own listing, as setting the path starts it."""
        if not self._listing:
            self._listing = True
            self.path = self.path  # the path always updates: its watcher resets the root and lists it in a thread

    # the Tree's own enter is hidden from the footer; in this dialog it is the key that opens
    BINDINGS = [
        Binding("enter", "select_cursor", "Open", tooltip="Open the file, or expand the folder, under the cursor")
    ]

    def on_key(self, event: events.Key) -> None:
        """A character typed on the tree goes to the path field (the tree takes no letters), which takes the focus."""
        if event.is_printable and event.character and event.character != " ":
            event.stop()
            event.prevent_default()
            field = self.screen.query_one(OpenField)
            field.focus()
            field.insert_text_at_cursor(event.character)

    def filter_paths(self, paths: Iterable[Path]) -> Iterable[Path]:
        def shown(p: Path) -> bool:
            if p.name.startswith("."):
                return False
            if p.is_dir():
                return not p.name.endswith(PANEL_COMPANIONS)
            return p.suffix.lower() in PANEL_SUFFIXES

        return [p for p in paths if shown(p)]


class OpenField(Input):
    """The path field: enter opens, and the footer says so (Textual's Input hides its enter binding)."""

    BINDINGS = [Binding("enter", "submit", "Open", tooltip="Open the path in the field")]


class OpenPanelDialog(OccludingScreen, DimmedBackdrop, SpareScreen, ModalScreen[Panel | None]):
    """Pick a panel file; dismisses with the panel read, or None. It may be built ahead (``spares``): its folder is
    listed once it is shown, after its first frame (a listing in before that frame made it the whole tree's)."""

    BINDINGS = [
        Binding("enter", "open", "Open", tooltip="Open the path in the field"),
        Binding("escape", "cancel", "Cancel", tooltip="Close without opening"),
    ]

    # the field takes the focus when the dialog is composed (Textual's default gave it to the tree, and on_mount
    # moved it: two restyles of each on the key)
    AUTO_FOCUS = "#open-path"

    def __init__(self, start: Path) -> None:
        super().__init__()
        self.start = start if start.is_dir() else start.parent

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog", classes="dialog open-dialog") as box:
            box.border_title = "Open panel"
            yield PanelTree(self.start, id="open-tree")
            yield OpenField(str(self.start) + "/", id="open-path", placeholder="path to a panel (.h5)")
            yield Static("", id="open-error", classes="error", markup=False)
        yield KeyBar()

    def on_mount(self) -> None:
        field = self.query_one(OpenField)
        field.focus()
        field.cursor_position = len(field.value)

    def _on_screen_resume(self) -> None:
        # (SpareScreen's and Screen's own handlers run too: Textual calls each class's)
        self.call_after_refresh(self.query_one(PanelTree).list_folder)

    def resolve(self, text: str) -> Path:
        """The path typed in the field: ``~`` expanded, a relative one under the folder the tree shows."""
        path = Path(text.strip() or ".").expanduser()
        return path if path.is_absolute() else Path(self.query_one(PanelTree).path) / path

    @on(DirectoryTree.FileSelected)
    def _file_chosen(self, event: DirectoryTree.FileSelected) -> None:
        self.query_one("#open-path", Input).value = str(event.path)
        self.action_open()

    @on(DirectoryTree.DirectorySelected)
    def _folder_chosen(self, event: DirectoryTree.DirectorySelected) -> None:
        self.query_one("#open-path", Input).value = str(event.path) + "/"

    @on(Input.Submitted)
    def action_open(self) -> None:
        path = self.resolve(self.query_one("#open-path", Input).value)
        self.query_one("#open-error", Static).update(f"reading {clean(path.name, 80)}…")
        self._read(path)

    @work(thread=True, exclusive=True, group="open-panel", exit_on_error=False)
    def _read(self, path: Path) -> None:
        from memtui.app.reading import read_for_app

        try:
            panel = read_for_app(path)
        except MemtuiError as exc:
            self.app.call_from_thread(self.query_one("#open-error", Static).update, clean(exc))
            return
        self.app.call_from_thread(self.dismiss, panel)

    def action_cancel(self) -> None:
        self.dismiss(None)


# the widget classes the dialog mounts: their default CSS is added to the stylesheet while the app is idle, before the
# dialog's first key (MemtuiApp._ready_open_dialog)
WIDGETS = (OpenPanelDialog, Vertical, PanelTree, OpenField, Static, KeyBar)
