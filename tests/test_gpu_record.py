"""``bench_gpu.py --record-json``: the sections a borrowed GPU machine's JSON makes, recorded
here (benchmarks/gpu_sections.py). The machine's copy of the tree never comes back, only its
output folder. So the sections must name that machine, its date and its command, and section
``gpu`` may be put together from parts measured by separate commands. RESULTS.md, ENGINE.md
and results/ are redirected to a temporary folder; the payloads are made up and labelled so."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))
import _common  # noqa: E402
import gpu_sections  # noqa: E402

GPU_MACHINE = {"cpu": "Made-up EPYC 9999", "cores": 16, "ram_gib": 128.0, "python": "3.12.0",
               "numpy": "2.5.0", "dask": "2026.8.0", "zarr": "3.1.6"}
SETUP = {"d": 20, "gamma": 0.025, "pcg_lam": 1e-6, "repeats": 5, "sparse_landmarks": 2000,
         "device_sparse_max_density": 0.02, "device_factor_min_m": 4096}
ROOF = {"gemm_f32": 5.0e13, "gemm_f64": 4.0e13, "exp_f32": 1.0e12, "exp_f64_to_f32": 9.0e11}


def payload(command: str, date: str, **parts) -> dict:
    return {"command": command, "date": date, "machine": GPU_MACHINE, "quick": False,
            "emulated": False, "complete": True, "machine_gpu": "Made-up H200, 139 GiB",
            "device_path": "GPU", "roofline": ROOF, "setup": SETUP, **parts}


PASS = [{"n": 1_000_000, "m": 1000, "gpu_pass_s": 0.08, "gpu_fit_s": 0.5, "cpu_pass_s": 2.8,
         "cpu_fit_s": 3.3, "speedup_pass": 35.0, "roofline_s": 0.06,
         "fraction_of_roofline": 0.75}]
DECODE = {"queries": 1000, "candidates": 2_000_000, "r": 256, "k": 10, "gpu_s": 0.05,
          "cpu_s": 9.0, "fraction_of_gemm_f32": 0.41}
PCG = [{"n": 1_000_000, "m": 20_000, "tol": 1e-3,
        "gpu": {"fit_s": 41.0, "iterations": 17, "passes": 18, "rmse": 0.1101},
        "cpu": {"fit_s": 600.0, "iterations": 17, "passes": 18, "rmse": 0.1101}}]
FACTOR = [{"m": 10_000, "host_factor_s": 1.2, "host_preconditioner_s": 2.3,
           "host_iteration_s": 0.4, "device_factor_s": 0.2, "device_preconditioner_s": 0.1,
           "device_iteration_s": 0.003, "device_wins": True}]
SPARSE = [{"b": 4096, "d": 1000, "density": rho, "nnz": 1, "sparse_s": s, "spmm_s": s,
           "dense_s": 0.01} for rho, s in ((0.001, 0.002), (0.01, 0.005), (0.1, 0.05))]


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """RESULTS.md, ENGINE.md and results/ in a temporary folder."""
    results, engine = tmp_path / "RESULTS.md", tmp_path / "ENGINE.md"
    results.write_text("# Benchmark results\n")
    engine.write_text("# Engine benchmarks\n")
    monkeypatch.setattr(_common, "RESULTS_MD", results)
    monkeypatch.setattr(_common, "ENGINE_MD", engine)
    monkeypatch.setattr(_common, "RESULTS_DIR", tmp_path / "results")
    return tmp_path


def write(tmp_path, name, p) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(p))
    return str(path)


ARGS = argparse.Namespace(quick=False, no_record=False)


def test_parts_measured_apart_make_one_gpu_section_naming_the_gpu_machine(tree):
    files = [write(tree, "pass.json", payload("bench_gpu.py --parts pass", "2026-12-01T10:00:00",
                                              **{"pass": PASS})),
             write(tree, "decode.json", payload("bench_gpu.py --parts decode",
                                                "2026-12-01T10:05:00", decode=DECODE)),
             write(tree, "pcg.json", payload("bench_gpu.py --parts pcg", "2026-12-01T10:09:00",
                                             pcg=PCG)),
             write(tree, "factor.json", payload("bench_gpu.py --factor-only",
                                                "2026-12-01T10:12:00", factor=FACTOR)),
             write(tree, "sparse.json", payload("bench_gpu.py --sparse-only",
                                                "2026-12-01T10:13:00", sparse_rows=SPARSE))]
    assert gpu_sections.record_json(files, ARGS) == ["gpu", "gpu_factor", "gpu_sparse"]
    results = (tree / "RESULTS.md").read_text()
    engine = (tree / "ENGINE.md").read_text()
    assert "<!-- gpu -->" in results and "<!-- gpu_factor -->" not in results
    assert "<!-- gpu_factor -->" in engine and "<!-- gpu_sparse -->" in engine
    gpu = results[results.index("<!-- gpu -->"):]
    # the GPU machine, the pass's date and command, not this machine's
    assert "Machine: Made-up EPYC 9999, 16 cores" in gpu and "Date: 2026-12-01T10:00:00" in gpu
    assert "Command: `bench_gpu.py --parts pass`" in gpu
    assert "| 1,000,000 | 1000 | 0.08 | 0.50 | 2.80 | 3.30 | 35.0× | 75% |" in gpu
    assert "41% of the float32 GEMM rate" in gpu and "| 41.0 | 17 | 0.110100 |" in gpu
    record = json.loads((tree / "results" / "gpu.jsonl").read_text().splitlines()[-1])
    assert record["machine"] == GPU_MACHINE and record["pcg"] == PCG
    assert record["parts_from"]["decode"] == "bench_gpu.py --parts decode"
    assert "device won both\nat m = [10000]" in engine
    assert "4096x1000: 0.0200" in engine  # the sparse crossover: 0.01 + 0.09 · 0.005 / 0.045


def test_a_missing_part_is_named_and_no_gpu_section_is_written(tree, capsys):
    files = [write(tree, "pass.json", payload("p", "2026-12-01T10:00:00", **{"pass": PASS})),
             write(tree, "factor.json", payload("f", "2026-12-01T10:00:00", factor=FACTOR))]
    assert gpu_sections.record_json(files, ARGS) == ["gpu_factor"]
    out = capsys.readouterr().out
    assert "none of the files has decode, pcg" in out and "--parts decode,pcg" in out
    assert "<!-- gpu -->" not in (tree / "RESULTS.md").read_text()


@pytest.mark.parametrize("change, why", [
    ({"emulated": True}, "emulated"), ({"quick": True}, "--quick"),
    ({"complete": False}, "did not finish"), ({"machine": None}, None)])
def test_what_is_not_a_measurement_is_refused_naming_the_file(tree, change, why):
    p = payload("c", "2026-12-01T10:00:00", factor=FACTOR)
    p.update(change)
    if change == {"machine": None}:
        del p["machine"]
        why = "predates the machine"
    path = write(tree, "x.json", p)
    with pytest.raises(SystemExit, match=rf"{path} is not a measurement to record: .*{why}"):
        gpu_sections.record_json([path], ARGS)
    assert "<!--" not in (tree / "ENGINE.md").read_text()
