"""``cim -hw=<preset|file>`` and ``pim -hw=<preset|file>`` as TVM targets.

TVM 0.27 cannot register target kinds from Python and no longer parses
CLI-style target strings, but any string can be a *tag*.  Each hardware
preset is registered as the tag ``"cim -hw=<name>"`` (or ``"pim -hw=<name>"``)
of an ``llvm`` target whose keys are ``["cim", "cpu"]`` and whose ``model``
attribute names the hardware, so host code still builds with LLVM.

A user's own file (``"cim -hw=./my_chip.toml"``) is validated and registered
on first use: :class:`tvm.target.Target` is wrapped so that an unregistered
``cim``/``pim`` string is resolved before TVM parses it, and an unknown
preset fails at once with the list of known ones.

``relax.build`` runs ``relax.pipeline.PIPELINE_MAP["default"]`` inside
``with target:`` for CPU-kind targets; that entry is wrapped so that a target
whose keys contain a registered accelerator key first runs the accelerator's
offload pass, and every other target runs TVM's pipeline unchanged.
"""

from __future__ import annotations

import re
from typing import Callable

import tvm
from tvm import relax

from .hardware import loader

_TARGET_RE = re.compile(r"^\s*(cim|pim)\s+-hw=(\S+)\s*$")
_REGISTERED: set[str] = set()
# accelerator key -> factory of the offload pass run before TVM's default pipeline
_OFFLOAD: dict[str, Callable[[], tvm.transform.Pass]] = {}


def target_string(kind: str, hw: str) -> str:
    """The target string of a hardware preset or file."""
    return f"{kind} -hw={hw}"


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
        See :func:`tvm_cim.hardware.loader.load`.
    """
    tag = target_string(kind, name_or_path)
    if tag in _REGISTERED:
        return tag
    path = loader.resolve(name_or_path, kind)
    loader.load(path, kind=kind)  # validate now: errors name file and key
    model = name_or_path if name_or_path in loader.preset_files(kind) else str(path)
    tvm.target.tag.register_tag(tag, {"kind": "llvm", "keys": [kind, "cpu"], "model": model})
    _REGISTERED.add(tag)
    return tag


def hardware_of(target: tvm.target.Target):
    """The hardware description a ``cim``/``pim`` target refers to."""
    if target is None:
        raise ValueError("no target in scope; build with target='cim -hw=<preset>'")
    kind = "cim" if "cim" in target.keys else "pim" if "pim" in target.keys else None
    if kind is None:
        raise ValueError(f"target {target} is not a cim or pim target")
    return loader.load(str(target.attrs["model"]), kind=kind)


def _ensure(target) -> None:
    if isinstance(target, str):
        m = _TARGET_RE.match(target)
        if m and target not in _REGISTERED:
            register_hardware(m.group(1), m.group(2))


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


def register_offload(key: str, factory: Callable[[], tvm.transform.Pass]) -> None:
    """Run ``factory()`` before TVM's default pipeline for targets with ``key``."""
    _OFFLOAD[key] = factory


_base_default = relax.pipeline.PIPELINE_MAP["default"]


def _dispatching_default(*args, **kwargs):
    base = _base_default(*args, **kwargs)

    @tvm.transform.module_pass(opt_level=0, name="InMemoryComputingDispatch")
    def _pipeline(mod: tvm.IRModule, ctx) -> tvm.IRModule:
        target = tvm.target.Target.current(allow_none=True)
        if target is not None:
            for key, factory in _OFFLOAD.items():
                if key in target.keys:
                    mod = factory()(mod)
                    break
        return base(mod)

    return _pipeline


def install() -> None:
    """Install the target hook, the pipeline dispatch and the preset tags (idempotent)."""
    if tvm.target.Target.__init__ is not _target_init:
        tvm.target.Target.__init__ = _target_init
    if relax.pipeline.PIPELINE_MAP["default"] is not _dispatching_default:
        relax.pipeline.PIPELINE_MAP["default"] = _dispatching_default
        relax.pipeline.PIPELINE_MAP["default_build"] = _dispatching_default


def register_presets(kind: str) -> list[str]:
    """Register every preset of a kind; returns their target strings."""
    return [register_hardware(kind, name) for name in loader.known_presets(kind)]
