import atexit
import os
import shutil
import tempfile

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
SCRATCH_PREFIX = "kvscope-tests-"
STALE_UNOWNED_S = 6 * 3600  # a scratch folder with no owner named, untouched this long, is a leftover


def _remove_leftover_scratch() -> None:
    """Scratch folders of earlier runs that were killed (exit handlers did not run): their owner
    process is gone."""
    import time

    root = tempfile.gettempdir()
    for name in os.listdir(root):
        path = os.path.join(root, name)
        if not name.startswith(SCRATCH_PREFIX) or not os.path.isdir(path):
            continue
        try:
            with open(os.path.join(path, "owner-pid")) as owner:
                pid = int(owner.read())
            os.kill(pid, 0)  # raises if no such process
            continue
        except ProcessLookupError:
            pass
        except (OSError, ValueError):  # no owner named (an older run), or one we may not signal
            try:
                if time.time() - os.path.getmtime(path) < STALE_UNOWNED_S:
                    continue
            except OSError:
                continue
        shutil.rmtree(path, ignore_errors=True)


_remove_leftover_scratch()
# Models the tests build, and the Hugging Face cache they look at, stay inside the test run.
_scratch = tempfile.mkdtemp(prefix=SCRATCH_PREFIX)
with open(os.path.join(_scratch, "owner-pid"), "w") as _owner:
    _owner.write(str(os.getpid()))
# The models built here are ~400 MB a run: left behind, a few hundred runs filled the disk that CI
# then built the bundle on.
atexit.register(shutil.rmtree, _scratch, ignore_errors=True)
os.environ["KVSCOPE_CACHE_DIR"] = os.path.join(_scratch, "kvscope")
os.environ["HF_HUB_CACHE"] = os.path.join(_scratch, "hf-hub")
os.environ["HF_HUB_OFFLINE"] = "1"


import pytest  # noqa: E402 - after the environment above is set


@pytest.fixture(autouse=True)
def _shown_widgets_outlive_the_test_body(request):
    """Keeps every widget given to qtbot.addWidget referenced until pytest-qt has closed it.

    pytest-qt holds them weakly and processes events right after the test body, when a test's
    own reference is gone. A widget in a reference cycle (most of ours: signals connected to
    lambdas) could then be collected by Python's garbage collector in the middle of its own paint
    event, deleting the C++ widget whose backing store was being painted: a segfault inside
    QPainter::drawImage that came and went with the number of objects the run had allocated
    (valgrind: the painter's image freed by ~QBackingStore from within the paint)."""
    if "qtbot" not in request.fixturenames:
        yield
        return
    qtbot = request.getfixturevalue("qtbot")
    kept, add_widget = [], qtbot.addWidget

    def add_and_keep(widget, *args, **kwargs):
        kept.append(widget)
        return add_widget(widget, *args, **kwargs)

    qtbot.addWidget = add_and_keep
    yield
    # pytest-qt has closed them; a dialog one opened (a window-modal error box) would stay on screen
    # with its parent gone and, modal to nothing, block the mouse in every later test
    from PySide6.QtWidgets import QDialog

    for widget in kept:
        try:
            dialogs = widget.findChildren(QDialog)
        except RuntimeError:  # deleted already
            continue
        for dialog in dialogs:
            dialog.close()
    kept.clear()


# The attach tests' loopback vLLM: an HTTP server (tests/attach_fixtures.py) and a ZMQ publisher
# (tests/test_vllm_subscriber.py), each stopped after its test.
@pytest.fixture
def server():
    from attach_fixtures import FixtureServer, vllm_routes

    started = []

    def start(routes=None) -> FixtureServer:
        started.append(FixtureServer(vllm_routes() if routes is None else routes))
        return started[-1]

    yield start
    for s in started:
        s.stop()


@pytest.fixture
def publisher():
    from test_vllm_subscriber import LoopbackPublisher

    started = []

    def start(**options) -> LoopbackPublisher:
        started.append(LoopbackPublisher(**options))
        return started[-1]

    yield start
    for p in started:
        p.stop()


@pytest.fixture
def window(qtbot, tmp_path, monkeypatch):
    """The main window (2,000 requests, paused) with its presets in a scratch folder: the hostile-input
    passes' window (a test file's own `window` fixture takes precedence over this one)."""
    from test_gui_hostile_fourth import make_window

    monkeypatch.setenv("KVSCOPE_CONFIG_DIR", str(tmp_path / "config"))
    win = make_window(qtbot, autoplay=False)
    yield win
    win.close()


@pytest.fixture(scope="module")
def recording_bytes(tmp_path_factory):
    """The bytes of a small engine recording, for the hostile passes that damage one record at a time."""
    from small_recording import record_small_run

    return record_small_run(tmp_path_factory.mktemp("rec") / "small.kvrec").read_bytes()
