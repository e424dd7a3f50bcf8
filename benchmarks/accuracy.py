"""Classification accuracy on real data: float, int8 and CIM (every preset), with and without the error budget.

The data set is scikit-learn's handwritten digits (1797 8x8 images, 10
classes, shipped inside the package: no download).  Two networks are trained
here in numpy with a seed (plain SGD with momentum, cross-entropy):

* ``mlp``: 64 -> 64 (ReLU) -> 10;
* ``cnn``: Conv 3x3 1->16 stride 2 (ReLU) -> 256 -> 64 (ReLU) -> 10.

Each is exported to ONNX (inputs standardised, so the first layer sees
signed activations), then evaluated on the held-out test images:

* float: TVM's ``llvm`` build of the ONNX model;
* int8: the CIM pipeline on the preset with its ADC made lossless (exact int8
  arithmetic on the crossbars; the same for every preset, since all quantise
  to int8);
* CIM: compiled for every CIM preset and simulated bit-accurately, with the
  default error budget and unconstrained (``max_error = 1``: the fastest
  mapping of every layer), with the simulated latency of both.

Calibration uses a batch of training images.  The whole test set runs as one
batch (one simulator run per build).

``--zoo`` measures instead cosine against the float reference (TVM's ``llvm``
build, seeded random inputs and weights) of CNNs on every CIM preset with the
default error budget, and the simulated latency cost of the chosen mappings
against the unconstrained ones (``max_error = 1``, timed without values):
AlexNet, ZFNet, VGG-19 and ResNet-18 from the zoo at ``--image`` pixels
(default 64: 224 takes minutes per build on the bit-accurate simulator), and
one ONNX model from outside the zoo, built here with ``onnx.helper``: an
NHWC-input mobile-style CNN (Transpose to NCHW, Conv + BatchNormalization +
Clip (ReLU6), a depthwise convolution, a residual Add, GlobalAveragePool,
MatMul + Add head).

    python benchmarks/accuracy.py [--quick] [--json out.json] [--plots DIR]
    python benchmarks/accuracy.py --zoo [--image 64] [--quick] [--json out.json] [--plots DIR]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import tvm  # noqa: E402
from tvm import relax  # noqa: E402

import tvm_cim  # noqa: E402
from tvm_cim.common.layout import im2col  # noqa: E402
from tvm_cim.common.onnx_io import import_onnx  # noqa: E402
from tvm_cim.common.zoo import MODELS  # noqa: E402
from tvm_cim.evaluate import evaluate as evaluate_spec  # noqa: E402


# ---------------------------------------------------------------------------- data and training
def load_digits(seed: int, n_test: int | None):
    """Standardised digits split into train / test (seeded shuffle)."""
    from sklearn.datasets import load_digits as _load

    d = _load()
    x = d.images.astype(np.float32)[:, None]  # (N, 1, 8, 8), values 0..16
    y = d.target.astype(np.int64)
    idx = np.random.default_rng(seed).permutation(len(x))
    x, y = x[idx], y[idx]
    split = int(0.7 * len(x))
    mean, std = x[:split].mean(), x[:split].std()
    x = (x - mean) / std
    xt, yt = x[split:], y[split:]
    if n_test:
        xt, yt = xt[:n_test], yt[:n_test]
    return x[:split], y[:split], xt, yt


def _he(rng, shape, fan_in):
    return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)


def init(kind: str, rng) -> dict:
    if kind == "mlp":
        return {"w1": _he(rng, (64, 64), 64), "b1": np.zeros(64, np.float32),
                "w2": _he(rng, (64, 10), 64), "b2": np.zeros(10, np.float32)}
    return {"k": _he(rng, (16, 1, 3, 3), 9), "kb": np.zeros(16, np.float32),
            "w1": _he(rng, (256, 64), 256), "b1": np.zeros(64, np.float32),
            "w2": _he(rng, (64, 10), 64), "b2": np.zeros(10, np.float32)}


def forward(kind: str, p: dict, x: np.ndarray, grads: bool = False):
    """Logits (and what the backward pass needs)."""
    n = len(x)
    cache = {}
    if kind == "mlp":
        h0 = x.reshape(n, 64)
    else:
        cols = im2col(x, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 0)  # (n*16, 9)
        c = cols @ p["k"].reshape(16, 9).T + p["kb"]  # (n*16, 16) rows (n, oh, ow)
        a = np.maximum(c, 0)
        h0 = a.reshape(n, 4, 4, 16).transpose(0, 3, 1, 2).reshape(n, 256)  # NCHW flatten
        cache.update(cols=cols, c=c)
    z1 = h0 @ p["w1"] + p["b1"]
    h1 = np.maximum(z1, 0)
    out = h1 @ p["w2"] + p["b2"]
    cache.update(h0=h0, z1=z1, h1=h1)
    return (out, cache) if grads else out


def train(kind: str, x, y, seed: int, epochs: int) -> dict:
    """Minibatch SGD with momentum on cross-entropy; seeded."""
    rng = np.random.default_rng(seed)
    p = init(kind, rng)
    vel = {k: np.zeros_like(v) for k, v in p.items()}
    lr, mom, bs = 0.05, 0.9, 32
    for _ in tqdm(range(epochs), desc=f"train {kind}", leave=False):
        order = rng.permutation(len(x))
        for i in range(0, len(x), bs):
            xb, yb = x[order[i:i + bs]], y[order[i:i + bs]]
            n = len(xb)
            logits, c = forward(kind, p, xb, grads=True)
            prob = np.exp(logits - logits.max(axis=1, keepdims=True))
            prob /= prob.sum(axis=1, keepdims=True)
            d = prob
            d[np.arange(n), yb] -= 1
            d /= n
            g = {"w2": c["h1"].T @ d, "b2": d.sum(0)}
            dh1 = (d @ p["w2"].T) * (c["z1"] > 0)
            g["w1"], g["b1"] = c["h0"].T @ dh1, dh1.sum(0)
            if kind == "cnn":
                dh0 = dh1 @ p["w1"].T  # (n, 256) NCHW
                dc = dh0.reshape(n, 16, 4, 4).transpose(0, 2, 3, 1).reshape(n * 16, 16) * (c["c"] > 0)
                g["k"] = (dc.T @ c["cols"]).reshape(16, 1, 3, 3)
                g["kb"] = dc.sum(0)
            for k in p:
                vel[k] = mom * vel[k] - lr * g[k].astype(np.float32)
                p[k] = p[k] + vel[k]
    return p


def to_onnx(kind: str, p: dict, batch: int) -> onnx.ModelProto:
    """The trained network as an ONNX graph (Conv / Relu / Flatten / Gemm)."""
    inits = [numpy_helper.from_array(p["w1"].T.copy(), "w1"), numpy_helper.from_array(p["b1"], "b1"),
             numpy_helper.from_array(p["w2"].T.copy(), "w2"), numpy_helper.from_array(p["b2"], "b2")]
    nodes = []
    src = "x"
    if kind == "cnn":
        inits += [numpy_helper.from_array(p["k"], "k"), numpy_helper.from_array(p["kb"], "kb")]
        nodes += [helper.make_node("Conv", ["x", "k", "kb"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
                  helper.make_node("Relu", ["c"], ["a"])]
        src = "a"
    nodes += [helper.make_node("Flatten", [src], ["f"]),
              helper.make_node("Gemm", ["f", "w1", "b1"], ["z1"], transB=1),
              helper.make_node("Relu", ["z1"], ["h1"]),
              helper.make_node("Gemm", ["h1", "w2", "b2"], ["logits"], transB=1)]
    graph = helper.make_graph(nodes, f"digits_{kind}",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 1, 8, 8])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    return model


# ---------------------------------------------------------------------------- evaluation
def run(ex, x) -> np.ndarray:
    return relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()


def cim_eval(mod, hw, x, calib, max_error, strategy="cim-mlc"):
    """Logits and simulated latency of one build."""
    with tvm_cim.calibration(inputs=[{"x": calib}]), tvm_cim.accuracy_budget(max_error), \
            tvm_cim.scheduling(strategy):
        lowered, info = tvm_cim.offload(mod, hw)
    ex = relax.build(lowered, target="llvm")
    tvm_cim.runtime.reset()
    with tvm_cim.runtime.collect() as stats:
        logits = run(ex, x)
    from tvm_cim import report

    rep = report.build_report(info, stats, hw.name)
    return logits, rep


def evaluate(kind, p, xtr, xt, yt, presets) -> dict:
    batch = len(xt)
    model = to_onnx(kind, p, batch)
    mod = import_onnx(model, kind)[0]
    calib = xtr[:batch] if len(xtr) >= batch else np.resize(xtr, (batch,) + xtr.shape[1:])
    ref = run(relax.build(mod, target="llvm"), xt)
    out = {"float": float((ref.argmax(1) == yt).mean()),
           "numpy_float": float((forward(kind, p, xt).argmax(1) == yt).mean())}
    base = tvm_cim.load(presets[0])
    lossless = dataclasses.replace(base, crossbar=dataclasses.replace(base.crossbar, adc_bits=24, adc_mode="clip"))
    logits, _ = cim_eval(mod, lossless, xt, calib, None)
    out["int8"] = float((logits.argmax(1) == yt).mean())
    out["presets"] = {}
    for name in tqdm(presets, desc=f"{kind}: presets", leave=False):
        hw = tvm_cim.load(name)
        row = {}
        for label, me in (("budget", None), ("unconstrained", 1.0)):
            logits, rep = cim_eval(mod, hw, xt, calib, me)
            acc = rep["accuracy"]
            row[label] = {"accuracy": float((logits.argmax(1) == yt).mean()),
                          "cosine": tvm_cim.common.report.compare([logits], [ref])["cosine"],
                          "latency_ns": rep["latency_ns"],
                          "predicted_error": acc.get("predicted_error"),
                          "layers_changed": acc.get("layers_changed", 0)}
        out["presets"][name] = row
    return out


# ---------------------------------------------------------------------------- zoo and ONNX CNNs: cosine
ZOO_MODELS = ("alexnet", "zfnet", "vgg19", "resnet18")


def nhwc_cnn(seed: int, image: int, channels: int = 32, classes: int = 100) -> onnx.ModelProto:
    """A mobile-style CNN with an NHWC input, built with ``onnx.helper`` (not from the zoo), seeded weights.

    Transpose (NHWC -> NCHW), Conv 3x3/2 + BatchNormalization + Clip(0, 6), depthwise Conv 3x3 + BN +
    Clip, pointwise Conv + BN, residual Add with the block input, Relu, Conv 3x3/2 + Relu,
    GlobalAveragePool, Flatten, MatMul + Add.
    """
    rng = np.random.default_rng(seed)
    c = channels
    inits, nodes = [], []

    def const(name, a):
        inits.append(numpy_helper.from_array(np.asarray(a, dtype=np.float32), name))
        return name

    def conv_bn(src, dst, cin, cout, k, stride, group=1, bn=True):
        w = rng.standard_normal((cout, cin // group, k, k)) * np.sqrt(2.0 / (cin // group * k * k))
        out = dst + "_c" if bn else dst
        nodes.append(helper.make_node("Conv", [src, const(dst + "_w", w)], [out], pads=[k // 2] * 4,
                                      strides=[stride, stride], group=group))
        if bn:
            nodes.append(helper.make_node(
                "BatchNormalization",
                [out, const(dst + "_g", 1 + 0.1 * rng.standard_normal(cout)), const(dst + "_b", 0.1 * rng.standard_normal(cout)),
                 const(dst + "_m", 0.1 * rng.standard_normal(cout)), const(dst + "_v", 1 + 0.1 * rng.random(cout))],
                [dst], epsilon=1e-5))
        return dst

    relu6 = [const("lo", 0.0), const("hi", 6.0)]
    nodes.append(helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 3, 1, 2]))
    conv_bn("xt", "s", 3, c, 3, 2)
    nodes.append(helper.make_node("Clip", ["s", *relu6], ["s6"]))
    conv_bn("s6", "dw", c, c, 3, 1, group=c)
    nodes.append(helper.make_node("Clip", ["dw", *relu6], ["dw6"]))
    conv_bn("dw6", "pw", c, c, 1, 1)
    nodes.append(helper.make_node("Add", ["pw", "s6"], ["res"]))
    nodes.append(helper.make_node("Relu", ["res"], ["r"]))
    conv_bn("r", "c2", c, 2 * c, 3, 2, bn=False)
    nodes.append(helper.make_node("Relu", ["c2"], ["c2r"]))
    nodes.append(helper.make_node("GlobalAveragePool", ["c2r"], ["gap"]))
    nodes.append(helper.make_node("Flatten", ["gap"], ["f"]))
    w = rng.standard_normal((2 * c, classes)) / np.sqrt(2 * c)
    nodes.append(helper.make_node("MatMul", ["f", const("fc_w", w)], ["fc"]))
    nodes.append(helper.make_node("Add", ["fc", const("fc_b", 0.1 * rng.standard_normal(classes))], ["y"]))
    graph = helper.make_graph(nodes, "nhwc_cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, image, image, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, classes])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    return model


def zoo_table(presets: list[str], image: int, seed: int, quick: bool, names: list[str] | None = None,
              outside: bool = True, json_path: str | None = None) -> dict:
    """Cosine with the default budget and the latency cost against the fastest mappings, model x preset.

    Parameters
    ----------
    presets : list of str
        CIM presets.
    image : int
        Input size in pixels.
    seed : int
        Seed of weights, inputs and calibration.
    quick : bool
        ResNet-18 only.
    names : list of str, optional
        Zoo models (default: ``ZOO_MODELS``, or ResNet-18 with ``quick``).
    outside : bool
        Also the NHWC ``onnx.helper`` CNN.
    json_path : str, optional
        Rewritten after every model, so a run that is stopped keeps what it measured.
    """
    tmp = Path(tempfile.mkdtemp(prefix="cim-accuracy-"))
    ext = tmp / "nhwc_cnn.onnx"
    onnx.save(nhwc_cnn(seed, image), ext)
    if names is None:
        names = ["resnet18"] if quick else list(ZOO_MODELS)
    models = {f"{m}@{image}": f"zoo:{m}?image_size={image}" for m in names}
    if outside:
        models[f"nhwc_cnn@{image} (onnx.helper)"] = str(ext)
    out = {"image_size": image, "seed": seed, "models": {}}
    for label, spec in models.items():
        rows = out["models"][label] = {}
        for hw in tqdm(presets, desc=label, leave=False):
            rep, _, _ = evaluate_spec(spec, hw, "cim-mlc", seed=seed)
            fast, _, _ = evaluate_spec(spec, hw, "cim-mlc", seed=seed, max_error=1.0, timing_only=True)
            acc = rep.get("accuracy", {})
            rows[hw] = {"cosine": rep["cosine"], "latency_ns": rep["latency_ns"],
                        "latency_ns_fastest": fast["latency_ns"],
                        "cost": rep["latency_ns"] / fast["latency_ns"],
                        "estimate_cost": acc.get("latency_cost", 1.0),
                        "layers_changed": acc.get("layers_changed", 0),
                        "predicted_error": acc.get("predicted_error"),
                        "encodings": encodings_chosen(rep),
                        "compile_s": rep["timing_s"]["compile"]}
        if json_path:
            Path(json_path).write_text(json.dumps(out, indent=2))
    return out


def encodings_chosen(rep: dict) -> dict:
    """How many layers use each encoding other than the chip's defaults (from the report's per-region mapping)."""
    out: dict = {}
    for reg in rep["regions"]:
        text = (reg.get("mapping") or {}).get("mapping", "")
        for part in text.split(", "):
            if part.endswith((" weights", " inputs")):
                out[part] = out.get(part, 0) + 1
    return out


def print_zoo(res: dict) -> None:
    print(f"cosine against the float reference (default budget, seed {res['seed']}, {res['image_size']}x"
          f"{res['image_size']} inputs) and simulated latency against the fastest mappings")
    print(f"  {'model':28s} {'preset':11s} {'cosine':>8s} {'latency':>11s} {'fastest':>11s} {'cost':>6s} "
          f"{'layers':>6s} {'compile':>8s}  encodings other than the chip's defaults")
    for label, rows in res["models"].items():
        for hw, r in rows.items():
            print(f"  {label:28s} {hw:11s} {r['cosine']:8.5f} {r['latency_ns'] / 1e3:9.1f}us "
                  f"{r['latency_ns_fastest'] / 1e3:9.1f}us {r['cost']:6.3f} {r['layers_changed']:6d} "
                  f"{r['compile_s']:7.1f}s  " + ", ".join(f"{k} x{v}" for k, v in r["encodings"].items()))


def plot_zoo(res: dict, where: str) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 4))
    ax1, ax2 = fig.subplots(1, 2)
    labels = list(res["models"])
    presets = list(next(iter(res["models"].values())))
    width = 0.8 / len(labels)
    xs = np.arange(len(presets))
    for i, label in enumerate(labels):
        rows = res["models"][label]
        ax1.bar(xs + i * width, [rows[p]["cosine"] for p in presets], width, label=label)
        ax2.bar(xs + i * width, [rows[p]["cost"] for p in presets], width, label=label)
    ax1.axhline(0.99, color="k", ls="--")
    ax1.set_ylim(0.98, 1.0)
    ax1.set_ylabel("cosine vs float (default budget)")
    ax2.set_ylabel("latency / fastest mapping")
    for ax in (ax1, ax2):
        ax.set_xticks(xs + 0.4 - width / 2, presets)
    ax1.legend(fontsize=7)
    Path(where).mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(Path(where) / "accuracy_zoo.png", dpi=120)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="100 test images, fewer epochs, mlp only")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--epochs", type=int, default=None)
    ap.add_argument("--hw", nargs="*", default=None, help="presets (default: every CIM preset)")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--plots", help="write accuracy.png here (a directory)")
    ap.add_argument("--zoo", action="store_true", help="cosine of zoo CNNs and an outside ONNX model per preset")
    ap.add_argument("--image", type=int, default=None, help="--zoo: input size (default 64, quick 32)")
    ap.add_argument("--models", nargs="*", default=None,
                    help=f"--zoo: zoo models (default: {' '.join(ZOO_MODELS)}), 'none' for the outside ONNX model only")
    ap.add_argument("--no-outside", action="store_true", help="--zoo: leave out the NHWC onnx.helper CNN")
    args = ap.parse_args()
    presets = args.hw or tvm_cim.known_presets("cim")
    if args.zoo:
        names = [m for m in args.models if m != "none"] if args.models else None
        unknown = sorted(set(names or ()) - set(MODELS)) if names else []
        if unknown:
            ap.error(f"unknown zoo model(s) {', '.join(unknown)}; known: {', '.join(sorted(MODELS))}")
        if args.models == ["none"] and args.no_outside:
            ap.error("--models none with --no-outside leaves nothing to measure")
        res = zoo_table(presets, args.image or (32 if args.quick else 64), args.seed, args.quick,
                        names=names if args.models != ["none"] else [], outside=not args.no_outside,
                        json_path=args.json)
        print_zoo(res)
        if args.plots:
            plot_zoo(res, args.plots)
        return 0
    xtr, ytr, xt, yt = load_digits(args.seed, 100 if args.quick else None)
    epochs = args.epochs or (3 if args.quick else 30)
    kinds = ["mlp"] if args.quick else ["mlp", "cnn"]
    res = {"dataset": f"sklearn digits: {len(xtr)} train / {len(xt)} test images, seed {args.seed}",
           "epochs": epochs, "models": {}}
    for kind in kinds:
        p = train(kind, xtr, ytr, args.seed, epochs)
        res["models"][kind] = evaluate(kind, p, xtr, xt, yt, presets)
    print(res["dataset"])
    for kind, r in res["models"].items():
        print(f"\n{kind}: float {100 * r['float']:.2f}%   int8 {100 * r['int8']:.2f}%")
        print(f"  {'preset':11s} {'acc budget':>10s} {'acc fastest':>11s} {'cos budget':>10s} {'cos fastest':>11s} "
              f"{'lat budget':>11s} {'lat fastest':>11s} {'cost':>6s} {'layers':>6s}")
        for name, row in r["presets"].items():
            b, u = row["budget"], row["unconstrained"]
            print(f"  {name:11s} {100 * b['accuracy']:9.2f}% {100 * u['accuracy']:10.2f}% {b['cosine']:10.5f} "
                  f"{u['cosine']:11.5f} {b['latency_ns'] / 1e3:9.2f}us {u['latency_ns'] / 1e3:9.2f}us "
                  f"{b['latency_ns'] / u['latency_ns']:6.2f} {b['layers_changed']:6d}")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))
    if args.plots:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, len(res["models"]), figsize=(6 * len(res["models"]), 4), squeeze=False)
        for ax, (kind, r) in zip(axes[0], res["models"].items()):
            names = list(r["presets"])
            xs = np.arange(len(names))
            ax.bar(xs - 0.2, [100 * r["presets"][n]["budget"]["accuracy"] for n in names], 0.4, label="default budget")
            ax.bar(xs + 0.2, [100 * r["presets"][n]["unconstrained"]["accuracy"] for n in names], 0.4,
                   label="fastest mapping")
            ax.axhline(100 * r["float"], color="k", ls="--", label="float")
            ax.axhline(100 * r["int8"], color="g", ls=":", label="int8")
            ax.set_xticks(xs, names)
            ax.set_ylabel("test accuracy (%)")
            ax.set_title(f"digits {kind}")
            ax.legend(fontsize=8)
        Path(args.plots).mkdir(parents=True, exist_ok=True)
        fig.tight_layout()
        fig.savefig(Path(args.plots) / "accuracy.png", dpi=120)
    return 0


if __name__ == "__main__":
    sys.exit(main())
