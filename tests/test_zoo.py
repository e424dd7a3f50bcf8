"""Tests for the generated ONNX model zoo (tvm_cim.common.zoo)."""

from __future__ import annotations

import math
import pathlib
import sys

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

try:
    from tvm_cim.common import zoo
except ImportError:  # running pytest without the repo root on sys.path
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
    from tvm_cim.common import zoo

ort = pytest.importorskip("onnxruntime")

# Reduced sizes: CNNs keep their full channel configuration (so parameter
# counts match the published networks) but run on small images; the
# transformers are tiny.  ``init_std`` is raised for the tiny transformers so
# the attention probabilities are far from uniform.
SMALL = {
    "resnet18": dict(image_size=64),
    "resnet34": dict(image_size=32),
    "resnet50": dict(image_size=32),
    "resnet101": dict(image_size=32),
    "vgg16": dict(image_size=32, fc_hidden=256),
    "vgg19": dict(image_size=32, fc_hidden=64),
    "vgg8": dict(image_size=28, num_classes=10),
    "googlenet": dict(image_size=32),
    "alexnet": dict(image_size=64, fc_hidden=64),
    "zfnet": dict(image_size=64, fc_hidden=64),
    "densenet121": dict(image_size=32),
    "mobilenetv2": dict(image_size=64),
    "vit_base": dict(image_size=32, patch_size=8, hidden=32, depth=2, heads=4, mlp=64,
                     num_classes=10, init_std=0.2),
    "bert_layer": dict(seq_len=16, hidden=32, heads=4, ffn=64, batch=2, init_std=0.2),
    "llama_layer": dict(seq_len=16, hidden=64, heads=4, ffn=96, batch=2, init_std=0.1),
    "gpt_decode": dict(batch=2, ctx=16, hidden=32, heads=4, ffn=64),
    "llama_decode": dict(batch=2, ctx=16, hidden=32, heads=4, ffn=64),
}
# graph outputs, where they are not the single "output"
OUTPUTS = {"gpt_decode": ["y", "k_new", "v_new"], "llama_decode": ["y", "k_new", "v_new"]}

# Trainable parameter counts of the torchvision reference models (BatchNorm
# running statistics excluded); independent of the image size.
TORCHVISION_PARAMS = {
    "resnet18": 11_689_512,
    "resnet34": 21_797_672,
    "resnet50": 25_557_032,
    "resnet101": 44_549_160,
    "densenet121": 7_978_856,
    "mobilenetv2": 3_504_872,
}

_CACHE: dict[tuple, onnx.ModelProto] = {}


def small(name: str, seed: int = 0) -> onnx.ModelProto:
    key = (name, seed)
    if key not in _CACHE:
        _CACHE[key] = zoo.build_model(name, seed=seed, **SMALL[name])
    return _CACHE[key]


def run_ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run([model.graph.output[0].name], feeds)[0]


