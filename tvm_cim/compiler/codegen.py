"""Emit the meta-operator program of one region (CIM-MLC meta-operator flow).

Each replica of the weights (duplication) is a *virtual crossbar*
(``CIM.bind_vxb``): physical crossbars bound to row and column ranges of the
weight matrix (dimension binding: the unfolded input dimension ``K`` on
wordlines, output channels ``N`` on bitlines).  The input vectors are cut into
chunks (output rows of a convolution); chunk ``c`` runs on replica
``c mod replicas``, so replicas work in parallel and, with the inter-layer
pipeline, the next region can start on the first chunks.

The read meta-operator follows the preset's computing mode (paper 003 sec. 3.3):

* ``core`` mode: ``CIM.read_core`` activates the cores of a replica;
* ``crossbar`` mode: ``CIM.read_xb`` activates a replica's crossbars; with the
  MVM-grained pipeline, each row block of crossbars gets its own input slice
  (``DMOV scatter``) and read, so it starts as soon as its slice arrives;
* ``wordline`` mode: one ``CIM.read_row`` per group of ``rows_active``
  wordlines (a single group when rows are remapped).

Quantisation and im2col follow CIM-MLC and PUMA: the cores of a region
quantise its output for the regions consuming it (``DCOM.dequantize
requant=``, their core ALU), so a region whose input other regions produce
quantises nothing on the chip ALU (``DCOM.quantize at="producer"`` only
computes the codes); only a network input is quantised by the chip ALU.
``DCOM.im2col`` is the gather pattern of the ``DMOV.scatter`` that sends the
unfolded vectors to the crossbars: data movement, costed by the scatter.

Tensor conventions (see :mod:`tvm_cim.simulator.engine`): ``%x`` (and ``%y``
for a run-time second operand) float inputs, ``%xq`` quantised codes, ``%xm``
the ``(Bt, M, K)`` input vectors, ``%acc`` the ``(Bt, M, N)`` integer
accumulators, ``%yf`` float results, ``%out`` the output in its layout.
"""

from __future__ import annotations

import numpy as np

from ..hardware.schema import CIMHardware
from ..program import Decl, Op, Parallel, Program, Range, Ref, op, op_from, verify
from ..program.encode import encode
from . import plan as P
from .mapping import Placement, precision
from .region import CONV2D, DMATMUL, Region
from .strategies import Options

#: The tensors programs name, one :class:`Ref` each (shared by every operation: a VGG-19 on ``jain21`` has
#: 880 k operations, most naming two tensors).
_REF = {n: Ref(n) for n in ("x", "y", "xq", "xm", "acc", "yf", "out", "w", "wscale", "wsum", "bias", "yq", "yq0")}


