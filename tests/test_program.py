"""Meta-operator programs: printer and parser round-trip."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tvm_cim
from tvm_cim.compiler import strategies
from tvm_cim.program import (
    Decl,
    Op,
    Parallel,
    Program,
    ProgramSyntaxError,
    Range,
    Ref,
    parse_program,
    parse_programs,
    print_program,
)

from .onnx_models import small_cnn

idents = st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True).filter(lambda s: s not in ("true", "false", "inf", "nan"))
scalars = st.one_of(
    st.integers(-10**9, 10**9),
    st.floats(allow_nan=False, allow_infinity=False, width=64),
    st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=12),
    st.booleans(),
    idents.map(Ref),
    st.tuples(st.integers(0, 1000), st.integers(0, 1000)).map(lambda t: Range(*t)),
)
values = st.one_of(scalars, st.lists(scalars, max_size=4).map(tuple))
ops = st.builds(
    lambda code, args: Op(code, tuple(args)),
    st.sampled_from(["CIM.read_xb", "CIM.write_xb", "CIM.read_row", "CIM.read_core", "DMOV", "DCOM"]),
    st.lists(st.tuples(idents, values), max_size=5, unique_by=lambda kv: kv[0]),
)
stmts = st.recursive(ops, lambda inner: st.lists(inner, max_size=4).map(lambda b: Parallel(tuple(b))), max_leaves=12)
decls = st.builds(Decl, st.sampled_from(["input", "const", "output"]), idents,
                  st.sampled_from(["float32", "int8", "int32"]), st.lists(st.integers(1, 512), max_size=4).map(tuple))
programs = st.builds(
    lambda name, attrs, d, setup, run: Program(name, tuple(attrs), tuple(d), tuple(setup), tuple(run)),
    st.text(max_size=10), st.lists(st.tuples(idents, values), max_size=4), st.lists(decls, max_size=4),
    st.lists(stmts, max_size=5), st.lists(stmts, max_size=8),
)


@settings(max_examples=200, deadline=None)
@given(programs)
def test_random_programs_round_trip(p):
    assert parse_program(print_program(p)) == p


@pytest.mark.parametrize("strategy", strategies.names())
def test_compiled_programs_round_trip(strategy):
    from tvm_cim.common.onnx_io import import_onnx

    mod = import_onnx(small_cnn(), "s")[0]
    for hw in ("isaac", "jia21", "jain21"):
        _, info = tvm_cim.offload(mod, tvm_cim.load(hw), strategy=strategy)
        text = info.program_text()
        parsed = parse_programs(text)
        assert parsed == info.programs
        mode_read = {"crossbar": "CIM.read_xb", "core": "CIM.read_core", "wordline": "CIM.read_row"}[info.hw.chip.computing_mode]
        assert all(any(o.opcode == mode_read for o in p.ops()) for p in parsed)


@pytest.mark.parametrize("text,where", [
    ('program "a" { run { CIM.read_xb(xb=1, ) ', "end of text"),
    ('program "a" {\n  run {\n    CIM.read_xb(xb=@)\n  }\n}', "line 3"),
    ('program "a" {\n  bogus 1\n}', "line 2"),
    ('program "a" { run { X(k=word) } }', "bare word"),
])
def test_syntax_errors_name_the_place(text, where):
    with pytest.raises(ProgramSyntaxError) as e:
        parse_program(text)
    assert where in str(e.value)


# --------------------------------------------------------------------------- typed operators, verifier, networks
from tvm_cim.program import (  # noqa: E402
    OPS,
    Network,
    ProgramError,
    Segment,
    op,
    parse_emitted,
    parse_network,
    print_network,
    verify,
    verify_network,
)


def compiled_program(hw="isaac"):
    from tvm_cim.common.onnx_io import import_onnx

    _, info = tvm_cim.offload(import_onnx(small_cnn(), "s")[0], tvm_cim.load(hw))
    return info


def test_every_generated_operation_is_defined_and_verified():
    info = compiled_program()
    for p in info.programs:
        assert verify(p, info.hw.total_crossbars) is p
        assert {o.kind for o in p.ops()} <= set(OPS)


@pytest.mark.parametrize("edit,message", [
    (lambda o: o if o.opcode != "CIM.read_xb" else Op("CIM.read_xx", o.args), "unknown meta-operator"),
    (lambda o: o if o.opcode != "CIM.read_xb" else Op(o.opcode, tuple(kv for kv in o.args if kv[0] != "dst")),
     "lacks the operand 'dst'"),
    (lambda o: o if o.opcode != "CIM.write_xb" else Op(o.opcode, tuple((k, "zero" if k == "xb" else v)
                                                                       for k, v in o.args)), "expected type"),
    (lambda o: o if o.opcode != "CIM.write_xb" else Op(o.opcode, tuple((k, 10**7 if k == "xb" else v)
                                                                       for k, v in o.args)), "does not exist"),
    (lambda o: o if o.opcode != "CIM.read_xb" else Op(o.opcode, tuple((k, 999 if k == "vxb" else v)
                                                                      for k, v in o.args)), "before CIM.bind_vxb"),
    (lambda o: o if o.kind != "DCOM.quantize" else Op(o.opcode, tuple((k, Ref("nowhere") if k == "src" else v)
                                                                      for k, v in o.args)), "before it is declared"),
    (lambda o: o if o.opcode != "CIM.read_xb" else Op(o.opcode, o.args + (("colour", 1),)), "no operand 'colour'"),
])
def test_verifier_rejects_malformed_programs(edit, message):
    p = compiled_program().programs[0]

    def rewrite(stmts):
        return tuple(Parallel(rewrite(s.body)) if isinstance(s, Parallel) else edit(s) for s in stmts)

    bad = Program(p.name, p.attrs, p.decls, rewrite(p.setup), rewrite(p.run))
    with pytest.raises(ProgramError) as e:
        verify(bad, 12288)
    assert message in str(e.value).replace("not of the expected type", "expected type") and p.name in str(e.value)


def test_network_round_trips_and_is_emitted():
    info = compiled_program()
    assert info.network is not None and info.network.regions == [p.name for p in info.programs]
    text = print_network(info.network)
    assert parse_network(text) == info.network
    net, progs = parse_emitted(info.program_text())
    assert net == info.network and progs == info.programs
    switched = Network("n", (("hw", "x"),), (Segment(0, (), ("a",)),
                                             Segment(1, (op("CM.switch", type="TOM", xbs=(3, 4)),), ("b",))))
    assert parse_network(print_network(switched)) == switched
    verify_network(switched, {"a": None, "b": None}, crossbars=8)


@pytest.mark.parametrize("net,message", [
    (Network("n", (), (Segment(1, (), ("a",)), Segment(0, (), ("b",)))), "after segment"),
    (Network("n", (), (Segment(0, (), ("a", "a")),)), "appears twice"),
    (Network("n", (), (Segment(0, (op("CM.switch", type="TOX", xbs=(1,)),), ("a",)),)), "expected type"),
    (Network("n", (), (Segment(0, (op("CM.switch", type="TOM", xbs=(99,)),), ("a",)),)), "does not exist"),
    (Network("n", (), (Segment(0, (), ("zz",)),)), "unknown region"),
])
def test_network_verifier(net, message):
    with pytest.raises(ProgramError) as e:
        verify_network(net, {"a": None, "b": None}, crossbars=8)
    assert message in str(e.value) or (message == "expected type" and "TOM" in str(e.value))
