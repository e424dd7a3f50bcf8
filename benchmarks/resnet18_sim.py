"""ResNet-18 (1x3x224x224) compiled for each CIM preset and simulated bit-accurately.

Prints, per preset: simulation wall time, peak resident memory of the process,
cosine and max |err| against TVM's llvm build, latency and energy of the
simulated chip.  Each preset runs in its own process (``python -m tvm_cim run``)
so that peak memory is per preset.

    python benchmarks/resnet18_sim.py                 # all CIM presets
    python benchmarks/resnet18_sim.py --hw prime isaac --bitwise --json out.json

``--bitwise`` sends every MVM through the bit-level crossbar model, also on presets
whose ADC is lossless (where the default computes the provably identical integer
product); bitlines a bound on their inputs proves unaltered by the ADC are summed
exactly (``python -m tvm_cim run --bitwise all`` converts every one).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tvm_cim.common.hardware import known_presets  # noqa: E402


def run_one(hw: str, bitwise: bool, image: int, seed: int) -> dict:
    with tempfile.TemporaryDirectory() as d:
        rep_path = Path(d) / "r.json"
        cmd = [sys.executable, "-m", "tvm_cim", "run", f"zoo:resnet18?image_size={image}", "--hw", hw,
               "--report", str(rep_path), "--seed", str(seed)]
        if bitwise:
            cmd.append("--bitwise")
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            return {"hw": hw, "error": p.stderr.strip().splitlines()[-1] if p.stderr else f"exit {p.returncode}"}
        rep = json.loads(rep_path.read_text())
    return {
        "hw": hw,
        "bitwise": bitwise,
        "simulate_s": rep["timing_s"]["simulate"],
        "compile_s": rep["timing_s"]["compile"],
        "peak_rss_mb": rep["peak_rss_mb"],
        "cosine": rep["cosine"],
        "max_abs_err": rep["max_abs_err"],
        "adc_lossless": rep["adc"]["lossless"],
        "adc_rel_rms_error": rep["adc"]["rel_rms_error"],
        "latency_ms": rep["latency_ns"] * 1e-6,
        "energy_mj": rep["energy_pj"] * 1e-9,
        "segments": rep["mapping"]["segments"],
        "crossbars_needed": rep["mapping"]["crossbars_needed"],
        "crossbars_available": rep["mapping"]["crossbars_available"],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hw", nargs="*", default=None, help="presets (default: every CIM preset)")
    ap.add_argument("--bitwise", action="store_true", help="also time the bit-level path (run --bitwise)")
    ap.add_argument("--image", type=int, default=224)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write the rows to this file")
    args = ap.parse_args()
    presets = args.hw or known_presets("cim")
    jobs = [(h, False) for h in presets] + ([(h, True) for h in presets] if args.bitwise else [])
    rows = [run_one(h, b, args.image, args.seed) for h, b in tqdm(jobs, desc="ResNet-18 runs")]
    hdr = f"{'preset':11s} {'path':9s} {'sim s':>7s} {'compile s':>9s} {'peak MB':>8s} {'cosine':>9s} {'max|err|':>9s} {'ADC':>9s} {'lat ms':>8s} {'energy mJ':>9s} {'xbars need/have':>16s} {'seg':>4s}"
    print(f"ResNet-18 1x3x{args.image}x{args.image}, seed {args.seed}")
    print(hdr)
    for r in rows:
        if "error" in r:
            print(f"{r['hw']:11s} ERROR {r['error']}")
            continue
        adc = "lossless" if r["adc_lossless"] else f"{r['adc_rel_rms_error']:.3f}"
        print(
            f"{r['hw']:11s} {'bitwise' if r['bitwise'] else 'default':9s} {r['simulate_s']:7.2f} {r['compile_s']:9.2f} "
            f"{r['peak_rss_mb']:8.0f} {r['cosine']:9.5f} {r['max_abs_err']:9.4f} {adc:>9s} {r['latency_ms']:8.3f} "
            f"{r['energy_mj']:9.4f} {str(r['crossbars_needed']) + '/' + str(r['crossbars_available']):>16s} {r['segments']:4d}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
        print(f"wrote {args.json}")
    return 0 if all("error" not in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