def generate(region: Region, pl: Placement, hw: CIMHardware, options: Options | None = None,
             strategy: str = "none", name: str | None = None, loopnest: dict | None = None,
             memory: dict | None = None, local_bytes: int = 0) -> Program:
    """Generate the meta-operator program of a region.

    Parameters
    ----------
    region : Region
        The quantised operator.
    pl : Placement
        Its tiles, replicas and passes (from :func:`mapping.allocate`).
    hw : CIMHardware
        The chip.
    options : Options, optional
        Scheduling techniques (pipeline flags); none by default.
    strategy : str
        Recorded in the program's attributes.
    name : str, optional
        Program name (default: the region's).
    loopnest : dict, optional
        Operands of a ``CIM.loopnest`` (the region's MIREDO dataflow,
        :func:`tvm_cim.hardware.loopnest.encode`): the program ends with it
        and the simulator times and charges the region by executing it; the
        other operations still compute the values.
    memory : dict, optional
        Dual-mode arrays (CMSwitch, ``AllocateArrayModes``): ``in`` / ``out``
        the memory-mode arrays its input is loaded from / its output stored
        into (``DMOV level="xbmem"``), ``writeback`` whether that output is
        written back from them at the end (``DMOV.writeback``: a consumer is
        in a later segment), ``ring`` the bytes of the rolling line buffer
        they hold the output in (``DMOV store ring=``; 0: whole), ``toc`` / ``tom`` the arrays switched
        (``CM.switch``) before anything else, in ``run`` if ``in_run`` (the
        segment's first region, every inference) else in ``setup``.
    local_bytes : int
        With ``options.local_memory``: the bytes of each of its cores' local
        memories the region's buffers may use (the simulator's heap,
        :mod:`tvm_cim.simulator.localmem`); 0: not managed.

    Returns
    -------
    Program
        Declares ``%x`` (and ``%y``) as inputs, the constants
        ``%w, %wscale, %wsum[, %bias]`` for constant-weight operators, and the
        output ``%out``.
    """
    opts = options or Options()
    m, k, n = region.mkn
    bt = region.batch
    wbits, ibits = precision(hw)
    abits = hw.activation_bits(ibits)  # what an activation occupies on links and in buffers
    mode = hw.chip.computing_mode
    per_core = hw.core.crossbars
    decls = [Decl("input", "x", "float32", tuple(region.in_shapes[0]))]
    if region.kind == DMATMUL:
        decls.append(Decl("input", "y", "float32", tuple(region.in_shapes[1])))
    else:
        decls += [
            Decl("const", "w", "int8", (k, n)),
            Decl("const", "wscale", "float32", (n,)),
            Decl("const", "wsum", "int32", (n,)),
        ]
        if region.bias is not None:
            decls.append(Decl("const", "bias", "float32", (n,)))
    if region.adc_lsb_cols is not None:  # the ADC range programmed per bitline
        decls.append(Decl("const", "adclsb", "int32", tuple(region.adc_lsb_cols.shape)))
    decls.append(Decl("output", "out", "float32", tuple(region.out_shape)))

    n_rep = len(pl.replicas)
    m_total = m  # vectors per batch element; chunks cut M
    ch = P.chunks(region, n_rep, hw, wbits, ibits, opts.pipeline_rounds, opts.pipeline_vectors)
    level = ch.level  # a working set larger than the global buffer stays in off-chip memory
    mem = memory or {}
    mem_in, mem_out = tuple(mem.get("in", ())), tuple(mem.get("out", ()))
    lv_in, lv_out = ("xbmem" if mem_in else level), ("xbmem" if mem_out else level)
    at_in = {"xbs": mem_in} if mem_in else {}
    at_out = {"xbs": mem_out} if mem_out else {}
    if mem_out and mem.get("ring"):  # a rolling line buffer: the arrays hold this many bytes at once
        at_out["ring"] = int(mem["ring"])
    chunks = [Range(int(a), int(b)) for a, b in zip(ch.starts, ch.stops)]
    n_blocks = len(P.row_blocks(pl.tiles))
    attrs = [
        ("hw", hw.name),
        ("mode", mode),
        ("op", region.kind),
        ("M", m),
        ("K", k),
        ("N", n),
        ("batch", bt),
        ("weight_bits", wbits),
        ("input_bits", ibits),
        ("signed_input", bool(region.x_signed)),
        ("tiles", len(pl.tiles)),
        ("replicas", n_rep),
        ("tile_rows", max(t.rows for t in pl.tiles)),
        ("chunks", len(chunks)),
        ("passes", len(pl.passes)),
        ("segment", pl.segment),
        ("resident", pl.resident),
        ("spills", level == "offchip"),
        ("strategy", strategy),
        ("pipeline", bool(opts.pipeline)),
        ("mvm_pipeline", bool(opts.mvm_pipeline and mode != "core")),
    ]
    if memory:
        attrs += [("mem_in", len(mem_in)), ("mem_out", len(mem_out))]
    if opts.local_memory and local_bytes > 0:
        attrs.append(("local_bytes", int(local_bytes)))
        if opts.local_heap == "core":  # one heap per core for every region on it, allocated when scheduled
            attrs.append(("local_heap", "core"))
        elif opts.local_heap != "region":
            raise ValueError(f"local_heap must be 'core' or 'region', not {opts.local_heap!r}")
    if opts.send_batch > 1:
        attrs.append(("send_batch", int(opts.send_batch)))
    # the crossbar mapping chosen for accuracy (only where it departs from the chip's defaults)
    if region.rows_per_step is not None and region.rows_per_step < hw.crossbar.rows_active:
        attrs.append(("rows_per_step", int(region.rows_per_step)))
    if region.adc_lsb is not None:
        attrs.append(("adc_lsb", int(region.adc_lsb)))
    if region.weight_encoding not in (None, hw.crossbar.weight_encoding):
        attrs.append(("weight_encoding", str(region.weight_encoding)))
    if region.x_signed and region.input_encoding not in (None, hw.crossbar.input_encoding):
        attrs.append(("input_encoding", str(region.input_encoding)))
    xhw = region.chip(hw)

    # ---- virtual crossbars: one per (pass, replica); mode switches first
    setup: list = []
    run: list = []
    switches = [op("CM.switch", type=t, xbs=tuple(mem[k])) for t, k in (("TOC", "toc"), ("TOM", "tom")) if mem.get(k)]
    (run if mem.get("in_run") else setup).extend(switches)
    inplace = tuple(mem.get("inplace", ()))  # keys in place: the run-time operand is already in the arrays
    if mem.get("tom_run") and mem_out:  # its arrays computed (keys in place) last inference: memory mode again
        run.append(op("CM.switch", type="TOM", xbs=mem_out))
    if inplace:
        run.append(op("CM.switch", type="TOC", xbs=inplace, keep=True))
    vxb_of: dict[tuple[int, int], int] = {}
    binds = []
    for p_idx, idx in enumerate(pl.passes):
        for r_idx, xbs in enumerate(pl.replicas):
            vid = len(vxb_of)
            vxb_of[(p_idx, r_idx)] = vid
            binds.append(op(
                "CIM.bind_vxb", vxb=vid,
                xbs=tuple(xbs[i] for i in idx),
                rows=tuple(Range(pl.tiles[i].k0, pl.tiles[i].k1) for i in idx),
                cols=tuple(Range(pl.tiles[i].n0, pl.tiles[i].n1) for i in idx),
            ))
    setup += binds

    tile_args: dict[int, tuple] = {}  # tile index -> its (rows, cols) argument pairs, shared by its writes

    def writes(p_idx: int) -> list:
        # op(xb=, src=, rows=, cols=, [batch=], [inplace=]) with the pairs built once
        src = ("src", _REF["w"] if region.kind != DMATMUL else _REF["yq"])
        tail = ((("batch", bt),) if (region.kind == DMATMUL and bt > 1) else ()) + ((("inplace", True),) if inplace else ())
        out = []
        if region.kind != DMATMUL:  # constant weights come from off-chip memory, one copy for all replicas
            nbytes = int(P.tile_bytes([pl.tiles[i] for i in pl.passes[p_idx]], wbits).sum())
            out.append(op("DMOV", op="fetch", src=_REF["w"], level="offchip", bytes=nbytes))
        for r_idx, xbs in enumerate(pl.replicas):
            for i in pl.passes[p_idx]:
                ta = tile_args.get(i)
                if ta is None:
                    t = pl.tiles[i]
                    ta = tile_args[i] = (("rows", Range(t.k0, t.k1)), ("cols", Range(t.n0, t.n1)))
                out.append(op_from("CIM.write_xb", (("xb", xbs[i]), src) + ta + tail))
        return out

    # ---- operand preparation that is not per chunk
    if region.kind == DMATMUL and not inplace:
        run.append(op("DMOV", op="load", src=_REF["y"], level=level, frac=(0.0, 1.0),
                      bytes=int(np.prod(region.in_shapes[1])) * wbits // 8))
    if region.kind == DMATMUL:
        run.append(op("DCOM", op="quantize", src=_REF["y"], dst=_REF["yq0"], scale=float(region.y_scale), zero=0,
                      bits=wbits, signed=True, elements=int(np.prod(region.in_shapes[1]))))
        run.append(op("DCOM", op="reshape", src=_REF["yq0"], dst=_REF["yq"], shape=(bt, k, n), batch_shape=region.batch_shape))
        run.append(op("DCOM", op="colsum", src=_REF["yq"], dst=_REF["wsum"], elements=bt * k * n))
    run.append(op("DCOM", op="zeros", dst=_REF["acc"], shape=(bt, m, n)))
    if pl.resident:
        for p_idx in range(len(pl.passes)):
            setup += writes(p_idx)

    def prep(c: int, v: Range) -> list:
        f0, f1 = float(ch.f0[c]), float(ch.f1[c])
        out = [op("DMOV", op="load", src=_REF["x"], vecs=v, level=lv_in, frac=(f0, f1), bytes=int(ch.load_bytes[c]),
                  **at_in)]
        at = {"at": "producer"} if region.quant_at_producer else {}  # the producing cores quantised it
        out.append(op("DCOM", op="quantize", src=_REF["x"], dst=_REF["xq"], vecs=v, scale=float(region.x_scale),
                      zero=int(region.x_zero), bits=ibits, signed=bool(region.x_signed),
                      elements=int(ch.quant_elems[c]), **at))
        if region.kind == CONV2D:
            cv = region.conv
            out.append(op("DCOM", op="im2col", src=_REF["xq"], dst=_REF["xm"], vecs=v, kernel=tuple(cv["kernel"]),
                          strides=tuple(cv["strides"]), padding=tuple(cv["padding"]),
                          dilation=tuple(cv["dilation"]), pad_value=int(region.x_zero),
                          elements=int(ch.im2col_elems[c])))
        elif region.kind == DMATMUL:
            out.append(op("DCOM", op="reshape", src=_REF["xq"], dst=_REF["xm"], vecs=v, shape=(bt, m, k),
                          batch_shape=region.batch_shape))
        else:
            out.append(op("DCOM", op="reshape", src=_REF["xq"], dst=_REF["xm"], vecs=v, shape=(1, m, k)))
        return out

    pass_info: dict[int, tuple] = {}  # per pass: its row blocks, rows used and tallest tile (chunks share them)
    # the reads are most of a program's operations (a pass per chunk per wordline group): their argument
    # pairs are built once and shared, in the order (and so the text) of op(vxb=, [group=], src=, vecs=, dst=,
    # [block=], [batch=])
    src_xm, dst_acc, at_core, scatter = ("src", _REF["xm"]), ("dst", _REF["acc"]), ("level", "core"), ("op", "scatter")
    batch_arg = (("batch", bt),) if bt > 1 else ()
    groups_of: dict[int, list] = {}  # tallest rows read -> the ("group", g) pairs of its wordline groups

    def reads(v: Range, p_idx: int, r_idx: int) -> list:
        vid = vxb_of[(p_idx, r_idx)]
        if p_idx not in pass_info:
            tiles = [pl.tiles[i] for i in pl.passes[p_idx]]
            blocks = P.row_blocks(tiles)
            pass_info[p_idx] = (blocks, sum(b1 - b0 for b0, b1 in blocks), max(t.rows for t in tiles),
                                [(("block", Range(b0, b1)),) for b0, b1 in blocks])
        blocks, rows_used, max_rows, block_args = pass_info[p_idx]
        vecs, vxb = ("vecs", v), ("vxb", vid)

        def read_ops(blk: tuple, max_rows: int) -> list:
            if mode == "core":
                return [op_from("CIM.read_core", (vxb, src_xm, vecs, dst_acc) + batch_arg)]
            if mode == "wordline":
                gs = groups_of.get(max_rows)
                if gs is None:
                    gs = groups_of[max_rows] = [("group", g) for g in range(-(-max_rows // xhw.crossbar.rows_active))]
                tail = (src_xm, vecs, dst_acc) + blk + batch_arg
                return [op_from("CIM.read_row", (vxb, g) + tail) for g in gs]
            return [op_from("CIM.read_xb", (vxb, src_xm, vecs, dst_acc) + blk + batch_arg)]

        if opts.mvm_pipeline and mode != "core" and len(blocks) > 1:
            out = []
            for (b0, b1), blk in zip(blocks, block_args):  # each row block starts as soon as its own slice arrives
                out.append(op_from("DMOV", (scatter, src_xm, vecs, vxb, at_core,
                                            ("bytes", P.scatter_bytes(bt, v.size, b1 - b0, abits))) + blk))
                out.append(Parallel(tuple(read_ops(blk, b1 - b0))))
            return out
        return [  # rows_used: this pass's rows only
            op_from("DMOV", (scatter, src_xm, vecs, vxb, at_core, ("bytes", P.scatter_bytes(bt, v.size, rows_used, abits)))),
            Parallel(tuple(read_ops((), max_rows))),
        ]

    def post(v: Range, r_idx: int) -> list:
        core = pl.replicas[r_idx][0] // per_core
        out = []
        if n_blocks > 1:
            out.append(op("DCOM", op="reduce", dst=_REF["acc"], vecs=v, core=core, terms=n_blocks,
                          elements=bt * v.size * n * (n_blocks - 1)))
        deq = dict(op="dequantize", src=_REF["acc"], dst=_REF["yf"], vecs=v, core=core,
                   scale=float(region.x_scale * (region.y_scale if region.kind == DMATMUL else 1.0)))
        if region.x_zero:
            deq["zero"] = int(region.x_zero)
            deq["wsum"] = _REF["wsum"]
        if region.kind != DMATMUL:
            deq["wscale"] = _REF["wscale"]
        if region.bias is not None:
            deq["bias"] = _REF["bias"]
        deq["elements"] = bt * v.size * n * 3
        if region.requant_out:  # this core also quantises its output for the consuming regions
            deq["requant"] = bt * v.size * n
        out.append(Op("DCOM", tuple(deq.items())))
        out.append(op("DMOV", op="store", src=_REF["yf"], vecs=v, level=lv_out,
                      frac=(v.start / m_total, v.stop / m_total), bytes=bt * v.size * n * -(-abits // 8), **at_out))
        return out

    if len(pl.passes) == 1:
        if not pl.resident:
            run += writes(0)
        queue: list = []  # Alg. 2: transmit requests, sent when the queue reaches the threshold
        for c_idx, v in enumerate(chunks):
            r_idx = c_idx % n_rep
            run += prep(c_idx, v)
            run += reads(v, 0, r_idx)
            ops = post(v, r_idx)
            if opts.send_batch > 1:
                queue.append(ops.pop())
                run += ops
                if len(queue) >= opts.send_batch:
                    run += queue
                    queue = []
            else:
                run += ops
        run += queue
    else:  # weights larger than the chip: every pass rewrites the crossbars
        for c_idx, v in enumerate(chunks):
            run += prep(c_idx, v)
        for p_idx in range(len(pl.passes)):
            run += writes(p_idx)
            for v in chunks:
                run += reads(v, p_idx, 0)
        for v in chunks:
            run += post(v, 0)
    if mem_out and mem.get("writeback"):  # live data leaves the arrays before they change role (T^wb)
        run.append(op("DMOV", op="writeback", src=_REF["yf"], level=level, bytes=bt * m * n, xbs=mem_out))
    run.append(op("DCOM", op="layout", src=_REF["yf"], dst=_REF["out"],
                  layout="nchw" if region.kind == CONV2D else "rowmajor", shape=tuple(region.out_shape)))
    if loopnest is not None:
        attrs.append(("dataflow", "miredo"))
        run.append(op("CIM.loopnest", **loopnest))
    prog = verify(Program(name or region.name, tuple(attrs), tuple(decls), tuple(setup), tuple(run)), hw.total_crossbars)
    encode(prog)  # its encoded form, which the simulator reads (kept on the program)
    return prog


def region_constants(region: Region) -> dict[str, np.ndarray]:
    """The constant tensors a region's program declares, by name."""
    consts = {}
    if region.kind != DMATMUL:
        consts = {
            "w": np.ascontiguousarray(region.w_int, dtype=np.int8),
            "wscale": np.ascontiguousarray(region.w_scale, dtype=np.float32),
            "wsum": region.w_int.sum(axis=0, dtype=np.int32),  # exact: integers, no overflow below 2^24 rows
        }
    if region.bias is not None and region.kind != DMATMUL:
        consts["bias"] = np.ascontiguousarray(region.bias, dtype=np.float32)
    if region.adc_lsb_cols is not None:
        consts["adclsb"] = np.ascontiguousarray(region.adc_lsb_cols, dtype=np.int32)
    return consts
