"""The simulator's flush of queued crossbar reads: how reads are split into batches and merged.

Both only decide how the work is grouped; the references here are plain loops over the reads.
"""

import numpy as np
import pytest

from tvm_cim.program.ir import Range
from tvm_cim.simulator import engine
from tvm_cim.simulator.engine import Chip


def _greedy(sizes: list[int], limit: int) -> list[tuple[int, int]]:
    """The reference split: a run ends before the read that would take it past ``limit``."""
    out, start, size = [], 0, 0
    for i, b in enumerate(sizes):
        if size and size + b > limit:
            out.append((start, i))
            start, size = i, 0
        size += b
    out.append((start, len(sizes)))
    return out


@pytest.mark.parametrize("seed", range(4))
def test_batches_split_reads_greedily_under_the_bound(seed):
    rng = np.random.default_rng(seed)
    for _ in range(300):
        n = int(rng.integers(1, 25))
        v = rng.integers(0, 3, n) * rng.integers(0, 2000, n)  # some reads without vectors
        r = rng.integers(1, 3000, n)
        bt = int(rng.integers(1, 3))
        meta = np.zeros((n, 8), np.int64)
        meta[:, 1], meta[:, 6] = r, v
        sizes = [8 * bt * int(a) * int(b) for a, b in zip(v, r)]
        assert list(Chip._batches(meta, bt)) == _greedy(sizes, engine._FLUSH_BYTES)


def _covered(meta: np.ndarray) -> dict:
    """Per (base, columns, vectors, tile): how often each row is read."""
    out: dict = {}
    for r0, r1, *key in meta.tolist():
        cnt = out.setdefault(tuple(key), {})
        for row in range(r0, r1):
            cnt[row] = cnt.get(row, 0) + 1
    return out


@pytest.mark.parametrize("seed", range(4))
def test_merge_rows_reads_every_row_as_often_and_only_adjacent_groups(seed):
    rng = np.random.default_rng(seed)
    w = [np.zeros((1, 128, 8)), np.zeros((1, 128, 8))]
    items = []
    for _ in range(200):
        g = int(rng.integers(0, 4))  # row group of 32 rows; repeated groups are reads of rows read before
        items.append((Range(32 * g, 32 * g + 32), Range(0, 8), 0, Range(*sorted(rng.choice([0, 4, 9], 2))),
                      w[int(rng.integers(0, 2))], None, None))
    meta, tiles = Chip._read_table(items)
    assert len(tiles) == 2 and meta.shape == (200, 8)
    merged = Chip._merge_rows(meta)
    assert _covered(merged) == _covered(meta)  # every row of every tile read as often, for the same vectors
    assert len(merged) < len(meta)
    for m in merged.tolist():  # a merged read spans whole row groups
        assert m[0] % 32 == 0 and m[1] % 32 == 0 and m[1] > m[0]
