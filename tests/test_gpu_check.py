"""benchmarks/gpu_check.sh, the one script a session with a lent GPU machine runs, checked here
without a GPU: its steps, statuses, time budget and wheel install (the numpy stand-in of the
CUDA backend runs the benchmark's --quick form; the real-CuPy tests skip)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuhelpers import cupy_skip_reason

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"
#: The brought wheels (../shared/wheels beside the clone; README there).
WHEELS = Path(__file__).resolve().parents[2] / "shared" / "wheels" / "py312"
STEPS = ("install", "env", "tests", "bench_quick", "bench_factor", "bench_sparse", "bench_parts")
STATUSES = {"ok", "failed", "timeout", "skipped", "not_run", "no_tests", "no_gpu"}

pytestmark = pytest.mark.skipif(shutil.which("timeout") is None, reason="no coreutils timeout")


def run_check(out: Path, budget: int, **env: str) -> tuple[subprocess.CompletedProcess, float, dict]:
    """Run the script with this interpreter; (process, wall seconds, summary.json)."""
    full = {**os.environ, "GPU_CHECK_PYTHON": sys.executable, **env}
    t = time.perf_counter()
    proc = subprocess.run(["bash", str(SCRIPT), str(out), "--budget", str(budget)], cwd=ROOT,
                          env=full, capture_output=True, text=True, timeout=budget + 60,
                          stdin=subprocess.DEVNULL)
    wall = time.perf_counter() - t
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert set(STEPS) <= set(summary["steps"]) <= {*STEPS, "tests_w_default"}
    assert all(s["status"] in STATUSES for s in summary["steps"].values()), summary["steps"]
    assert proc.stdout.rstrip().endswith("}"), "summary.json is not printed last"
    return proc, wall, summary


@pytest.mark.slow
def test_without_a_gpu_every_step_is_recorded_and_the_run_exits_0(tmp_path):
    if cupy_skip_reason() is None:
        pytest.skip("a GPU is present: the script would run the real device checks")
    out = tmp_path / "out"
    results = ROOT / "benchmarks" / "RESULTS.md"
    before = results.read_text() if results.exists() else None
    proc, wall, summary = run_check(out, 60, GPU_SITE=str(tmp_path / "site"))
    assert wall < 65 and summary["elapsed_s"] <= 60 and summary["within_budget"]
    assert {"budget_s", "elapsed_s", "gpu_ok", "device", "cuda", "versions", "steps", "pytest",
            "bench_quick", "bench_factor", "bench_sparse", "ok", "files"} <= set(summary)
    steps = summary["steps"]
    # dask, distributed and zarr import here: nothing to install
    assert steps["install"]["status"] == "skipped" and not (tmp_path / "site").exists()
    assert steps["env"]["status"] == "ok"
    env = json.loads((out / "env.json").read_text())
    assert env["gpu_ok"] is False and "cupy" in env["modules"] and "dask" in env["modules"]
    assert "gpu_ok: False" in (out / "env.txt").read_text()
    assert summary["gpu_ok"] is False and summary["ok"] is False and summary["device"] is None
    # the gpu-marked tests all skip (no CuPy); counts from the summary line and the junit XML
    assert steps["tests"]["status"] == "ok" and steps["tests"]["rc"] == 0
    py = summary["pytest"]
    assert py["skipped"] > 0 and py["all_skipped"] and not py.get("passed")
    assert py["junit"]["skipped"] == py["junit"]["tests"] == py["skipped"]
    assert py["failed_tests"] == [] and py["warning_failures"] == []
    assert "skipped" in py["summary_line"] and py["summary_line"] in proc.stdout
    # --quick runs on the numpy stand-in; the real --factor-only and --sparse-only refuse
    # without a device
    assert steps["bench_quick"]["status"] == "ok"
    assert summary["bench_quick"]["complete"] and summary["bench_quick"]["emulated"]
    assert steps["bench_factor"]["status"] == "no_gpu" and steps["bench_factor"]["rc"] == 2
    assert summary["bench_factor"] is None
    assert steps["bench_parts"]["status"] == "skipped"  # only when asked for (GPU_CHECK_STEPS)
    assert steps["bench_sparse"]["status"] == "no_gpu" and steps["bench_sparse"]["rc"] == 2
    assert summary["bench_sparse"] is None  # nothing measured: no JSON
    for name in ("env.txt", "env.json", "gpu-tests.log", "gpu-tests.xml", "bench-quick.log",
                 "bench-quick.json", "bench-factor.log", "bench-sparse.log", "summary.json"):
        assert (out / name).is_file() and name in summary["files"], name
    # the benchmark records nothing into the tree (--no-record; its JSON went to OUTDIR)
    assert (results.read_text() if results.exists() else None) == before


@pytest.mark.slow
def test_the_parts_step_runs_only_when_asked_and_refuses_without_a_gpu(tmp_path):
    if cupy_skip_reason() is None:
        pytest.skip("a GPU is present: the step would measure it")
    proc, wall, summary = run_check(tmp_path / "out", 30, GPU_CHECK_STEPS="parts",
                                    GPU_CHECK_PARTS="decode")
    steps = summary["steps"]
    assert steps["bench_parts"]["status"] == "no_gpu" and steps["bench_parts"]["rc"] == 2
    assert "--parts decode" in proc.stdout
    assert all(s["status"] == "skipped" for k, s in steps.items() if k != "bench_parts")


SLEEPING_TEST = '''
import subprocess, time
import pytest

@pytest.mark.gpu
def test_sleeps(tmp_path):
    child = subprocess.Popen(["sleep", "300"])
    open({pidfile!r}, "w").write(str(child.pid))
    time.sleep(300)
'''


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in ("Z", "X")


@pytest.mark.slow
def test_a_step_past_its_share_is_killed_and_recorded_as_timed_out(tmp_path):
    tests = tmp_path / "sleeping"
    tests.mkdir()
    (tests / "pytest.ini").write_text("[pytest]\nmarkers =\n    gpu: a device test\n")
    pidfile = tmp_path / "child.pid"
    (tests / "test_sleep.py").write_text(SLEEPING_TEST.format(pidfile=str(pidfile)))
    out = tmp_path / "out"
    budget = 16  # tests: min(16*180/330, time left (< 16 - 5) - 16*90/330) = about 6 s
    proc, wall, summary = run_check(out, budget, GPU_CHECK_STEPS="tests",
                                    GPU_CHECK_PYTEST_TARGETS=str(tests))
    assert wall < budget + 3, wall
    steps = summary["steps"]
    assert steps["tests"]["status"] == "timeout" and steps["tests"]["rc"] in (124, 137)
    limit = steps["tests"]["limit_s"]
    assert 4 <= limit <= 8 and limit - 0.5 < steps["tests"]["seconds"] < limit + 3
    assert summary["pytest"]["junit"] is None  # pytest was killed before writing it
    for name in ("install", "env", "bench_quick", "bench_factor", "bench_sparse", "bench_parts"):
        assert steps[name]["status"] == "skipped", name
    # the whole process group went: the test's own child too
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while not _gone(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _gone(pid)

    # a budget below the reserve runs nothing, and still writes the summary and exits 0
    proc, wall, summary = run_check(tmp_path / "out2", 3)
    assert wall < 6
    assert {s["status"] for s in summary["steps"].values()} <= {"not_run", "skipped"}
    assert summary["steps"]["tests"]["status"] == "not_run"


WARNING_TEST = '''
import warnings
import pytest

@pytest.mark.gpu
def test_warns():
    warnings.warn("the device says something", UserWarning)

@pytest.mark.gpu
def test_quiet():
    pass
'''


@pytest.mark.slow
def test_warnings_raised_as_errors_are_recorded_and_rerun_with_w_default(tmp_path):
    tests = tmp_path / "warning"
    tests.mkdir()
    (tests / "pytest.ini").write_text("[pytest]\nmarkers =\n    gpu: a device test\n"
                                      "filterwarnings =\n    error\n")
    (tests / "test_warns.py").write_text(WARNING_TEST)
    proc, wall, summary = run_check(tmp_path / "out", 60, GPU_CHECK_STEPS="tests",
                                    GPU_CHECK_PYTEST_TARGETS=str(tests))
    steps, py = summary["steps"], summary["pytest"]
    assert steps["tests"]["status"] == "failed" and steps["tests"]["rc"] == 1
    assert py["failed"] == 1 and py["passed"] == 1 and py["junit"]["failures"] == 1
    assert len(py["warning_failures"]) == 1 and "test_warns" in py["warning_failures"][0]
    assert "log_tail" in steps["tests"]
    # the diagnostic rerun: warnings shown, not raised (the config itself is unchanged)
    assert steps["tests_w_default"]["status"] == "ok"
    assert summary["pytest_w_default"]["passed"] == 2
    assert summary["pytest_w_default"]["warning"] == 1
    assert summary["ok"] is False


@pytest.mark.slow
@pytest.mark.skipif(not WHEELS.is_dir(), reason=f"no brought wheels under {WHEELS}")
def test_the_install_step_puts_the_wheels_into_the_target(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for whl in WHEELS.glob("*.whl"):
        shutil.copyfile(whl, wheels / whl.name)  # a copy, as the device gets one
    site = tmp_path / "site"
    env = {"GPU_WHEELS": str(wheels), "GPU_SITE": str(site), "GPU_CHECK_FORCE_INSTALL": "1",
           "GPU_CHECK_STEPS": "install"}
    if sys.version_info[:2] != (3, 12):
        # the wheels are for the device's CPython 3.12 (numcodecs, google-crc32c are cp312):
        # pip installs them into a --target for that version without importing them here
        env["GPU_CHECK_PIP_ARGS"] = "--python-version 3.12 --only-binary=:all:"
    proc, wall, summary = run_check(tmp_path / "out", 60, **env)
    install = summary["steps"]["install"]
    assert install["status"] == "ok" and install["rc"] == 0, (tmp_path / "out" / "install.log").read_text()
    assert f"{len(list(wheels.glob('*.whl')))} wheels into {site} by pip" == install["note"]
    for pkg in ("dask", "distributed", "zarr", "numcodecs", "tornado", "zict", "tblib", "partd"):
        assert (site / pkg / "__init__.py").is_file(), pkg
    dists = {p.name.split("-")[0].lower() for p in site.glob("*.dist-info")}
    assert {whl.name.split("-")[0].lower() for whl in wheels.glob("*.whl")} <= dists
    assert list(site.glob("numcodecs/*.cpython-312-*.so"))
    assert not list(site.rglob("*.pyc"))  # --no-compile

    # no wheels to bring: the step fails with the reason, the run still ends well
    proc, wall, summary = run_check(tmp_path / "out2", 20, GPU_WHEELS=str(tmp_path / "none"),
                                    GPU_SITE=str(tmp_path / "site2"), GPU_CHECK_FORCE_INSTALL="1",
                                    GPU_CHECK_STEPS="install")
    assert summary["steps"]["install"]["status"] == "failed"
    assert "no wheels" in summary["steps"]["install"]["note"]
