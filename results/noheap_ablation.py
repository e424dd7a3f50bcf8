import json
import sys

# run from the worktree root: python results/noheap_ablation.py
sys.path.insert(0, "benchmarks")
import pimcomp as B

import tvm_cim
from tvm_cim.common import zoo
from tvm_cim.common.onnx_io import import_onnx

path = "results/pimcomp_b32.json"
res = json.load(open(path))
s = "pimcomp-ll/no-heap"
for key, pt in res["points"].items():
    if s in pt["strategies"]:
        continue
    hw = tvm_cim.load(pt["hw"])
    mod = import_onnx(zoo.build_model(pt["model"], **pt["model_kwargs"]), pt["model"])[0]
    row, g = B.run_point(mod, hw, s, res["batch"], res["ga_time_limit_s"])
    pt["strategies"][s] = row
    pt["ga_vs_dp"][s] = g
    ll = pt["strategies"]["pimcomp-ll"]["latency_ns"]
    print(f"{key:22s} no-heap {row['latency_ns']/1e3:10.1f} us  heap {ll/1e3:10.1f} us  heap/no-heap {ll/row['latency_ns']:.2f}", flush=True)
    B.save(res, path)
