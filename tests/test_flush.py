"""The simulator's flush of queued crossbar reads: how reads are split into batches and merged.

Both only decide how the work is grouped; the references here are plain loops over the reads.
"""

import dataclasses

import numpy as np
import pytest

import tvm_cim
from tvm_cim.compiler import codegen, mapping, schedule
from tvm_cim.compiler.region import CONV2D, MATMUL, Region, unfold_conv_weight
from tvm_cim.program.ir import Op, Parallel, Range
from tvm_cim.simulator import engine
from tvm_cim.simulator.engine import Chip, Options


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
    # captures (Chip._capture): one crossbar, row group g of 32 rows, of either tile
    snaps = {(g, t): (np.array([[32 * g, 32 * g + 32, 0, 0, 8, 0]]), [(w[t], None, None)])
             for g in range(4) for t in range(2)}
    items = []
    for _ in range(200):
        g = int(rng.integers(0, 4))  # row group of 32 rows; repeated groups are reads of rows read before
        items.append((snaps[g, int(rng.integers(0, 2))], Range(*sorted(rng.choice([0, 4, 9], 2)))))
    meta, tiles = Chip._read_table(items)
    assert len(tiles) == 2 and meta.shape == (200, 8)
    merged = Chip._merge_rows(meta)
    assert _covered(merged) == _covered(meta)  # every row of every tile read as often, for the same vectors
    assert len(merged) < len(meta)
    for m in merged.tolist():  # a merged read spans whole row groups
        assert m[0] % 32 == 0 and m[1] % 32 == 0 and m[1] > m[0]


@pytest.mark.parametrize("seed", range(6))
def test_flush_exact_adds_every_reads_integer_product(seed):
    """Reads of random tiles, rows, columns and vectors (repeated, overlapping, sparse, split into row
    groups) against a plain int64 loop over the reads."""
    rng = np.random.default_rng(seed)
    bt, m, k, n = 1, int(rng.integers(1, 40)), int(rng.integers(8, 300)), int(rng.integers(4, 80))
    x = rng.integers(-255, 256, (bt, m, k)).astype(np.int32)
    tiles = []
    for _ in range(int(rng.integers(1, 6))):
        r, c = int(rng.integers(1, k + 1)), int(rng.integers(1, n + 1))
        tiles.append((rng.integers(-127, 128, (1, r, c)).astype(rng.choice([np.int8, np.int64])), None, None))
    rows = []
    for _ in range(int(rng.integers(1, 60))):
        j = int(rng.integers(0, len(tiles)))
        tr, tc = tiles[j][0].shape[1:]
        base = int(rng.integers(0, k - tr + 1))
        a = base + int(rng.integers(0, tr))
        b = int(rng.integers(a + 1, base + tr + 1))
        c0 = int(rng.integers(0, n - tc + 1)) if rng.random() < 0.5 else 0
        c1 = c0 + int(rng.integers(1, tc + 1))
        v0 = int(rng.integers(0, m))
        v1 = int(rng.integers(v0, m + 1))  # some reads without vectors
        rows.append((a, b, base, c0, c1, v0, v1, j))
    meta = np.array(rows, dtype=np.int64)
    ref = np.zeros((bt, m, n), dtype=np.int64)
    for a, b, base, c0, c1, v0, v1, j in rows:
        w = tiles[j][0][0, a - base : b - base, : c1 - c0].astype(np.int64)
        ref[:, v0:v1, c0:c1] += x[:, v0:v1, a:b].astype(np.int64) @ w
    for merged in (meta, Chip._merge_rows(meta)):
        acc = np.zeros((bt, m, n), dtype=np.int64)
        stats = engine.RegionStats("t", "t")
        Chip._flush_exact(x, acc, merged, tiles, stats)
        assert np.array_equal(acc, ref)
        assert stats.macs == sum(bt * (v1 - v0) * (b - a) * (c1 - c0) for a, b, _, c0, c1, v0, v1, _ in rows)


