"""The benchmarks' harness (benchmarks/_common.py), and the benchmarks that have a short
``--quick`` setting run end to end with ``--no-record``: they print their figures and leave
RESULTS.md, ENGINE.md and results/ byte for byte as they were."""

import hashlib
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
_spec = importlib.util.spec_from_file_location("benchmarks_common", BENCH / "_common.py")
harness = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(harness)

CASP = harness.casp_path()
BIBTEX = harness.bibtex_dir() / "bibtex-train.arff"
RF1 = harness.data_path("mtr", "rf1-train.arff")
USPS = harness.usps_path()
SCRIPTS = sorted(p.name for p in BENCH.glob("bench_*.py"))


def written() -> dict[str, str]:
    """SHA-256 of every file a benchmark may write: RESULTS.md, ENGINE.md, results/*."""
    files = [BENCH / "RESULTS.md", BENCH / "ENGINE.md", *sorted((BENCH / "results").rglob("*"))]
    return {str(p.relative_to(BENCH)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in files if p.is_file()}


def run(script: str, *extra: str) -> str:
    """``script --quick --no-record``: its stdout, after checking that it wrote nothing."""
    before = written()
    out = subprocess.run([sys.executable, str(BENCH / script), "--quick", "--no-record", *extra],
                         capture_output=True, text=True, timeout=600, cwd=BENCH)
    assert out.returncode == 0, out.stderr[-3000:]
    assert written() == before, f"{script} --no-record changed the result files"
    return out.stdout


# --------------------------------------------------------------------------- the harness


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS)
def test_every_benchmark_takes_the_harness_options(script):
    out = subprocess.run([sys.executable, str(BENCH / script), "--help"], capture_output=True,
                         text=True, timeout=120, cwd=BENCH)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "--quick" in out.stdout and "--no-record" in out.stdout


def test_every_section_lives_in_the_file_its_script_writes():
    seen = {}
    for path in (harness.RESULTS_MD, harness.ENGINE_MD):
        text = path.read_text()
        opened = re.findall(r"^<!-- (\w+) -->$", text, re.M)
        closed = re.findall(r"^<!-- /(\w+) -->$", text, re.M)
        assert opened == closed and len(set(opened)) == len(opened), path.name
        for name in opened:
            assert harness.section_file(name) == path, (name, path.name)
            assert name not in seen, (name, seen.get(name), path.name)
            seen[name] = path.name
            assert re.search(rf"<!-- {name} -->\n### {name}\n\nCommand: `", text), name
    assert harness.section_file("pass") == harness.ENGINE_MD
    assert harness.section_file("lipschitz_admm_1e5") == harness.ENGINE_MD
    assert harness.section_file("casp") == harness.RESULTS_MD


def test_a_rerun_replaces_its_section_and_keeps_the_notes_around_it():
    text = ("intro\n\n<!-- a -->\n### a\nold figures\n<!-- /a -->\nnote on a\n\n"
            "<!-- ab -->\n### ab\nother\n<!-- /ab -->\n")
    new = harness.replace_section(text, "a", "<!-- a -->\n### a\nnew figures\n<!-- /a -->\n")
    assert new == text.replace("old figures", "new figures")
    appended = harness.replace_section(text, "c", "<!-- c -->\nc\n<!-- /c -->\n")
    assert appended == text + "\n<!-- c -->\nc\n<!-- /c -->\n"


@pytest.mark.slow
def test_quick_alone_writes_nothing_either():
    before = written()
    out = subprocess.run([sys.executable, str(BENCH / "bench_leverage.py"), "--quick"],
                         capture_output=True, text=True, timeout=600, cwd=BENCH)
    assert out.returncode == 0, out.stderr[-3000:]
    assert written() == before
    assert "<!-- leverage -->" in out.stdout and "RESULTS.md and results/leverage.jsonl not " \
        "written" in out.stdout


# --------------------------------------------------------------------------- quick runs


@pytest.mark.slow
def test_huber_scale_quick():
    out = run("bench_huber_scale.py")
    assert "'passes'" in out and "'rel_gap'" in out


