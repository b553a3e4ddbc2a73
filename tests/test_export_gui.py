"""File > Export: every live plot as PNG and SVG, the block map and batch timeline as PNG, the
results table as CSV; each file is checked to be what its suffix says, and a bad path is refused
with a dialog, not a traceback."""

from __future__ import annotations

import csv
import xml.etree.ElementTree as ET

import pytest
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QMessageBox

from kvscope.app.cli.gui import initial_values
from kvscope.app.gui.main_window import MainWindow
from kvscope.app.lab.compare import ComparisonSpec, ComparisonWorkload, Variant
from kvscope.engine.config import EngineArgs
from kvscope.app.lab.presets import load_workload
from kvscope.widgets.live_plots import TITLES

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


class Args:
    backend, model, hardware, workload, model_path = "simulated", None, "h100-80gb", "chat", None


@pytest.fixture(scope="module")
def window(qapp):
    values = initial_values(Args())
    values["num_requests"] = 200
    win = MainWindow(values, autoplay=True)
    win.resize(1600, 960)
    win.show()
    win.speed.setCurrentText("10x")
    yield win
    win.close()


@pytest.fixture
def saving_to(window, monkeypatch):
    """Answer the file dialog with a path, and record the warnings a modal box would show."""
    answers, warnings = [], []
    monkeypatch.setattr(window, "_ask_save_path", lambda title, default, formats: answers.pop(0))
    monkeypatch.setattr(QMessageBox, "warning", lambda parent, title, text, *a, **k: warnings.append(text))

    def save(path):
        answers.append(str(path))
        return warnings

    return save


def running(window, qtbot):
    qtbot.waitUntil(lambda: window.series.columns["time_s"].size > 20 and len(window.series.columns["ttft_s"].view()) > 2,
                    timeout=30000)


def assert_png(path, min_width=100):
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    image = QImage(str(path))
    assert not image.isNull() and image.width() >= min_width and image.height() >= 50


@pytest.mark.parametrize("name", list(TITLES))
def test_every_plot_exports_as_png_and_svg(window, qtbot, tmp_path, saving_to, name):
    running(window, qtbot)
    plot = window.plots.plots[name]
    png, svg = tmp_path / f"{name}.png", tmp_path / f"{name}.svg"
    saving_to(png)
    assert window.exports.ask_plot(name)
    assert_png(png, min_width=int(plot.sceneBoundingRect().width()))  # exported at twice the size on screen
    saving_to(svg)
    assert window.exports.ask_plot(name)
    root = ET.parse(svg).getroot()
    assert root.tag.endswith("svg")
    assert any(el.tag.endswith(("path", "polyline")) for el in root.iter())  # the curves, as vectors


@pytest.mark.parametrize("key", ["block_map", "timeline"])
def test_the_block_map_and_the_timeline_export_as_png(window, qtbot, tmp_path, saving_to, key):
    running(window, qtbot)
    path = tmp_path / f"{key}.png"
    saving_to(path)
    assert window.exports.ask_view(key)
    widget = window.block_map if key == "block_map" else window.timeline
    assert_png(path, min_width=widget.width())


