"""The workbench App: one panel (or a suite of panels, one per model, shown one at a time and side by side on the
Compare pane), the current estimation settings, and the panes that show its estimate.

Estimates come from an in-memory dict per Settings, then the on-disk cache (read synchronously: a few ms), and only
then a worker thread, which reports progress to the top bar and never blocks keys. Only the visible pane is redrawn
when the estimate changes; the others catch up when they are shown.
"""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from textual import on, work
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.command import CommandPalette
from textual.containers import Horizontal
from textual.notifications import Notify
from textual.screen import Screen
from textual.theme import Theme
from textual.widgets import ContentSwitcher, ProgressBar, Static, TabbedContent, TabPane, Tabs
from textual.worker import Worker

from memtui.app import config
from memtui.app.backdrop import Backdrop, DimmedBackdrop
from memtui.app.by_view import by_options, view_result, views
from memtui.app.compare import ComparePane
from memtui.app.dialogs import ConfirmDialog, ExportDialog, HelpScreen, SettingsDialog
from memtui.app.estimate_controller import EstimateController, SplitController
from memtui.app.estimates import EstimatesPane, EstimatesTable
from memtui.app.extraction import POLL_S, ExtractionPane, job_indicator
from memtui.app.fmt import markup_literal
from memtui.app.heatmap import Heatmap
from memtui.app.keybar import KeyBar
from memtui.app.messages import ByProgress, ByReady, EstimateProgress, EstimateReady, PanelReloaded, while_running
from memtui.app.notices import fit_paths, toast_text_width
from memtui.app.occlusion import OccludingScreen
from memtui.app.prefetch import Prefetch, default_settings, metric_order, with_default_band
from memtui.app.profile import ProfilePane
from memtui.app.restyle import HiddenPanes, ParsedThemes, add_default_css, batch_restyles, css_variables
from memtui.app.spares import Spares
from memtui.app.styles_ahead import StylesAhead
from memtui.app.summaries import SummariesPane
from memtui.app.title import TitleBar, short_names, title_wordings
from memtui.core.errors import MemtuiError
from memtui.core.text import clean
from memtui.estimation.estimate import ESTIMATORS, EstimateResult
from memtui.estimation.group_spec import resolve
from memtui.estimation.settings import DEFAULT_BAND, Settings
from memtui.estimation.subgroups import ByResult
from memtui.panel.hdf5 import read_panel
from memtui.panel.model import METRIC_LABEL, Panel

if TYPE_CHECKING:
    from memtui.app.open_dialog import OpenPanelDialog  # imported while idle, or on the key: not at start

# panes drawn from the estimate alone (no worker of their own), filled while idle when not shown (_fill_pane_ahead);
# the Summaries start a worker for their extras, Compare one per model: they are filled when shown
AHEAD_PANES = ("estimates", "profile")
GC_AHEAD = 4  # generation-1 collections since the last full one after which an idle app does the next (_collect_ahead)
SPARES_S = 0.5  # how often an idle app checks that the dialogs' next instances match the state (spares.py)
PANES = ("profile", "summaries", "estimates", "extraction", "compare")
PANE_TITLES = {
    "profile": "Profile",
    "summaries": "Summaries",
    "estimates": "Estimates",
    "extraction": "Extraction",
    "compare": "Compare",
}


def same_data(a: Panel, b: Panel) -> bool:
    """Whether two reads of a panel hold the same design, the same completed checkpoints and the same values (what
    an estimate depends on): a re-read that changed nothing keeps the estimates on screen."""
    if a.metrics.keys() != b.metrics.keys() or a.signs != b.signs:
        return False
    arrays = [(a.ids, b.ids), (a.treatment, b.treatment), (a.steps, b.steps), (a.done, b.done)]
    arrays += [(a.metrics[k], b.metrics[k]) for k in a.metrics]
    return all(x.shape == y.shape and np.array_equal(x, y, equal_nan=x.dtype.kind == "f") for x, y in arrays)


class Palette(OccludingScreen, DimmedBackdrop, CommandPalette):
    """Textual's command palette, drawn over the panes dimmed ahead (its CSS is CommandPalette's: a type selector
    matches a subclass)."""