@pytest.mark.slow
@pytest.mark.skipif(not CASP.exists(), reason="CASP data not available")
def test_svr_comparison_quick():
    pytest.importorskip("sklearn")
    out = run("bench_lipschitz.py")
    assert "'svr_mae'" in out and "'distsketch_mae'" in out


@pytest.mark.slow
@pytest.mark.skipif(not CASP.exists(), reason="CASP data not available")
def test_joint_quantile_quick():
    out = run("bench_quantile.py")
    assert "'crossing_mean'" in out


@pytest.mark.slow
@pytest.mark.skipif(not RF1.exists(), reason="rf1 data not available")
def test_rf1_quick():
    out = run("bench_rf1.py")
    assert "ARRMSE" in out and "'arrmse_mean'" in out


@pytest.mark.slow
@pytest.mark.skipif(not CASP.exists(), reason="CASP data not available")
def test_nystroem_pipelines_quick():
    pytest.importorskip("sklearn")
    out = run("bench_pipelines.py")
    assert out.count("'sklearn_objective'") == 3


@pytest.mark.slow
def test_friedman_quick():
    pytest.importorskip("sklearn")
    out = run("bench_friedman.py")
    assert "'rel_mse'" in out and "Gaussian (p = 1)" in out


@pytest.mark.slow
def test_leverage_quick():
    out = run("bench_leverage.py")
    assert "'LeverageScores'" in out and "'SubSampling'" in out


@pytest.mark.slow
@pytest.mark.skipif(not BIBTEX.exists(), reason="Bibtex data not available")
def test_cv_cost_quick():
    out = run("bench_cv.py")
    assert "'n_scores': 500" in out and "<!-- cv -->" in out


@pytest.mark.slow
@pytest.mark.skipif(not USPS.exists(), reason="USPS data not available")
def test_usps_reduced_rank_quick():
    out = run("bench_usps_rr.py")
    assert "rr {" in out and "iokr {" in out


@pytest.mark.slow
@pytest.mark.skipif(not BIBTEX.exists(), reason="Bibtex data not available")
def test_bibtex_reduced_rank_quick():
    out = run("bench_bibtex_rr.py")
    assert "rr_tuned {" in out and "iokr_shared {" in out


@pytest.mark.slow
def test_import_quick():
    out = run("bench_import.py")
    assert '"import_beyond_deps_s"' in out and '"sklearn": false' in out


@pytest.mark.slow
@pytest.mark.skipif(not RF1.exists(), reason="rf1 data not available")
def test_cli_regression_quick():
    pytest.importorskip("sklearn")
    out = run("bench_cli_regression.py")
    assert out.startswith("rf1 ") and '"nystroem"' in out and '"best"' in out


@pytest.mark.slow
def test_falkon_quick_or_its_skip():
    """Without Falkon (torch stays out of the project's extras) the script says why and ends
    with status 0; with it, the quick side-by-side table."""
    out = run("bench_falkon.py")
    if importlib.util.find_spec("falkon") is None:
        assert "skipped: Falkon is not importable" in out
    else:
        assert "| Falkon float64 |" in out and "| distsketch PCG, 20 it. |" in out


@pytest.mark.slow
def test_large_m_quick():
    """PCG against the direct solve on a tiny synthetic problem."""
    out = run("bench_large_m.py")
    assert "PCG" in out or "pcg" in out


@pytest.mark.slow
def test_lipschitz_admm_quick():
    """The ADMM route against Newton on a tiny synthetic Huber problem."""
    out = run("bench_lipschitz_admm.py")
    assert "admm" in out.lower() and "newton" in out.lower()


@pytest.mark.slow
@pytest.mark.skipif(not BIBTEX.exists(), reason="Bibtex data not available")
def test_driver_threads_quick():
    out = run("bench_driver_threads.py")
    assert "| 1 |" in out and "auto (chose " in out and "Cholesky" in out


@pytest.mark.slow
@pytest.mark.skipif(not BIBTEX.exists(), reason="Bibtex data not available")
def test_sparse_blocks_quick():
    out = run("bench_sparse_blocks.py")
    assert "crossover densities" in out and "sparse×dense" in out


@pytest.mark.slow
def test_small_fits_quick():
    pytest.importorskip("sklearn")
    out = run("bench_small_fits.py")
    assert "eps" in out and "quantile" in out and "CPU" in out
