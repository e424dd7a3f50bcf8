"""Bank-PIM kernels: command streams, simulator correctness and timing properties.

Every kernel on both devices is generated for several drafts (the backend's
default tiling and seeded random drafts of the pruned space), printed, parsed
back, executed by the functional simulator and compared with an independent
float32 numpy reference within the FP16 error bound of the accumulation
order.
"""

from __future__ import annotations

import numpy as np
import pytest

from tvm_pim import load, program
from tvm_pim.compiler import codegen, space
from tvm_pim.compiler.kernels import KernelShapeError, KernelSpec
from tvm_pim.hardware.view import PimView, UnsupportedOnDevice
from tvm_pim.simulator import SimulationError, Simulator

VIEWS = {name: PimView(load(name)) for name in ("hbm-pim", "attacc")}

CASES = [
    ("hbm-pim", KernelSpec.make("gemv", b=3, m=2, n=100, k=200)),
    ("hbm-pim", KernelSpec.make("gemv", b=1, m=1, n=64, k=4096)),
    ("hbm-pim", KernelSpec.make("red", b=2, n=37, k=300)),
    ("hbm-pim", KernelSpec.make("va", b=3, i=1000)),
    ("hbm-pim", KernelSpec.make("relu", b=2, i=777)),
    ("attacc", KernelSpec.make("gemv", b=4, m=1, n=130, k=128)),
    ("attacc", KernelSpec.make("gemv", b=1, m=3, n=64, k=300)),
    ("attacc", KernelSpec.make("red", b=2, n=33, k=200)),
    ("attacc", KernelSpec.make("attn", b=4, n=50, k=32)),
    ("attacc", KernelSpec.make("attn", b=2, n=300, k=128)),
]


def fp16_chain(spec: KernelSpec, draft: space.Draft) -> int:
    """Longest chain of FP16 roundings one output sees for a draft (see KernelSpec.error_bound)."""
    per = space.per_core_length(spec, draft)
    if spec.kind in ("gemv", "red"):
        return -(-per["k"] // 16) + 3
    if spec.kind == "attn":
        return -(-spec.dims["k"] // 16) + -(-per["n"] // 16) + 6
    return 2


def _drafts(spec, view, n=5, seed=0):
    drafts, _ = space.enumerate_drafts(spec, view)
    rng = np.random.default_rng(seed)
    pick = [drafts[i] for i in rng.choice(len(drafts), min(n, len(drafts)), replace=False)]
    return [space.default_draft(spec, view)] + pick


@pytest.mark.parametrize("hw,spec", CASES, ids=[f"{h}-{s.name}" for h, s in CASES])
def test_kernel_matches_numpy_reference(hw, spec):
    view = VIEWS[hw]
    sim = Simulator(view.hw)
    inputs = spec.random_inputs(seed=7)
    ref = spec.reference(inputs)
    ran = 0
    for d in _drafts(spec, view):
        try:
            stream = codegen.generate(spec, d, view)
        except space.InfeasibleDraft:
            continue
        text = program.print_stream(stream)
        res = sim.run(text, inputs)
        out = res.output.astype(np.float32)
        assert out.shape == ref.shape
        assert not np.isnan(out).any(), f"{d}: read unwritten PIM memory"
        bound = spec.error_bound(inputs, fp16_chain(spec, d))
        err = np.abs(out - ref)
        assert np.all(err <= bound), f"{d}: max error {err.max():.3g} exceeds the FP16 bound {bound.max():.3g}"
        # FP16 arithmetic really happened: results are FP16 values and differ from float32
        assert res.output.dtype == np.float16
        assert res.latency_ns > 0 and res.energy_pj > 0
        ran += 1
    assert ran >= 3


def test_fp16_is_really_used():
    """A long FP16 accumulation drifts from the float32 reference (but stays in its bound)."""
    view = VIEWS["hbm-pim"]
    spec = KernelSpec.make("red", b=1, n=1, k=4096)
    inputs = {"A": np.full((1, 1, 4096), 1.0 / 3.0, np.float16)}
    d = space.Draft((space.Part("b", 1, 1), space.Part("n", 1, 1), space.Part("k", 1, 1)), "expand")
    out = Simulator(view.hw).run(codegen.generate(spec, d, view), inputs).output
    ref = spec.reference(inputs)
    assert abs(float(out[0, 0]) - float(ref[0, 0])) > 0  # FP16 rounding is visible
    assert abs(float(out[0, 0]) - float(ref[0, 0])) <= spec.error_bound(inputs, fp16_chain(spec, d))[0, 0]


def test_stream_round_trip_and_device_mnemonics():
    view = VIEWS["hbm-pim"]
    spec = KernelSpec.make("gemv", b=2, m=1, n=300, k=256)
    d = space.default_draft(spec, view)
    text = codegen.generate_text(spec, d, view)
    again = program.print_stream(program.parse_stream(text))
    assert again == text
    ops = {c.op for _, c in program.parse_stream(text).commands()}
    assert {"MAC", "ACT_AB", "PRE_AB", "MOV", "RD"} <= ops
    assert all(o in view.hw.commands or o.startswith("HOST.") for o in ops)
    att = VIEWS["attacc"]
    text2 = codegen.generate_text(KernelSpec.make("attn", b=2, n=64, k=128), space.default_draft(
        KernelSpec.make("attn", b=2, n=64, k=128), att), att)
    ops2 = {c.op for _, c in program.parse_stream(text2).commands()}
    assert {"MAC_AB", "MVSB", "SFM", "MVGB", "WRGB"} <= ops2


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "pimstream 2\n",
        "pimstream 1\ndevice x\nkernel {}\nunits 1 1\nmemory 1\nphase compute\n  MAC addr=0\n",
        "pimstream 1\ndevice x\nkernel {}\nunits 1 1\nmemory 1\nphase compute\n  loop i 2\n  MAC @0:* addr=0\n",
        "pimstream 1\ndevice x\nkernel {}\nunits 2 1\nmemory 1\ntable t g 1\n",
        "pimstream 1\ndevice x\nkernel {}\nunits 1 1\nmemory 1\nphase fly\n",
    ],
)
def test_parser_rejects_malformed_streams(bad):
    with pytest.raises(program.StreamFormatError):
        program.parse_stream(bad)