class MainScreen(OccludingScreen, Screen):
    """The panes and the keys that work on every pane. The screen owns these bindings (as posting's MainScreen
    does), so a dialog pushed over it never sees them: q under a dialog cannot quit, m cannot change its result."""

    dims_from_backdrop = True  # a dialog over it draws it dimmed from the app's Backdrop (backdrop.py)

    def _compositor_refresh(self) -> None:
        # Where Textual draws what changed on it: a frame when it is shown, or the dialog over it redrawn there
        # (the changes seen through the dialog's background). Either way the panes dimmed ahead are out of date,
        # unless only the screen itself asked to be drawn again (pushing a dialog does): what it draws, its plain
        # background, changes only with its styles (notify_style_update, below), and its widgets did not change.
        if self._dirty_widgets - {self} or (self._compositor._dirty_regions and not self._dirty_widgets):
            self.app.backdrop.drawn()
        super()._compositor_refresh()

    def _refresh_layout(self, size=None, scroll: bool = False) -> None:
        self.app.backdrop.drawn()  # laid out anew: widgets may have moved
        super()._refresh_layout(size, scroll)

    def notify_style_update(self) -> None:
        self.app.backdrop.drawn()
        super().notify_style_update()

    # The same key does the same thing on every pane; descriptions are short so the footer keeps the important
    # ones at 80 columns (the pane's own keys come first, then these).
    BINDINGS = [
        Binding("question_mark", "app.help", "Keys", tooltip="List every key"),
        # ? lists the open panel's own metrics in their order (key_sections); any panel has up to six, or others
        Binding("m", "app.next_metric(1)", "Metric", tooltip="Next metric of the panel (? lists them in order)"),
        Binding("M", "app.next_metric(-1)", "Previous metric", show=False, tooltip="Previous metric"),
        Binding("d", "app.toggle_estimator", "Estimator", tooltip="Next estimator: DiD, difference, extractable"),
        Binding("o,comma", "app.settings", "Settings", tooltip="Band family, alpha, bootstrap draws, final checkpoint"),
        Binding("e", "app.export", "Export", tooltip="Write estimates to CSV (asks before overwriting)"),
        Binding(
            "q", "app.request_quit", "Quit", tooltip="Quit (asks only if an estimate would be lost)"
        ),  # last: the one the footer drops first
        Binding("1", "app.pane('profile')", "Profile", show=False, tooltip="Profile pane"),
        Binding("2", "app.pane('summaries')", "Summaries", show=False, tooltip="Summaries pane"),
        Binding("3", "app.pane('estimates')", "Estimates", show=False, tooltip="Estimates pane"),
        Binding("4", "app.pane('extraction')", "Extraction", show=False, tooltip="Extraction pane"),
        Binding("5", "app.pane('compare')", "Compare", show=False, tooltip="Compare pane: every model of the suite"),
        Binding("n", "app.next_model(1)", "Model", tooltip="Next model of the suite (the panes show one at a time)"),
        Binding("N", "app.next_model(-1)", "Previous model", show=False, tooltip="Previous model of the suite"),
        # with one panel open the three above are off (and out of the footer); these say why instead of nothing
        Binding("5,n,N", "app.needs_suite", show=False),
        Binding("r", "app.reload", "Reload panel", show=False, tooltip="Re-read the panel file"),
        # the split by group: listed by ? (the footer keeps its keys at 80 columns)
        Binding("b", "app.next_by(1)", "Split", show=False, tooltip="Split by the next covariate spec (none first)"),
        Binding("B", "app.next_by(-1)", "Previous split", show=False, tooltip="Split by the previous covariate spec"),
        Binding("v", "app.next_view(1)", "Group", show=False, tooltip="Heatmap: next group, or difference of two"),
        Binding("V", "app.next_view(-1)", "Previous group", show=False, tooltip="Heatmap: previous group view"),
        Binding("ctrl+o", "app.open_panel", "Open panel", show=False, tooltip="Pick another panel file"),
    ]

    def compose(self) -> ComposeResult:
        app = self.app
        with Horizontal(id="topbar"):
            # markup off wherever text from the panel is shown: a metric named "[@click=app.quit]" stays words
            yield TitleBar(id="title")
            yield Static("", id="job", markup=False)
            yield Static("", id="busy-label", markup=False)
            yield ProgressBar(total=1.0, show_eta=False, id="busy")
        # The opening pane is fixed here, before anything mounts: set later (in on_mount), it raced the tab bar's own
        # first activation, which could land afterwards and switch back to the first tab.
        with TabbedContent(id="panes", initial=app._opening_pane()):
            with TabPane("Profile 1", id="profile"):
                yield ProfilePane(id="profile-pane")
            with TabPane("Summaries 2", id="summaries"):
                yield SummariesPane(id="summaries-pane")
            with TabPane("Estimates 3", id="estimates"):
                yield EstimatesPane(id="estimates-pane")
            with TabPane("Extraction 4", id="extraction"):
                yield ExtractionPane(app.panel, id="extraction-pane")
            if app.suite is not None:
                with TabPane("Compare 5", id="compare"):
                    yield ComparePane(app.suite, id="compare-pane")
        # the palette's key is in the help (?) and the top of the list: its slot goes to the panes' own keys
        yield KeyBar(show_command_palette=False)

    def on_mount(self) -> None:
        # Keys 1-5 (and clicks) switch panes, so the tab bar never takes the focus: Tab stays within the pane (on
        # the Extraction pane it went from Launch to the tab bar, where typed letters then ran the app's keys)
        self.query_one("#panes Tabs", Tabs).can_focus = False
        self.panes = self.query_one(TabbedContent)  # what the idle app checks every tick (a query walked the DOM)
        self.app.hidden_panes.watch(self.query_one("#panes ContentSwitcher", ContentSwitcher))
        self.app.main_screen_ready()


