"""The compiler's module-level caches stay bounded across builds (issue 14 s6: the CIM-MLC benchmark's memory)."""

from tvm_cim.compiler import transform
from tvm_cim.program import print_program
from tvm_cim.program.ir import Program


def _programs(build: int, n: int, pad: int) -> list[tuple[Program, str]]:
    out = []
    for i in range(n):
        p = Program(f"mb{build}.r{i}", attrs=(("note", "x" * pad),))
        out.append((p, print_program(p)))
    return out


def test_program_cache_keeps_newest_build_and_bounds_earlier_ones(monkeypatch):
    monkeypatch.setattr(transform, "_PROGRAMS", type(transform._PROGRAMS)())
    monkeypatch.setattr(transform, "_PROGRAM_CHARS", [0])
    monkeypatch.setattr(transform, "PROGRAMS_KEPT", (4096, 10_000))
    for b in range(6):  # six builds of 8 programs, each about 2,000 characters: 16 k characters per build
        for p, text in _programs(b, 8, 2000):
            transform._remember(p, text)
        held = list(transform._PROGRAMS)
        newest = [n for n in held if n.startswith(f"mb{b}.")]
        assert len(newest) == 8, "the newest build's programs are kept whole, even above the budget"
        older = [transform._PROGRAMS[n][0] for n in held if not n.startswith(f"mb{b}.")]
        assert sum(map(len, older)) + sum(len(transform._PROGRAMS[n][0]) for n in newest) <= 10_000 or not older
        assert transform._PROGRAM_CHARS[0] == sum(len(t) for t, _ in transform._PROGRAMS.values())
    # a text seen again is served without parsing; an evicted one is parsed back to an equal program
    p, text = _programs(5, 1, 2000)[0]
    assert transform.compiled_program(text) is transform._PROGRAMS[p.name][1]
    p0, text0 = _programs(0, 1, 2000)[0]
    assert p0.name not in transform._PROGRAMS
    assert transform.compiled_program(text0) == p0


def test_program_cache_count_bound(monkeypatch):
    monkeypatch.setattr(transform, "_PROGRAMS", type(transform._PROGRAMS)())
    monkeypatch.setattr(transform, "_PROGRAM_CHARS", [0])
    monkeypatch.setattr(transform, "PROGRAMS_KEPT", (5, 1 << 30))
    for b in range(4):
        for p, text in _programs(b, 3, 10):
            transform._remember(p, text)
    assert list(transform._PROGRAMS) == ["mb2.r1", "mb2.r2", "mb3.r0", "mb3.r1", "mb3.r2"]


def test_body_memo_keeps_current_build_and_bounds_earlier_ones(monkeypatch):
    import numpy as np
    from tvm import relax

    monkeypatch.setattr(transform, "_BUILD", [0])
    memo = transform._BodyMemo(count=1000, kept_bytes=2500)
    bodies = {}
    for b in range(4):  # four builds of five entries of 1,000 bytes each
        transform._BUILD[0] += 1
        for i in range(5):
            body = bodies[(b, i)] = relax.const(np.zeros(1, "float32"))
            memo.put((b, i), body, f"v{b}.{i}", 1000)
        held = list(memo._d)
        assert [k for k in held if k[0] == b] == [(b, i) for i in range(5)], "the current build's entries stay"
        assert len([k for k in held if k[0] != b]) <= 2, "at most 2,500 bytes of earlier builds"
    # an entry found again belongs to the current build from then on: the next build keeps it
    assert memo.get((3, 0), bodies[(3, 0)]) == "v3.0"
    assert memo.get((3, 0), bodies[(2, 0)]) is None, "a different body is a miss"
    transform._BUILD[0] += 1
    assert memo.get((3, 4), bodies[(3, 4)]) == "v3.4"
    memo.put(("new", 0), relax.const(np.zeros(1, "float32")), "n", 1000)
    # earlier builds' entries go least recently used first: (3, 0), used again in build 4, outlives (3, 1)
    assert list(memo._d) == [(3, 3), (3, 0), (3, 4), ("new", 0)]
    assert memo._bytes == 1000 * len(memo)


def test_body_memo_count_bound(monkeypatch):
    import numpy as np
    from tvm import relax

    monkeypatch.setattr(transform, "_BUILD", [7])
    memo = transform._BodyMemo(count=3, kept_bytes=1 << 30)
    for i in range(5):
        memo.put(i, relax.const(np.zeros(1, "float32")), i, 10)
    assert list(memo._d) == [2, 3, 4] and memo._bytes == 30


def test_tile_lists_are_remembered_and_handed_out_as_copies():
    """tile_matrix remembers its tiles (per shape, and per read-only matrix whose all-zero tiles it skips) and
    hands out a new list each time: a caller changing its list cannot change the next caller's."""
    import numpy as np

    from tvm_cim.common.hardware import load
    from tvm_cim.compiler.mapping import Tile, tile_matrix

    hw = load("isaac")
    rows, cols = hw.crossbar.rows, hw.logical_cols(8)
    k, n = 3 * rows + 5, 2 * cols + 1
    first = tile_matrix(k, n, hw)
    first.clear()
    again = tile_matrix(k, n, hw)
    by_hand = [Tile(k0, min(k, k0 + rows), n0, min(n, n0 + cols)) for k0 in range(0, k, rows) for n0 in range(0, n, cols)]
    assert again == by_hand and again is not tile_matrix(k, n, hw)
    w = np.zeros((k, n), np.int8)
    w[rows + 1, cols + 3] = 1  # one non-zero tile: row block 1, column block 1
    w.flags.writeable = False
    masked = tile_matrix(k, n, hw, w)
    assert masked == [Tile(rows, 2 * rows, cols, 2 * cols)]
    masked.append(None)
    assert tile_matrix(k, n, hw, w) == [Tile(rows, 2 * rows, cols, 2 * cols)]
    w2 = w.copy()  # writeable: never cached, always tiled afresh
    w2[0, 0] = 1
    assert tile_matrix(k, n, hw, w2) == [Tile(0, rows, 0, cols), Tile(rows, 2 * rows, cols, 2 * cols)]