def test_the_comparison_plots_and_results_table_export(window, qtbot, tmp_path, saving_to):
    workload = ComparisonWorkload(load_workload("chat").with_overrides(num_requests=30, arrival_rate_per_s=20.0))
    small = dict(gpu_memory_utilization=0.3, max_model_len=4096)
    h100 = "h100-80gb"  # 30 % of the default 24 GB L4 does not hold Llama 3 8B's weights
    spec = ComparisonSpec([Variant("fp16 KV", hardware=h100, engine_args=EngineArgs(kv_cache_dtype="fp16", **small)),
                           Variant("fp8 KV", hardware=h100, engine_args=EngineArgs(kv_cache_dtype="fp8", **small)),
                           Variant("block 32", hardware=h100, engine_args=EngineArgs(block_size=32, **small))], workload)
    window.speed.setCurrentText("max")
    window.open_comparison(spec, "csv")
    window.play_pressed()
    view = window.compare
    qtbot.waitUntil(lambda: view.done, timeout=30000)
    shown = [name for name, plot in view.plots.plots.items() if plot.isVisible()]
    assert len(shown) >= 3
    for name in shown:  # the comparison's plots, every configuration on them
        png, svg = tmp_path / f"compare-{name}.png", tmp_path / f"compare-{name}.svg"
        saving_to(png)
        assert window.exports.ask_compare_plot(name)
        assert_png(png)
        saving_to(svg)
        assert window.exports.ask_compare_plot(name)
        assert ET.parse(svg).getroot().tag.endswith("svg")
    path = tmp_path / "results.csv"
    saving_to(path)
    assert window.export_actions["results"].isEnabled()
    assert window.exports.ask_results()
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    table = view.table
    assert len(rows) == table.rowCount() + 1 and all(len(r) == table.columnCount() for r in rows)
    assert len(rows[0]) == len(table.header())
    assert rows[0][:4] == ["metric (unit)", "fp16 KV (baseline)", "fp8 KV", "fp8 KV \u00f7 baseline"]
    for r, row in enumerate(rows[1:]):
        assert row[0] == table.shown_text(r, 0)
        for c in range(1, len(row)):  # the same numbers as on screen, unrounded
            shown = table.shown_text(r, c).replace(",", "").lstrip("\u00d7")
            if shown == "\u2013":
                assert row[c] == ""
            else:  # equal to the digits shown
                decimals = len(shown.split(".")[1]) if "." in shown else 0
                assert float(row[c]) == pytest.approx(float(shown), abs=0.5 * 10**-decimals + 1e-9)
    window.pages.setCurrentIndex(0)


def test_a_path_that_cannot_be_written_is_refused_with_the_reason(window, qtbot, tmp_path, saving_to):
    warnings = saving_to(tmp_path / "missing-folder" / "kv.png")
    assert not window.exports.ask_plot("kv")
    assert warnings and "does not exist" in warnings[-1]
    saving_to(tmp_path / "kv.jpg")
    assert not window.exports.ask_plot("kv")
    assert ".png or .svg" in warnings[-1]
    assert not (tmp_path / "kv.jpg").exists()


def files_in(folder) -> set:
    return {p.name for p in folder.iterdir()}


def test_an_export_that_fails_leaves_the_existing_file_as_it_was(window, qtbot, tmp_path, saving_to, monkeypatch):
    """Written to a temporary file beside the target and renamed over it when complete: a full
    disk or a failing exporter costs nothing that was there."""
    import pyqtgraph as pg

    running(window, qtbot)
    target = tmp_path / "kv.png"
    target.write_bytes(b"the user's earlier picture")
    before = files_in(tmp_path)

    def disk_full(self, fileName=None, toBytes=False, copy=False):
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(pg.exporters.ImageExporter, "export", disk_full)
        warnings = saving_to(target)
        assert not window.exports.ask_plot("kv")
    assert "No space left on device" in warnings[-1]
    assert target.read_bytes() == b"the user's earlier picture" and files_in(tmp_path) == before
    saving_to(target)
    assert window.exports.ask_plot("kv")
    assert_png(target)
    assert files_in(tmp_path) == before  # replaced whole, nothing left beside it


def test_no_export_overwrites_a_file_the_window_reads(window, qtbot, tmp_path, saving_to):
    from tests.small_recording import record_small_run

    recording = record_small_run(tmp_path / "run.png")  # a recording whatever its name: the window reads it
    data = recording.read_bytes()
    assert window.open_recording(str(recording))
    try:
        warnings = saving_to(recording)
        assert not window.exports.ask_plot("kv")
        assert "is also the recording" in warnings[-1]
        saving_to(recording)
        assert not window.exports.ask_view("block_map")
        assert "is also the recording" in warnings[-1]
        saving_to(recording)
        assert not window.exports.ask_perfetto()
        assert "is also the recording" in warnings[-1]
        assert recording.read_bytes() == data
    finally:
        window.close_recording()
