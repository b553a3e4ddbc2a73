"""The batch timeline's data: the newest steps as [lane, column] cells, and who holds which lane.

A request takes the lowest free lane when it first appears in a batch and gives it back when it
finishes or is preempted; each cell holds a code (empty, decode, or a prompt chunk by size), the
request and its tokens. Columns form a ring buffer of the newest ``capacity`` steps: column slot =
sequence number % capacity, where the sequence number counts steps since clear() (x in the view;
its axis shows the engine step number). Plain numpy and text, no Qt: batch_timeline.py draws it.
"""

from __future__ import annotations

import heapq
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
        # Who holds which lane, in plain Python: a batch is a few to a few hundred requests, and
        # a frame at maximum speed brings 400 steps; numpy's per-call cost on such small arrays
        # made assigning lanes ~25 us a step, 10 ms of a frame.
        self._lane_of: dict[int, int] = {}  # request id -> lane
        self._lane_owner = [-1] * self.max_lanes  # lane -> request id
        self._free_lanes = list(range(self.max_lanes))  # a heap: the lowest free lane first
        self._lacked_lane: set[int] = set()  # request ids ever drawn without a lane
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

    @property
    def lanes_in_use(self) -> int:
        return self.max_lanes - len(self._free_lanes)

    def lane_of(self, request_id: int) -> int:
        """The lane a request holds now, or -1."""
        return self._lane_of.get(request_id, -1)

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
        new_marks = {k: [] for k in MARK_KINDS}  # kind -> [(sequence, lane, request id)]
        drawn = []  # (slot, lanes, ids, tokens, is_prefill) of every step drawn
        lane_of, owner, free = self._lane_of, self._lane_owner, self._free_lanes
        for i, st in enumerate(steps):
            ids = st.request_ids
            last = self._last_step  # a step retried after running out of memory repeats its number
            if last is not None and (st.step > last + 1 or st.step < last):
                self._release_lanes_after_gap(ids)
            self._last_step = st.step
            lanes = [lane_of.get(r, -1) for r in ids]
            n_over = 0
            if -1 in lanes:
                n_over = self._give_lanes(ids, lanes)

            seq = self._seq_end
            draw = i >= first_drawn
            if draw:
                slot = seq % cap
                drawn.append((slot, lanes, ids, st.num_new_tokens, st.is_prefill))
                self._step_no[slot] = st.step
                self._duration[slot] = st.duration_s
                self._batch_size[slot] = len(ids)
                self._overflow[slot] = n_over

            # Marks, then give back the lanes of finished and preempted requests.
            for kind, listed in ((JOINED, st.joined), (FINISHED, st.finished), (PREEMPTED, st.preempted)):
                for rid in listed:
                    lane = lane_of.get(rid, -1)
                    if lane < 0:
                        continue
                    if draw:
                        new_marks[kind].append((seq, lane, rid))
                    if kind != JOINED:
                        del lane_of[rid]
                        owner[lane] = -1
                        heapq.heappush(free, lane)
            self._seq_end += 1
        self._count = min(cap, self._count + len(steps))
        self._draw_columns(drawn)

        first = self._seq_end - self._count
        for kind in MARK_KINDS:
            s, lanes, rid = self._marks[kind]
            if new_marks[kind]:
                added = np.array(new_marks[kind], dtype=np.int64).reshape(-1, 3)
                s, lanes, rid = (np.concatenate((s, added[:, 0])), np.concatenate((lanes, added[:, 1])),
                                 np.concatenate((rid, added[:, 2])))
            keep = s >= first
            self._marks[kind] = (s[keep], lanes[keep], rid[keep])

    def _release_lanes_after_gap(self, batch_ids) -> None:
        """Steps were skipped (a fast run sends only the newest of them): whoever finished or was
        preempted meanwhile never gave back a lane, so every request not in this batch does now.
        Without this, lanes ran out after a minute at maximum speed with 4 requests running."""
        running = set(batch_ids)
        for rid in [rid for rid in self._lane_of if rid not in running]:
            lane = self._lane_of.pop(rid)
            self._lane_owner[lane] = -1
            heapq.heappush(self._free_lanes, lane)

    def _give_lanes(self, ids, lanes: list) -> int:
        """The batch's newcomers take the lowest free lanes, in batch order (lanes: the batch's,
        -1 where none, filled in place); those left without one are counted. Returns how many
        entries have none."""
        lane_of, owner, free = self._lane_of, self._lane_owner, self._free_lanes
        n_over = 0
        for j, rid in enumerate(ids):
            if lanes[j] >= 0:
                continue
            if rid >= 0 and rid in lane_of:  # the same request twice in one batch
                lanes[j] = lane_of[rid]
                continue
            if rid >= 0 and free:
                lane = heapq.heappop(free)
                lane_of[rid], owner[lane], lanes[j] = lane, rid, lane
                continue
            n_over += 1
            if rid >= 0 and rid not in self._lacked_lane:
                self._lacked_lane.add(rid)
                self.overflow_requests_total += 1
        return n_over

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
        n = int(sizes.sum())
        lanes = np.fromiter(chain.from_iterable(d[1] for d in drawn), dtype=np.int64, count=n)
        ids = np.fromiter(chain.from_iterable(d[2] for d in drawn), dtype=np.int64, count=n)
        tok = np.fromiter(chain.from_iterable(d[3] for d in drawn), dtype=np.int64, count=n)
        pre = np.fromiter(chain.from_iterable(d[4] for d in drawn), dtype=bool, count=n)
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

