"""HT throughput of one (model, preset, strategy) at several batches: python results/saturation.py resnet18 224 pimcomp-a pimcomp-ht 16,32,128"""
import resource
import sys
import time

import tvm_cim
from tvm_cim.common import zoo
from tvm_cim.common.onnx_io import import_onnx
from tvm_cim.compiler import strategies
from tvm_cim.compiler.transform import offload
from tvm_cim.report import batch_summary, simulate_timing

name, img, hwn, strat = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
batches = [int(b) for b in sys.argv[5].split(",")]
mod = import_onnx(zoo.build_model(name, image_size=img), name)[0]
hw = tvm_cim.load(hwn)
opts = strategies.get(strat).options(hw)
t0 = time.time()
_, info = offload(mod, hw, strategy=strat, options=opts)
t1 = time.time()
stats, tl = simulate_timing(info)
t2 = time.time()
print(f"compile {t1-t0:.0f}s sim {t2-t1:.0f}s latency {tl.latency_ns/1e3:.1f}us events {sum(len(s.events.dur) for s in stats)}", flush=True)
for b in batches:
    t = time.time()
    r = batch_summary(info, stats, b, tl.latency_ns, 0.0)
    print(f"batch {b}: thr {r['throughput_per_s']:.4g} batch_thr {r.get('batch_throughput_per_s', 0):.4g} in {time.time()-t:.0f}s maxrss {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss/1e6:.1f} GB", flush=True)
