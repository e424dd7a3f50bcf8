"""The PIM benchmark scripts keep working: each one's ``--quick`` mode runs end to end."""

from __future__ import annotations

import importlib.util
import json
import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_pim_kernels_quick(tmp_path, capsys):
    out = tmp_path / "k.json"
    assert _script("pim_kernels").main(["--quick", "--json", str(out), "--plots", str(tmp_path / "plots")]) == 0
    res = json.loads(out.read_text())
    rows = res["kernels"]["rows"]
    assert {(r["device"], r["kernel"]) for r in rows} >= {("hbm-pim", "VA"), ("attacc", "ATTN")}
    for r in rows:
        # DCC's search covers the default draft, so it is never slower than the default with the same optimiser
        assert r["dcc_ns"] <= r["default_with_dcc_optimiser_ns"] * (1 + 1e-12)
        assert r["space"]["after_rule3"] < r["space"]["total"]
    (step,) = res["decode"]["rows"]
    assert step["step_ns"]["dcc"] <= min(step["step_ns"]["gpu"], step["step_ns"]["attacc_full"])
    # the labelled fallback variants never lose to the always-on-PIM ones nor to the GPU
    for v in ("attacc_base", "attacc_full"):
        assert step["step_ns"][f"{v}_fb"] <= min(step["step_ns"][v], step["step_ns"]["gpu"]) * (1 + 1e-12)
    # every GPU baseline and launch overhead is reported; less launch overhead, less time on both sides
    hl = step["by_host_launch"]
    assert {"host@0us", "host@1.5us", "host@5us", "paper-gpu@0us", "paper-gpu@5us"} <= set(hl)
    assert hl["host@0us"]["gpu"] < hl["host@5us"]["gpu"] and hl["host@0us"]["dcc"] < hl["host@5us"]["dcc"]
    assert res["decode_unconstrained"]["rows"][0]["step_ns"]["dcc"] <= step["step_ns"]["dcc"] * (1 + 1e-12)
    assert {r["device"] for r in rows} >= {"hbm-pim-hbm3", "attacc-unconstrained"}
    assert all(set(r["speedup_by_host_launch"]) == {"host", "paper-gpu"} for r in rows)
    assert set(res["simspeed"]) == {"hbm-pim", "attacc"}
    # AttAcc's literal default and hierarchical commands off are reported beside the adjusted default
    assert all(r["default_literal_ns"] > 0 and r["dcc_no_hierarchical_ns"] >= r["dcc_ns"] * (1 - 1e-12) for r in rows)
    assert set(res["kernels"]["baselines"]) >= {"attacc", "hbm-pim", "ALL"}
    conv = res["kernels"]["rule1"]["conv1d_b8_n1024_r16"]
    assert conv["after_rule1"] < conv["total"]
    # exported graphs: K transposed in the graph runs as fast as K stored pre-transposed (resident, folded)
    g = {r["graph"]: r for r in res["graphs"]["rows"]}
    for arch in ("gpt", "llama"):
        pre, std = g[f"zoo:{arch}_decode K pre-transposed"], g[f"zoo:{arch}_decode K transposed in graph"]
        assert std["attention"] == pre["attention"] == "attn on PIM, resident K,V"
        assert std["latency_ns"] == pytest.approx(pre["latency_ns"])
    assert len(list((tmp_path / "plots").glob("*.png"))) >= 3
    assert "wall time" in capsys.readouterr().out


def test_pim_kernels_decode_one_device_saves_each_step(tmp_path, monkeypatch):
    """``--decode-devices`` runs only the presets asked for, and the JSON holds every finished step."""
    mod = _script("pim_kernels")
    out = tmp_path / "d.json"
    seen = []
    real = mod.run_decode

    def spy(scale, device, on_row=None):
        def rows_saved(rows):
            on_row(rows)
            seen.append(json.loads(out.read_text()))  # written before the experiment ends
        return real(scale, device, on_row=rows_saved)

    monkeypatch.setattr(mod, "run_decode", spy)
    argv = ["--quick", "--experiment", "decode", "--decode-devices", "attacc-unconstrained",
            "--json", str(out), "--plots", str(tmp_path / "plots")]
    assert mod.main(argv) == 0
    assert seen and seen[-1]["decode_unconstrained"]["partial"] is True
    assert len(seen[-1]["decode_unconstrained"]["rows"]) == len(seen)
    res = json.loads(out.read_text())
    assert "decode" not in res and res["decode_unconstrained"]["device"] == "attacc-unconstrained"
    assert "partial" not in res["decode_unconstrained"]


@pytest.mark.usefixtures("metaschedule_ready")
def test_pim_predictor_quick(tmp_path):
    out = tmp_path / "p.json"
    assert _script("pim_predictor").main(["--quick", "--json", str(out), "--plots", str(tmp_path / "plots")]) == 0
    res = json.loads(out.read_text())
    for dev in ("hbm-pim", "attacc"):
        d = res["devices"][dev]
        assert d["offline"]["samples"] > 0 and d["lookup_table_entries"] == 2
        for s in d["summary"].values():
            assert s["total"] == 2 and 0 < s["suboptimal_performance_geomean"] <= 1
        (demo,) = d["cost_model_demo"]
        assert demo["best_ns_with_predictor"] > 0
    assert res["overall_unseen"]["total"] == 4


def test_pim_predictor_rejects_unknown_devices(tmp_path, capsys):
    assert _script("pim_predictor").main(["--quick", "--devices", "hbm-pim,nonesuch", "--plots", str(tmp_path)]) == 2
    assert "nonesuch" in capsys.readouterr().err
