"""The live plots keep up with the status bar on the real backend: a new user saw them trail the
status line by 5 - 17 s, with holes, while the engine ran a real model. Here the status line's
engine clock is read, and the KV plot must hold a point at that time within a second of wall time,
with one point per step the engine reported (no holes) while the run is too short to be thinned."""

from __future__ import annotations

import numpy as np

from kvscope.app.cli.gui import initial_values
from kvscope.app.gui.main_window import MainWindow


class _Args:
    backend = "real"
    model = "tiny-llama"
    hardware = None
    workload = "chat"
    model_path = None


def test_the_kv_plot_reaches_the_clock_the_status_bar_shows_within_a_second(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("KVSCOPE_CONFIG_DIR", str(tmp_path / "config"))
    values = initial_values(_Args())
    values.update({"backend": "real", "model": "tiny-llama", "hardware": "this-machine",
                   "kv_cache_memory_bytes": 32 * 1024**2, "num_requests": 400})
    win = MainWindow(values, autoplay=True)
    qtbot.addWidget(win)
    win.show()
    qtbot.waitUntil(lambda: win.latest_snapshot is not None and win.latest_snapshot.step >= 20, timeout=90000)

    def kv_plot_times() -> np.ndarray:
        x = win.plots.curves["kv_usage"].xData  # what was given, before clipping to the view
        return np.asarray([] if x is None else x, dtype=float)

    for _ in range(3):
        shown = win.latest_snapshot.time_s
        assert f"engine clock {shown:,.2f} s" in win.state.status_text()
        qtbot.waitUntil(lambda: kv_plot_times().size and np.nanmax(kv_plot_times()) >= shown - 1e-9, timeout=1000)
        qtbot.wait(300)  # a few more steps run between the samples
    win.toggle_play()  # pause, so the count below is of a settled series
    assert win.play_action.text() == "Play"
    steps_held = lambda: win.series.columns["time_s"].size  # noqa: E731
    try:
        qtbot.waitUntil(lambda: np.count_nonzero(np.isfinite(kv_plot_times())) == steps_held(), timeout=2000)
    finally:
        print("points drawn", np.count_nonzero(np.isfinite(kv_plot_times())), "steps held", steps_held())
    assert steps_held() >= 20
    win.close()
