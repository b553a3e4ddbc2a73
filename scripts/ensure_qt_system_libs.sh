#!/usr/bin/env bash
# `make run` runs this before the window: Qt's X11 plugin (libqxcb.so) needs system libraries that a
# fresh Debian/Ubuntu may lack (libxcb-cursor0, libxcb-icccm4, libxcb-keysyms1, ...). As root they are
# installed with apt-get; otherwise the one apt-get line to run is printed and the exit status is 2.
# Headless runs (QT_QPA_PLATFORM=offscreen) need none of them.
set -euo pipefail
PY="${PY:-.venv/bin/python}"
exec "$PY" -m kvscope.app.cli.qt_system_libs --install
