"""The benchmarks that have a ``--quick`` setting run end to end in it (nothing recorded)."""

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
CASP = BENCH.parent.parent / "shared" / "data" / "casp" / "CASP.csv"


def run(script: str) -> str:
    out = subprocess.run([sys.executable, str(BENCH / script), "--quick"], capture_output=True,
                         text=True, timeout=600, cwd=BENCH)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_huber_scale_quick():
    out = run("bench_huber_scale.py")
    assert "'passes'" in out and "'rel_gap'" in out


@pytest.mark.skipif(not CASP.exists(), reason="CASP data not available")
def test_svr_comparison_quick():
    pytest.importorskip("sklearn")
    out = run("bench_lipschitz.py")
    assert "'svr_mae'" in out and "'distsketch_mae'" in out


@pytest.mark.skipif(not CASP.exists(), reason="CASP data not available")
def test_joint_quantile_quick():
    out = run("bench_quantile.py")
    assert "'crossing_mean'" in out


@pytest.mark.skipif(not (BENCH.parent.parent / "shared" / "data" / "mtr" / "rf1-train.arff").exists(),
                    reason="rf1 data not available")
def test_rf1_quick():
    out = run("bench_rf1.py")
    assert "ARRMSE" in out and "'arrmse_mean'" in out


@pytest.mark.skipif(not CASP.exists(), reason="CASP data not available")
def test_nystroem_pipelines_quick():
    pytest.importorskip("sklearn")
    out = run("bench_pipelines.py")
    assert out.count("'sklearn_objective'") == 3


def test_friedman_quick():
    pytest.importorskip("sklearn")
    out = run("bench_friedman.py")
    assert "'rel_mse'" in out and "Gaussian (p = 1)" in out


def test_leverage_quick():
    out = run("bench_leverage.py")
    assert "'LeverageScores'" in out and "'SubSampling'" in out


@pytest.mark.skipif(not (BENCH.parent.parent / "shared" / "data" / "bibtex" / "bibtex-train.arff").exists(),
                    reason="Bibtex data not available")
def test_cv_cost_quick():
    out = run("bench_cv.py")
    assert "'n_scores': 500" in out


@pytest.mark.skipif(not (BENCH.parent.parent / "shared" / "data" / "usps" / "usps.h5").exists(),
                    reason="USPS data not available")
def test_usps_reduced_rank_quick():
    out = run("bench_usps_rr.py")
    assert "rr {" in out and "iokr {" in out


@pytest.mark.skipif(not (BENCH.parent.parent / "shared" / "data" / "bibtex" / "bibtex-train.arff").exists(),
                    reason="Bibtex data not available")
def test_bibtex_reduced_rank_quick():
    out = run("bench_bibtex_rr.py")
    assert "rr_tuned {" in out and "iokr_shared {" in out


def test_import_quick():
    out = run("bench_import.py")
    assert '"import_beyond_deps_s"' in out and '"sklearn": false' in out


@pytest.mark.skipif(not (BENCH.parent.parent / "shared" / "data" / "mtr" / "rf1-train.arff").exists(),
                    reason="rf1 data not available")
def test_cli_regression_quick():
    pytest.importorskip("sklearn")
    out = run("bench_cli_regression.py")
    assert out.startswith("rf1 ") and '"nystroem"' in out and '"best"' in out


def test_large_m_quick():
    """PCG against the direct solve on a tiny synthetic problem."""
    out = run("bench_large_m.py")
    assert "PCG" in out or "pcg" in out


def test_lipschitz_admm_quick():
    """The ADMM route against Newton on a tiny synthetic Huber problem."""
    out = run("bench_lipschitz_admm.py")
    assert "admm" in out.lower() and "newton" in out.lower()


@pytest.mark.skipif(not (BENCH.parent.parent / "shared" / "data" / "bibtex" / "bibtex-train.arff").exists(),
                    reason="Bibtex data not available")
def test_driver_threads_quick():
    out = run("bench_driver_threads.py")
    assert "| 1 |" in out and "auto (chose " in out and "Cholesky" in out


@pytest.mark.skipif(not (BENCH.parent.parent / "shared" / "data" / "bibtex" / "bibtex-train.arff").exists(),
                    reason="Bibtex data not available")
def test_sparse_blocks_quick():
    out = run("bench_sparse_blocks.py")
    assert "crossover densities" in out and "sparse×dense" in out


def test_small_fits_quick():
    pytest.importorskip("sklearn")
    out = run("bench_small_fits.py")
    assert "eps" in out and "quantile" in out and "CPU" in out
