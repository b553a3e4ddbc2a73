"""The batch timeline's data: the newest steps as [lane, column] cells, and who holds which lane.

A request takes the lowest free lane when it first appears in a batch and gives it back when it
finishes or is preempted; each cell holds a code (empty, decode, or a prompt chunk by size), the
request and its tokens. Columns form a ring buffer of the newest ``capacity`` steps: column slot =
sequence number % capacity, where the sequence number counts steps since clear() (x in the view;
its axis shows the engine step number). Plain numpy and text, no Qt: batch_timeline.py draws it.
"""

from __future__ import annotations

from itertools import chain
from typing import NamedTuple

import numpy as np


class TimelineStep(NamedTuple):
    step: int
    start_time_s: float
    duration_s: float
    request_ids: list  # list[int], the batch in order
    num_new_tokens: list  # list[int], per batch entry: prompt-chunk length, or 1 for a decode
    is_prefill: list  # list[bool], per batch entry
    joined: list  # list[int], request ids admitted to the batch this step
    finished: list  # list[int]
    preempted: list  # list[int]




# Cell codes of the index image.
EMPTY = 0
DECODE = 1
PREFILL_SMALL = 2  # PREFILL_SMALL + k for the k-th chunk-size bin
PREFILL_BIN_EDGES = np.array([32, 256, 1024])  # chunks of <32, 32-255, 256-1023, >=1024 tokens
PREFILL_BIN_LABELS = ("<32", "32-255", "256-1023", "\u22651024")
NUM_CODES = PREFILL_SMALL + len(PREFILL_BIN_LABELS)

JOINED, FINISHED, PREEMPTED = "joined", "finished", "preempted"
MARK_KINDS = (JOINED, FINISHED, PREEMPTED)


def prefill_codes(num_tokens: np.ndarray) -> np.ndarray:
    """Cell code of prompt chunks of the given sizes (vectorised)."""
    return (PREFILL_SMALL + np.searchsorted(PREFILL_BIN_EDGES, num_tokens, side="right")).astype(np.uint8)



def format_ms(seconds: float) -> str:
    ms = seconds * 1e3
    if ms >= 100:
        return f"{ms:,.0f} ms"
    if ms >= 1:
        return f"{ms:.2f} ms"
    return f"{ms:.3f} ms"



