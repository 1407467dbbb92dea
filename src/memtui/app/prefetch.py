"""The opening estimate, read from the disk cache in a thread while Textual is still being imported and started.

Hashing the panel for the cache key and reading the parquet file mostly run outside the GIL, so they overlap with
the (GIL-bound) imports and layout; this module stays free of Textual so the thread can start first.
"""

from __future__ import annotations

import threading

from memtui.estimation.estimate import EstimateResult
from memtui.estimation.settings import Settings
from memtui.panel import metrics as registry
from memtui.panel.model import Panel


def metric_order(panel: Panel) -> list[str]:
    """The panel's metrics (the ``m`` key's cycle): the registry's in its order, then any others."""
    return registry.ordered(panel.metrics)


def default_settings(panel: Panel) -> Settings:
    """The CLI's defaults for ``panel``: its default metric, and the band ``memtui estimate`` runs without --band."""
    settings = Settings(metric=panel.default_metric)
    return with_default_band(panel, settings)


def with_default_band(panel: Panel, settings: Settings) -> Settings:
    """``settings`` with the band the CLI would choose for ``panel`` under them (``estimation.settings.default_band``:
    the permutation band where the panel's order is a uniform shuffle with controls drawn from it and the settings
    allow it, else the calibrated band), so the workbench and ``memtui estimate`` agree when no band was asked for."""
    from dataclasses import replace

    from memtui.estimation.settings import default_band

    band, _why = default_band(
        panel,
        draws=settings.draws,
        control_group=settings.control_group,
        covariates=settings.covariates,
        cluster=settings.cluster,
        engine=settings.engine,
    )
    return settings if band == settings.band else replace(settings, band=band)


class Prefetch:
    """``cache.load(panel, settings)`` running in a daemon thread; ``get`` waits for it (re-raising its error)."""

    def __init__(self, panel: Panel, settings: Settings) -> None:
        self.panel = panel
        self.settings = settings
        self._result: EstimateResult | None = None
        self._error: BaseException | None = None
        self._done = threading.Event()
        threading.Thread(target=self._run, name="memtui-prefetch-estimate", daemon=True).start()

    def _run(self) -> None:
        from memtui.estimation import cache

        try:
            self._result = cache.load(self.panel, self.settings.validate())
        except BaseException as exc:  # noqa: BLE001 - handed to the thread that calls get()
            self._error = exc
        finally:
            self._done.set()

    def get(self) -> EstimateResult | None:
        self._done.wait()
        if self._error is not None:
            raise self._error
        return self._result
