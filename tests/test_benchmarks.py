"""The benchmark scripts run (in their quick modes), so that they cannot rot; their figures are not asserted."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def bench(script, *args, tmp):
    out = tmp / "out.json"
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *map(str, args), "--json", str(out)],
                       capture_output=True, text=True, cwd=tmp)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(out.read_text()), p.stdout


def test_cim_multilevel_strategies(tmp_path):
    res, out = bench("cim_multilevel.py", "--quick", "--image", "32", "--only", "3", "--plots", tmp_path, tmp=tmp_path)
    assert set(res) == {"exp3"} and "[3]" in out
    assert res["exp3"]["cim-mlc"]["latency_ns"] < res["exp3"]["none"]["latency_ns"]
    dec = res["exp3"]["decomposition"]
    assert set(dec) == {"isaac", "isaac, signed inputs in one pass"}
    for d in dec.values():  # greedy runs layer after layer (no pipeline within one input): its layers' sum
        assert abs(d["greedy_serial_ns"] - d["latency_ns"]["greedy"]) <= 1e-6 * d["latency_ns"]["greedy"]
        assert d["latency_ns"]["greedy+pipe"] < d["latency_ns"]["greedy"]


@pytest.mark.slow
def test_cim_multilevel_quick(tmp_path):
    res, out = bench("cim_multilevel.py", "--quick", "--plots", tmp_path, tmp=tmp_path)
    assert set(res) == {f"exp{i}" for i in range(1, 8)} | {"exp1_rounds"}


def test_cim_multilevel_power_cap(tmp_path):
    res, out = bench("cim_multilevel.py", "--quick", "--image", "32", "--only", "7", "--plots", tmp_path, tmp=tmp_path)
    assert set(res) == {"exp7"} and "[7]" in out and (tmp_path / "cim_multilevel_power_cap.png").exists()
    free = res["exp7"]["uncapped"]
    for c in res["exp7"]["caps"]:
        assert c["peak_power_mw"] <= c["cap_mw"] * (1 + 1e-9) and c["latency_ns"] >= free["latency_ns"] * (1 - 1e-9)


def test_resnet18_sim_quick(tmp_path):
    rows, out = bench("resnet18_sim.py", "--hw", "isaac", "--image", "32", tmp=tmp_path)
    assert rows[0]["hw"] == "isaac" and rows[0]["cosine"] > 0.99 and "isaac" in out


def test_accuracy_quick(tmp_path):
    res, out = bench("accuracy.py", "--quick", "--hw", "prime", "jia21", "--plots", tmp_path, tmp=tmp_path)
    mlp = res["models"]["mlp"]
    assert set(mlp["presets"]) == {"prime", "jia21"} and 0 <= mlp["int8"] <= 1 and "digits" in out
    assert (tmp_path / "accuracy.png").exists()


@pytest.mark.slow
def test_accuracy_zoo_quick(tmp_path):
    res, out = bench("accuracy.py", "--zoo", "--quick", "--image", "32", "--hw", "jia21", "--plots", tmp_path,
                     tmp=tmp_path)
    assert set(res["models"]) == {"resnet18@32", "nhwc_cnn@32 (onnx.helper)"} and "cosine" in out
    for rows in res["models"].values():
        assert set(rows) == {"jia21"} and rows["jia21"]["cost"] >= 1.0 - 1e-9
    assert (tmp_path / "accuracy_zoo.png").exists()


MIREDO_MAPPERS = ("miredo", "ws", "zigzag", "zigzag-roofline")


def test_miredo_quick(tmp_path):
    res, out = bench("miredo.py", "--quick", "--layers", "3", "--plots", tmp_path, tmp=tmp_path)
    net = res["networks"]["resnet18"]
    assert len(net["layers"]) == 3 and "EDP gain of miredo" in out
    assert set(net["totals"]) == {"miredo", "ws", "zigzag", "zigzag-roofline", "miredo_layer_choice"}
    assert res["objective"] == "edp"  # the default (issue 12: EDP is the figure of merit)
    assert all(p.endswith(".png") for p in res["plots"])
    assert "zigzag-roofline" in out and set(net["edp_gain"]) >= {"ws", "zigzag", "zigzag-roofline"}
    # the max-of-levels latency zigzag-roofline chooses by, beside what its mapping executes: never above it
    assert all(0 < r[m]["cycles_roofline"] <= r[m]["cycles_sim"] * (1 + 1e-9) for r in net["layers"] for m in MIREDO_MAPPERS)
    for m in MIREDO_MAPPERS:  # the shapes solved over worker processes: elapsed time and workers
        t = net["totals"][m]
        assert t["workers"] >= 1 and 0 < t["solve_elapsed_s"]


def test_miredo_rejects_a_bad_worker_count(tmp_path):
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "miredo.py"), "--quick", "--workers", "0"],
                       capture_output=True, text=True, cwd=tmp_path)
    assert p.returncode == 2 and "--workers 0: expected a positive integer" in p.stderr
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "miredo.py"), "--quick", "--zigzag-spatial", "0"],
                       capture_output=True, text=True, cwd=tmp_path)
    assert p.returncode == 2 and "--zigzag-spatial 0: expected a positive integer" in p.stderr


@pytest.mark.slow
def test_miredo_quick_full_network(tmp_path):
    res, _ = bench("miredo.py", "--quick", tmp=tmp_path)
    assert len(res["networks"]["resnet18"]["layers"]) == 21


def test_miredo_floor_bounds_what_miredo_reaches(tmp_path):
    res, out = bench("miredo.py", "--quick", "--floor", "--classes", "depthwise", "fc", tmp=tmp_path)
    assert set(res["classes"]) == {"depthwise", "fc"} and "no mapping beats zigzag by more than" in out
    for r in res["classes"].values():  # the floor is below every mapping of the space, miredo's among them
        assert 0 < r["edp_floor"] <= r["miredo_edp"] <= r["zigzag_edp"] * (1 + 1e-9)
        assert r["max_gain_vs_zigzag"] >= r["miredo_gain_vs_zigzag"]


def test_miredo_net_floor_is_below_zigzags_network_edp(tmp_path):
    res, out = bench("miredo.py", "--quick", "--net-floor", "--only", "layer1.0.conv1", "fc", tmp=tmp_path)
    r = res["networks"]["resnet18"]
    assert len(r["layers"]) == 2 and "beats zigzag's network EDP by more than" in out
    assert 0 < r["floor_edp"] <= min(r["zigzag_edp_model"], r["zigzag_edp_sim"])
    assert r["max_gain_vs_zigzag_model"] >= 1 and r["max_gain_vs_zigzag_sim"] >= 1
    assert 0 < r["floor_edp"] <= min(r["zigzag-roofline_edp_model"], r["zigzag-roofline_edp_sim"])
    assert "over zigzag-roofline" in out


def test_miredo_runs_chosen_layers_with_a_warm_start(tmp_path):
    res, _ = bench("miredo.py", "--quick", "--only", "layer1.0.conv1", "fc", "--warm", "on", "--node-limit", "5",
                   tmp=tmp_path)
    assert [r["layer"].split(":")[1] for r in res["networks"]["resnet18"]["layers"]] == ["layer1.0.conv1", "fc"]
    assert res["settings"]["warm"] is True and res["settings"]["node_limit"] == 5
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "miredo.py"), "--quick", "--only", "nope"],
                       capture_output=True, text=True, cwd=tmp_path)
    assert p.returncode == 2 and "nope" in p.stderr


def test_miredo_rejects_a_chip_without_a_dataflow_table(tmp_path):
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "miredo.py"), "--quick", "--hw", "isaac"],
                       capture_output=True, text=True, cwd=tmp_path)
    assert p.returncode == 2 and "dataflow" in p.stderr


def test_cmswitch_quick(tmp_path):
    res, out = bench("cmswitch.py", "--quick", "--models", "resnet18", "bert_large_layer", "--no-sweep",
                     "--batches", "1", "2", "--plots", tmp_path, tmp=tmp_path)
    assert set(res["fig14"]) == {"resnet18", "bert_large_layer"} and "Fig. 14" in out
    # by batch size: batch 1 is Fig. 14's row; two inputs take longer than one on both strategies
    for net, row in res["batches"].items():
        layers = res["models"][net]["layers"]
        for s in ("cim-mlc", "cmswitch"):
            assert row["1"][f"{s}_ns"] == res["fig14"][net][s]["latency_ns"] * layers
            assert row["2"][f"{s}_ns"] > row["1"][f"{s}_ns"]
        assert row["2"]["speedup"] == pytest.approx(row["2"]["cim-mlc_ns"] / row["2"]["cmswitch_ns"], rel=1e-12)
    pts = [r["speedup"] for row in res["batches"].values() for r in row.values()]
    assert res["batches_summary"]["arith_mean_all"] == pytest.approx(sum(pts) / len(pts))
    assert "[1b] Fig. 14 by batch size" in out and (tmp_path / "cmswitch_batches.png").exists()
    row = res["fig14"]["resnet18"]["cmswitch"]
    assert row["segments"] > 1 and set(row["time_share"]) == {"switch", "rewrite", "write_back"}
    assert res["summary"]["geomean_vs_cim_mlc"] > 0
    assert (tmp_path / "cmswitch_speedup.png").exists() and (tmp_path / "cmswitch_modes.png").exists()


def test_cmswitch_rejects_a_batch_size_below_one(tmp_path):
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "cmswitch.py"), "--quick", "--batches", "1", "0"],
                       capture_output=True, text=True, cwd=tmp_path)
    assert p.returncode == 2 and "--batches" in p.stderr and "[1, 0]" in p.stderr


@pytest.mark.slow
def test_scale_quick(tmp_path):
    res, out = bench("scale.py", "--quick", tmp=tmp_path)
    run = res["runs"][0]
    assert (run["model"], run["hw"]) == ("resnet18", "isaac") and "error" not in run
    assert run["metaops"] > 0 and run["peak_rss_mb"] > 0 and run["timing_only_cpu_s"] > 0
    assert set(run["phases"]) >= {"Calibrate", "GenerateMetaOps", "LowerToRuntime"}
    assert res["bitwise"][0]["hw"] == "isaac" and "Compile time against the number of layers" in out


def test_pimcomp_quick(tmp_path):
    res, out = bench("pimcomp.py", "--quick", "--models", "vgg8", "--batch", "2", "--ga-time", "1", "--plots", tmp_path,
                     "--saturation", "2", "3", "--energy-terms", tmp=tmp_path)
    pt = res["points"]["vgg8@pimcomp-a"]
    ga = {"pimcomp-ht", "pimcomp-ll", "pimcomp-ht/ga-alone", "pimcomp-ll/ga-alone"}
    assert set(pt["strategies"]) == {"none", "puma", "greedy", "cim-mlc"} | ga
    assert set(pt["ga_vs_dp"]) == ga and "GA vs DP" in out
    assert set(res["saturation"]["strategies"]["pimcomp-ht"]) == {"2", "3"}
    assert all(r["throughput_per_s"] > 0 and r["latency_ns"] > 0 for r in pt["strategies"].values())
    assert all(p.endswith(".png") for p in res["plots"])
    # energy by term: the report's one-input terms; static power x time over the run (the batch's share for HT)
    terms = res["energy_terms"]["vgg8@pimcomp-a"]
    for s in ("none", "pimcomp-ll"):
        r, t = pt["strategies"][s], terms[f"{s} (one input)"]
        assert t["dynamic"] + t["static"] == pytest.approx(r["energy_pj"], rel=1e-9)
    assert terms["none (one input)"]["static"] > terms["pimcomp-ll (one input)"]["static"]  # the longer run
    ht = terms["pimcomp-ht (per input of the batch)"]
    assert ht["total"] == pytest.approx(pt["strategies"]["pimcomp-ht"]["energy_per_input_pj"], rel=1e-9)
    assert "none-sequential" in res["summary"]["ht"] and "[7] Energy per input by term" in out
    # one input at a time is never faster than none's batch, whose inputs may overlap
    ht_sum = res["summary"]["ht"]
    assert ht_sum["none-sequential"]["throughput_geomean"] >= ht_sum["none"]["throughput_geomean"] * (1 - 1e-12)


def test_cim_multilevel_critical_path(tmp_path):
    res, out = bench("cim_multilevel.py", "--quick", "--image", "32", "--only", "8", "--decompose", "resnet18",
                     "--plots", tmp_path, tmp=tmp_path)
    assert set(res) == {"exp8"} and "[8]" in out
    for cfg in ("graph-P&D", "+crossbar"):
        r = res["exp8"][cfg]
        assert abs(r["path_ns"] - r["latency_ns"]) <= 1e-9 * r["latency_ns"]
        assert abs(sum(s["path_ns"] for s in r["stages"]) - r["latency_ns"]) <= 1e-6 * r["latency_ns"]


def test_scale_repeat_takes_median_times_largest_rss_and_flags_changed_figures():
    import importlib.util

    spec = importlib.util.spec_from_file_location("scale", ROOT / "benchmarks" / "scale.py")
    scale = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(scale)
    runs = iter([(3.0, 900.0, 5.0, 0.4), (1.0, 1000.0, 5.0, 0.9), (2.0, 950.0, 5.0, 1.2)])

    def point(spec_, hw, latency=None):
        sim, rss, lat, load = next(runs)
        return {"simulate_s": sim, "simulate_cpu_s": 2 * sim, "peak_rss_mb": rss, "latency_ns": latency or lat,
                "load_avg": (load, load + 0.1)}

    r = scale.repeated(point, 3, "zoo:x", "isaac")
    assert (r["simulate_s"], r["simulate_cpu_s"], r["peak_rss_mb"]) == (2.0, 4.0, 1000.0)
    assert [x["simulate_s"] for x in r["repeats"]] == [3.0, 1.0, 2.0] and "differs" not in r
    assert r["load_avg"] == (0.4, 1.3)
    runs = iter([(1.0, 1.0, 5.0, 0.0), (1.0, 1.0, 6.0, 0.0)])
    assert scale.repeated(point, 2, "zoo:x", "isaac")["differs"] == ["latency_ns"]
    runs = iter([(1.0, 1.0, 5.0, 0.0)])
    bad = iter([{"error": "boom"}])
    assert scale.repeated(lambda: next(bad, None) or point("s", "h"), 2) == {"error": "boom"}


def test_scale_rejects_a_repeat_below_one(tmp_path):
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "scale.py"), "--quick", "--repeat", "0"],
                       capture_output=True, text=True, cwd=tmp_path)
    assert p.returncode == 2 and "--repeat must be at least 1, got 0" in p.stderr