class BatchLanes:
    """The newest ``capacity`` steps on at most ``max_lanes`` lanes; ``add_steps`` as they come."""

    def __init__(self, capacity: int = 400, max_lanes: int = 256):
        self.capacity = int(capacity)
        self.max_lanes = int(max_lanes)
        cap, lanes = self.capacity, self.max_lanes
        # ring buffers: per cell [lane, slot], then per column [slot], then the marks
        self._codes = np.zeros((lanes, cap), dtype=np.uint8)
        self._rid = np.full((lanes, cap), -1, dtype=np.int64)
        self._ntok = np.zeros((lanes, cap), dtype=np.int32)
        self._step_no = np.zeros(cap, dtype=np.int64)
        self._duration = np.zeros(cap, dtype=np.float64)
        self._prefill_tok = np.zeros(cap, dtype=np.int64)
        self._decode_tok = np.zeros(cap, dtype=np.int64)
        self._batch_size = np.zeros(cap, dtype=np.int64)
        self._overflow = np.zeros(cap, dtype=np.int64)  # batch entries with no lane, per column
        self._marks = {k: (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64))
                       for k in MARK_KINDS}  # kind -> (sequence, lane, request id)
        self._init_state()

    def _init_state(self) -> None:
        self._seq_end = 0  # sequence number of the next step
        self._last_step: int | None = None  # engine step number of the newest step added
        self._count = 0  # valid columns, <= capacity
        self._lane_owner = np.full(self.max_lanes, -1, dtype=np.int64)  # lane -> request id
        self._lane_by_id = np.full(1024, -1, dtype=np.int64)  # request id -> lane
        self._lacked_lane = np.zeros(1024, dtype=bool)  # request id -> ever drawn without a lane
        self.overflow_requests_total = 0  # distinct requests that ran without a lane since clear()

    def clear(self) -> None:
        """Forget every step and lane."""
        self._codes.fill(EMPTY)
        self._rid.fill(-1)
        self._ntok.fill(0)
        for a in (self._step_no, self._duration, self._prefill_tok, self._decode_tok,
                  self._batch_size, self._overflow):
            a.fill(0)
        for k in MARK_KINDS:
            self._marks[k] = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64))
        self._init_state()

    def _ensure_ids(self, max_id: int) -> None:
        n = len(self._lane_by_id)
        if max_id < n:
            return
        size = max(max_id + 1, 2 * n)
        grown = np.full(size, -1, dtype=np.int64)
        grown[:n] = self._lane_by_id
        self._lane_by_id = grown
        lacked = np.zeros(size, dtype=bool)
        lacked[:n] = self._lacked_lane
        self._lacked_lane = lacked

    def _lanes_of(self, ids: np.ndarray) -> np.ndarray:
        if ids.size and ids.min() < 0:
            out = np.full(ids.shape, -1, dtype=np.int64)
            ok = ids >= 0
            out[ok] = self._lane_by_id[ids[ok]]
            return out
        return self._lane_by_id[ids]

    @property
    def lanes_in_use(self) -> int:
        return int((self._lane_owner >= 0).sum())

    def lane_of(self, request_id: int) -> int:
        """The lane a request holds now, or -1."""
        if 0 <= request_id < len(self._lane_by_id):
            return int(self._lane_by_id[request_id])
        return -1

    # ------------------------------------------------------------------ data in

    def add_steps(self, steps: list) -> None:
        """Append the steps since the last frame (oldest first); keeps the newest ``capacity``.
        Lanes are given step by step (a lane freed by one step is taken in the next); the
        drawn columns are written together afterwards: at maximum speed a frame brings 400 steps,
        and writing each column with its own dozen small array operations took 15 ms."""
        if not steps:
            return
        cap = self.capacity
        first_drawn = len(steps) - cap  # steps before this index scroll out at once: lanes only
        new_marks = {k: [] for k in MARK_KINDS}
        drawn = []  # (slot, lanes, ids, tokens, is_prefill) of every step drawn
        for i, st in enumerate(steps):
            ids = np.asarray(st.request_ids, dtype=np.int64)
            last = self._last_step  # a step retried after running out of memory repeats its number
            if last is not None and (st.step > last + 1 or st.step < last):
                self._release_lanes_after_gap(ids)
            self._last_step = st.step
            hi = max(int(ids.max()) if ids.size else -1, max(st.joined, default=-1), max(st.finished, default=-1),
                     max(st.preempted, default=-1))
            self._ensure_ids(hi)
            lanes = self._lanes_of(ids)
            n_over = 0
            if ids.size and (lanes < 0).any():
                lanes, n_over = self._give_lanes(ids, lanes)

            seq = self._seq_end
            draw = i >= first_drawn
            if draw:
                slot = seq % cap
                drawn.append((slot, lanes, ids, st.num_new_tokens, st.is_prefill))
                self._step_no[slot] = st.step
                self._duration[slot] = st.duration_s
                self._batch_size[slot] = ids.size
                self._overflow[slot] = n_over

            # Marks, then give back the lanes of finished and preempted requests.
            for kind, lst in ((JOINED, st.joined), (FINISHED, st.finished), (PREEMPTED, st.preempted)):
                if not lst:
                    continue
                mid = np.asarray(lst, dtype=np.int64)
                ml = self._lanes_of(mid)
                ok = ml >= 0
                if draw and ok.any():
                    new_marks[kind].append((np.full(int(ok.sum()), seq, np.int64), ml[ok], mid[ok]))
                if kind != JOINED and ok.any():
                    self._lane_owner[ml[ok]] = -1
                    self._lane_by_id[mid[ok]] = -1
            self._seq_end += 1
        self._count = min(cap, self._count + len(steps))
        self._draw_columns(drawn)

        first = self._seq_end - self._count
        for kind in MARK_KINDS:
            parts = [self._marks[kind]] + new_marks[kind]
            s = np.concatenate([p[0] for p in parts])
            keep = s >= first
            self._marks[kind] = (s[keep], np.concatenate([p[1] for p in parts])[keep],
                                 np.concatenate([p[2] for p in parts])[keep])

    def _release_lanes_after_gap(self, batch_ids: np.ndarray) -> None:
        """Steps were skipped (a fast run sends only the newest of them): whoever finished or was
        preempted meanwhile never gave back a lane, so every request not in this batch does now.
        Without this, lanes ran out after a minute at maximum speed with 4 requests running."""
        owners = self._lane_owner
        held = np.flatnonzero(owners >= 0)
        gone = held[~np.isin(owners[held], batch_ids)]
        self._lane_by_id[owners[gone]] = -1
        owners[gone] = -1

    def _give_lanes(self, ids: np.ndarray, lanes: np.ndarray) -> tuple[np.ndarray, int]:
        """The batch's newcomers take the lowest free lanes, in batch order; those left without
        one are counted. Returns the lanes of the batch and how many entries have none."""
        need = (lanes < 0) & (ids >= 0)
        if need.any():
            new_ids = ids[need]
            free = np.flatnonzero(self._lane_owner < 0)
            k = min(len(new_ids), len(free))
            if k:
                got = free[:k]
                self._lane_by_id[new_ids[:k]] = got
                self._lane_owner[got] = new_ids[:k]
                lanes = self._lanes_of(ids)
        no_lane = lanes < 0
        n_over = int(no_lane.sum())
        if n_over:
            over_ids = ids[no_lane & (ids >= 0)]
            fresh = over_ids[~self._lacked_lane[over_ids]]
            self._lacked_lane[fresh] = True
            self.overflow_requests_total += int(np.unique(fresh).size)
        return lanes, n_over

    def _draw_columns(self, drawn: list) -> None:
        """Writes the columns of the drawn steps (distinct slots) in one go."""
        if not drawn:
            return
        slots = np.fromiter((d[0] for d in drawn), dtype=np.int64, count=len(drawn))
        self._codes[:, slots] = EMPTY
        self._rid[:, slots] = -1
        self._ntok[:, slots] = 0
        sizes = np.fromiter((len(d[2]) for d in drawn), dtype=np.int64, count=len(drawn))
        if not sizes.sum():
            self._prefill_tok[slots] = 0
            self._decode_tok[slots] = 0
            return
        column = np.repeat(np.arange(len(drawn)), sizes)
        lanes = np.concatenate([d[1] for d in drawn])
        ids = np.concatenate([d[2] for d in drawn])
        tok = np.fromiter(chain.from_iterable(d[3] for d in drawn), dtype=np.int64, count=len(ids))
        pre = np.fromiter(chain.from_iterable(d[4] for d in drawn), dtype=bool, count=len(ids))
        has = lanes >= 0
        cells = (lanes[has], slots[column[has]])
        self._codes[cells] = np.where(pre[has], prefill_codes(tok[has]), DECODE)
        self._rid[cells] = ids[has]
        self._ntok[cells] = tok[has]
        prefill = np.bincount(column, weights=np.where(pre, tok, 0), minlength=len(drawn)).astype(np.int64)
        total = np.bincount(column, weights=tok, minlength=len(drawn)).astype(np.int64)
        self._prefill_tok[slots] = prefill
        self._decode_tok[slots] = total - prefill

    # ------------------------------------------------------------------ queries

    @property
    def count(self) -> int:
        """Steps held: at most capacity."""
        return self._count

    @property
    def first_seq(self) -> int:
        """Sequence number of the oldest step held."""
        return self._seq_end - self._count

    @property
    def seq_end(self) -> int:
        """Sequence number the next step will get."""
        return self._seq_end

    def _window_slots(self) -> np.ndarray:
        return np.arange(self.first_seq, self._seq_end) % self.capacity

    def index_image(self) -> np.ndarray:
        """The drawn codes, [lane, column], oldest step at column 0 (a copy)."""
        return self._codes[:, self._window_slots()]

    def steps_shown(self) -> np.ndarray:
        """Engine step numbers of the steps held, oldest first."""
        return self._step_no[self._window_slots()].copy()

    def tokens_shown(self) -> tuple[np.ndarray, np.ndarray]:
        """(prompt tokens, decode tokens) of every step shown, oldest first: the bars above."""
        slots = self._window_slots()
        return self._prefill_tok[slots].copy(), self._decode_tok[slots].copy()

    def marks(self, kind: str) -> list:
        """[(step, lane, request id)] of the marks of one kind (joined, finished, preempted)."""
        s, lanes, rid = self._marks[kind]
        slots = s % self.capacity
        return [(int(self._step_no[sl]), int(l), int(r)) for sl, l, r in zip(slots, lanes, rid)]

    def mark_positions(self, kind: str) -> tuple[np.ndarray, np.ndarray]:
        """(sequence, lane) of every mark of one kind held."""
        s, lanes, _ = self._marks[kind]
        return s, lanes

    def cells_of(self, request_id: int) -> np.ndarray:
        """[lane, column] bool mask of the cells a request ran in, oldest step at column 0."""
        return self._rid[:, self._window_slots()] == request_id

    def most_lanes_lacking(self) -> int:
        """The most batch entries that had no lane in any one step held."""
        return int(self._overflow[self._window_slots()].max()) if self._count else 0

    def _cell(self, x: float, y: float):
        seq, lane = int(np.floor(x)), int(np.floor(y))
        if not (self.first_seq <= seq < self._seq_end and 0 <= lane < self.max_lanes):
            return None
        return seq, lane

    def request_at(self, x: float, y: float) -> int:
        """Request id drawn at view position (x = sequence, y = lane), or -1."""
        cell = self._cell(x, y)
        if cell is None:
            return -1
        seq, lane = cell
        rid = int(self._rid[lane, seq % self.capacity])
        if rid >= 0:
            return rid
        for kind in MARK_KINDS:  # a preempted request has a mark but no cell in its last step
            s, ln, r = self._marks[kind]
            hit = np.flatnonzero((s == seq) & (ln == lane))
            if hit.size:
                return int(r[hit[0]])
        return -1

    def hover_text_at(self, x: float, y: float) -> str:
        """Tooltip for the timeline cell at view position (x = sequence, y = lane)."""
        cell = self._cell(x, y)
        if cell is None:
            return ""
        seq, lane = cell
        slot = seq % self.capacity
        step_no = int(self._step_no[slot])
        rid = int(self._rid[lane, slot])
        lines = []
        if rid >= 0:
            n = int(self._ntok[lane, slot])
            lines.append(f"step {step_no} \u00b7 request {rid} (lane {lane})")
            if self._codes[lane, slot] == DECODE:
                lines.append("decode (1 token)" if n == 1 else f"decode ({n} tokens)")
            else:
                lines.append(f"prefill chunk of {n:,} tokens")
        for kind in MARK_KINDS:
            s, ln, r = self._marks[kind]
            for j in np.flatnonzero((s == seq) & (ln == lane)):
                if rid < 0:
                    lines.append(f"step {step_no} \u00b7 request {int(r[j])} (lane {lane})")
                    rid = int(r[j])
                lines.append({JOINED: "joined the batch", FINISHED: "finished",
                              PREEMPTED: "preempted (blocks freed, will recompute)"}[kind])
        if not lines:
            return ""
        lines.append(f"step duration {format_ms(float(self._duration[slot]))}")
        return "\n".join(lines)

    def bar_text_at(self, x: float) -> str:
        """Tooltip for the token bar of the step at x (sequence)."""
        seq = int(np.floor(x))
        if not (self.first_seq <= seq < self._seq_end):
            return ""
        sl = seq % self.capacity
        return (f"step {int(self._step_no[sl])}: {int(self._batch_size[sl]):,} requests, "
                f"{int(self._prefill_tok[sl]):,} prefill + {int(self._decode_tok[sl]):,} decode tokens\n"
                f"step duration {format_ms(float(self._duration[sl]))}")

    def step_label(self, v: float) -> str:
        """The engine step number at x = v (extrapolated beyond the steps held), for the axis."""
        seq = int(np.floor(v + 1e-6))
        if self._count == 0:
            return str(seq)
        near = min(max(seq, self.first_seq), self._seq_end - 1)
        return str(int(self._step_no[near % self.capacity]) + (seq - near))

