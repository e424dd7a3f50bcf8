"""Design-space sweeps on Ray: a grid of points, each one compile + simulation, cached, tabulated, plotted.

A sweep is a grid over named axes (``model``, ``hw``, ``strategy``, a
backend's own options, and hardware keys such as ``crossbar.rows`` or
``chip.cores``).  Every point runs as a Ray task in a fresh worker process
(``max_calls=1``), so a worker holds one model at a time and nothing it
caches outlives the point; a local Ray starts by itself, and
``address`` (or ``$RAY_ADDRESS``) runs the same sweep on a Ray cluster.

Results are cached, one JSON file per point, under a key that hashes the
point's model (spec, or file contents), its hardware description (after the
overrides), its options and the project's version (package version plus a
digest of the sources), so a re-run computes only new points.  A point that
fails is recorded with its error while the others finish.  The table
(:func:`write_table`, CSV, one row per point: the swept values, then every
figure) and the plots (:func:`plot`) are the same for both backends.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import importlib
import importlib.metadata
import importlib.util
import itertools
import json
import os
import time
import traceback
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from tqdm import tqdm

from . import hardware
from .cli import UserError
from .report import pareto

SOURCES = ("tvm_cim", "tvm_pim")
RESERVED = ("model", "hw", "strategy")


# ============================================================================ the grid
def parse_axis(text: str) -> tuple[str, list]:
    """``name=v1,v2,...`` -> ``(name, [values])``; numbers become int or float.

    Raises
    ------
    UserError
        Not of the form ``name=values``.
    """
    name, eq, vals = text.partition("=")
    if not eq or not name or not vals:
        raise UserError(f"sweep axis '{text}': expected name=value1,value2,... (e.g. crossbar.rows=64,128,256)")
    out = []
    for v in vals.split(","):
        try:
            out.append(int(v))
        except ValueError:
            try:
                out.append(float(v))
            except ValueError:
                out.append(v)
    return name.strip(), out


def grid(axes: dict[str, list]) -> list[dict]:
    """Every combination of the axes' values, in order (the last axis varies fastest)."""
    names = list(axes)
    return [dict(zip(names, combo)) for combo in itertools.product(*(axes[n] for n in names))]


def with_overrides(hw, overrides: dict):
    """A hardware description with dotted keys set (``{"crossbar.rows": 64}``), validated again.

    Raises
    ------
    UserError
        An unknown key or a value the schema rejects (the message names the key).
    """
    if not overrides:
        return hw
    data = hardware.to_dict(hw)
    for dotted, value in overrides.items():
        node = data
        *parents, leaf = dotted.split(".")
        for p in parents:
            if not isinstance(node.get(p), dict):
                raise UserError(f"sweep axis '{dotted}': '{p}' is not a table of {hw.name}'s description")
            node = node[p]
        if leaf not in node:
            raise UserError(f"sweep axis '{dotted}': {hw.name}'s description has no key '{leaf}' there "
                            f"(keys: {', '.join(sorted(node))})")
        node[leaf] = value
    try:
        return hardware.parse(data, f"{hw.name} with {', '.join(f'{k}={v}' for k, v in overrides.items())}")
    except hardware.HardwareDescriptionError as e:
        raise UserError(str(e)) from None


@dataclasses.dataclass
class Point:
    """One point of a sweep: its swept values, split into model, hardware, hardware keys and options."""

    values: dict

    @property
    def model(self) -> str:
        return str(self.values["model"])

    @property
    def hw(self) -> str:
        return str(self.values["hw"])

    @property
    def hw_overrides(self) -> dict:
        return {k: v for k, v in self.values.items() if "." in k}

    @property
    def options(self) -> dict:
        return {k: v for k, v in self.values.items() if "." not in k and k not in ("model", "hw")}


def project_version() -> str:
    """The package version plus a digest of the sources: any change of the code gives a new version."""
    h = hashlib.sha256()
    for pkg in SOURCES:
        spec = importlib.util.find_spec(pkg)
        if spec is None or not spec.submodule_search_locations:
            continue
        root = Path(list(spec.submodule_search_locations)[0])
        for p in sorted(root.rglob("*.py")):
            h.update(str(p.relative_to(root)).encode())
            h.update(p.read_bytes())
    return f"{importlib.metadata.version('tvm-cim')}+{h.hexdigest()[:10]}"


