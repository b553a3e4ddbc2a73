"""How long the main window takes to open and to close: MainWindow's constructor, then shown and
drawn once, then closed, offscreen, on the simulated backend and paused (no engine steps), twelve
times; the median of the last ten (the first two warm caches and imports).

    python scripts/time_window_open.py

Most of what the window tests spend is this; a user meets it at every start."""

from __future__ import annotations

import os
import statistics
import time
from types import SimpleNamespace

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
ROUNDS, WARM_UP = 12, 2


def main() -> None:
    from PySide6.QtWidgets import QApplication

    from kvscope.app.cli.gui import initial_values
    from kvscope.app.gui.main_window import MainWindow

    app = QApplication([])
    args = SimpleNamespace(backend="simulated", model=None, hardware="h100-80gb", workload="chat", model_path=None)
    built, drawn, closed = [], [], []
    for _ in range(ROUNDS):
        started = time.perf_counter()
        window = MainWindow({**initial_values(args), "num_requests": 2000}, autoplay=False)
        built.append(time.perf_counter() - started)
        window.resize(1280, 800)
        window.show()
        app.processEvents()
        drawn.append(time.perf_counter() - started)
        started = time.perf_counter()
        window.close()
        app.processEvents()
        closed.append(time.perf_counter() - started)
    median = lambda values: statistics.median(values[WARM_UP:])
    print(f"built {median(built):.3f} s, built and drawn {median(drawn):.3f} s, closed {median(closed):.3f} s "
          f"(median of {ROUNDS - WARM_UP})")


if __name__ == "__main__":  # the engine processes are spawned: they import this file
    main()
