"""The frozen application's entry point: `kvscope` inside the PyInstaller bundle.

The first statement records when this script began. The self-test's start-up probe times the
bundle from the process start the kernel recorded (/proc on Linux) and falls back to this
timestamp where there is no such record.
"""

import time

ENTRY_WALL_TIME = time.time()

import os  # noqa: E402
import sys  # noqa: E402


def main() -> int:
    # The window runs the engine in a spawned process: in a frozen bundle that child is this
    # executable again, and freeze_support() turns it into the engine process before anything else.
    import multiprocessing

    multiprocessing.freeze_support()
    os.environ["KVSCOPE_ENTRY_TIME"] = repr(ENTRY_WALL_TIME)  # this process's, not a parent's
    argv = sys.argv[1:]
    if argv[:1] == ["--self-test"]:
        # Also reachable as `kvscope --self-test` through kvscope.app.cli.main; handled here too so the
        # bundle checks itself with the fewest modules between the launcher and the check.
        from kvscope.app.bench.self_test import run_self_test

        return run_self_test(argv[1:])
    from kvscope.app.cli.main import main as cli_main

    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