class MemtuiApp(App):
    """Browse a panel's memorisation profile; keyboard first, works in 80 x 24 and in 256 colours."""

    CSS_PATH = "app.tcss"
    TITLE = "memtui"
    ENABLE_COMMAND_PALETTE = True
    # how often an idle app builds the dialogs' next instances (spares.py); None: never. The tests of other things
    # turn it off (tests/conftest.py): ~150 ms of CPU per build in every test that runs half a second
    spares_every_s: float | None = SPARES_S
    # the theme a restyle ahead takes as the app's (styles_ahead.py), while it runs: no await within
    _simulated_theme: Theme | None = None
    _theme_now: str | None = None  # the theme shown, and the theme left (the likeliest next change: back)
    _theme_left: str | None = None
    _open_dialog_ready = False  # the open dialog's module imported and its CSS parsed, while idle

    def __init__(
        self,
        panel: Panel,
        settings: Settings | None = None,
        *,
        prefetch: Prefetch | None = None,
        models: list[Panel] | None = None,
        suite=None,
        **kwargs,
    ) -> None:
        """``models``: every model's panel, in the suite's order (``panel`` is one of them); ``suite``: the same
        panels on their common instances and checkpoints (``estimation.suite_load.load_suite``), for the Compare
        pane."""
        super().__init__(**kwargs)
        self.panel = panel
        self.models = models or [panel]
        self.suite = suite if len(self.models) > 1 else None
        self.metrics = metric_order(panel)
        self.settings = settings or default_settings(panel)
        # no band was asked for: the band follows the CLI's default for the panel and settings shown (prefetch's
        # with_default_band) until one is chosen in the settings dialog
        self._band_by_default = settings is None
        # the background estimates (the whole panel's, the split's): their results, workers and progress
        self.estimates = EstimateController(self, prefetch, on_computing=self._computing_changed)
        self.splits = SplitController(self)
        self.result: EstimateResult | None = None
        self.message = ""
        self._reload_error = ""
        self._reload_failures = 0
        self._reload_asked = False  # r was pressed: the next re-read says what it found
        self._quit_prompt: ConfirmDialog | None = None  # open while q waits on an estimate being computed
        # the split by group (b, settings): its spec, the groups' estimates shown, the heatmap's view
        self.by = ""
        self._by_good = ""  # the last spec shown: an estimate that fails goes back to it
        self.by_result: ByResult | None = None
        self.by_view = 0
        self._view_results: dict[tuple[int, int], object] = {}
        self._heap_frozen = False
        self._gc_paused = False  # the collector paused until a theme's first frame (_watch_theme)
        self.spares = Spares(self)  # the dialogs' next instances, built while idle (spares.py says why)
        self.backdrop = Backdrop()  # and the panes dimmed behind a dialog, drawn while idle (backdrop.py)
        batch_restyles(self.stylesheet)  # a theme change refreshes each widget once (restyle.py says why)
        self.parsed_themes = ParsedThemes(self.stylesheet)  # and parses the CSS once per theme, ahead while idle
        self._themes_changed = False  # the user changed the theme while the app ran: every theme parsed ahead
        self._theme_variables: dict[str, tuple[Theme, dict[str, str]]] = {}  # theme name -> its CSS variables
        self.hidden_panes = HiddenPanes(self.stylesheet)  # and restyles the panes not shown when shown, or while idle
        # and works out ahead, while idle, what the next theme's restyle sets on each widget shown
        self.styles_ahead = StylesAhead(self, self.stylesheet, self.hidden_panes.walk)
        self.preferences = config.load()
        if self.preferences.theme in self.available_themes:
            self.theme = self.preferences.theme
        if not self.preferences.animations:
            self.animation_level = "none"

    @property
    def computing(self) -> Settings | None:
        """The settings whose estimate the worker computes (None: nothing is being computed)."""
        return self.estimates.computing

    def _computing_changed(self) -> None:
        if self._quit_prompt is not None:  # after the handler that set it: it may start the next estimate at once
            self.call_later(self._follow_quit_prompt)

    # ---- layout -------------------------------------------------------------------------------------------------

    def get_default_screen(self) -> Screen:
        return MainScreen(id="main")

    def _opening_pane(self) -> str:
        """Nothing to estimate yet: open where the user can start extraction."""
        return "profile" if self.panel.done.any() else "extraction"

    def on_mount(self) -> None:
        self.theme_changed_signal.subscribe(self, self._remember_theme)

    def on_unmount(self) -> None:
        self._resume_gc()  # a theme's first frame not drawn: the collector runs again all the same
        if self._heap_frozen:  # what was frozen for the app's life can be collected again
            gc.unfreeze()
            self._heap_frozen = False

    def _freeze_heap(self) -> None:
        """Once the first estimate is on screen, set every object made so far (Textual's, the panel's, polars')
        aside from the garbage collector for the app's life. Its full collections otherwise walk them all, and one
        that lands while a key is handled added 40-100 ms to it (Textual pauses the collector while scrolling for
        the same reason); new objects are still collected as before."""
        if not self._heap_frozen:
            gc.collect()
            gc.freeze()
            self._heap_frozen = True

    def main_screen_ready(self) -> None:
        """The panes exist (the main screen mounts after the app): show the opening estimate."""
        self.query_one("#busy", ProgressBar).display = False
        self.query_one("#job", Static).display = False
        self._focus_pane(self._opening_pane())
        self.request_estimate()
        if self.spares_every_s:
            self.set_interval(self.spares_every_s, self._keep_spares)

    # ---- preferences --------------------------------------------------------------------------------------------

    @property
    def current_theme(self) -> Theme:
        """As App.current_theme, looked up once per theme: Textual looks it up (copying its dict of ~20 themes twice)
        for every widget a rule with :dark, :light or :ansi is matched against, a sixth of restyling a pane when
        it takes the focus."""
        if self._simulated_theme is not None:
            return self._simulated_theme
        name, memo = self.theme, getattr(self, "_theme_memo", None)
        if memo is None or memo[0] != name:
            memo = self._theme_memo = (name, super().current_theme)
        return memo[1]

    def register_theme(self, theme: Theme) -> None:
        self._theme_memo = None
        super().register_theme(theme)

    def unregister_theme(self, theme_name: str) -> None:
        self._theme_memo = None
        super().unregister_theme(theme_name)

    def _watch_theme(self, theme_name: str) -> None:
        """As Textual's, with the garbage collector paused until the theme's first frame is drawn: restyling and
        drawing every widget anew allocates enough for several young collections, 15-20 ms of that frame's CPU;
        the collector runs again (and collects them) once it is drawn."""
        if self.is_running and gc.isenabled() and not self._gc_paused:
            gc.disable()
            self._gc_paused = True
            self.call_after_refresh(self._resume_gc)
        if theme_name != self._theme_now:
            self._theme_left, self._theme_now = self._theme_now, theme_name
        super()._watch_theme(theme_name)

    def _resume_gc(self) -> None:
        if self._gc_paused:
            self._gc_paused = False
            if not (self.PAUSE_GC_ON_SCROLL and self._realtime_animation_count):  # Textual's own pause holds
                gc.enable()

    def _remember_theme(self, theme) -> None:
        self._themes_changed = self._themes_changed or theme.name != self.preferences.theme
        # written after the theme's first frame: the file's write is no part of what the key shows
        self.call_after_refresh(lambda: self._save_preferences(dataclasses.replace(self.preferences, theme=theme.name)))

    def action_toggle_animations(self) -> None:
        on = not self.preferences.animations
        self.animation_level = "full" if on else "none"
        self._save_preferences(dataclasses.replace(self.preferences, animations=on))
        self.notify(f"Animations {'on' if on else 'off'}.", timeout=3)

    def _save_preferences(self, preferences: config.Preferences) -> None:
        if preferences == self.preferences:
            return
        self.preferences = preferences
        try:
            config.save(preferences)
        except (OSError, MemtuiError) as exc:  # preferences are a comfort: say it once, keep working
            self.notify(clean(exc), title="Preferences not saved", severity="warning", markup=False)

    @property
    def active_pane(self) -> str:
        return self.query_one(TabbedContent).active or "profile"

    def _pane_widget(self, name: str):
        return self.query_one(f"#{name}-pane")

    def notify(self, message: str, *, title: str = "", severity="information", timeout=None, markup=True) -> None:
        """As App.notify, with paths in plain-text notices shortened from their start to a toast's line
        (``notices.fit_paths``): Rich broke them mid-word over several lines."""
        if not markup:
            message = fit_paths(message, toast_text_width(self.size.width))
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=markup)

    def _on_notify(self, event: Notify) -> None:
        # one notice of a kind (its title and severity) at a time: a newer one replaces it, where several in a row
        # (re-read, opened, exported) stacked over the heatmap
        new = event.notification
        for old in [n for n in self._notifications if (n.title, n.severity) == (new.title, new.severity)]:
            self._unnotify(old, refresh=False)
        super()._on_notify(event)

    def update_title(self) -> None:
        s = self.settings
        done, total = int(self.panel.done.sum()), self.panel.n_checkpoints
        name = short = clean(self.panel.path.name, 80) if self.panel.path else "panel"
        if len(self.models) > 1:
            i = self._model_index()
            names = [clean(m.path.name, 80) if m.path else "panel" for m in self.models]
            name, short = (f"{n} ({i + 1}/{len(self.models)})" for n in (name, short_names(names)[i]))
        by = f" │ by {clean(self.by, 40)}" if self.by else ""
        what = f"{clean(s.metric, 60)} · {s.estimator}{by}"
        self.query_one("#title", TitleBar).show(
            title_wordings(name, short, what, (f"α {s.alpha:g} · {s.draws} draws", s.family), (done, total))
        )

    # ---- estimation ---------------------------------------------------------------------------------------------

    def request_estimate(self) -> None:
        """Show the estimate for the current settings (and their split by group, if one is chosen)."""
        self._request_whole()
        self.request_by()

    def _request_whole(self) -> None:
        """The whole panel's estimate: from memory or disk at once, else computed in a thread."""
        self.update_title()
        known = self.estimates.request(self.panel, self.settings)
        if known is None:
            self._show_busy(0.0, "starting")
        else:
            self._set_result(*known)

    @while_running
    def on_estimate_progress(self, event: EstimateProgress) -> None:
        if self.estimates.progress(event.settings, event.stage):
            self._show_busy(event.fraction, event.stage)

    @on(EstimateReady)
    @while_running
    def _estimate_ready(self, event: EstimateReady) -> None:
        if self.estimates.ready(event, self.settings):
            self._hide_busy()
            self._set_result(event.result, event.error)

    @on(Worker.StateChanged)
    @while_running
    def _worker_failed(self, event: Worker.StateChanged) -> None:
        """A bug in estimation, not a bad panel (those arrive as EstimateReady): say so instead of crashing."""
        message = self.estimates.failed(event)
        if message is not None:
            self._hide_busy()
            self._set_result(None, message)

    def _show_busy(self, fraction: float, stage: str) -> None:
        self.query_one("#panes").add_class("-stale")  # the panes still show the previous estimate, dimmed
        bar = self.query_one("#busy", ProgressBar)
        bar.display = True
        bar.update(progress=fraction)
        s = self.computing
        self.query_one("#busy-label", Static).update(
            f"computing {clean(s.metric, 60)} ({s.estimator}): {stage} " if s else ""
        )

    def _hide_busy(self) -> None:
        self.query_one("#panes").remove_class("-stale")
        self.query_one("#busy", ProgressBar).display = False
        self.query_one("#busy-label", Static).update("")

    def _set_result(self, result: EstimateResult | None, message: str = "") -> None:
        self.estimates.cancel()  # switched to settings that need no computing: drop the running one
        self._hide_busy()
        self.result = result
        self.message = clean(message)  # error messages quote panel contents (metric names, attributes)
        self._refresh_pane(self.active_pane)
        if result is not None and not self._heap_frozen:
            self.call_after_refresh(self._freeze_heap)

    def _refresh_pane(self, name: str) -> None:
        if name == "compare":
            self.query_one(ComparePane).show_settings(self.settings, self.by)
        if name in ("profile", "summaries", "estimates"):
            pane = self._pane_widget(name)
            if getattr(pane, "_shown", None) != self._pane_state(name):
                pane._shown = self._pane_state(name)
                message = self.message
                if self.result is None and not message:
                    message = "Computing the estimate…"
                if name == "estimates":
                    pane.show(self.result, message)
                else:
                    self._show_split(pane, message)

    def _pane_state(self, name: str) -> tuple:
        """What a pane shows is drawn from: the estimate, the message and (but on Estimates) the split's view."""
        split = (id(self.by_result), self.by_view) if name != "estimates" else None
        return (id(self.result), self.message, split)

    def _pane_to_fill(self) -> str | None:
        """A pane not shown whose content is behind the estimate shown (``AHEAD_PANES``), to fill while idle: its
        key then only lays it out and draws it (the Estimates table's rows formatted on `3` were a fifth of it)."""
        if self.result is None:
            return None
        active = self.active_pane
        for name in AHEAD_PANES:
            if name != active and getattr(self._pane_widget(name), "_shown", None) != self._pane_state(name):
                return name
        return None

    @while_running
    def _fill_pane_ahead(self) -> None:
        name = self._pane_to_fill() if self._idle_on_panes() else None
        if name is not None:
            self._refresh_pane(name)

    def _show_split(self, pane, message: str) -> None:
        """Profile and Summaries with the split: the heatmap draws the chosen group (or difference), the plots one
        line per group; without one, the whole panel's estimate as before."""
        by = self.by_result if self.result is not None else None
        if pane.id == "summaries-pane":
            pane.split = by
            pane.show(self.result, message)
            return
        if by is None:
            pane.split = None
            pane.show(self.result, message)
            return
        all_views = views(by)
        view = all_views[self.by_view % len(all_views)]
        key = (id(by), self.by_view % len(all_views))
        if key not in self._view_results:
            self._view_results = {key: view_result(by, view)}  # only the one shown: a difference sorts every draw
        pane.split = (by, view)
        pane.show(self._view_results[key], message)

    @on(TabbedContent.TabActivated)
    def _tab_activated(self, event: TabbedContent.TabActivated) -> None:
        name = event.pane.id
        self._refresh_pane(name)
        self._focus_pane(name)

    def _focus_pane(self, name: str) -> None:
        target = {
            "profile": Heatmap,
            "summaries": SummariesPane,
            "estimates": EstimatesTable,
            "compare": ComparePane,
        }.get(name)
        # Extraction: the pane itself, so the keys keep working (no text field takes them) and Tab goes to the
        # form's first field
        self.query_one(target or ExtractionPane).focus()

    # ---- the split by group -------------------------------------------------------------------------------------

    def check_by(self, spec: str) -> None:
        """Raise the one-line MemtuiError that makes ``spec`` no split of this panel (cheap: no estimate)."""
        if not spec:
            return
        if self.settings.engine != "memtui":
            raise MemtuiError("a split by group is estimated by memtui's engine; choose it in the settings.")
        resolve(self.panel, spec)

    def set_by(self, spec: str) -> bool:
        """Split the views by ``spec`` ("" : no split); an invalid spec is a notification and the view stays."""
        spec = spec.strip()
        try:
            self.check_by(spec)
        except MemtuiError as exc:
            self.notify(clean(exc), title="Not split", severity="error", markup=False)
            return False
        if spec != self.by:
            self.by, self.by_view = spec, 0
            self.update_title()
            self.request_by()
        return True

    def action_next_by(self, step: int = 1) -> None:
        options = by_options(self.panel)
        if len(options) < 2:
            self.notify("This panel has no covariate to split by: `memtui covariates PANEL` adds them.", markup=False)
            return
        index = options.index(self.by) if self.by in options else 0
        spec = options[(index + step) % len(options)]
        self.set_by(spec)  # the title bar and the legend line say what the split is

    def action_next_view(self, step: int = 1) -> None:
        """The heatmap's next group, or difference of two groups, of the split (on Compare: its next group)."""
        if self.active_pane == "compare":
            self.query_one(ComparePane).next_group(step)
            return
        if self.by_result is None:
            self.notify("No split: b (or the settings, o) splits the views by a covariate.", markup=False)
            return
        self.by_view = (self.by_view + step) % len(views(self.by_result))
        self._refresh_pane(self.active_pane)

    def request_by(self) -> None:
        """The split's estimates for the current settings: from memory at once, else computed in a thread."""
        if not self.by:
            self._set_by_result(None)
            return
        known, started = self.splits.request(self.panel, (self.settings, self.by))
        if known is not None:
            self._set_by_result(known)
        elif started:
            self._show_by_busy(0.0, "starting")

    @while_running
    def on_by_progress(self, event: ByProgress) -> None:
        if self.splits.progress(event.key, event.stage):
            self._show_by_busy(event.fraction, event.stage)

    @on(ByReady)
    @while_running
    def _by_ready(self, event: ByReady) -> None:
        if not self.splits.ready(event):
            return
        if self.computing is None:
            self._hide_busy()
        if event.result is None:  # the previous view stays (or none, if the same spec fails again)
            spec, self.by = self.by, (self._by_good if self._by_good != event.key[1] else "")
            self.notify(f"Not split by {clean(spec, 60)}: {clean(event.error)}", severity="error", markup=False)
            self.update_title()
            self.request_by()
            return
        self._set_by_result(event.result)

    def _set_by_result(self, by: ByResult | None) -> None:
        if self.splits.computing is not None:  # a split no longer wanted: drop it
            self.splits.cancel()
            if self.computing is None:
                self._hide_busy()
        if by is not None:
            self._by_good = by.spec
        self.by_result = by
        self._refresh_pane(self.active_pane)

    def _show_by_busy(self, fraction: float, stage: str) -> None:
        if self.computing is not None:  # the whole estimate's progress has the bar first
            return
        self.query_one("#panes").add_class("-stale")
        bar = self.query_one("#busy", ProgressBar)
        bar.display = True
        bar.update(progress=fraction)
        self.query_one("#busy-label", Static).update(f"computing by {clean(self.by, 40)}: {clean(stage, 60)} ")

    # ---- settings changes ---------------------------------------------------------------------------------------

    def change_settings(self, **changes) -> None:
        band = changes.pop("band", self.settings.band)
        if band != self.settings.band:  # a band chosen: it stays whatever else changes
            self._band_by_default = False
        if self._band_by_default:  # the CLI's default under the new settings (from one every setting allows)
            settings = with_default_band(self.panel, dataclasses.replace(self.settings, band=DEFAULT_BAND, **changes))
        else:
            settings = dataclasses.replace(self.settings, band=band, **changes)
        if settings != self.settings:
            self.settings = settings
            self.request_estimate()

    def action_next_metric(self, step: int = 1) -> None:
        metrics = self.metrics
        index = metrics.index(self.settings.metric) if self.settings.metric in metrics else -1
        self.change_settings(metric=metrics[(index + step) % len(metrics)])

    def action_metric(self, metric: str) -> None:
        self.change_settings(metric=metric)

    def action_toggle_estimator(self) -> None:
        i = ESTIMATORS.index(self.settings.estimator)
        self.change_settings(estimator=ESTIMATORS[(i + 1) % len(ESTIMATORS)])

    def action_settings(self) -> None:
        def done(settings: Settings | None) -> None:
            if settings is None:
                return
            if dialog.by != self.by:  # checked in the dialog: the split and the settings change together
                self.by, self.by_view = dialog.by, 0
            if settings != self.settings:
                self.settings = settings
                self.request_estimate()
            else:
                self.update_title()
                self.request_by()

        dialog = self.spares.take("settings", *self._settings_dialog())
        self.push_screen(dialog, done)

    def _settings_dialog(self) -> tuple[tuple, Callable[[], SettingsDialog]]:
        """What the settings dialog is built from now, and how (for ``spares``)."""
        settings, panel, by = self.settings, self.panel, self.by
        key = (settings, tuple(int(c) for c in panel.done_steps), by, panel)
        return key, lambda: SettingsDialog(
            settings, panel.done_steps, by=by, by_options=by_options(panel), check_by=self.check_by
        )

    def action_export(self) -> None:
        if self.result is None:
            self.notify(self.message or "No estimate to export yet.", severity="warning", markup=False)
            return

        def done(message: str | None) -> None:
            if message:
                self.notify(clean(message), title="Exported", timeout=8, markup=False)

        self.push_screen(self.spares.take("export", *self._export_dialog()), done)

    def _export_dialog(self) -> tuple[tuple, Callable[[], ExportDialog]]:
        """What the export dialog is built from now, and how (for ``spares``); the pane's scope on Estimates."""
        result, path = self.result, self.panel.path or Path("panel")
        scope = self.query_one(EstimatesPane).scope if self.active_pane == "estimates" else "profile"
        return (result, path, scope, Path.cwd()), lambda: ExportDialog(result, path, scope)

    def _spare_dialogs(self) -> dict[str, tuple[tuple, Callable]]:
        """The dialogs kept built ahead (``spares``): what each is built from now, and how."""
        dialogs = {"settings": self._settings_dialog(), "help": self._help_dialog(), "open": self._open_dialog()}
        if self.result is not None:
            dialogs["export"] = self._export_dialog()
        return dialogs

    def _idle_on_panes(self) -> bool:
        """Nothing computed, and the panes on screen (no dialog open; the app not closing)."""
        stack = self.screen_stack
        if self.computing is not None or not stack or not isinstance(stack[-1], MainScreen):
            return False
        panes = getattr(stack[-1], "panes", None)
        return panes is not None and panes.is_attached  # the panes are gone while the app shuts down

    @while_running
    def _keep_spares(self) -> None:
        """While nothing is computed and no dialog is open, do one thing ahead a tick, after the frame pending is
        drawn (a key's answer, painted first, is never behind it): restyle a pane left out of a theme change, fill a
        pane not shown with the estimate shown, build a dialog's next instance, dim the panes as a dialog shows them
        (once they drew nothing for a tick), parse a theme's stylesheet; once all are done, the collector's next
        full collection (:meth:`_collect_ahead`)."""
        if not self._idle_on_panes():
            return
        if self.hidden_panes.stale:  # first: a pane key is the likeliest next
            self.call_after_refresh(self._restyle_hidden_pane)
        elif self._pane_to_fill() is not None:
            self.call_after_refresh(self._fill_pane_ahead)
        elif not self.spares_ready():
            self.call_after_refresh(self._build_spare)
        elif not self._open_dialog_ready:
            self.call_after_refresh(self._ready_open_dialog)
        elif self._backdrop_colour() is not None:
            if self.backdrop.quiet():
                self.call_after_refresh(self._dim_ahead)
        elif self._theme_to_parse() is not None:
            self.call_after_refresh(self._parse_theme_ahead)
        elif self._styles_to_work_out():
            self.call_after_refresh(self._style_ahead)
        else:
            self._collect_ahead()

    def _theme_to_parse(self) -> dict[str, str] | None:
        """The CSS variables of the next theme whose stylesheet is to be parsed ahead (``restyle.ParsedThemes``),
        None when each is: the default dark and light themes (what a change most often goes between), and once
        the theme was changed in this run, every theme (each parse is 50-60 ms, and about 0.75 MB kept; a user who
        never changes the theme pays for two)."""
        themes = self.available_themes
        names = ["textual-dark", "textual-light"] + (sorted(themes) if self._themes_changed else [])
        names = [name for name in dict.fromkeys(names) if name != self.theme and name in themes]
        for name in names[: self.parsed_themes.room - 2]:  # room left for the theme in use and the one left
            variables = self._variables_of(themes[name])
            if not self.parsed_themes.parsed(variables):
                return variables
        return None

    def _variables_of(self, theme: Theme) -> dict[str, str]:
        """``theme``'s CSS variables (``restyle.css_variables``), computed once per theme registered."""
        known = self._theme_variables.get(theme.name)
        if known is None or known[0] is not theme:
            known = self._theme_variables[theme.name] = (theme, css_variables(self, theme))
        return known[1]

    def _theme_to_style(self) -> tuple[Theme, list] | None:
        """The theme whose restyle is worked out ahead (``styles_ahead``), and its parsed rules: the theme left last,
        else the other of the default dark and light themes; None while its stylesheet is not parsed."""
        themes = self.available_themes
        other = "textual-light" if self.theme == "textual-dark" else "textual-dark"
        name = next((n for n in (self._theme_left, other) if n in themes and n != self.theme), None)
        if name is None:
            return None
        theme = themes[name]
        rules = self.parsed_themes.rules(self._variables_of(theme))
        return None if rules is None else (theme, rules)

    def _styles_to_work_out(self) -> bool:
        """Whether widgets shown are still to be restyled ahead for the next theme likeliest."""
        if not self.styles_ahead.enabled:
            return False
        self.styles_ahead.target(*(self._theme_to_style() or (None, None)))
        return bool(self.styles_ahead.pending(self))

    @while_running
    def _style_ahead(self) -> None:
        """Some of the next theme's restyle worked out while idle, about 10 ms a tick: the change then only sets
        what was found (a third of its restyle)."""
        if self._idle_on_panes() and self._styles_to_work_out():
            self.styles_ahead.work(self)

    def _backdrop_colour(self):
        """The dialogs' background colour where the panes dimmed in it are to be drawn ahead (``backdrop``): not
        drawn since the main screen's last frame. None when they are, or no dialog is built to take it from."""
        colour = self.spares.background()
        if colour is None or colour.a >= 1 or self.backdrop.fresh(self.screen, colour):
            return None
        return colour

    @while_running
    def _dim_ahead(self) -> None:
        """The panes dimmed as a dialog shows them, drawn while idle, a tick, and cut into a dialog's lines: its
        first frame then takes them as they are (40-50 ms of a dialog key at 120 x 40)."""
        colour = self._backdrop_colour() if self._idle_on_panes() else None
        if colour is not None:
            self.backdrop.make(self.screen, colour, self.console, self.console.options)
            dialog = self.spares.styled()
            if dialog is not None:
                self.backdrop.make_lines(dialog, self.screen, colour)

    @while_running
    def _ready_open_dialog(self) -> None:
        """The open dialog's module imported and its widgets' default CSS added to the stylesheet and parsed while
        idle, as its first mount would add them: ``ctrl+o`` then neither imports it nor parses the whole stylesheet
        again for the tree's CSS (10 ms of its 90). The dialog itself is built on the key (its listing is then)."""
        if not self._idle_on_panes():
            return
        from memtui.app.open_dialog import WIDGETS

        add_default_css(self.stylesheet, WIDGETS)
        self.stylesheet.rules  # noqa: B018 - parsed now, not on the key
        self._open_dialog_ready = True

    @while_running
    def _parse_theme_ahead(self) -> None:
        """One theme's stylesheet parsed while idle, a tick: a change to it then skips the parse (50-60 ms)."""
        variables = self._theme_to_parse() if self._idle_on_panes() else None
        if variables is not None:
            self.parsed_themes.parse_ahead(variables)

    @while_running
    def _restyle_hidden_pane(self) -> None:
        """A pane left out of a theme change's restyle (restyle.HiddenPanes), restyled while idle, one a tick."""
        if self._idle_on_panes():
            self.hidden_panes.restyle_one()

    def _collect_ahead(self) -> None:
        """The full collection Python's collector is coming up to, done now while the app is idle. Of the objects
        made since the heap was frozen (the panes' plots, the estimates since, the dialogs built ahead), one that
        lands while a key is handled added 40-160 ms to it (2 keys of 8 in one round of the keys benchmark). Python
        may start one after ten generation-1 collections since the last (``gc.get_threshold()[2]``; a key makes up
        to about six): this does it after ``GC_AHEAD`` of them, between keys, and not more often."""
        if self._collection_due():
            gc.collect()

    def _collection_due(self) -> bool:
        return self._heap_frozen and gc.get_count()[2] >= GC_AHEAD

    def idle_work_done(self) -> bool:
        """Whether an idle app has nothing left to do ahead (panes left out of a theme change to restyle, dialogs to
        build, themes to parse, a collection to make): what a benchmark waits for between keys, as a user's pause
        would."""
        ahead = self.hidden_panes.stale or self._pane_to_fill() is not None or self._backdrop_colour() is not None
        ahead = ahead or not self._open_dialog_ready or self._theme_to_parse() is not None
        ahead = ahead or self._styles_to_work_out() or self._collection_due()
        return self.spares_ready() and not (self._idle_on_panes() and ahead)

    @while_running
    def _build_spare(self) -> None:
        if not self._idle_on_panes():
            return
        self.spares.lay_out()  # those mounted since the last tick
        for kind, (key, build) in self._spare_dialogs().items():
            if not self.spares.ready(kind, key):
                self.spares.keep(kind, key, build)
                return

    def spares_ready(self) -> bool:
        """Whether each dialog's next instance is built from the state now, or none is to be built (a dialog is open,
        an estimate computed): what a benchmark waits for between keys."""
        if not self._idle_on_panes():
            return True
        return all(self.spares.ready(kind, key) for kind, (key, _) in self._spare_dialogs().items())

    def action_pane(self, name: str) -> None:
        if name == "compare" and self.suite is None:
            self.notify("Compare needs a suite: `memtui A.h5 B.h5 …` opens several models.", markup=False)
            return
        self.query_one(TabbedContent).active = name
        self._focus_pane(name)

    def action_next_model(self, step: int = 1) -> None:
        """Show the next model of the suite on the per-model panes; the settings carry over."""
        if len(self.models) < 2:
            self.notify("One panel is open: `memtui A.h5 B.h5 …` opens a suite of models.", markup=False)
            return
        self._show_panel(self.models[(self._model_index() + step) % len(self.models)])

    def _model_index(self) -> int:
        """Which model the panes show (by identity: panels hold arrays, so == cannot compare them)."""
        return next(i for i, m in enumerate(self.models) if m is self.panel)

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        """Keys for a suite stay out of the footer when one panel is open (their keys then say why they do nothing)."""
        if action == "next_model" or (action == "pane" and parameters == ("compare",)):
            return len(self.models) > 1
        if action == "needs_suite":
            return len(self.models) < 2
        return True

    def action_needs_suite(self) -> None:
        self.notify(
            "One panel is open: the Compare pane (5) and the next model (n, N) need a suite of models, "
            "`memtui A.h5 B.h5 …`.",
            markup=False,
        )

    @on(EstimatesTable.Open)
    def _open_cell(self, event: EstimatesTable.Open) -> None:
        """Enter on a table row: show that (g, c) cell in the profile."""
        result = self.result
        if result is None:
            return
        self._refresh_pane("profile")  # before the tab switch lands, so the heatmap has this result
        self.action_pane("profile")
        row = int(np.searchsorted(result.cohorts, event.cohort))
        column = int(np.searchsorted(result.checkpoints, event.checkpoint))
        self.query_one(Heatmap).move_to(row, column)

    def action_open_panel(self) -> None:
        """Browse another panel: it replaces what is open (a suite becomes that one panel)."""

        def done(panel: Panel | None) -> None:
            if panel is None:
                return
            self.models, self.suite = [panel], None
            panes = self.query_one(TabbedContent)
            if panes.query("#compare"):
                panes.remove_pane("compare")
            self._show_panel(panel)
            self.notify(f"Opened {clean(panel.path, 200)}", markup=False, timeout=4)

        self.push_screen(self.spares.take("open", *self._open_dialog()), done)

    def _open_dialog(self) -> tuple[tuple, Callable[[], OpenPanelDialog]]:
        """What the open dialog is built from now, and how (for ``spares``): the folder it starts in. Its listing is
        made when it is shown, so a spare built long before lists the folder as it is then."""
        from memtui.app.open_dialog import OpenPanelDialog

        start = self.panel.path or Path.cwd()
        return (start,), lambda: OpenPanelDialog(start)

    def action_help(self) -> None:
        self.push_screen(self.spares.take("help", *self._help_dialog()))

    def _help_dialog(self) -> tuple[tuple, Callable[[], HelpScreen]]:
        """What the list of keys is built from now, and how (for ``spares``): its lines wrap to the terminal's width."""
        sections = tuple((title, tuple(keys)) for title, keys in key_sections(self))
        return (sections, self.size.width), lambda: HelpScreen(sections)

    # ---- panel reloads (extraction completing checkpoints) ------------------------------------------------------

    def action_reload(self) -> None:
        self._reload_asked = True  # say what the re-read found, even when it is nothing
        self._reload(self.panel.path)

    @on(ExtractionPane.CheckpointsChanged)
    @while_running
    def _checkpoints_changed(self) -> None:
        self._reload(self.panel.path)

    @work(thread=True, exclusive=True, group="reload", exit_on_error=False)
    def _reload(self, path: Path) -> None:
        old = self.panel
        try:
            panel = read_panel(path)
        except MemtuiError as exc:
            self.post_message(PanelReloaded(None, str(exc)))
        except Exception as exc:  # noqa: BLE001 - a file damaged under us must not stop the app; it keeps the old copy
            self.post_message(PanelReloaded(None, f"{path.name} could not be read: {type(exc).__name__}: {exc}"))
        else:
            self.post_message(PanelReloaded(panel, unchanged=old.path == panel.path and same_data(old, panel)))

    @while_running
    def on_panel_reloaded(self, event: PanelReloaded) -> None:
        asked, self._reload_asked = self._reload_asked, False
        if event.panel is None:
            if event.error != self._reload_error or asked:  # once per problem, not once per retry; always for r
                self.notify(clean(event.error), title="Panel not re-read", severity="error", markup=False)
            self._reload_error = event.error
            self._reload_failures += 1
            # The poller reports a change of the done flags once; a reload that failed (the writer mid-write, a
            # damaged file) would never be retried. Ask it again, less often while the failures go on.
            delay = min(30.0, POLL_S * 2**self._reload_failures)
            self.set_timer(delay, self.query_one(ExtractionPane).recheck)
            return
        self._reload_error, self._reload_failures = "", 0
        old, new = self.panel, event.panel
        name = clean(new.path.name, 80) if new.path else "the panel"
        extracted = f"{int(new.done.sum())}/{new.n_checkpoints} checkpoints extracted"
        if event.unchanged:  # nothing to show anew: the estimates on screen stay
            if asked:
                self.notify(f"Re-read {name}: nothing changed ({extracted}).", markup=False, timeout=4)
            return
        if asked:
            was = f"{int(old.done.sum())}/{old.n_checkpoints}"
            changed = f"{extracted}, was {was}" if was != f"{int(new.done.sum())}/{new.n_checkpoints}" else extracted
            self.notify(f"Re-read {name}: its data changed ({changed}); estimating anew.", markup=False, timeout=4)
        self.models[self._model_index()] = new
        self._show_panel(new)

    def _show_panel(self, panel: Panel) -> None:
        """Make ``panel`` the one the per-model panes show (a re-read copy, or another model of the suite)."""
        self.panel = panel
        self.estimates.forget()
        self.splits.forget()
        if self.by:  # another model or a re-read copy: the split stays if it still makes groups there
            try:
                self.check_by(self.by)
            except MemtuiError as exc:
                self.notify(f"No split: {clean(exc)}", severity="warning", markup=False)
                self.by = self._by_good = ""
        self.metrics = metric_order(panel)
        self.query_one(ExtractionPane).describe_panel(panel)
        if self.settings.metric not in self.metrics:
            self.settings = dataclasses.replace(self.settings, metric=self.metrics[0])
        self.settings = self._default_band(self.settings)
        self.request_estimate()

    def _default_band(self, settings: Settings) -> Settings:
        """``settings`` with the panel's default band where none was chosen (the CLI's rule), else as they are."""
        return with_default_band(self.panel, settings) if self._band_by_default else settings

    # ---- quitting -----------------------------------------------------------------------------------------------

    def action_request_quit(self) -> None:
        if self.computing is None:
            self.exit(0)
            return

        def answer(yes: bool | None) -> None:
            self._quit_prompt = None
            if yes:
                self.exit(0)

        self._quit_prompt = ConfirmDialog(self._quit_question())
        self.push_screen(self._quit_prompt, answer)

    def _quit_question(self) -> str:
        s = self.computing
        return (
            f"The {clean(s.metric, 60)} ({s.estimator}) estimate is still being computed ({self.estimates.stage}); "
            "quitting now loses it. Quit anyway?"
        )

    def _follow_quit_prompt(self) -> None:
        """The quit prompt asks only while an estimate would be lost: once it is done (or failed), nothing is lost
        and the quit asked for goes ahead; a new estimate started meanwhile (a panel re-read) is what it asks about."""
        prompt = self._quit_prompt
        if prompt is None or prompt is not self.screen:
            return
        if self.computing is None:
            prompt.dismiss(True)
        else:
            prompt.ask(self._quit_question())

    # ---- command palette ----------------------------------------------------------------------------------------

    def action_command_palette(self) -> None:
        """Textual's palette, over the panes dimmed ahead while idle (``backdrop.DimmedBackdrop``)."""
        if self.use_command_palette and not CommandPalette.is_open(self):
            self.push_screen(Palette(id="--command-palette"))

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        for command in super().get_system_commands(screen):
            if command.title != "Keys":  # Textual's own key panel: ours (below) lists every key, by pane
                yield command
        for metric in self.metrics:
            # the palette reads titles as markup
            yield SystemCommand(
                markup_literal(f"Metric: {clean(metric, 60)}"),
                markup_literal(f"Show {clean(METRIC_LABEL.get(metric, metric), 60)}"),
                lambda m=metric: self.action_metric(m),
            )
        yield SystemCommand("Estimator: DiD / difference / extractable", "Next estimator", self.action_toggle_estimator)
        yield SystemCommand("Settings…", "Band family, alpha, bootstrap draws, final checkpoint", self.action_settings)
        yield SystemCommand("Export CSV…", "Write estimates to a CSV file", self.action_export)
        yield SystemCommand(
            "Non-significant cells: dim / hide / show",
            "Heatmap display",
            lambda: self.query_one(Heatmap).action_cycle_mode(),
        )
        yield SystemCommand(
            "Estimates: significant only / all",
            "Table rows",
            lambda: self.query_one(EstimatesPane).action_toggle_significant(),
        )
        for name in PANES:
            yield SystemCommand(
                f"Go to {PANE_TITLES[name]}", f"Show the {name} pane", lambda n=name: self.action_pane(n)
            )
        yield SystemCommand("Launch extraction", "Start extraction with the form's settings", self._launch)
        yield SystemCommand("Cancel extraction", "Stop the running extraction job", self._cancel_job)
        yield SystemCommand("Reload panel", "Re-read the panel file", self.action_reload)
        yield SystemCommand("Open panel…", "Pick another panel file to browse", self.action_open_panel)
        yield SystemCommand(
            "Path plot: show / hide", "Give the heatmap the path plot's rows", self.query_one(ProfilePane).toggle_plot
        )
        yield SystemCommand(
            "True profile: show / hide", "A simulated panel's truth over the path plot (t)", self._toggle_truth
        )
        yield SystemCommand(
            "Animations: on / off", "The tab underline slide (remembered)", self.action_toggle_animations
        )
        yield SystemCommand("Keys", "List every key", self.action_help)

    def _toggle_truth(self) -> None:
        self.action_pane("profile")
        pane = self.query_one(ProfilePane)
        if pane.has_truth:
            pane.action_toggle_truth()
        else:
            pane.action_no_truth()

    def _launch(self) -> None:
        self.action_pane("extraction")
        self.query_one(ExtractionPane).action_launch()

    def _cancel_job(self) -> None:
        self.query_one(ExtractionPane).action_cancel_job()

    # ---- the running extraction, on every pane ------------------------------------------------------------------

    @on(ExtractionPane.Status)
    @while_running
    def _job_status(self, event: ExtractionPane.Status) -> None:
        """Handled after the pane's own handler (the message bubbles up to here), so its progress is current."""
        done = event.done if event.done is not None else self.panel.done
        text = job_indicator(self.query_one(ExtractionPane).progress, done)
        job = self.query_one("#job", Static)
        job.update(text)
        job.display = bool(text)


