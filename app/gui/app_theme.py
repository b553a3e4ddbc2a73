"""A Theme (kvscope.widgets.palette) applied to the whole application: Qt's palette for the
widgets, pyqtgraph's defaults for the plots built after it. Each view recolours itself in its own
set_theme."""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QApplication


def apply_theme(app: QApplication, theme) -> None:
    if app.style().name().lower() != "fusion":  # setting it again rebuilt the style and repolished every widget (~0.1 s)
        app.setStyle("Fusion")
    palette = QPalette()
    bg, fg = QColor(*theme.background), QColor(*theme.foreground)
    base = bg.lighter(115) if theme.is_dark else QColor(255, 255, 255)
    for role, color in ((QPalette.Window, bg), (QPalette.WindowText, fg), (QPalette.Base, base),
                        (QPalette.AlternateBase, bg), (QPalette.Text, fg), (QPalette.Button, bg.lighter(110)),
                        (QPalette.ButtonText, fg), (QPalette.ToolTipBase, base), (QPalette.ToolTipText, fg),
                        (QPalette.Highlight, QColor(*theme.decode)), (QPalette.HighlightedText, QColor(255, 255, 255))):
        palette.setColor(role, color)
    palette.setColor(QPalette.Disabled, QPalette.Text, fg.darker(160) if theme.is_dark else fg.lighter(250))
    palette.setColor(QPalette.Disabled, QPalette.ButtonText, fg.darker(160) if theme.is_dark else fg.lighter(250))
    app.setPalette(palette)
    pg.setConfigOptions(background=theme.background, foreground=theme.foreground, antialias=False)
