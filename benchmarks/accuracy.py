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

    python benchmarks/accuracy.py [--quick] [--json out.json] [--plots DIR]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="100 test images, fewer epochs, mlp only")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--epochs", type=int, default=None)
    ap.add_argument("--hw", nargs="*", default=None, help="presets (default: every CIM preset)")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--plots", help="write accuracy.png here (a directory)")
    args = ap.parse_args()
    presets = args.hw or tvm_cim.known_presets("cim")
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
