"""``cim -hw=<preset|file>`` and ``pim -hw=<preset|file>`` as TVM targets, and their Relax pipelines.

TVM 0.27 cannot register target kinds from Python and no longer parses
CLI-style target strings, but any string can be a *tag*.  Each hardware
preset is registered as the tag ``"cim -hw=<name>"`` (or ``"pim -hw=<name>"``)
of an ``llvm`` target whose keys are ``["cim", "cpu"]`` and whose ``model``
attribute names the hardware, so host code still builds with LLVM.

Build options may follow the hardware: ``"cim -hw=prime -max_error=0.01"``
(:data:`TARGET_OPTIONS`; they travel in the ``model`` attribute after the
hardware, :func:`options_of`); an unknown option fails with the known ones.

A user's own file (``"cim -hw=./my_chip.toml"``) is validated and registered
on first use: :class:`tvm.target.Target` is wrapped so that an unregistered
``cim``/``pim`` string is resolved before TVM parses it (TVM offers no other
hook: tags must exist before ``Target(str)`` parses them), and an unknown
preset fails at once with the list of known ones.

Pipelines.  Each backend registers its pipeline (a pass run before TVM's own)
with :func:`register_backend`, and it becomes a named Relax pipeline
(``relax.build(mod, target, relax_pipeline="cim")``, through
``relax.register_pipeline``).  TVM chooses a target-specific pipeline only
for GPU targets; for every other target ``relax.build`` runs a *named*
pipeline (``"default"`` unless told otherwise) inside ``with target:``.  So
that a plain ``relax.build(mod, target="cim -hw=prime")`` never silently
produces a CPU-only program, every named pipeline of ``relax.pipeline.PIPELINE_MAP``
is wrapped to run the backend's pipeline first when the target in scope has
the backend's key; other targets run TVM's pipelines unchanged.  A pipeline
given as a ``Pass`` object is the user's own composition and runs as given.
"""

from __future__ import annotations

import re
from typing import Callable

import tvm
from tvm import relax

from . import hardware as loader

_TARGET_RE = re.compile(r"^\s*(cim|pim)\s+-hw=(\S+)((?:\s+-\w+=\S+)*)\s*$")
_OPTION_RE = re.compile(r"-(\w+)=(\S+)")


