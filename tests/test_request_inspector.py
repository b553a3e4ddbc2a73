"""The request inspector: the words the window keeps per request (frames carry only what changed),
what a request's blocks share through the prefix cache, and the panel that shows both for the
request selected in any view."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from PySide6.QtCore import Qt

from kvscope.app.gui.request_blocks import request_blocks
from kvscope.app.gui.request_texts import RequestTexts
from kvscope.app.host.protocol import FrameDelta, RequestText
from kvscope.engine.snapshot import BLOCK_CACHED, BLOCK_FREE, BLOCK_USED, REQUEST_DTYPE, Snapshot

PROMPT = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is KV?<|im_end|>\n<|im_start|>assistant\n"


def snapshot_of(owner, ref, requests, block_size=16) -> Snapshot:
    """A pool whose blocks have these owners and ref counts, holding these (id, blocks, cached tokens) requests."""
    owner, ref = np.asarray(owner, dtype=np.int64), np.asarray(ref, dtype=np.int32)
    state = np.where(ref > 0, BLOCK_USED, np.where(owner >= 0, BLOCK_CACHED, BLOCK_FREE)).astype(np.uint8)
    table = np.zeros(len(requests), dtype=REQUEST_DTYPE)
    for row, (request_id, blocks, cached) in zip(table, requests):
        row["request_id"], row["status"], row["num_blocks"], row["num_cached_prompt_tokens"] = request_id, 2, blocks, cached
        row["num_prompt_tokens"], row["max_tokens"] = blocks * block_size, 64
    return Snapshot(time_s=1.0, step=3, block_size=block_size, block_owner=owner, block_state=state,
                    block_ref_cnt=ref, block_fill=np.where(ref > 0, block_size, 0).astype(np.uint16),
                    block_hash=np.zeros(len(owner), dtype=np.uint64), requests=table, kv_usage=0.5,
                    num_running=len(requests), num_waiting=0)


def test_the_window_keeps_the_latest_words_of_each_request():
    texts = RequestTexts(kept=3)
    texts.take({4: RequestText(PROMPT, "Key", None, typed=False), 5: RequestText(PROMPT, "", None, typed=True)})
    texts.take({4: RequestText(None, "Key and value", None)})  # later frames carry no prompt
    record = texts.get(4)
    assert record.prompt == PROMPT and record.output == "Key and value" and not record.finished
    assert texts.newest_typed == 5 and texts.shown_in_demo(-1) == 5 and texts.shown_in_demo(4) == 4
    texts.take({4: RequestText(None, "Key and value.", "stop")})
    assert texts.get(4).finished and "end-of-sequence" in texts.get(4).finish_text()
    for request_id in (6, 7, 8):  # over the limit: the oldest finished request goes, the typed one stays
        texts.take({request_id: RequestText(PROMPT, "", None)})
    assert texts.get(4) is None and texts.get(5) is not None and len(texts) == 4
    texts.clear()
    assert len(texts) == 0 and texts.shown_in_demo(-1) == -1


def test_demo_mode_follows_a_request_that_is_writing_until_it_finishes():
    """Not the newest request, which is often still waiting with no word written."""
    texts = RequestTexts()
    texts.take({1: RequestText(PROMPT, "Key", None), 2: RequestText(PROMPT, "Val", None),
                3: RequestText(PROMPT, "", None)})  # 3 waits in the queue
    assert texts.shown_in_demo(-1) == 2
    texts.take({4: RequestText(PROMPT, "A", None), 2: RequestText(None, "Value", None)})
    assert texts.shown_in_demo(-1) == 2  # kept while it writes: the pane does not jump to each newcomer
    texts.take({2: RequestText(None, "Value.", "stop")})
    assert texts.shown_in_demo(-1) == 4  # then the newest writing one
    texts.take({4: RequestText(None, "A.", "stop"), 1: RequestText(None, "Key.", "stop")})
    assert texts.shown_in_demo(-1) == 3  # nothing writes: the one still waiting


def test_blocks_reused_from_a_prefix_another_request_still_holds():
    # request 1 filled blocks 0-3; request 2 reused 0-2 (48 cached tokens) and filled 4-5
    snap = snapshot_of(owner=[1, 1, 1, 1, 2, 2, -1], ref=[2, 2, 2, 1, 1, 1, 0], requests=[(1, 4, 0), (2, 5, 48)])
    second = request_blocks(snap, 2)
    assert (second.held, second.lit, second.reused, second.lent, second.shared) == (5, 2, 3, 0, 3)
    assert second.sentences()[0].startswith("3 of 5 blocks shared with other requests through the prefix cache")
    assert "3 shared blocks that another request filled first stay dim" in second.sentences()[1]
    first = request_blocks(snap, 1)
    assert (first.held, first.lit, first.reused, first.lent, first.shared) == (4, 4, 0, 3, 3)
    assert request_blocks(snap, 9) is None


def test_blocks_taken_over_from_the_cache_and_lent_again_are_counted_once():
    # request 3 reused 2 cached blocks nobody held (it became their owner), filled 2 more, and
    # request 4 now shares its first 3 blocks: 3 shared, not 2 + 3
    snap = snapshot_of(owner=[3, 3, 3, 3, 4], ref=[2, 2, 2, 1, 1], requests=[(3, 4, 32), (4, 4, 48)])
    blocks = request_blocks(snap, 3)
    assert (blocks.held, blocks.lit, blocks.reused, blocks.lent, blocks.shared) == (4, 4, 2, 1, 3)


def test_the_request_text_helpers_import_no_qt():
    code = ("import sys; import kvscope.app.gui.request_texts, kvscope.app.gui.request_blocks; "
            "sys.exit('PySide6' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


class Info:
    """The EngineInfo fields the panels read."""

    def __init__(self, no_text_reason=None, workload="chat-text"):
        self.no_text_reason = no_text_reason
        self.workload = type("Workload", (), {"name": workload})()


@pytest.fixture
def inspector(qtbot):
    from kvscope.app.gui.request_inspector import RequestInspector
    from kvscope.app.gui.window_state import WindowState

    view = RequestInspector()
    qtbot.addWidget(view)
    state = WindowState()
    return view, state


def feed(view, state, frame):
    view.take(state.take(frame))


def test_selecting_a_request_shows_its_prompt_its_answer_and_its_blocks(inspector):
    view, state = inspector
    snap = snapshot_of(owner=[1, 1, 1, 1, 2, 2, -1], ref=[2, 2, 2, 1, 1, 1, 0], requests=[(1, 4, 0), (2, 5, 48)])
    feed(view, state, FrameDelta(engine_info=Info(), snapshot=snap,
                                 texts={2: RequestText(PROMPT, "KV is", None, typed=True)}))
    assert "No request selected" in view.heading.text()
    view.select_request(2)
    assert "Request #2" in view.heading.text() and "typed in the prompt box" in view.heading.text()
    assert view.text.prompt == PROMPT and view.text.answer == "KV is"
    assert "3 of 5 blocks shared with other requests through the prefix cache" in view.facts_text()
    feed(view, state, FrameDelta(texts={2: RequestText(None, "KV is the key-value cache.", "stop")}))
    assert view.text.answer == "KV is the key-value cache."  # streamed on: appended, the prompt kept
    assert view.text.toPlainText() == PROMPT + "\n\nKV is the key-value cache."
    view.select_request(1)  # a request with no words
    assert "No words to show" in view.facts_text() and "token ids" in view.facts_text()
    assert view.text.toPlainText() == ""


def test_a_click_in_the_requests_table_or_the_block_map_selects_the_request_in_the_inspector(qtbot, tmp_path,
                                                                                           monkeypatch):
    from kvscope.app.cli.gui import initial_values
    from kvscope.app.gui.main_window import MainWindow

    class Args:
        backend, model, hardware, workload, model_path = "simulated", None, "h100-80gb", "chat", None

    monkeypatch.setenv("KVSCOPE_CONFIG_DIR", str(tmp_path / "config"))
    window = MainWindow(initial_values(Args()), autoplay=False)
    qtbot.addWidget(window)
    window.resize(1280, 720)
    window.show()
    window.arrange_docks()
    qtbot.waitUntil(lambda: window.engine_info is not None, timeout=20000)
    for _ in range(30):
        window.step_once()
    qtbot.waitUntil(lambda: window.latest_snapshot is not None and window.latest_snapshot.num_running > 1,
                    timeout=20000)
    window.requests.set_requests(window.latest_snapshot.requests)
    model = window.requests.model_
    request_id = int(model.rows[1]["request_id"])
    rect = window.requests.visualRect(model.index(1, 0))
    window.inspector_dock.raise_()
    window.bottom_dock.raise_()  # the table in front; the inspector is behind its tab
    qtbot.mouseClick(window.requests.viewport(), Qt.LeftButton, pos=rect.center())
    assert window.selected_request == request_id and window.inspector.selected == request_id
    assert window.inspector.isVisible()  # its tab came to the front
    assert f"Request #{request_id}" in window.inspector.heading.text()
    assert "No words to show" in window.inspector.facts_text()  # the simulated backend has no text
    assert window.block_map.selected_request() == request_id
    owner = int(np.flatnonzero(window.latest_snapshot.block_owner >= 0)[0])
    clicked = window.block_map._emit_for_block(owner)  # what a click on that cell does
    assert window.inspector.selected == clicked == int(window.latest_snapshot.block_owner[owner])
    window.close()