def weights(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def expected_output_shape(name: str) -> tuple:
    kw = SMALL[name]
    if name in ("bert_layer", "llama_layer"):
        return (kw.get("batch", 1), kw["seq_len"], kw["hidden"])
    if name in OUTPUTS:
        return (kw["batch"], 1, kw["hidden"])
    return (kw.get("batch", 1), kw.get("num_classes", 1000))


def test_registry_lists_all_models():
    assert list(zoo.MODELS) == list(SMALL)
    for builder in zoo.MODELS.values():
        assert builder.__doc__ and "Parameters" in builder.__doc__


def test_googlenet_modules_have_the_papers_parameters():
    """Szegedy et al. 2015 Table 1: weights per inception module (K = 1024), from its params column.

    The column disagrees with the table's own filter counts for 4c (463K; the filters give 497.5K) and
    5a (1072K; 1018K), which the builder follows; those two are left out."""
    table1 = {"3a": 159, "3b": 380, "4a": 364, "4b": 437, "4d": 580, "4e": 840, "5b": 1388}
    w = weights(small("googlenet"))
    for mod, k in table1.items():
        n = sum(a.size for name, a in w.items() if name.startswith(f"inception{mod}.") and name.endswith(".weight"))
        assert abs(n / 1024 - k) <= 0.02 * k, (mod, n / 1024, k)


def test_vgg8_layers():
    """Six 3x3 convolutions 128-128-256-256-512-512 on 1x28x28, FC 512*3*3 -> 1024 -> 10."""
    w = weights(small("vgg8"))
    convs = [a.shape for name, a in w.items() if name.endswith(".weight") and a.ndim == 4]
    assert convs == [(128, 1, 3, 3), (128, 128, 3, 3), (256, 128, 3, 3), (256, 256, 3, 3),
                     (512, 256, 3, 3), (512, 512, 3, 3)]
    fcs = [a.shape for name, a in w.items() if name.endswith(".weight") and a.ndim == 2]
    assert fcs == [(1024, 512 * 3 * 3), (10, 1024)]


def test_unknown_name_raises_listing_known_names():
    with pytest.raises(ValueError) as info:
        zoo.build_model("lenet")
    msg = str(info.value)
    assert "alexnet" in msg and "lenet" in msg
    for name in zoo.MODELS:
        assert name in msg


@pytest.mark.parametrize("name", list(SMALL))
def test_checker_shapes_and_ort(name):
    model = small(name)
    onnx.checker.check_model(model, full_check=True)
    expected_input = "hidden_states" if name.endswith("_layer") else "x" if name in OUTPUTS else "input"
    shapes = zoo.input_shapes(model)
    assert list(shapes) == ([expected_input, "k_cache", "v_cache"] if name in OUTPUTS else [expected_input])
    assert [o.name for o in model.graph.output] == OUTPUTS.get(name, ["output"])
    feeds = zoo.random_inputs(model, seed=1)
    assert feeds[expected_input].shape == shapes[expected_input]
    assert feeds[expected_input].dtype == np.float32
    out = run_ort(model, feeds)
    assert out.shape == expected_output_shape(name)
    assert np.all(np.isfinite(out))
    assert 1e-2 < float(out.std()) < 1e2


@pytest.mark.parametrize("name", list(SMALL))
def test_tvm_matches_onnxruntime(name):
    tvm = pytest.importorskip("tvm")
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    model = small(name)
    feeds = zoo.random_inputs(model, seed=2)
    ref = run_ort(model, feeds)
    mod = from_onnx(model)
    ex = relax.build(mod, target="llvm")
    vm = relax.VirtualMachine(ex, tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(x) for x in feeds.values()])
    out = out[0].numpy() if name in OUTPUTS else out.numpy()
    np.testing.assert_allclose(out, ref, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("name", list(SMALL))
def test_seed_determinism(name):
    a = small(name, seed=0)
    b = zoo.build_model(name, seed=0, **SMALL[name])
    assert a.SerializeToString() == b.SerializeToString()
    c = zoo.build_model(name, seed=1, **SMALL[name])
    ra = {t.name: t.raw_data for t in a.graph.initializer}
    tc = {t.name: t for t in c.graph.initializer}
    assert ra.keys() == tc.keys()
    changed = 0
    for key, raw in ra.items():
        if raw != tc[key].raw_data:
            changed += 1
            continue
        # Only non-random tensors may coincide: shared constants, rotary
        # tables, the causal mask and unit/zero normalisation parameters.
        value = numpy_helper.to_array(tc[key])
        assert (key.startswith(("const.", "rope.")) or key == "causal_mask"
                or np.all(value == value.flat[0])), key
    assert changed > 0


@pytest.mark.parametrize("name", list(TORCHVISION_PARAMS))
def test_parameter_count_matches_torchvision(name):
    w = weights(small(name))
    count = sum(v.size for k, v in w.items()
                if not k.startswith("const.") and not k.endswith(("running_mean", "running_var")))
    assert count == TORCHVISION_PARAMS[name]


def test_full_size_resnet18():
    model = zoo.build_model("resnet18")
    assert zoo.input_shapes(model) == {"input": (1, 3, 224, 224)}
    out = run_ort(model, zoo.random_inputs(model))
    assert out.shape == (1, 1000)
    assert 0.1 < float(out.std()) < 10


def test_batch_and_image_size_knobs():
    model = zoo.build_model("resnet18", batch=2, image_size=(32, 48), num_classes=7)
    assert zoo.input_shapes(model) == {"input": (2, 3, 32, 48)}
    assert run_ort(model, zoo.random_inputs(model)).shape == (2, 7)


def test_invalid_sizes_raise():
    with pytest.raises(ValueError):
        zoo.build_model("bert_layer", hidden=30, heads=4)
    with pytest.raises(ValueError):
        zoo.build_model("vit_base", image_size=30, patch_size=8, hidden=32, heads=4)
    with pytest.raises(ValueError):
        zoo.build_model("resnet18", image_size=16)
    with pytest.raises(ValueError):
        zoo.build_model("bert_layer", gelu="tanh")


def test_export_roundtrip(tmp_path):
    path = zoo.export("bert_layer", tmp_path / "sub" / "bert.onnx", seed=3, **SMALL["bert_layer"])
    assert isinstance(path, pathlib.Path) and path.is_file()
    loaded = onnx.load(str(path))
    built = zoo.build_model("bert_layer", seed=3, **SMALL["bert_layer"])
    assert loaded.SerializeToString() == built.SerializeToString()


def test_input_shapes_excludes_initializers():
    model = small("bert_layer")
    model = onnx.ModelProto.FromString(model.SerializeToString())
    # Older exporters list initializers among the graph inputs too.
    init = model.graph.initializer[0]
    model.graph.input.append(
        onnx.helper.make_tensor_value_info(init.name, init.data_type, list(init.dims))
    )
    assert list(zoo.input_shapes(model)) == ["hidden_states"]


def test_gelu_erf_variant_matches_gelu_op():
    kw = SMALL["bert_layer"]
    op_model = zoo.build_model("bert_layer", **kw)
    erf_model = zoo.build_model("bert_layer", gelu="erf", **kw)
    assert op_model.opset_import[0].version == 20
    assert erf_model.opset_import[0].version == 17
    assert "Gelu" in {n.op_type for n in op_model.graph.node}
    assert "Gelu" not in {n.op_type for n in erf_model.graph.node}
    onnx.checker.check_model(erf_model, full_check=True)
    feeds = zoo.random_inputs(op_model)
    np.testing.assert_allclose(run_ort(erf_model, feeds), run_ort(op_model, feeds),
                               rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------
# Semantics of the transformer layers against straightforward numpy references
# ---------------------------------------------------------------------------
def _np_layer_norm(x, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps)


def _np_softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _np_gelu(x):
    from math import erf

    return 0.5 * x * (1.0 + np.vectorize(erf)(x / math.sqrt(2.0)))


def _np_heads(x, heads):
    b, s, h = x.shape
    return x.reshape(b, s, heads, h // heads).transpose(0, 2, 1, 3)


def _np_merge(x):
    b, nh, s, d = x.shape
    return x.transpose(0, 2, 1, 3).reshape(b, s, nh * d)


def test_bert_layer_matches_numpy_reference():
    kw = SMALL["bert_layer"]
    model = small("bert_layer")
    w = {k: v.astype(np.float64) for k, v in weights(model).items()}
    x = zoo.random_inputs(model, seed=5)["hidden_states"]
    h = x.astype(np.float64)

    def lin(t, name):
        return t @ w[f"{name}.weight"] + w[f"{name}.bias"]

    heads = kw["heads"]
    q = _np_heads(lin(h, "attention.query"), heads)
    k = _np_heads(lin(h, "attention.key"), heads)
    v = _np_heads(lin(h, "attention.value"), heads)
    d = q.shape[-1]
    p = _np_softmax(q @ k.transpose(0, 1, 3, 2) / math.sqrt(d))
    assert p.max() > 0.5  # attention is not trivially uniform at this init_std
    a = lin(_np_merge(p @ v), "attention.output")
    h1 = _np_layer_norm(a + h, 1e-12)
    f = lin(_np_gelu(lin(h1, "intermediate.dense")), "output.dense")
    ref = _np_layer_norm(f + h1, 1e-12)
    np.testing.assert_allclose(run_ort(model, {"hidden_states": x}), ref, rtol=1e-4, atol=1e-4)


def test_llama_layer_matches_numpy_reference():
    kw = SMALL["llama_layer"]
    model = small("llama_layer")
    w = {k: v.astype(np.float64) for k, v in weights(model).items()}
    x = zoo.random_inputs(model, seed=6)["hidden_states"]
    h = x.astype(np.float64)
    heads, seq = kw["heads"], kw["seq_len"]
    d = kw["hidden"] // heads

    def rms(t, name):
        return t / np.sqrt((t**2).mean(-1, keepdims=True) + 1e-6) * w[f"{name}.weight"]

    def rope(t):
        inv = 1.0 / (10000.0 ** (np.arange(0, d, 2) / d))
        ang = np.outer(np.arange(seq), inv)
        ang = np.concatenate([ang, ang], -1)
        rot = np.concatenate([-t[..., d // 2:], t[..., : d // 2]], -1)
        return t * np.cos(ang) + rot * np.sin(ang)

    n = rms(h, "input_layernorm")
    q = rope(_np_heads(n @ w["self_attn.q_proj.weight"], heads))
    k = rope(_np_heads(n @ w["self_attn.k_proj.weight"], heads))
    v = _np_heads(n @ w["self_attn.v_proj.weight"], heads)
    s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d)
    s = np.where(np.tril(np.ones((seq, seq), bool)), s, -np.inf)
    h1 = h + _np_merge(_np_softmax(s) @ v) @ w["self_attn.o_proj.weight"]
    m = rms(h1, "post_attention_layernorm")
    gate = m @ w["mlp.gate_proj.weight"]
    up = m @ w["mlp.up_proj.weight"]
    silu = gate / (1.0 + np.exp(-gate))
    ref = h1 + (silu * up) @ w["mlp.down_proj.weight"]
    np.testing.assert_allclose(run_ort(model, {"hidden_states": x}), ref, rtol=1e-4, atol=1e-4)


def test_llama_layer_is_causal():
    model = small("llama_layer")
    x = zoo.random_inputs(model, seed=7)["hidden_states"]
    y = x.copy()
    y[:, -1] += 1.0
    ox, oy = run_ort(model, {"hidden_states": x}), run_ort(model, {"hidden_states": y})
    np.testing.assert_allclose(ox[:, :-1], oy[:, :-1], rtol=1e-5, atol=1e-6)
    assert not np.allclose(ox[:, -1], oy[:, -1])