def _nonneg_float(name: str, text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = float("nan")
    if not v >= 0:
        raise ValueError(f"target option -{name}={text}: expected a number >= 0")
    return v


# build options a target string may carry after -hw=..., per kind: name -> parser
TARGET_OPTIONS: dict[str, dict[str, Callable[[str, str], object]]] = {
    "cim": {"max_error": _nonneg_float},  # error budget of the crossbar mapping (MapCrossbars)
    "pim": {},
}
_REGISTERED: set[str] = set()
#: LLVM settings of the host code (the operators left on the CPU) per kind.  ``cim``: optimisation level 1,
#: as calibration's build (:data:`tvm_cim.compiler.quantize.CALIBRATION_TARGET`): without fast-math flags
#: LLVM keeps IEEE semantics at every level, so the host operators compute the bits of the default level 3
#: (``tests/test_passes.py`` checks both on zoo models) and their code generation takes less than half the
#: time (DenseNet-121's 190 host functions: 12 s CPU at level 3, 5 s at level 1).
HOST_LLVM: dict[str, dict] = {"cim": {"opt-level": 1}, "pim": {}}
# backend key -> factory of the pipeline run before TVM's for its targets
_BACKENDS: dict[str, Callable[[], tvm.transform.Pass]] = {}
# TVM's own named pipelines, before wrapping
_TVM_PIPELINES: dict[str, Callable] = {}


def target_string(kind: str, hw: str, **options) -> str:
    """The target string of a hardware preset or file, with build options (``-max_error=0.01``)."""
    return f"{kind} -hw={hw}" + "".join(f" -{k}={v}" for k, v in options.items() if v is not None)


def parse_options(kind: str, text: str) -> dict:
    """The build options of a target string's tail (``" -max_error=0.01"``), checked.

    Raises
    ------
    ValueError
        An option the kind does not know, or a bad value.
    """
    known = TARGET_OPTIONS[kind]
    out = {}
    for name, value in _OPTION_RE.findall(text or ""):
        if name not in known:
            raise ValueError(f"unknown option -{name} in a {kind} target; known: "
                             + (", ".join(f"-{k}" for k in known) or "none"))
        out[name] = known[name](name, value)
    return out


def register_hardware(kind: str, name_or_path: str) -> str:
    """Register ``"<kind> -hw=<name_or_path>"`` as a TVM target tag.

    Parameters
    ----------
    kind : {'cim', 'pim'}
    name_or_path : str
        A preset name or a hardware file path.

    Returns
    -------
    str
        The tag, usable with ``tvm.target.Target`` and ``relax.build``.

    Raises
    ------
    UnknownHardwareError, HardwareDescriptionError
        See :func:`tvm_cim.common.hardware.load`.
    """
    return _register(kind, name_or_path, "")


def _register(kind: str, name_or_path: str, tail: str, tag: str | None = None) -> str:
    options = parse_options(kind, tail)
    tag = tag or target_string(kind, name_or_path, **options)
    if tag in _REGISTERED:
        return tag
    path = loader.resolve(name_or_path, kind)
    loader.load(path, kind=kind)  # validate now: errors name file and key
    model = name_or_path if name_or_path in loader.preset_files(kind) else str(path)
    # the build options travel in the target's ``model`` attribute after the hardware ("prime -max_error=0.01")
    model += "".join(f" -{k}={v}" for k, v in options.items())
    config = {"kind": "llvm", "keys": [kind, "cpu"], "model": model, **HOST_LLVM.get(kind, {})}
    tvm.target.tag.register_tag(tag, config)
    _REGISTERED.add(tag)
    return tag


def hardware_of(target: tvm.target.Target):
    """The hardware description a ``cim``/``pim`` target refers to."""
    if target is None:
        raise ValueError("no target in scope; build with target='cim -hw=<preset>'")
    kind = _kind(target)
    return loader.load(str(target.attrs["model"]).split(" -", 1)[0], kind=kind)


def _kind(target) -> str:
    kind = "cim" if "cim" in target.keys else "pim" if "pim" in target.keys else None
    if kind is None:
        raise ValueError(f"target {target} is not a cim or pim target")
    return kind


def options_of(target: tvm.target.Target | None) -> dict:
    """The build options a ``cim``/``pim`` target string carries (``cim -hw=prime -max_error=0.01``);
    empty for None or a target without options."""
    if target is None or "model" not in target.attrs:
        return {}
    model = str(target.attrs["model"])
    return parse_options(_kind(target), model[len(model.split(" -", 1)[0]):])


def _ensure(target) -> None:
    if isinstance(target, str):
        m = _TARGET_RE.match(target)
        if m and target not in _REGISTERED:
            _register(m.group(1), m.group(2), m.group(3) or "", tag=target)


_orig_init = tvm.target.Target.__init__


def _target_init(self, target, host=None):
    _ensure(target)
    _ensure(host)
    _orig_init(self, target, host)


def offload_pass(name: str, kind: str, hw, offload: Callable) -> tvm.transform.Pass:
    """A module pass that runs ``offload(mod, hw)`` for a device read from the current target.

    Parameters
    ----------
    name : str
        Pass name.
    kind : {'cim', 'pim'}
    hw : hardware description, preset name, file path or None
        None reads it from ``Target.current()`` (how ``relax.build`` runs it).
    offload : callable
        ``(mod, hw) -> (mod, info)``.

    Returns
    -------
    tvm.transform.Pass
    """

    @tvm.transform.module_pass(opt_level=0, name=name)
    def _pass(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        dev = hw if hw is not None else hardware_of(tvm.target.Target.current())
        if isinstance(dev, str):
            dev = loader.load(dev, kind=kind)
        return offload(mod, dev)[0]

    return _pass


def register_backend(key: str, pipeline: Callable[[], tvm.transform.Pass]) -> None:
    """Run ``pipeline()`` before TVM's pipeline for targets with ``key``; also name it a Relax pipeline.

    Parameters
    ----------
    key : str
        The target key (``cim`` or ``pim``).
    pipeline : callable
        Returns the backend's pass (it reads the hardware from the target in scope).
    """
    _BACKENDS[key] = pipeline
    if key not in relax.pipeline.PIPELINE_MAP:

        def _named(**kwargs):
            return tvm.transform.Sequential([pipeline(), _TVM_PIPELINES["default"](**kwargs)], name=f"{key}_pipeline")

        relax.register_pipeline(key)(_named)


def _dispatching(base_factory):
    """A named pipeline that first runs the backend pipeline of the target in scope."""

    def factory(*args, **kwargs):
        base = base_factory(*args, **kwargs)

        @tvm.transform.module_pass(opt_level=0, name="InMemoryComputingDispatch")
        def _pipeline(mod: tvm.IRModule, ctx) -> tvm.IRModule:
            target = tvm.target.Target.current(allow_none=True)
            if target is not None:
                for key, backend in _BACKENDS.items():
                    if key in target.keys:
                        mod = backend()(mod)
                        break
            return base(mod)

        return _pipeline

    factory.__wrapped__ = base_factory
    return factory


def install() -> None:
    """Install the target hook and wrap TVM's named pipelines (idempotent)."""
    if tvm.target.Target.__init__ is not _target_init:
        tvm.target.Target.__init__ = _target_init
    for name, f in list(relax.pipeline.PIPELINE_MAP.items()):
        if name in _BACKENDS or getattr(f, "__wrapped__", None) is not None:
            continue
        _TVM_PIPELINES.setdefault(name, f)
        relax.pipeline.PIPELINE_MAP[name] = _dispatching(f)


def register_presets(kind: str) -> list[str]:
    """Register every preset of a kind; returns their target strings."""
    return [register_hardware(kind, name) for name in loader.known_presets(kind)]