def _model_digest(spec: str) -> str:
    p = Path(spec)
    if not spec.startswith("zoo:") and p.is_file():
        return hashlib.sha256(p.read_bytes()).hexdigest()[:16]
    return spec


def point_key(point: Point, kind: str, version: str) -> str:
    """The cache key of a point: its model, its hardware (after overrides), its options and the version."""
    hw = with_overrides(hardware.load(point.hw, kind=kind), point.hw_overrides)
    payload = json.dumps({"model": _model_digest(point.model), "hw": hardware.digest(hw),
                          "options": point.options, "version": version}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:20]


# ============================================================================ running
def _evaluate_remote(evaluate: str, values: dict) -> dict:
    """Run one point in the worker: ``evaluate`` is ``module:function`` taking a :class:`Point`."""
    module, _, fn = evaluate.partition(":")
    t0 = time.perf_counter()
    try:
        row = getattr(importlib.import_module(module), fn)(Point(values))
        row["error"] = ""
    except Exception as e:  # a failed point is recorded, the sweep goes on
        row = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc(limit=5)}
    row["wall_s"] = time.perf_counter() - t0
    return row


def run(points: list[Point], evaluate: str, kind: str, cache_dir: str | Path, address: str | None = None,
        progress: bool = True, num_cpus: int | None = None) -> list[dict]:
    """Evaluate every point on Ray (cached points are read back, not recomputed).

    Parameters
    ----------
    points : list of Point
    evaluate : str
        ``module:function`` that evaluates one point in a worker and returns a flat dict of figures.
    kind : {'cim', 'pim'}
        Hardware kind of the points' ``hw`` values.
    cache_dir : str or Path
        One JSON file per computed point.
    address : str, optional
        A Ray cluster (``ray://host:10001`` or ``auto``); default ``$RAY_ADDRESS``, else a local Ray.
    progress : bool
        Show a tqdm bar.
    num_cpus : int, optional
        CPUs of the local Ray (default: the machine's).

    Returns
    -------
    list of dict
        One row per point, in the grid's order: the swept values, ``cached``, ``error`` and the figures.
    """
    try:
        import ray  # optional dependency (extra "sweep"): only a sweep needs it, and it is slow to import
    except ImportError:
        raise UserError("sweeps run on Ray: pip install 'tvm-cim[sweep]' (or pip install ray)") from None

    cache = Path(cache_dir)
    cache.mkdir(parents=True, exist_ok=True)
    version = project_version()
    keys = [point_key(p, kind, version) for p in points]
    rows: list[dict | None] = [None] * len(points)
    todo = []
    for i, (p, k) in enumerate(zip(points, keys)):
        f = cache / f"{k}.json"
        if f.is_file():
            rows[i] = {**p.values, **json.loads(f.read_text()), "cached": True}
        else:
            todo.append(i)
    if todo:
        address = address or os.environ.get("RAY_ADDRESS")
        if not ray.is_initialized():
            kw = {"address": address} if address else {"num_cpus": num_cpus, "include_dashboard": False}
            ray.init(log_to_driver=False, ignore_reinit_error=True, **kw)
        task = ray.remote(max_calls=1, num_cpus=1)(_evaluate_remote)
        pending = {task.remote(evaluate, points[i].values): i for i in todo}
        bar = tqdm(total=len(pending), desc="sweep points", disable=not progress)
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                i = pending.pop(ref)
                try:
                    row = ray.get(ref)
                except Exception as e:  # the worker itself died (out of memory, ...)
                    row = {"error": f"{type(e).__name__}: {e}"}
                if not row.get("error"):
                    (cache / f"{keys[i]}.json").write_text(json.dumps(row, default=float))
                rows[i] = {**points[i].values, **row, "cached": False}
                bar.update(1)
        bar.close()
    return [r for r in rows if r is not None]


