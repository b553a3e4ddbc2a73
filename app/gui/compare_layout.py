"""The comparison page's layout: block maps over the plots and the results table, which sit side by
side in a wide window and share tabs in a narrow one (a 1280x720 projector), and the heights and
widths each gets as the guess is asked, committed and answered. CompareView (compare_window.py)
builds the widgets; this mixin arranges them."""

from __future__ import annotations

from PySide6.QtCore import QTimer

WIDE_PX = 1500  # from this width the plots and the results table sit side by side
LEGEND_CLEARANCE_PX = 8  # between the block maps' legend and the splitter handle under it (half above the plots')
COLUMNS_SHARE = 0.5  # of the height below the scenario strip: the block maps; the rest plots and table
# Before a scenario's guess the block maps are veiled: their columns get only the height their
# numbers and the veil's text need (share 0), the plots the rest -- at demo mode's 1280x720 the
# plots were ~70 px tall beside a tall, empty veil.
VEILED_COLUMNS_SHARE = 0.0
REVEALED_COLUMNS_SHARE = 0.35  # once the answer is in, narrow windows give the results table more room
PLOTS_SHARE = 0.6  # of a wide window's width: the plots; the rest the results table ...
TABLE_MAX_SHARE = 0.6  # ... or as much as its columns need, up to this


class CompareLayout:
    """Arranges a CompareView's ``split`` (``columns_box`` over ``bottom``), ``bottom_split`` and
    ``bottom_tabs`` (``plots``, ``table``); the view keeps ``_wide``, ``_sized`` and ``_table_fitted``."""

    def _arrange(self, wide: bool) -> None:
        if wide == self._wide:
            return
        self._wide = wide
        if wide:
            self.bottom_tabs.clear()
            self.bottom_split.addWidget(self.plots)
            self.bottom_split.addWidget(self.table)
            self.plots.show()  # a tab page taken out of its tabs stays hidden until told otherwise
            self.table.show()
            self._sized = False
            self.bottom_split.setStretchFactor(0, 3)
            self.bottom_split.setStretchFactor(1, 2)
            self.bottom.setCurrentWidget(self.bottom_split)
        else:
            self.bottom_tabs.addTab(self.plots, "Plots")
            self.bottom_tabs.addTab(self.table, "Results table")
            self.bottom_tabs.setTabToolTip(0, "every configuration on the same axes, on the shared clock")
            self.bottom_tabs.setTabToolTip(1, "each key metric, with its ratio to the first configuration")
            self.bottom.setCurrentWidget(self.bottom_tabs)

    def resizeEvent(self, event) -> None:  # noqa: N802
        super().resizeEvent(event)
        self._arrange(self.width() >= WIDE_PX)
        if not self._sized:
            QTimer.singleShot(0, self._fit_splitters)

    def _fit_splitters(self) -> None:
        """The first layout at the window's real size: block maps over plots, plots beside the table."""
        height, width = sum(self.split.sizes()), self.bottom_split.width()
        if height < 200:
            return
        columns = self._columns_height(height, VEILED_COLUMNS_SHARE if self.awaiting_guess() else COLUMNS_SHARE)
        self.split.setSizes([columns, height - columns])
        if self._wide and width > 200:
            self.bottom_split.setSizes([int(width * PLOTS_SHARE), width - int(width * PLOTS_SHARE)])
        self._sized = True

    def _veil_changed(self) -> None:
        """The guess was committed or asked for again: the block maps' legend and room follow."""
        self._show_veiled_parts()
        QTimer.singleShot(0, self._fit_splitters)

    def _show_veiled_parts(self) -> None:
        """Before the guess the block maps' legend and the tab of an empty results table only take the
        plots' height (at 1280x720 in demo mode the plots were ~70 px tall); after it they come back."""
        veiled = self.awaiting_guess()
        self.block_legend.setVisible(not veiled)
        self.bottom_tabs.tabBar().setVisible(not veiled)

    def _columns_height(self, height: int, share: float) -> int:
        """The block maps' part of the split: its share, or more where the columns' wrapped text needs it
        (three columns' numbers wrap to three lines in demo mode's font: squeezed, the lines overlapped)."""
        layout = self.columns_box.layout()
        needed = layout.minimumHeightForWidth(self.columns_box.width()) if layout.hasHeightForWidth() else 0
        room = height - self.bottom.minimumSizeHint().height()
        return max(0, min(max(int(height * share), needed), room))

    def _fit_table(self) -> None:
        """Wide windows give the results table the width its columns need (up to TABLE_MAX_SHARE)."""
        self._table_fitted = True
        if not self._wide:
            return
        total = sum(self.bottom_split.sizes())
        wanted = min(self.table.full_width(), int(total * TABLE_MAX_SHARE))
        if total > 200 and wanted > self.bottom_split.sizes()[1]:
            self.bottom_split.setSizes([total - wanted, wanted])

    def show_results_table(self) -> None:
        if not self._wide:
            self.bottom_tabs.setCurrentWidget(self.table)