def test_simulator_rejects_foreign_commands_and_bad_expressions():
    view = VIEWS["attacc"]
    sim = Simulator(view.hw)
    spec = KernelSpec.make("red", b=1, n=16, k=16)
    text = codegen.generate_text(spec, space.default_draft(spec, view), view)
    with pytest.raises(SimulationError, match="not in attacc"):
        sim.run(text.replace("MAC_AB", "MAC"), spec.random_inputs())
    with pytest.raises(program.StreamFormatError):
        program.eval_expr("__import__('os')", {})
    with pytest.raises(SimulationError, match="device"):
        Simulator(VIEWS["hbm-pim"].hw).run(text, spec.random_inputs())


def test_unsupported_kernels_are_refused_with_a_reason():
    att = VIEWS["attacc"]
    with pytest.raises(UnsupportedOnDevice, match="VA"):
        codegen.generate(KernelSpec.make("va", b=1, i=64), space.Draft((space.Part("b", 1, 1), space.Part("i", 1, 1))), att)
    hbm = VIEWS["hbm-pim"]
    with pytest.raises(UnsupportedOnDevice, match="ATTN"):
        spec = KernelSpec.make("attn", b=1, n=16, k=16)
        codegen.generate(spec, space.default_draft(spec, hbm), hbm)
    with pytest.raises(KernelShapeError):
        KernelSpec.make("gemv", b=0, m=1, n=1, k=1)
    with pytest.raises(KernelShapeError):
        KernelSpec.make("conv", b=1)


