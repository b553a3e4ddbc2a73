"""What one request's KV blocks share through the prefix cache, worked out from a snapshot.

The snapshot has no per-request block table, only each block's owner (the request that filled it,
or that took it back from the free queue on a prefix hit) and its ref count, plus each request's
block count and prompt tokens served from the prefix cache. That suffices, because prefix sharing
always covers the leading blocks of a request: its first ``reused`` blocks came from the cache, and
when other requests reuse its prefix they hold its first k blocks. Of its blocks it owns (the ones
the block map lights), those with ref count > 1 are the shared ones it owns: when that count
exceeds the reused blocks it owns, k reaches past the reused ones and the excess is what it lent.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class RequestBlocks:
    held: int  # blocks in its block table
    lit: int  # of those, the ones the block map highlights (it is their owner)
    reused: int  # leading blocks it took from the prefix cache at admission (filled by an earlier request)
    lent: int  # blocks it filled that other requests now hold too (they reused its prefix)
    cached_tokens: int  # prompt tokens served from the prefix cache, not recomputed

    @property
    def shared(self) -> int:
        return min(self.held, self.reused + self.lent)

    def sentences(self) -> list[str]:
        """What the inspector says about these blocks, one sentence each."""
        if self.held == 0:
            return ["It holds no KV blocks now (waiting for room, or finished)."]
        lines = [f"{self.shared:,} of {self.held:,} blocks shared with other requests through the prefix cache"
                 + (f": {self.reused:,} reused from earlier requests ({self.cached_tokens:,} prompt tokens not "
                    f"recomputed), {self.lent:,} of its own now held by later requests too." if self.shared else ".")]
        dim = self.held - self.lit
        lines.append(f"The block map lights the {self.lit:,} blocks it filled"
                     + (f"; {dim:,} shared block{'s' if dim != 1 else ''} that another request filled first "
                        "stay dim (numbered: their ref count)." if dim else "."))
        return lines


def request_blocks(snapshot, request_id: int) -> RequestBlocks | None:
    """The request's blocks as the snapshot shows them; None if the engine no longer holds it."""
    rows = snapshot.requests
    match = np.flatnonzero(rows["request_id"] == request_id) if len(rows) else ()
    if not len(match):
        return None
    row = rows[match[0]]
    held = int(row["num_blocks"])
    cached_tokens = int(row["num_cached_prompt_tokens"])
    reused = min(held, cached_tokens // max(snapshot.block_size, 1))
    ref = snapshot.block_ref_cnt
    mine = (snapshot.block_owner == request_id) & (ref > 0)
    lit = min(held, int(np.count_nonzero(mine)))
    owned_shared = int(np.count_nonzero(mine & (ref > 1)))
    reused_it_owns = max(0, reused - (held - lit))  # reused blocks nobody held any more: it took them over
    lent = max(0, owned_shared - reused_it_owns)
    return RequestBlocks(held=held, lit=lit, reused=reused, lent=lent, cached_tokens=cached_tokens)