@pytest.mark.parametrize("preset", ["isaac", "jia21", "jain21"])
@pytest.mark.parametrize("shortcut", [True, "tile"])
def test_exact_reads_queued_across_rewrites_see_the_tiles_they_read(preset, shortcut):
    """A layer larger than the chip runs in passes that rewrite the same crossbars while earlier passes'
    reads are still queued (resolved at the flush from the write log): the accumulators equal plain int64
    numpy, for a matmul and a convolution, on every computing mode."""
    rep = dataclasses.replace
    hw = tvm_cim.load(preset)
    hw = rep(hw, crossbar=rep(hw.crossbar, adc_bits=24, adc_mode="clip"), chip=rep(hw.chip, cores=1),
             core=rep(hw.core, crossbars=2))
    rng = np.random.default_rng(11)

    def run(region, x):
        sched = schedule.schedule([region], hw, "cim-mlc")
        cmap = mapping.allocate([region], hw, sched.plans)
        assert len(cmap.placements[region.name].passes) > 1
        prog = codegen.generate(region, cmap.placements[region.name], hw, sched.options, "cim-mlc")
        chip = Chip(hw, Options(exact_shortcut=shortcut))
        assert chip.run(prog, {"x": x, **codegen.region_constants(region)})[1].weight_writes > 2
        return chip.run(prog, {"x": x, **codegen.region_constants(region)})[0]["acc"]

    w = rng.integers(-127, 128, size=(700, 90)).astype(np.int8)
    x = rng.integers(0, 256, size=(9, 700)).astype(np.float32)
    r = Region("mm", MATMUL, [(9, 700)], (9, 90), x_scale=1.0, w_int=w, w_scale=np.ones(90, np.float32))
    assert np.array_equal(run(r, x)[0], x.astype(np.int64) @ w.astype(np.int64))

    wc = rng.integers(-127, 128, size=(70, 150, 3, 3)).astype(np.int8)
    xc = rng.integers(0, 256, size=(1, 150, 5, 5)).astype(np.float32)
    conv = dict(kernel=(3, 3), strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1), groups=1)
    rc = Region("cv", CONV2D, [(1, 150, 5, 5)], (1, 70, 5, 5), x_scale=1.0, w_int=unfold_conv_weight(wc, 1),
                w_scale=np.ones(70, np.float32), conv=conv)
    xp = np.pad(xc[0].astype(np.int64), ((0, 0), (1, 1), (1, 1)))
    ref = np.zeros((25, 70), np.int64)
    for i in range(5):
        for j in range(5):
            ref[i * 5 + j] = np.einsum("chw,ochw->o", xp[:, i : i + 3, j : j + 3], wc.astype(np.int64))
    assert np.array_equal(run(rc, xc)[0].reshape(25, 70), ref)


def test_placed_tiles_are_reused_only_for_the_same_tile_arrays():
    """Flushes of the same reads of the same tile arrays reuse the matrix placed the first time; a new tile
    array at the same rows and columns (a rewrite) is placed anew: every flush equals plain int64 numpy."""
    rng = np.random.default_rng(7)
    bt, m, k, n = 1, 6, 40, 24
    blocks = engine._Blocks(2**20)
    meta = np.array([(0, 20, 0, 0, 12, 0, 3, 0), (20, 40, 20, 0, 12, 0, 3, 1), (0, 20, 0, 12, 24, 3, 6, 0)],
                    dtype=np.int64)
    first = [(rng.integers(-127, 128, (1, 20, 12)).astype(np.int8), None, None) for _ in range(2)]
    second = [(rng.integers(-127, 128, (1, 20, 12)).astype(np.int8), None, None) for _ in range(2)]
    for tiles, new in ((first, True), (first, False), (second, True), (first, False)):
        x = rng.integers(-255, 256, (bt, m, k)).astype(np.int32)
        ref = np.zeros((bt, m, n), dtype=np.int64)
        for a, b, base, c0, c1, v0, v1, j in meta.tolist():
            ref[:, v0:v1, c0:c1] += x[:, v0:v1, a:b].astype(np.int64) @ tiles[j][0][0, a - base:b - base,
                                                                                   : c1 - c0].astype(np.int64)
        before = len(blocks._memo)
        acc = np.zeros((bt, m, n), dtype=np.int64)
        Chip._flush_exact(x, acc, meta, tiles, engine.RegionStats("t", "t"), blocks)
        assert np.array_equal(acc, ref)
        assert (len(blocks._memo) > before) == new
    assert not next(iter(blocks._memo.values()))[0][0].flags.writeable  # placed matrices are read-only


def test_placed_tiles_stay_within_their_byte_bound():
    """The least recently used entries leave once the bound is passed; a value filled in later counts."""
    blocks = engine._Blocks(1000)
    keep = [np.zeros(1)]
    for i in range(5):
        blocks.put(i, [np.zeros(50)], keep, 400)
        assert blocks.bytes <= 1000
    assert list(blocks._memo) == [3, 4] and blocks.get(3) is not None and blocks.get(0) is None
    blocks.grow(3, 300)  # entry 3 (now the most recent) holds 700 bytes: entry 4 leaves
    assert list(blocks._memo) == [3] and blocks.bytes == 700
    blocks.put("big", [np.zeros(1)], keep, 2000)  # larger than the bound: not kept
    assert "big" not in blocks._memo and blocks.bytes == 700


