"""The Qt binding must not leak references: PySide6 6.12.0 dropped a reference to None on every
void-returning call, which on Python 3.11 crashes the window within a minute of drawing."""

import sys


def test_qt_calls_do_not_leak_references_to_none(qapp):
    from PySide6.QtCore import QRectF
    from PySide6.QtGui import QColor, QImage, QPainter
    from PySide6.QtWidgets import QGraphicsRectItem, QWidget

    widget = QWidget()
    item = QGraphicsRectItem()
    image = QImage(8, 8, QImage.Format_RGB32)

    def calls():
        item.setPos(1.0, 2.0)
        item.setRect(QRectF(0, 0, 1, 1))
        widget.update()
        painter = QPainter(image)
        painter.fillRect(0, 0, 4, 4, QColor(1, 2, 3))
        painter.end()

    calls()
    before = sys.getrefcount(None)
    for _ in range(2000):
        calls()
    assert sys.getrefcount(None) - before > -100  # 2000 rounds of leaks would be -10,000 or worse
