"""Models in: ONNX files and ``zoo:`` specs, their import into Relax, and the run's inputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import tvm
from tvm.relax.frontend.onnx import from_onnx
from tvm.relax.frontend.onnx.onnx_frontend import _get_convert_map

from . import zoo
from .cli import UserError


def parse_options(text: str, spec: str, example: str = "zoo:bert_layer?seq_len=128,hidden=768") -> dict[str, int]:
    """``k=v,k2=v2`` with integer values (zoo options, kernel sizes).

    Parameters
    ----------
    text : str
        The items.
    spec : str
        What they came from, for messages.
    example : str
        A well-formed spec shown in messages.

    Raises
    ------
    UserError
        An item is not ``key=integer``.
    """
    out = {}
    for item in filter(None, text.split(",")):
        k, eq, v = item.partition("=")
        try:
            if not eq:
                raise ValueError("expected key=value")
            out[k] = int(v)
        except ValueError as e:
            raise UserError(f"option '{item}' in '{spec}': {e} (options are integers, e.g. {example})") from None
    return out


def load_onnx(spec: str, seed: int = 0) -> onnx.ModelProto:
    """Read an ONNX model from a file, or build ``zoo:<name>[?k=v,...]`` from the zoo.

    Raises
    ------
    UserError
        Unknown zoo model or option, missing or unreadable file.
    """
    if spec.startswith("zoo:"):
        name, _, kv = spec[4:].partition("?")
        kwargs = parse_options(kv, spec)
        try:
            return zoo.build_model(name, seed=seed, **kwargs)
        except (ValueError, TypeError) as e:
            raise UserError(f"{spec}: {e}") from None
    path = Path(spec)
    if not path.is_file():
        raise UserError(f"model file '{spec}' does not exist (or use zoo:<name>, e.g. zoo:resnet18)")
    try:
        model = onnx.load(str(path))
    except Exception as e:  # protobuf DecodeError and friends
        raise UserError(f"model file '{spec}' is not a readable ONNX model: {type(e).__name__}: {e}") from None
    if not model.graph.node:
        raise UserError(f"model file '{spec}' is not a readable ONNX model: the graph has no nodes")
    return model


def without_weights(model: onnx.ModelProto) -> onnx.ModelProto:
    """The graph of an imported model without its initializers (the Relax module holds every weight).

    Its nodes, inputs and outputs still name the graph's operators and outputs.  Clearing the field of the
    model itself would free nothing (protobuf keeps a message's memory until the whole message goes); the
    caller drops the model for this copy, and a VGG-19 keeps 574 MB less for the rest of the run.
    """
    skel = onnx.ModelProto(ir_version=model.ir_version, producer_name=model.producer_name)
    skel.opset_import.extend(model.opset_import)
    skel.graph.name = model.graph.name
    inits = {i.name for i in model.graph.initializer}
    skel.graph.node.extend(model.graph.node)
    skel.graph.input.extend(i for i in model.graph.input if i.name not in inits)
    skel.graph.output.extend(model.graph.output)
    return skel


def import_onnx(model: onnx.ModelProto, spec: str):
    """ONNX -> Relax with static shapes; symbolic dimensions become 1.

    Returns
    -------
    mod : tvm.IRModule
    shapes, dtypes : dict
        Graph input name -> shape / dtype.

    Raises
    ------
    UserError
        The model uses operators TVM's ONNX frontend cannot import, or the import fails.
    """
    known = _get_convert_map()
    unsupported = sorted({n.op_type for n in model.graph.node if n.op_type not in known})
    if unsupported:
        raise UserError(
            f"model '{spec}' uses ONNX operators that TVM's ONNX frontend cannot import: "
            f"{', '.join(unsupported)}. Operators it imports but the device cannot run are "
            "executed on the host automatically; these cannot be imported at all."
        )
    inits = {i.name for i in model.graph.initializer}
    shapes, dtypes = {}, {}
    for inp in model.graph.input:
        if inp.name in inits:
            continue
        t = inp.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else 1 for d in t.shape.dim]
        shapes[inp.name] = dims
        dtypes[inp.name] = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type).name
    try:
        mod = from_onnx(model, shape_dict=shapes, dtype_dict=dtypes)
    except Exception as e:
        raise UserError(f"model '{spec}' could not be imported: {type(e).__name__}: {e}") from None
    return mod, shapes, dtypes


def host_onnx_ops(model: onnx.ModelProto, offloadable: dict[str, tuple[str, ...]],
                  host_ops: dict | None = None) -> list[str]:
    """ONNX operator types that run on the host.

    Parameters
    ----------
    model : onnx.ModelProto
    offloadable : dict
        ONNX operator type -> the Relax operators it becomes, for the types
        the device can run (``BatchNormalization`` folded into convolutions
        counts as offloadable).
    host_ops : dict, optional
        The Relax operators the build left on the host.  Without it, every
        type not in ``offloadable`` is listed; with it, an offloadable type is
        listed when some of its Relax operators stayed on the host.

    Returns
    -------
    list of str
    """
    types = {n.op_type for n in model.graph.node}
    if host_ops is None:
        return sorted(t for t in types if t not in offloadable)
    left = set(host_ops)
    return sorted(t for t in types if t not in offloadable or any(r in left for r in offloadable[t]))


def model_inputs(path: str | None, shapes: dict, dtypes: dict, seed: int) -> dict[str, np.ndarray]:
    """The graph inputs of a run: from an ``.npz`` keyed by input name, or seeded random normals.

    Raises
    ------
    UserError
        The file is unreadable, lacks an input or has one of the wrong shape.
    """
    if not path:
        rng = np.random.default_rng(seed)
        return {k: rng.standard_normal(shapes[k]).astype(dtypes[k]) for k in shapes}
    try:
        data = dict(np.load(path))
    except Exception as e:
        raise UserError(f"inputs file '{path}' is not a readable .npz: {e}") from None
    missing = sorted(set(shapes) - set(data))
    if missing:
        raise UserError(f"inputs file '{path}' lacks {missing}; the model's inputs are {sorted(shapes)}")
    inputs = {}
    for k in shapes:
        a = np.asarray(data[k], dtype=dtypes[k])
        if list(a.shape) != list(shapes[k]):
            raise UserError(f"input '{k}' has shape {list(a.shape)}, the model expects {shapes[k]}")
        inputs[k] = a
    return inputs


def outputs_list(res) -> list[np.ndarray]:
    """The numpy arrays of a VM result (a tensor or nested tuples of them), flattened."""
    if isinstance(res, tvm.runtime.Tensor):
        return [res.numpy()]
    out = []
    for r in res:
        out += outputs_list(r)
    return out
