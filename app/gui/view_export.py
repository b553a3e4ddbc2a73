"""Saving what a view shows: a plot as PNG or SVG (pyqtgraph's own exporters, so an SVG stays
vector), a whole view (block map, batch timeline) as a PNG of the widget, a table as CSV. The
Qt-free part (names, path checks, the Perfetto trace) is in export_files.py."""

from __future__ import annotations

import csv
import re
import sys
from pathlib import Path

import pyqtgraph as pg
import pyqtgraph.exporters  # noqa: F401 - registers pg.exporters
from PySide6.QtCore import QBuffer, QByteArray, QIODevice

from kvscope.app.gui.export_files import ExportError, shown_name, write_whole

PLOT_FORMATS = "PNG image (*.png);;SVG drawing (*.svg)"
PNG_FORMAT = "PNG image (*.png)"
CSV_FORMAT = "CSV table (*.csv)"
PNG_SCALE = 2  # plots are exported at twice their size on screen: sharp on a slide


_CLOSE_SENTINEL = re.compile(r"Z[-+0-9.eE]+,[-+0-9.eE]+")


def _accept_closed_svg_paths() -> None:
    """pyqtgraph 0.14.0's SVG exporter re-maps every path point as an "x,y" pair and fails on the
    "Z" (close path) that Qt 6.8+ writes after every rectangle (pyqtgraph issue #3495): no plot
    could be saved as SVG. Each "Z" is handed to it as "Z0,0", which it maps like a point, and
    turned back into "Z" afterwards. Applied once; a pyqtgraph without the function is left alone."""
    module = sys.modules.get("pyqtgraph.exporters.SVGExporter")
    original = getattr(module, "correctCoordinates", None)
    if original is None or getattr(original, "accepts_closed_paths", False):
        return

    def correct_coordinates(node, defs, item, options):
        paths = node.getElementsByTagName("path")
        for path in paths:
            d = path.getAttribute("d")
            if "Z" in d:
                path.setAttribute("d", re.sub(r"Z(?=\s|$)", "Z0,0", d))
        original(node, defs, item, options)
        for path in paths:
            d = path.getAttribute("d")
            if "Z" in d:
                path.setAttribute("d", _CLOSE_SENTINEL.sub("Z", d))

    correct_coordinates.accepts_closed_paths = True
    module.correctCoordinates = correct_coordinates


def export_plot(plot_item: pg.PlotItem, path, inputs: dict | None = None) -> Path:
    """One plot (with its title, axes and legend) as .png or .svg, chosen by the file's suffix;
    written whole (export_files.write_whole), never over a file in inputs."""
    suffix = Path(path).suffix.lower()
    if not plot_item.isVisible() or plot_item.sceneBoundingRect().width() <= 0:
        raise ExportError(f"{shown_name(path)}: that plot is not shown in this view, so there is nothing to save")
    if suffix == ".png":
        exporter = pg.exporters.ImageExporter(plot_item)
        width = int(plot_item.sceneBoundingRect().width() * PNG_SCALE)
        exporter.parameters()["width"] = max(width, 200)

        def write(partial) -> None:
            _save_image(exporter.export(toBytes=True), partial, path)
    elif suffix == ".svg":
        _accept_closed_svg_paths()
        exporter = pg.exporters.SVGExporter(plot_item)

        def write(partial) -> None:
            Path(partial).write_bytes(exporter.export(toBytes=True))
    else:
        raise ExportError(f"{shown_name(path)}: a plot is saved as .png or .svg, "
                          f"not {suffix or 'a file with no suffix'}")
    return write_whole(path, write, inputs)


def export_widget_png(widget, path, inputs: dict | None = None) -> Path:
    """A whole view as it is on screen (with its legend and status line) as a PNG."""
    if Path(path).suffix.lower() != ".png":
        raise ExportError(f"{shown_name(path)}: this view is saved as a .png image")
    return write_whole(path, lambda partial: _save_image(widget.grab(), partial, path), inputs)


def _save_image(image, partial, target) -> None:
    """A QImage or QPixmap as PNG into the temporary file (whose name says nothing of its format).
    Encoded in memory and written by Python: Qt's save() into /dev/full, or a symlink to it, returned
    True for a widget's grab and the export said "saved" of a file that holds nothing; a failed
    write() raises here, and write_whole says why."""
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    if image is None or image.isNull() or not image.save(buffer, "PNG"):
        raise ExportError(f"{target}: could not be written")
    Path(partial).write_bytes(data.data())


def export_csv(header: list[str], rows: list[list], path, inputs: dict | None = None) -> Path:
    if Path(path).suffix.lower() != ".csv":
        raise ExportError(f"{shown_name(path)}: a table is saved as .csv")

    def write(partial) -> None:
        with open(partial, "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(header)
            writer.writerows(rows)

    return write_whole(path, write, inputs)