def test_timing_follows_dram_parameters():
    """Slower column cadence or row cycle -> slower compute; more groups -> faster."""
    import dataclasses

    view = VIEWS["hbm-pim"]
    spec = KernelSpec.make("gemv", b=1, m=1, n=2048, k=1024)
    d = space.Draft((space.Part("b", 1, 1), space.Part("m", 1, 1), space.Part("n", 4, 8), space.Part("k", 1, 1)), "expand")
    base = Simulator(view.hw).run(codegen.generate(spec, d, view), functional=False)
    cmds = dict(view.hw.commands)
    cmds["MAC"] = dataclasses.replace(cmds["MAC"], latency_cycles=8)
    slow = dataclasses.replace(view.hw, commands=cmds)
    r2 = Simulator(slow).run(codegen.generate(spec, d, PimView(slow)), functional=False)
    assert r2.compute_ns > 1.5 * base.compute_ns
    tm = dataclasses.replace(view.hw.dram.timing, trcd=40, trp=40)
    slow_rows = dataclasses.replace(view.hw, dram=dataclasses.replace(view.hw.dram, timing=tm))
    r3 = Simulator(slow_rows).run(codegen.generate(spec, d, PimView(slow_rows)), functional=False)
    assert r3.compute_ns > base.compute_ns
    d2 = space.Draft((space.Part("b", 1, 1), space.Part("m", 1, 1), space.Part("n", 16, 8), space.Part("k", 1, 1)), "expand")
    r4 = Simulator(view.hw).run(codegen.generate(spec, d2, view), functional=False)
    assert r4.compute_ns < base.compute_ns / 2


def test_staging_and_hierarchical_commands_help():
    """DCC's optimiser: staging makes rearrangement parallel, broadcast cuts command traffic."""
    view = VIEWS["hbm-pim"]
    spec = KernelSpec.make("va", b=4, i=65536)
    d = space.Draft((space.Part("b", 4, 1), space.Part("i", 16, 8)), "expand")
    sim = Simulator(view.hw)
    on = sim.run(codegen.generate(spec, d, view), functional=False)
    off = sim.run(codegen.generate(spec, d, view, codegen.CodegenOptions(staging=False)), functional=False)
    assert off.rearrangement_ns > 4 * on.rearrangement_ns
    flat = sim.run(codegen.generate(spec, d, view, codegen.CodegenOptions(hierarchical=False)), functional=False)
    assert flat.latency_ns >= on.latency_ns
    att = VIEWS["attacc"]
    g = KernelSpec.make("gemv", b=1, m=1, n=4096, k=128)
    dg = space.Draft((space.Part("b", 1, 1), space.Part("m", 1, 1), space.Part("n", 64, 64), space.Part("k", 1, 1)), "expand")
    s2 = Simulator(att.hw)
    bc = s2.run(codegen.generate(g, dg, att), functional=False)
    nb = s2.run(codegen.generate(g, dg, att, codegen.CodegenOptions(hierarchical=False)), functional=False)
    assert bc.command_counts["WRGB"] < nb.command_counts["WRGB"]
    assert bc.latency_ns < nb.latency_ns


def test_phases_are_timed_independently_and_setup_is_not_latency():
    """Each phase simulated alone takes what it takes inside the whole stream; the latency is the sum of
    the phases other than ``setup``, and the rearrangement share covers at least the host's own traffic."""
    view = VIEWS["attacc"]
    spec = KernelSpec.make("gemv", b=8, m=1, n=1024, k=128)
    text = codegen.generate_text(spec, space.default_draft(spec, view), view)
    sim = Simulator(view.hw)
    r = sim.run(text, functional=False)
    assert set(r.phases_ns) == {"setup", "rearrange_in", "compute", "rearrange_out"}
    assert r.setup_ns > 0  # the resident matrix is placed once, outside the latency
    head, *phases = text.split("\nphase ")
    alone = {}
    for body in phases:
        name = body.split()[0]
        alone[name] = sim.run(f"{head}\nphase {body}" + ("" if body.endswith("\n") else "\n"), functional=False).latency_ns
    assert alone.pop("setup") == 0.0  # a stream's own setup is never latency
    assert set(alone) == {"rearrange_in", "compute", "rearrange_out"}
    for name, ns in alone.items():
        assert ns == pytest.approx(r.phases_ns[name], rel=1e-12)
    assert r.latency_ns == pytest.approx(sum(alone.values()), rel=1e-12)
    # the host moves x in and y out over its own bus at least once
    host_bytes = (spec.dims["b"] * spec.dims["k"] + spec.dims["b"] * spec.dims["n"]) * 2
    assert r.rearrangement_ns >= host_bytes / view.host_bw_gbs
    assert 0 < r.compute_ns < r.latency_ns