# ============================================================================ output
def write_table(rows: list[dict], path: str | Path, swept: list[str]) -> Path:
    """One CSV row per point: the swept values first, then every figure (nested values as JSON)."""
    cols = list(swept) + ["error", "cached"]
    for r in rows:
        cols += [k for k in r if k not in cols and k != "traceback"]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: json.dumps(v) if isinstance(v, (dict, list)) else v for k, v in r.items()})
    return path


def plot(rows: list[dict], out_dir: str | Path, swept: list[str], latency: str = "latency_ns",
         energy: str = "energy_pj", baseline: str | None = None) -> list[str]:
    """Latency and energy per point, the latency-energy Pareto front and speedup bars per strategy.

    Returns
    -------
    list of str
        The PNG files written.
    """
    ok = [r for r in rows if not r.get("error") and r.get(latency) is not None]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = []
    if not ok:
        return files

    def label(r):
        return ", ".join(f"{r[k]}" for k in swept if k in r)

    lat = np.array([float(r[latency]) for r in ok])
    en = np.array([float(r.get(energy, np.nan)) for r in ok])
    fig = Figure(figsize=(max(6, 0.35 * len(ok)), 6))
    axs = fig.subplots(2, 1, sharex=True)
    axs[0].bar(range(len(ok)), lat * 1e-6)
    axs[0].set_ylabel("latency (ms)")
    axs[1].bar(range(len(ok)), en * 1e-9, color="tab:orange")
    axs[1].set_ylabel("energy (mJ)")
    axs[1].set_xticks(range(len(ok)), [label(r) for r in ok], rotation=80, fontsize=7)
    fig.tight_layout()
    files.append(str(out / "sweep_points.png"))
    fig.savefig(files[-1], dpi=120)
    fig = Figure(figsize=(6, 4.5))
    ax = fig.subplots()
    ax.scatter(lat * 1e-6, en * 1e-9, s=14, alpha=0.6)
    valid = np.isfinite(en)
    if valid.any():
        idx = np.flatnonzero(valid)[pareto(np.stack([lat[valid], en[valid]], axis=1))]
        ax.plot(lat[idx] * 1e-6, en[idx] * 1e-9, "r-o", ms=4, label="Pareto front")
        for i in idx:
            ax.annotate(label(ok[i]), (lat[i] * 1e-6, en[i] * 1e-9), fontsize=6)
        ax.legend()
    ax.set_xlabel("latency (ms)")
    ax.set_ylabel("energy (mJ)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    fig.tight_layout()
    files.append(str(out / "sweep_pareto.png"))
    fig.savefig(files[-1], dpi=120)
    if "strategy" in swept and len({r["strategy"] for r in ok}) > 1:
        base = baseline or sorted({r["strategy"] for r in ok})[0]
        groups: dict = {}
        for r in ok:
            key = tuple((k, r[k]) for k in swept if k != "strategy")
            groups.setdefault(key, {})[r["strategy"]] = float(r[latency])
        strategies = sorted({r["strategy"] for r in ok})
        keys = [k for k, g in groups.items() if base in g]
        if keys:
            fig = Figure(figsize=(max(6, 0.5 * len(keys) * len(strategies)), 4))
            ax = fig.subplots()
            w = 0.8 / len(strategies)
            for j, s in enumerate(strategies):
                ax.bar(np.arange(len(keys)) + j * w, [groups[k][base] / groups[k][s] if s in groups[k] else 0
                                                      for k in keys], w, label=s)
            ax.set_xticks(np.arange(len(keys)) + 0.4 - w / 2, [", ".join(str(v) for _, v in k) for k in keys],
                          rotation=60, fontsize=7)
            ax.set_ylabel(f"speedup over {base}")
            ax.legend(fontsize=8)
            fig.tight_layout()
            files.append(str(out / "sweep_speedup.png"))
            fig.savefig(files[-1], dpi=120)
    return files


def summary(rows: list[dict], swept: list[str], figures: list[str]) -> str:
    """A terminal table: the swept values and the chosen figures of every point."""
    head = swept + figures + ["status"]
    lines = ["  ".join(f"{h:>14s}" for h in head)]
    for r in rows:
        cells = [str(r.get(k, ""))[-14:] for k in swept]
        for f in figures:
            v = r.get(f)
            cells.append(f"{v:.4g}" if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v or ""))
        cells.append("cached" if r.get("cached") else ("FAILED: " + r["error"][:60] if r.get("error") else "ok"))
        lines.append("  ".join(f"{c:>14s}" for c in cells))
    return "\n".join(lines)


