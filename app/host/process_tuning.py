"""How a process that runs an engine sets itself up: the interpreter (tune_for_engine, the same
for the window's session processes and for headless runs, so that their speeds compare), and the
share of the machine it leaves to the window (leave_a_core_to_the_window)."""

from __future__ import annotations

import gc

# (generation 0, 1, 2): collections run ~140x less often than at CPython's default (700, 10, 10).
ENGINE_GC_THRESHOLD = (100_000, 20, 20)


def tune_for_engine() -> None:
    """An engine step allocates a few hundred short-lived objects, almost none in reference
    cycles. At the default threshold a collection runs every few steps and walks everything
    recently kept -- the steps and events the window is handed each frame among them: measured
    5-11 % of a simulated step's time. Collections still run, just far less often."""
    gc.set_threshold(*ENGINE_GC_THRESHOLD)


def leave_a_core_to_the_window() -> None:
    """torch's intra-op threads wait for each other at every op; when the window's process takes
    one of their cores to draw, each op waits for a thread that is not running (measured: a
    comparison on the tiny model ran 6x slower beside the window on 2 cores). One fewer thread
    than cores leaves the window its own. Called once a real model runs in this process."""
    import os

    import torch

    torch.set_num_threads(max(1, min(torch.get_num_threads(), (os.cpu_count() or 2) - 1)))