@pytest.mark.parametrize("shortcut", [False, True])
def test_chunks_post_processing_waits_only_for_the_reads_it_reads(shortcut):
    """A convolution in chunks: each chunk's reads, its dequantisation (deferred until the reads execute) and a
    store.  Data movements and whole-tensor operations already computed change no value, so the chunks' reads
    execute as one batch; a read into vectors whose deferred dequantisation has not run yet flushes first (here
    every chunk's reads run again after its dequantisation: the output holds the product once, the accumulator
    twice).  Against int64 numpy, on the bit-serial path and on the exact shortcut."""
    hw = tvm_cim.load("pimcomp-b")
    rng = np.random.default_rng(3)
    wc = rng.integers(-127, 128, size=(40, 24, 3, 3)).astype(np.int8)
    xc = rng.integers(0, 256, size=(1, 24, 12, 12)).astype(np.float32)
    conv = dict(kernel=(3, 3), strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1), groups=1)
    rc = Region("cv", CONV2D, [(1, 24, 12, 12)], (1, 40, 12, 12), x_scale=1.0, w_int=unfold_conv_weight(wc, 1),
                w_scale=np.ones(40, np.float32), conv=conv)
    sched = schedule.schedule([rc], hw, "cim-mlc")
    prog = codegen.generate(rc, mapping.allocate([rc], hw, sched.plans).placements[rc.name], hw, sched.options,
                            "cim-mlc")
    xp = np.pad(xc[0].astype(np.int64), ((0, 0), (1, 1), (1, 1)))
    ref = np.zeros((40, 12, 12), np.int64)
    for i in range(12):
        for j in range(12):
            ref[:, i, j] = np.einsum("chw,ochw->o", xp[:, i : i + 3, j : j + 3], wc.astype(np.int64))
    consts = codegen.region_constants(rc)
    kinds = [s.kind for s in prog.run if isinstance(s, Op)]
    assert kinds.count("DCOM.dequantize") > 10 and kinds.count("DMOV.store") > 10

    flushes = []
    real = Chip._flush_reads

    def counted(self, env, stats):
        flushes.append(sum(len(q) for q in self._pending.values()))
        return real(self, env, stats)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Chip, "_flush_reads", counted)
        env = Chip(hw, Options(exact_shortcut=shortcut)).run(prog, {"x": xc, **consts})[0]
        assert np.array_equal(env["out"][0], ref)
        assert len([n for n in flushes if n]) == 1  # every chunk's reads in one flush
        run, reads = [], []
        for s in prog.run:
            run.append(s)
            if type(s) is Parallel:
                reads.append(s)
            elif s.kind == "DCOM.dequantize":
                run += reads
                reads = []
        flushes.clear()
        env = Chip(hw, Options(exact_shortcut=shortcut)).run(dataclasses.replace(prog, run=run), {"x": xc, **consts})[0]
    assert np.array_equal(env["out"][0], ref)
    assert np.array_equal(env["acc"][0].reshape(12, 12, 40).transpose(2, 0, 1), 2 * ref)
    assert len([n for n in flushes if n]) == kinds.count("DCOM.dequantize") + 1  # one per chunk, and the last
    # every read twice in a row: the same tiles read for the same vectors in one flush, added twice
    run = [t for s in prog.run for t in ((s, s) if type(s) is Parallel else (s,))]
    env = Chip(hw, Options(exact_shortcut=shortcut)).run(dataclasses.replace(prog, run=run), {"x": xc, **consts})[0]
    assert np.array_equal(env["out"][0], 2 * ref)


@pytest.mark.parametrize("shortcut", [False, True])
def test_tiles_hold_codes_clipped_to_the_weight_range(shortcut):
    """A tile holds its codes clipped to +-(2^(bits-1) - 1): int8 codes of -128 read as -127, and a weight
    tensor already within the range is read as it is (no clipping copy).  Against int64 numpy."""
    hw = tvm_cim.load("isaac")
    rng = np.random.default_rng(5)
    x = rng.integers(0, 256, size=(7, 300)).astype(np.float32)
    for low in (-128, -127):
        w = rng.integers(low, 128, size=(300, 50)).astype(np.int8)
        w[0, :5] = low
        r = Region("mm", MATMUL, [(7, 300)], (7, 50), x_scale=1.0, w_int=w, w_scale=np.ones(50, np.float32))
        sched = schedule.schedule([r], hw, "cim-mlc")
        prog = codegen.generate(r, mapping.allocate([r], hw, sched.plans).placements[r.name], hw, sched.options,
                                "cim-mlc")
        acc = Chip(hw, Options(exact_shortcut=shortcut)).run(prog, {"x": x, **codegen.region_constants(r)})[0]["acc"]
        assert np.array_equal(acc[0], x.astype(np.int64) @ np.clip(w.astype(np.int64), -127, 127))
