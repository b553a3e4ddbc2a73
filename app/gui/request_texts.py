"""The words of the text requests the window has seen: each frame carries only the requests whose
text changed (the prompt in the first frame that carries a request, then None), so the window
keeps the latest of each here. Plain Python, no Qt: the prompt box, the request inspector and demo
mode read it, and it is tested without a window."""

from __future__ import annotations

from dataclasses import dataclass

TEXTS_KEPT = 2000  # requests whose words are kept; the oldest finished ones go first (a long run sends thousands)

FINISH_REASONS = {
    "stop": "the model ended its answer (end-of-sequence token)",
    "length": "stopped at its token limit (max_tokens or the context)",
}


@dataclass
class TextRecord:
    request_id: int
    prompt: str  # as the model reads it: the chat template applied
    output: str  # the answer so far
    finish_reason: str | None  # None while it runs (see FINISH_REASONS)
    typed: bool  # sent from the prompt box, not by the workload
    version: int  # the store's version when this record last changed: views redraw what is newer

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def finish_text(self) -> str:
        if self.finish_reason is None:
            return "answering"
        return FINISH_REASONS.get(self.finish_reason, f"finished ({self.finish_reason})")


class RequestTexts:
    """Request id -> TextRecord, folded from the frames' ``texts`` (request id -> RequestText)."""

    def __init__(self, kept: int = TEXTS_KEPT):
        self.kept = kept
        self.version = 0  # counts the frames that changed any text
        self._records: dict[int, TextRecord] = {}
        self.newest_typed = -1  # the newest request sent from the prompt box, -1 before any
        self._followed = -1  # the workload's request demo mode shows while it writes

    def __len__(self) -> int:
        return len(self._records)

    def get(self, request_id: int) -> TextRecord | None:
        return self._records.get(request_id)

    def clear(self) -> None:
        self._records.clear()
        self.newest_typed = -1
        self.version += 1

    def take(self, texts: dict) -> None:
        """Fold one frame's texts in; a request first seen without its prompt (its first frame was
        missed) keeps an empty prompt rather than being dropped."""
        if not texts:
            return
        self.version += 1
        records = self._records
        for request_id, text in texts.items():
            record = records.get(request_id)
            if record is None:
                record = records[request_id] = TextRecord(request_id, text.prompt or "", text.output,
                                                          text.finish_reason, bool(text.typed), self.version)
            else:
                if text.prompt is not None:
                    record.prompt = text.prompt
                record.output, record.finish_reason = text.output, text.finish_reason
                record.typed = record.typed or bool(text.typed)
                record.version = self.version
            if record.typed and request_id > self.newest_typed:
                self.newest_typed = request_id
        if len(records) > self.kept:
            self._forget_oldest(len(records) - self.kept)

    def _forget_oldest(self, count: int) -> None:
        finished = [rid for rid, record in self._records.items() if record.finished and rid != self.newest_typed]
        for request_id in finished[:count]:
            del self._records[request_id]

    def newest_streaming(self) -> int:
        """The newest request writing its answer (else the newest not finished, still waiting), -1 if
        none: what demo mode follows before anything is typed."""
        unfinished = [rid for rid, record in self._records.items() if not record.finished]
        writing = [rid for rid in unfinished if self._records[rid].output]
        return max(writing or unfinished, default=-1)

    def shown_in_demo(self, selected: int) -> int:
        """The request whose answer demo mode shows: the one chosen (selected, if it has text), else the
        newest typed, else the one it followed while that one is still writing, else the newest
        writing. (The newest unfinished one was often still waiting: half the screen showed an empty
        answer while others streamed; and following each newcomer made the pane jump.)"""
        if selected >= 0 and selected in self._records:
            return selected
        if self.newest_typed >= 0:
            return self.newest_typed
        followed = self._records.get(self._followed)
        if followed is None or followed.finished or not followed.output:
            self._followed = self.newest_streaming()
        return self._followed
