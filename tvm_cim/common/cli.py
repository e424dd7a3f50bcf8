"""Command-line plumbing shared by ``python -m tvm_cim`` and ``python -m tvm_pim``.

Exit codes: 0 success, 2 bad input (:class:`UserError`: unknown hardware,
malformed hardware file, unreadable model, unsupported model or option),
1 internal error.
"""

from __future__ import annotations

import argparse
import sys

from . import hardware


class UserError(Exception):
    """Bad input: reported as one clear message with exit code 2."""


def load_hardware(name_or_path: str, kind: str):
    """A hardware description, with unknown names and malformed files turned into :class:`UserError`."""
    try:
        return hardware.load(name_or_path, kind=kind)
    except (hardware.UnknownHardwareError, hardware.HardwareDescriptionError) as e:
        raise UserError(str(e)) from None


def add_run_io(p: argparse.ArgumentParser) -> None:
    """The input/output options every ``run`` sub-command has."""
    p.add_argument("--report", help="write the JSON report here")
    p.add_argument("--inputs", help=".npz of inputs keyed by graph input name (default: seeded random)")
    p.add_argument("--outputs", help="save outputs to this .npz, keyed by graph output name")
    p.add_argument("--seed", type=int, default=0, help="seed of random inputs, zoo weights and calibration")


def add_run_command(sub, default_hw: str, model_help: str, emit_help: str) -> argparse.ArgumentParser:
    """The ``run`` sub-command every backend has: a model, ``--hw``, the I/O options and ``--emit``.

    Parameters
    ----------
    sub : argparse._SubParsersAction
        The sub-commands of the backend's parser.
    default_hw : str
        The preset ``--hw`` defaults to.
    model_help, emit_help : str
        What the model argument accepts, and what ``--emit`` writes.

    Returns
    -------
    argparse.ArgumentParser
        The sub-command's parser, for the backend's own options.
    """
    r = sub.add_parser("run", help="compile, simulate and report a model")
    r.add_argument("model", help=model_help)
    r.add_argument("--hw", default=default_hw, help=f"hardware preset name or .toml file (default: {default_hw})")
    add_run_io(r)
    r.add_argument("--emit", help=emit_help)
    return r


def dispatch(parser: argparse.ArgumentParser, argv: list[str] | None) -> int:
    """Parse ``argv`` and run the chosen sub-command; :class:`UserError` exits 2 with one message."""
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