def test_a_new_device_needs_only_a_hardware_file(tmp_path):
    """A made-up device (different organisation, names, timing) compiles and runs from its TOML alone."""
    import pathlib

    import tvm
    from tvm import relax

    import tvm_pim

    text = pathlib.Path(load("attacc").source_path).read_text()
    text = text.replace('name = "attacc"', 'name = "tiny-pim"')
    text = text.replace("stacks = 5", "stacks = 1").replace("channels_per_stack = 16", "channels_per_stack = 4")
    text = text.replace("bank_groups = 16", "bank_groups = 2").replace("trcd = 19", "trcd = 25")
    text = text.replace("ranks_per_pseudo_channel = 2", "ranks_per_pseudo_channel = 1")  # 2 bank groups: one per pCH
    f = tmp_path / "tiny-pim.toml"
    f.write_text(text)
    view = PimView(tvm_pim.load(str(f)))
    assert (view.groups, view.cores_per_group) == (4, 8)
    spec = KernelSpec.make("gemv", b=3, m=1, n=70, k=96)
    drafts, st = space.enumerate_drafts(spec, view)
    assert all(d.groups_used <= 4 and d.cores_used <= 8 for d in drafts)
    inputs = spec.random_inputs(3)
    for d in drafts[:4]:
        res = Simulator(view.hw).run(codegen.generate(spec, d, view), inputs)
        assert np.all(np.abs(res.output.astype(np.float32) - spec.reference(inputs)) <= spec.error_bound(inputs, fp16_chain(spec, d)))
    # and through relax.build with the file path as the target
    rng = np.random.default_rng(0)
    W = rng.standard_normal((96, 70)).astype("float32")
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 96), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            gv = bb.emit_output(relax.op.matmul(x, relax.const(W)))
        bb.emit_func_output(gv)
    with tvm_pim.offload_options(policy="always", strategy="simulate"):
        ex = relax.build(bb.get(), target=f"pim -hw={f}")
    xv = rng.standard_normal((1, 96)).astype("float32")
    y = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(xv)).numpy()
    assert tvm_pim.last_compile_info().kernels[0].offloaded
    np.testing.assert_allclose(y, xv @ W, rtol=0.02, atol=0.05)


def _host_write_stream(cores: str) -> str:
    return (
        "pimstream 1\ndevice hbm-pim\n"
        'kernel {"kind": "va", "resident": [], "scale": 1.0, "sizes": {"b": 1, "i": 4096}}\n'
        "tensor A float16 1x4096 input\ntensor B float16 1x4096 input\ntensor C float16 1x4096 output\n"
        "units 1 8\nmemory 256\n"
        "phase rearrange_in\n"
        f"  WR @0:{cores} addr=0 src=A[0,0:4096:4096] lay=lin:256\n"
    )


def test_bank_group_parallelism_in_timing():
    """Bank-level writes to two banks of one bank group wait tCCD_L; spread over bank groups, tCCD_S."""
    view = VIEWS["hbm-pim"]
    assert view.cores_per_bank_group == 2
    sim = Simulator(view.hw)
    same_bg = sim.run(_host_write_stream("0-1"), functional=False)
    two_bgs = sim.run(_host_write_stream("0,2"), functional=False)
    assert same_bg.command_counts["WR"] == two_bgs.command_counts["WR"]
    assert same_bg.latency_ns > 1.2 * two_bgs.latency_ns


def test_result_readback_is_charged_per_output():
    """Reading results back costs at least one column per output at the host bus's rate."""
    view = VIEWS["hbm-pim"]
    spec = KernelSpec.make("gemv", b=64, m=1, n=1024, k=128)
    d = space.default_draft(spec, view)
    r = Simulator(view.hw).run(codegen.generate(spec, d, view), functional=False)
    outputs = 64 * 1024
    assert r.command_counts["RD"] >= outputs
    assert r.phases_ns["rearrange_out"] >= outputs * view.column_bytes / view.host_bw_gbs