def key_sections(app: MemtuiApp) -> list[tuple[str, list[tuple[str, str]]]]:
    """Every key, from the bindings themselves, grouped by where it works."""
    from memtui.app.dialogs import Choice
    from memtui.app.instances import InstanceScreen, InstancesScreen

    # what depends on the panel open: the metrics m steps through, in its order
    metrics = ", ".join(clean(m, 40) for m in app.metrics)
    told = {"app.next_metric(1)": f"Next metric: {metrics}"}

    def keys(bindings, extra=()) -> list[tuple[str, str]]:
        out = []
        for b in bindings:
            if b.action in ("app.needs_suite", "no_truth", "toggle_truth_unlisted", "instances_unlisted"):  # dup keys
                continue
            key = b.key_display or ", ".join(_key_name(k) for k in b.key.split(","))
            out.append((key, told.get(b.action, b.tooltip or b.description)))
        return out + list(extra)

    return [
        ("Everywhere", keys(MainScreen.BINDINGS, [("ctrl+p", "command palette"), ("ctrl+q", "quit at once")])),
        ("Profile (heatmap)", keys(Heatmap.BINDINGS + ProfilePane.BINDINGS, [("click", "move the cursor to a cell")])),
        ("Summaries", [("↑ ↓, pgup, pgdn", "scroll"), ("home, end", "top, bottom")]),
        ("Estimates (table)", keys(EstimatesTable.BINDINGS) + keys(EstimatesPane.BINDINGS)),
        ("Extraction", keys(ExtractionPane.BINDINGS, [("tab, shift+tab", "next / previous field")])),
        ("Instances", keys(InstancesScreen.BINDINGS)),  # app/instances.py (w on the profile)
        ("Instance", keys(InstanceScreen.BINDINGS[:1])),  # enter on a ranked instance
        (
            "Dialogs",
            keys(
                Choice.BINDINGS,
                [("tab, shift+tab", "next / previous field"), ("enter", "apply / write / open"), ("escape", "cancel")],
            ),
        ),  # fmt: skip
    ]


_KEY_NAMES = {
    "question_mark": "?",
    "dollar_sign": "$",
    "equals_sign": "=",
    "plus": "+",
    "minus": "-",
    "comma": ",",
    "greater_than_sign": ">",
    "pageup": "pgup",
    "pagedown": "pgdn",
}


def _key_name(key: str) -> str:
    key = key.strip()
    return _KEY_NAMES.get(key, key)
