"""One configuration's column on the comparison page: its name in its colour, its live numbers and
its block map -- veiled before a scenario's guess (the pool's size would give the answer away) and
able to hold an earlier moment (the reveal shows each pool at its fullest). And the block maps'
legend, said once for every column."""

from __future__ import annotations

from html import escape

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from kvscope.engine.units import format_percent
from kvscope.widgets.block_map import BlockMapView
from kvscope.widgets.block_map_colors import state_colors
from kvscope.widgets.palette import Theme, hex_color
from kvscope.widgets.shown_label import shown_label

VEIL_TEXT = ("The block maps appear when your guess is locked:\nthe pool's size would give the answer away.")


def block_legend_html(theme: Theme) -> str:
    """The block maps' legend, said once for every column."""
    colors = state_colors(theme)
    sample = 7  # one request's colour in each of its states

    def swatch(rgb) -> str:
        return f"<span style='color:{hex_color(rgb)}'>\u25a0</span>"

    return (f"<span>Block maps: {swatch(colors['used'][sample])} used (colour = request) &nbsp;"
            f"{swatch(colors['shared'][sample])} shared prefix &nbsp;{swatch(colors['cached'][sample])} cached prefix "
            f"&nbsp;{swatch(colors['reserved'][sample])} reserved, no token yet &nbsp;{swatch(colors['free'])} free"
            f" &nbsp;\u00b7 hover a block for details</span>")


class ConfigColumn(QWidget):
    """One configuration: its name in its colour, its live numbers, its block map."""

    NUMBERS_TIP = ("this configuration at the shared clock (or, after a scenario's reveal, at its decisive moment): "
                   "the share of its KV blocks requests hold, requests running and waiting, requests finished of "
                   "the workload's.\nThe decisive moment is the fullest frame the window drew; the results table's "
                   "peaks count every step, so they can be a little higher.")

    def __init__(self, parent=None):
        super().__init__(parent)
        self.label, self.detail = "", ""
        self.header = QLabel()
        self.header.setTextFormat(Qt.RichText)
        self.header.setWordWrap(True)
        self.numbers = QLabel()
        self.numbers.setTextFormat(Qt.PlainText)
        self.numbers.setWordWrap(True)
        self.numbers.setToolTip(self.NUMBERS_TIP)
        self.block_map = BlockMapView()
        # every column's legend is the same: the page shows it once; the header gives the pool size
        self.block_map.set_legend_visible(False)
        self.veil = QLabel(VEIL_TEXT)
        self.veil.setAlignment(Qt.AlignCenter)
        self.veil.setWordWrap(True)
        self.veil.hide()
        self.veiled = False
        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.setSpacing(2)
        layout.addWidget(self.header)
        layout.addWidget(self.numbers)
        layout.addWidget(self.block_map, 1)
        layout.addWidget(self.veil, 1)

    def set_veiled(self, veiled: bool) -> None:
        """Before a scenario's guess the pool's size (its block count, the map's cells) stays hidden."""
        if veiled != self.veiled:
            self.veiled = veiled
            self.block_map.setVisible(not veiled)
            self.veil.setVisible(veiled)

    def set_config(self, label: str, detail: str, color: tuple) -> None:
        self.label, self.detail = label, detail
        # the label as text, never markup: "<b>8k" is a name (shown_label.py)
        name = escape(shown_label(label))
        self.header.setText(f"<span style='color:{hex_color(color)}'>\u25a0</span>&nbsp;<b>{name}</b>"
                            + (f"&nbsp; {escape(shown_label(detail, 120))}" if detail else ""))

    def set_numbers(self, snapshot, finished: int, total: int, moment_s: float | None = None,
                    moment: str = "") -> None:
        """moment_s: the numbers are of that moment of the run (the reveal's decisive one: `moment`
        says what happened then), not the latest."""
        # short: four columns share a 1280 px screen; the block size is in the tooltip
        pool = "in use (the pool's size shows after the guess)" if self.veiled else f"of {snapshot.num_blocks:,} blocks"
        when = f"{moment_s:,.1f} s ({moment}): " if moment_s is not None else ""
        self.numbers.setToolTip(f"{self.NUMBERS_TIP}; blocks of {snapshot.block_size} tokens" if not self.veiled
                                else self.NUMBERS_TIP)
        self.numbers.setText(f"{when}KV {format_percent(snapshot.kv_usage)} {pool}\n"
                             f"running {snapshot.num_running:,} \u00b7 waiting {snapshot.num_waiting:,} \u00b7 "
                             f"finished {finished:,} of {total:,}")
