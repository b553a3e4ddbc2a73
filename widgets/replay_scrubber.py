"""The scrubber of a replayed recording: a slider over its steps and where the replay stands, in
steps and on the recorded engine clock. Dragging asks for a seek; the app moves the replay."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QSizePolicy, QSlider, QStyle, QStyleOptionSlider, QWidget

from kvscope.widgets.palette import DARK, Theme, hex_color

SEEK_DELAY_MS = 80  # a drag asks for one seek per pause in the motion, not one per pixel


class JumpSlider(QSlider):
    """A click on the groove moves the handle there (a QSlider only pages towards the click), and
    the press goes on as a drag from there."""

    def mousePressEvent(self, event) -> None:  # noqa: N802 - Qt's name
        if event.button() == Qt.LeftButton and self.maximum() > self.minimum():
            option = QStyleOptionSlider()
            self.initStyleOption(option)
            handle = self.style().subControlRect(QStyle.CC_Slider, option, QStyle.SC_SliderHandle, self)
            if not handle.contains(event.position().toPoint()):
                groove = self.style().subControlRect(QStyle.CC_Slider, option, QStyle.SC_SliderGroove, self)
                span = max(1, groove.width() - handle.width())
                x = int(event.position().x()) - groove.x() - handle.width() // 2
                self.setValue(QStyle.sliderValueFromPosition(self.minimum(), self.maximum(), x, span,
                                                             option.upsideDown))
        super().mousePressEvent(event)


class ReplayScrubber(QWidget):
    seek_requested = Signal(int)  # a position: steps replayed, 0 .. num_steps

    def __init__(self, parent=None, theme: Theme = DARK):
        super().__init__(parent)
        self.num_steps = 0
        self._end_times = np.zeros(0)
        self._steps_before = 0
        self.slider = JumpSlider(Qt.Horizontal)
        self.slider.setToolTip("click or drag to any step of the recording; the block map, timeline and plots show the "
                               "run as it was right after that step")
        self.slider.setFocusPolicy(Qt.NoFocus)  # the arrow keys stay the window's (Right: one step)
        self.label = QLabel()
        self.label.setToolTip("steps replayed of the recording, and the recorded engine clock at that point")
        self.slider.setMinimumWidth(200)
        self.setSizePolicy(QSizePolicy.Expanding, QSizePolicy.Preferred)  # a toolbar then gives it the width
        layout = QHBoxLayout(self)
        layout.setContentsMargins(6, 0, 6, 0)
        layout.addWidget(QLabel("Replay"))
        layout.addWidget(self.slider, 1)
        layout.addWidget(self.label)
        self._pending: int | None = None
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(SEEK_DELAY_MS)
        self._timer.timeout.connect(self._emit_seek)
        self.slider.valueChanged.connect(self._moved)
        self.set_theme(theme)

    def set_theme(self, theme: Theme) -> None:
        """The style's own groove is a dark line on a dark panel: drawn here in the theme's colours,
        the part already replayed in the decode colour."""
        groove, done, handle = hex_color(theme.grid), hex_color(theme.decode), hex_color(theme.foreground)
        self.slider.setStyleSheet(
            f"QSlider::groove:horizontal {{ height: 6px; border-radius: 3px; background: {groove}; }}"
            f"QSlider::sub-page:horizontal {{ height: 6px; border-radius: 3px; background: {done}; }}"
            f"QSlider::handle:horizontal {{ width: 12px; margin: -5px 0; border-radius: 6px; background: {handle}; }}")

    def set_recording(self, num_steps: int, end_times_s, steps_before: int = 0) -> None:
        """num_steps: steps in the recording; end_times_s: the engine clock at the end of each;
        steps_before: the engine steps taken before the recording started (the status bar counts them)."""
        self.num_steps = int(num_steps)
        self._end_times = np.asarray(end_times_s, dtype=np.float64)
        self._steps_before = int(steps_before)
        self.slider.blockSignals(True)
        self.slider.setRange(0, self.num_steps)
        self.slider.setPageStep(max(1, self.num_steps // 20))
        self.slider.setValue(0)
        self.slider.blockSignals(False)
        self._show(0)

    def clock_at(self, position: int) -> float:
        return float(self._end_times[position - 1]) if 0 < position <= len(self._end_times) else 0.0

    def set_position(self, position: int) -> None:
        """Where the replay is now (the slider follows unless the user is dragging it)."""
        if self.slider.isSliderDown() or self._timer.isActive():
            return
        self.slider.blockSignals(True)
        self.slider.setValue(position)
        self.slider.blockSignals(False)
        self._show(position)

    def _show(self, position: int) -> None:
        total = self._end_times[-1] if len(self._end_times) else 0.0
        # a recording started mid-run: the engine's own step number (the status bar's) beside the count
        engine_step = f" (engine step {position + self._steps_before:,})" if self._steps_before else ""
        self.label.setText(f"{position:,} of {self.num_steps:,} steps replayed{engine_step} \u00b7 engine clock "
                           f"{self.clock_at(position):,.2f} s of {total:,.2f} s")

    def _moved(self, value: int) -> None:
        self._pending = value
        self._show(value)
        self._timer.start()

    def _emit_seek(self) -> None:
        if self._pending is not None:
            self.seek_requested.emit(self._pending)
            self._pending = None
