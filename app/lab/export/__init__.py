"""A recorded run converted for other tools: a Chrome/Perfetto trace (perfetto.py) and the
per-step series as CSV (series_csv.py). Each reads a Recording; neither needs the engine."""

from kvscope.app.lab.export.perfetto import TraceStats, perfetto_trace, write_perfetto
from kvscope.app.lab.export.series_csv import write_series_csv

__all__ = ["TraceStats", "perfetto_trace", "write_perfetto", "write_series_csv"]
