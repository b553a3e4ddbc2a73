"""The block map of an attached vLLM server's prefix cache: the same view, honest hover text.

vLLM publishes block hashes, never block ids, so the app places each cached block in a cell
itself; the snapshot's owner is the block's chain (blocks descending from one root block), so a
chain has one colour. Hovering a cell says so, with the chain, the depth in it and the age.
"""

from __future__ import annotations

import numpy as np

from kvscope.engine.snapshot import BLOCK_CACHED
from kvscope.widgets.block_map import BlockMapView


class PrefixCacheMapView(BlockMapView):
    def __init__(self, parent=None, **kwargs):
        super().__init__(parent, **kwargs)
        self.cells: dict = {}  # "chain", "depth", "age_s" arrays, "segments": {DP rank: (start, stop)}
        self._status.setToolTip("One cell per block of the server's KV cache. vLLM publishes block hashes, not "
                                "block ids: kvscope places each cached block in a cell, so a cell's position "
                                "means nothing on the server; its colour is its prefix chain.")

    def update_cells(self, snapshot, cells: dict | None) -> None:
        self.cells = cells or {}
        self.update_snapshot(snapshot)

    def hover_text(self, block_id: int) -> str:
        snap = self._snapshot
        if snap is None or not (0 <= block_id < snap.num_blocks):
            return ""
        rank = next((r for r, (start, stop) in self.cells.get("segments", {}).items() if start <= block_id < stop), 0)
        lines = [f"cell {block_id:,} (DP engine {rank}), placed by kvscope: vLLM publishes no block ids"]
        if int(snap.block_state[block_id]) != BLOCK_CACHED:
            lines.append("no cached block here (free, or held by a request whose blocks are not full yet)")
            return "\n".join(lines)
        chain, depth = self.cells.get("chain"), self.cells.get("depth")
        age = self.cells.get("age_s")
        lines.append(f"cached block, hash {int(snap.block_hash[block_id]):016x}")
        cut = self.cells.get("chain_cut")
        if chain is not None and depth is not None and cut is not None and cut[block_id]:
            # "block 1 of its chain" of a block whose parent the server named: not a prompt's first block
            lines.append(f"prefix chain {int(chain[block_id])}, block {int(depth[block_id]) + 1} of it as seen: its "
                         "first block follows one never seen stored (before attaching, in a lost batch, or evicted)")
        elif chain is not None and depth is not None:
            lines.append(f"prefix chain {int(chain[block_id])}, block {int(depth[block_id]) + 1} of its chain")
        if age is not None and not np.isnan(age[block_id]):
            lines.append(f"stored {float(age[block_id]):,.1f} s before the newest stored block")
        return "\n".join(lines)

    def _refresh_status(self) -> None:
        super()._refresh_status()
        if self._hover_block < 0 and self._snapshot is not None:
            cached = int(np.count_nonzero(self._snapshot.block_state == BLOCK_CACHED))
            self._status.setText(f"{cached:,} cached blocks of {self._snapshot.num_blocks:,} cells, placed by "
                                 "kvscope (vLLM publishes hashes, not block ids)  ·  colour: prefix chain  ·  "
                                 "hover a cell for its chain and age")