def add_parser(sub, kind: str, default_hw: str, grid_text: str, point_text: str):
    """Add the ``sweep`` sub-command to a CLI's sub-parsers and return it.

    Parameters
    ----------
    sub : argparse._SubParsersAction
        The CLI's sub-parsers.
    kind : {'cim', 'pim'}
        The backend (hardware choices and messages).
    default_hw : str
        Preset swept when ``--hw`` is not given.
    grid_text : str
        What the grid spans (first line of the help).
    point_text : str
        What one point is (start of the description).
    """
    w = sub.add_parser("sweep", help=f"{grid_text} on Ray (a local Ray by default; --address or $RAY_ADDRESS "
                       "for a cluster)",
                       description=f"{point_text}, run as a Ray task in its own worker process. Results go to "
                       "OUT/sweep.csv (one row per point), plots to OUT/, and a cache keyed by the point, the "
                       "hardware, its options and the project version, so a re-run computes only new points. "
                       "Point it at a Ray cluster with --address ray://HEAD:10001 (or set RAY_ADDRESS); on a node "
                       "of the cluster, --address auto.")
    add_arguments(w, kind, default_hw)
    return w


def add_arguments(p, kind: str, default_hw: str) -> None:
    """The options of a ``sweep`` sub-command."""
    p.add_argument("--model", nargs="+", help="models (ONNX files or zoo:NAME[?k=v,...])")
    p.add_argument("--hw", nargs="+", help=f"{kind.upper()} presets or .toml files (default: {default_hw})")
    p.add_argument("--strategy", nargs="+", help="strategies")
    p.add_argument("--set", action="append", metavar="KEY=V1,V2",
                   help="another axis: a hardware key (crossbar.rows=64,128,256; chip.cores=...) or an option "
                   "of a point; repeatable")
    p.add_argument("--out", default="sweep", help="folder of the table (sweep.csv), the plots and the cache")
    p.add_argument("--cache", help="cache folder (default OUT/cache); a re-run computes only new points")
    p.add_argument("--address", help="Ray cluster to run on (ray://HEAD:10001, or 'auto' on a cluster node); "
                   "default $RAY_ADDRESS, else a local Ray started on this machine")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def cli_sweep(args, kind: str, evaluate: str, defaults: dict, figures: list[str], extra: dict | None = None) -> int:
    """The ``sweep`` sub-command of both CLIs: axes from ``--model/--hw/--strategy/--set``, run, write, plot.

    ``extra``: fixed options of every point (a one-value axis each).
    """
    axes: dict[str, list] = {}
    axes["model"] = args.model or defaults["model"]
    axes["hw"] = args.hw or defaults["hw"]
    axes["strategy"] = args.strategy or defaults["strategy"]
    for k, v in (extra or {}).items():
        axes[k] = [v]
    for text in args.set or []:
        name, vals = parse_axis(text)
        axes[name] = vals
    points = [Point(v) for v in grid(axes)]
    for p in points:  # unknown hardware, bad keys and values fail before any work
        try:
            base = hardware.load(p.hw, kind=kind)
        except (hardware.UnknownHardwareError, hardware.HardwareDescriptionError) as e:
            raise UserError(str(e)) from None
        with_overrides(base, p.hw_overrides)
    out = Path(args.out)
    rows = run(points, evaluate, kind, args.cache or out / "cache", address=args.address,
               progress=not args.quiet)
    swept = list(axes)
    table = write_table(rows, out / "sweep.csv", swept)
    files = plot(rows, out, swept)
    print(summary(rows, swept, figures))
    print(f"table         {table}")
    for f in files:
        print(f"plot          {f}")
    failed = sum(1 for r in rows if r.get("error"))
    if failed:
        print(f"{failed} of {len(rows)} points failed (their errors are in the table)")
    return 0
