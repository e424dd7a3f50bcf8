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
