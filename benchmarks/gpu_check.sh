#!/usr/bin/env bash
# The CUDA path on a borrowed GPU machine, in one run within a hard time budget: install the
# brought wheels (dask, distributed, zarr and the dependencies that machine lacks), record the
# device and versions, run `pytest -m gpu`, then benchmarks/bench_gpu.py --quick and (time
# left) --factor-only and --sparse-only, every log and JSON into OUTDIR. Always exits 0 after writing
# OUTDIR/summary.json (each step's status, exit code, seconds; the pytest counts), printed last.
#
#   bash benchmarks/gpu_check.sh OUTDIR [--budget SECONDS]      # default budget 330 s
#
# ---- How a session with a GPU runs it (device tool `run`; 15 min of device time in all) ----
# 1. Here, first: `make gpu-wheels` (copies ../shared/wheels/py312/*.whl into the git-ignored
#    .gpu-wheels/, about 12 MiB; ignored paths travel only when named in `carry`).
# 2. run(command='bash benchmarks/gpu_check.sh "$OUT" --budget 330',
#        carry=[".gpu-wheels"], timeout_s=360)
#    (no `kind`: one H100 is plenty). The files come back under files_at: summary.json,
#    env.txt/env.json, gpu-tests.{log,xml}, bench-quick.{log,json}, bench-factor.{log,json},
#    bench-sparse.{log,json}.
# 3. give_back() unless rerunning at once. A rerun of one part on the still-warm machine
#    (.gpu-site/ stays there, so the install is skipped):
#        run(command='GPU_CHECK_STEPS=install,env,sparse bash benchmarks/gpu_check.sh "$OUT" --budget 240',
#            carry=[".gpu-wheels"], timeout_s=270)
#    The full benchmark's parts (RESULTS.md section gpu: pass, decode, pcg), each one command
#    within the per-command limit (step bench_parts, not run by default, takes what is left):
#        run(command='GPU_CHECK_STEPS=install,parts GPU_CHECK_PARTS=pcg bash benchmarks/gpu_check.sh "$OUT" --budget 540',
#            carry=[".gpu-wheels"], timeout_s=570)
# 4. Here, record what came back (the machine's copy of the tree never returns): the sections
#    name the GPU machine, its date and its command:
#        python benchmarks/bench_gpu.py --record-json FILES_AT/bench-factor.json FILES_AT/bench-sparse.json
#    and, once every part of section gpu was measured, their bench-parts.json files together.
# ----------------------------------------------------------------------------------------------
#
# Budget B (seconds; the run ends by B + ~1 s): install <= 90 s and env probe <= 40 s out of the
# time left; tests min(B*180/330, left - B*90/330) (180 s at the default: the benchmark keeps at
# least B*90/330); bench --quick min(B*100/330, left); bench --factor-only min(B*45/330, left);
# bench --sparse-only whatever is left.
# Each step runs under `timeout -k 2 LIMIT` (its whole process group is signalled); 5 s stay
# reserved for the kill grace and summary.json. Step statuses: ok, failed, timeout, skipped
# (install not needed, or not in GPU_CHECK_STEPS), not_run (no time left), no_tests (pytest
# exit 5), no_gpu (bench_gpu.py refused: no CuPy/device).
#
# The pytest config (filterwarnings = error, --strict-markers) is kept as it is: a warning
# CuPy raises fails the test; summary.json lists such failures under pytest.warning_failures
# (and summary.import_warnings / env.json the warnings importing each module raised). When some
# failures are such warnings and >= 20 s of the tests' share remain, a diagnostic rerun with
# `-W default` (step tests_w_default, gpu-tests-w-default.{log,xml}, summary.pytest_w_default)
# shows how those tests fare otherwise. Without pip, the install unzips the wheels (none of
# them has a .data/ part). bench_gpu.py's JSON is rewritten after each measurement, so a
# benchmark cut by its timeout still brings back what it measured ("complete": false).
#
# Environment (mainly for tests/test_gpu_check.py, which runs this script without a GPU):
#   GPU_CHECK_PYTHON          interpreter (default python3)
#   GPU_WHEELS                wheel folder (default .gpu-wheels)
#   GPU_SITE                  pip --target folder put first on PYTHONPATH (default .gpu-site)
#   GPU_CHECK_FORCE_INSTALL=1 install even when dask, distributed and zarr import
#   GPU_CHECK_PIP_ARGS        extra pip arguments (e.g. --python-version 3.12)
#   GPU_CHECK_STEPS           comma list of install,env,tests,bench,factor,sparse,parts (default:
#                             all but parts)
#   GPU_CHECK_PARTS           bench_gpu.py --parts of step parts (default pass,decode,pcg)
#   GPU_CHECK_PYTEST_TARGETS  pytest paths instead of the configured testpaths
set -u

usage() { echo "usage: bash benchmarks/gpu_check.sh OUTDIR [--budget SECONDS]" >&2; exit 2; }
OUTDIR="" BUDGET=330
while (($#)); do
    case $1 in
        --budget) (($# >= 2)) || usage; BUDGET=$2; shift 2 ;;
        --budget=*) BUDGET=${1#--budget=}; shift ;;
        -h|--help) usage ;;
        *) [[ -z $OUTDIR ]] || usage; OUTDIR=$1; shift ;;
    esac
done
[[ -n $OUTDIR ]] || usage
[[ $BUDGET =~ ^[0-9]+$ ]] && ((BUDGET > 0)) || { echo "gpu_check: --budget wants whole seconds > 0" >&2; exit 2; }

now_ms() { date +%s%3N; }
START_MS=$(now_ms)
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 2
mkdir -p "$OUTDIR" && OUT=$(cd "$OUTDIR" && pwd) || { echo "gpu_check: cannot create $OUTDIR" >&2; exit 2; }

PY=${GPU_CHECK_PYTHON:-python3}
WHEELS=${GPU_WHEELS:-$ROOT/.gpu-wheels}
SITE=${GPU_SITE:-$ROOT/.gpu-site}
STEPS=",${GPU_CHECK_STEPS:-install,env,tests,bench,factor,sparse},"
RESERVE_S=5   # kill grace (2 s) + summary.json
END_MS=$((START_MS + (BUDGET - RESERVE_S) * 1000))
TEST_SHARE=$((BUDGET * 180 / 330)) BENCH_MIN=$((BUDGET * 90 / 330)) QUICK_SHARE=$((BUDGET * 100 / 330))
FACTOR_SHARE=$((BUDGET * 45 / 330))
export PYTHONPATH="$SITE:$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
STEPS_TSV="$OUT/steps.tsv"
: >"$STEPS_TSV"
TMPD=$(mktemp -d) || exit 2
trap 'rm -rf "$TMPD"' EXIT

say() { printf 'gpu_check: %s\n' "$*"; }
left_s() { local l=$(((END_MS - $(now_ms)) / 1000)); echo $((l > 0 ? l : 0)); }
min() { echo $(($1 < $2 ? $1 : $2)); }
wanted() { [[ $STEPS == *",$1,"* ]]; }
# record NAME STATUS RC SECONDS LIMIT NOTE
record() { printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" "${6//$'\t'/ }" >>"$STEPS_TSV"; }

# step NAME LIMIT LOG CMD...: run CMD under `timeout` with stdout+stderr to LOG (a file, never a
# pipe: a leftover grandchild cannot hold the script up); sets RC, STATUS, SECS.
step() {
    local name=$1 limit=$2 log=$3 t0
    shift 3
    if ((limit < 1)); then
        RC="" STATUS=not_run SECS=0
        say "$name: not run (no time left in the budget)"
        record "$name" "$STATUS" "" 0 "$limit" "no time left"
        return
    fi
    local cmd="$*"
    ((${#cmd} <= 300)) || cmd="${cmd:0:300}..."
    say "$name: up to ${limit}s: $cmd"
    t0=$(now_ms)
    timeout -k 2 "$limit" "$@" >"$log" 2>&1 </dev/null
    RC=$?
    SECS=$(awk -v ms=$(($(now_ms) - t0)) 'BEGIN { printf "%.1f", ms / 1000 }')
    case $RC in
        0) STATUS=ok ;;
        124 | 137) STATUS=timeout ;;
        *) STATUS=failed ;;
    esac
    say "$name: $STATUS (exit $RC, ${SECS}s)"
}

say "budget ${BUDGET}s, output in $OUT, python: $(command -v "$PY" || echo "$PY (not found)")"

# ---- 1. wheels -------------------------------------------------------------------------------
if ! wanted install; then
    record install skipped "" 0 0 "not in GPU_CHECK_STEPS"
elif (($(left_s) < 1)); then
    say "install: not run (no time left in the budget)"
    record install not_run "" 0 0 "no time left"
elif [[ ${GPU_CHECK_FORCE_INSTALL:-0} != 1 ]] &&
    timeout -k 2 "$(min 60 "$(left_s)")" "$PY" -c "import dask, distributed, zarr" >/dev/null 2>&1; then
    say "install: skipped (dask, distributed and zarr import already)"
    record install skipped 0 0 0 "dask, distributed and zarr import already"
else
    shopt -s nullglob
    wheels=("$WHEELS"/*.whl)
    shopt -u nullglob
    if ((${#wheels[@]} == 0)); then
        say "install: failed: no wheels in $WHEELS (make gpu-wheels here, carry .gpu-wheels)"
        record install failed "" 0 0 "no wheels in $WHEELS"
    else
        limit=$(min 90 "$(left_s)")
        # shellcheck disable=SC2086  # GPU_CHECK_PIP_ARGS is a word list
        if ((limit < 1)) || timeout -k 1 "$(min 20 "$limit")" "$PY" -m pip --version >/dev/null 2>&1; then
            how="pip"
            step install "$limit" "$OUT/install.log" \
                "$PY" -m pip install -q --no-index --no-deps --no-compile --upgrade \
                --disable-pip-version-check --target "$SITE" ${GPU_CHECK_PIP_ARGS:-} "${wheels[@]}"
        else
            # no pip: these wheels have no .data/ part, so unzipping them is what pip would do
            how="unzip (no pip)"
            step install "$limit" "$OUT/install.log" "$PY" -c '
import sys, zipfile
for whl in sys.argv[2:]:
    zipfile.ZipFile(whl).extractall(sys.argv[1])
    print("unzipped", whl)' "$SITE" "${wheels[@]}"
        fi
        [[ $STATUS == not_run ]] ||
            record install "$STATUS" "$RC" "$SECS" "$limit" "${#wheels[@]} wheels into $SITE by $how"
    fi
fi

# ---- 2. versions and device ------------------------------------------------------------------
if wanted env; then
    cat >"$TMPD/env_probe.py" <<'PYEOF'
"""Versions, the CUDA runtime/driver, the device (CuPy and nvidia-smi) and a smoke test."""
import contextlib, importlib, importlib.metadata as md, io, json, os, platform, shutil
import subprocess, sys, time, traceback, warnings

out = sys.argv[1]
env = {"python": sys.version.split()[0], "executable": sys.executable,
       "platform": platform.platform(), "cpu_count": os.cpu_count(),
       "pythonpath": os.environ.get("PYTHONPATH", ""), "modules": {}, "distributions": {}}
for name in ("numpy", "scipy", "sklearn", "pandas", "psutil", "dask", "distributed", "zarr",
             "numcodecs", "pytest", "cupy", "distsketch"):
    entry = env["modules"][name] = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            mod = importlib.import_module(name)
            entry.update(version=str(getattr(mod, "__version__", "?")),
                         file=getattr(mod, "__file__", None))
        except Exception as exc:
            entry["error"] = f"{type(exc).__name__}: {exc}"
    if caught:  # under pytest's filterwarnings = error these would fail a test
        entry["import_warnings"] = [f"{w.category.__name__}: {w.message}" for w in caught][:10]
for dist in ("cupy-cuda13x", "cupy-cuda12x", "cupy", "torch", "numpy", "nvidia-cuda-nvrtc",
             "nvidia-cuda-nvrtc-cu13", "nvidia-cuda-runtime", "fastrlock"):
    try:
        env["distributions"][dist] = md.version(dist)
    except md.PackageNotFoundError:
        pass

cuda = env["cuda"] = {"device_count": 0}
show = ""
try:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import cupy
        rt = cupy.cuda.runtime
        cuda["runtime_version"] = rt.runtimeGetVersion()
        cuda["driver_version"] = rt.driverGetVersion()
        cuda["device_count"] = rt.getDeviceCount()
        cuda["devices"] = []
        for i in range(cuda["device_count"]):
            p = rt.getDeviceProperties(i)
            name = p["name"].decode() if isinstance(p["name"], bytes) else p["name"]
            cuda["devices"].append({"id": i, "name": name,
                                    "total_mem_gib": round(p["totalGlobalMem"] / 2**30, 2),
                                    "compute_capability": f"{p['major']}.{p['minor']}",
                                    "multiprocessors": p["multiProcessorCount"]})
        if cuda["device_count"]:
            free, total = rt.memGetInfo()
            cuda["mem_free_gib"] = round(free / 2**30, 2)

            def dense():  # NVRTC compiles an elementwise kernel and a reduction; cuBLAS
                import numpy
                x = cupy.arange(1 << 20, dtype=cupy.float32)
                want = float(numpy.exp(numpy.arange(1 << 20) * 1e-6).sum())
                assert abs(float(cupy.exp(x * 1e-6).sum()) / want - 1) < 1e-3
                a = cupy.ones((512, 512))
                assert float((a @ a)[0, 0]) == 512.0

            def sparse():  # cuSPARSE
                import cupyx.scipy.sparse as csp
                s = csp.random(256, 256, density=0.05, format="csr", dtype=cupy.float64)
                assert (s @ s.T).shape == (256, 256)
                assert (s @ cupy.ones((256, 8))).shape == (256, 8)

            for name, check in (("smoke", dense), ("smoke_sparse", sparse)):
                t = time.perf_counter()
                try:
                    check()
                    cupy.cuda.Device().synchronize()
                    cuda[name] = "ok"
                except Exception as exc:
                    cuda[name] = f"{type(exc).__name__}: {exc}"[:500]
                cuda[f"{name}_s"] = round(time.perf_counter() - t, 3)
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            cupy.show_config()
        show = buf.getvalue()
    if caught:
        cuda["warnings"] = [f"{w.category.__name__}: {w.message}" for w in caught][:10]
except Exception as exc:
    cuda["error"] = f"{type(exc).__name__}: {exc}"
    cuda["traceback"] = traceback.format_exc()[-2000:]
env["gpu_ok"] = bool(cuda.get("device_count")) and cuda.get("smoke") == "ok"

smi = ""
if shutil.which("nvidia-smi"):
    try:
        q = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,memory.used,"
                            "driver_version,compute_cap", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=15)
        env["nvidia_smi"] = q.stdout.strip() or q.stderr.strip()
        smi = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=15).stdout
    except Exception as exc:
        env["nvidia_smi"] = f"{type(exc).__name__}: {exc}"
else:
    env["nvidia_smi"] = "not found"

with open(os.path.join(out, "env.json"), "w") as f:
    json.dump(env, f, indent=1, default=str)
lines = [f"python {env['python']} ({env['executable']}), {env['platform']}, "
         f"{env['cpu_count']} CPUs", f"PYTHONPATH={env['pythonpath']}"]
for name, entry in env["modules"].items():
    lines.append(f"{name}: {entry.get('version') or entry.get('error')}"
                 + (f"  [import warnings: {entry['import_warnings']}]"
                    if "import_warnings" in entry else ""))
lines.append("distributions: " + ", ".join(f"{k} {v}" for k, v in env["distributions"].items()))
lines.append("cuda: " + json.dumps({k: v for k, v in cuda.items() if k != "traceback"}))
lines.append(f"gpu_ok: {env['gpu_ok']}")
lines.append(f"nvidia-smi: {env['nvidia_smi']}")
text = "\n".join(lines) + "\n"
with open(os.path.join(out, "env.txt"), "w") as f:
    f.write(text + "\n" + show + "\n" + smi)
print(text, end="")
PYEOF
    limit=$(min 40 "$(left_s)")
    step env "$limit" "$OUT/env.log" "$PY" "$TMPD/env_probe.py" "$OUT"
    [[ $STATUS == not_run ]] || record env "$STATUS" "$RC" "$SECS" "$limit" ""
    [[ -s $OUT/env.log ]] && sed 's/^/  /' "$OUT/env.log" | tail -n 30
else
    record env skipped "" 0 0 "not in GPU_CHECK_STEPS"
fi

# ---- 3. pytest -m gpu ------------------------------------------------------------------------
pytest_done() {  # pytest_done NAME LOG: status from pytest's exit code, summary line recorded
    [[ $STATUS == not_run ]] && return
    [[ $RC == 5 ]] && STATUS=no_tests
    local line
    line=$(grep -E '(passed|failed|skipped|error|deselected|no tests ran).* in [0-9.]+s' "$2" |
        tail -n 1)
    record "$1" "$STATUS" "$RC" "$SECS" "$limit" "$line"
    say "$1: ${line:-no pytest summary line (see $(basename "$2"))}"
    grep -E '^(FAILED|ERROR) ' "$2" | head -n 25 | sed 's/^/  /'
}
if wanted tests; then
    limit=$(min "$TEST_SHARE" $(($(left_s) - BENCH_MIN)))
    # faulthandler_timeout: a test hanging past 60 s dumps every thread's stack into the log
    # shellcheck disable=SC2086  # GPU_CHECK_PYTEST_TARGETS is a word list
    step tests "$limit" "$OUT/gpu-tests.log" \
        "$PY" -m pytest -m gpu -q -p no:cacheprovider --durations=15 \
        -o faulthandler_timeout=60 --junitxml="$OUT/gpu-tests.xml" ${GPU_CHECK_PYTEST_TARGETS:-}
    pytest_done tests "$OUT/gpu-tests.log"
    # Failures that are warnings turned errors (filterwarnings = error, e.g. a CuPy warning):
    # the config stays as it is, and, time allowing, a diagnostic rerun of the gpu tests with
    # `-W default` (warnings shown, not raised) says how they fare otherwise.
    if [[ $STATUS == failed ]] && [[ -s $OUT/gpu-tests.xml ]] &&
        grep -qE '<(failure|error) message="[^"]*Warning' "$OUT/gpu-tests.xml"; then
        say "tests: some failures are warnings raised as errors (filterwarnings = error)"
        limit=$(min "$TEST_SHARE" $(($(left_s) - BENCH_MIN)))
        ((limit >= 20)) || limit=0
        # shellcheck disable=SC2086
        step tests_w_default "$limit" "$OUT/gpu-tests-w-default.log" \
            "$PY" -m pytest -m gpu -q -p no:cacheprovider -W default -o faulthandler_timeout=60 \
            --junitxml="$OUT/gpu-tests-w-default.xml" ${GPU_CHECK_PYTEST_TARGETS:-}
        pytest_done tests_w_default "$OUT/gpu-tests-w-default.log"
    fi
else
    record tests skipped "" 0 0 "not in GPU_CHECK_STEPS"
fi

# ---- 4. benchmark: --quick, then --factor-only and --sparse-only ----------------------------
bench_status() {  # bench_gpu.py exits 2 with this sentence when there is no CuPy/device
    if [[ $RC == 2 ]] && grep -q "nothing measured, nothing written" "$1"; then
        STATUS=no_gpu
        say "$2: that is: no CuPy or no CUDA device (status no_gpu)"
    fi
}
# bench WANTED NAME LIMIT FILE NOTE_PATTERN SHOW_PATTERN ARGS...: bench_gpu.py ARGS into
# FILE.{log,json} as step NAME, when WANTED is in GPU_CHECK_STEPS; the step's note is the log's
# first line matching NOTE_PATTERN, the lines matching SHOW_PATTERN are echoed.
bench() {
    local wanted_name=$1 name=$2 limit=$3 file=$4 note=$5 show=$6
    shift 6
    if ! wanted "$wanted_name"; then
        record "$name" skipped "" 0 0 "not in GPU_CHECK_STEPS"
        return
    fi
    step "$name" "$limit" "$OUT/$file.log" \
        "$PY" benchmarks/bench_gpu.py "$@" --no-record --json "$OUT/$file.json"
    if [[ $STATUS != not_run ]]; then
        bench_status "$OUT/$file.log" "$name"
        record "$name" "$STATUS" "$RC" "$SECS" "$limit" "$(grep -m1 -E "$note" "$OUT/$file.log")"
        grep -E "$show" "$OUT/$file.log" | sed 's/^/  /'
    fi
}
bench bench bench_quick "$(min "$QUICK_SHARE" "$(left_s)")" bench-quick '^device path:' \
    '^(device path|roofline|n=|decoding|sparse rows)' --quick
bench factor bench_factor "$(min "$FACTOR_SHARE" "$(left_s)")" bench-factor '^factor \(' \
    '^(device path|factor|bench_gpu:)' --factor-only --repeats 3
bench sparse bench_sparse "$(left_s)" bench-sparse '^sparse rows' \
    '^(device path|sparse rows|bench_gpu:)' --sparse-only
bench parts bench_parts "$(left_s)" bench-parts '^(device path|bench_gpu:)' \
    '^(device path|roofline|n=|decoding|PCG|factor|sparse rows|bench_gpu:)' \
    --parts "${GPU_CHECK_PARTS:-pass,decode,pcg}"

# ---- 5. summary.json -------------------------------------------------------------------------
ELAPSED=$(awk -v ms=$(($(now_ms) - START_MS)) 'BEGIN { printf "%.1f", ms / 1000 }')
cat >"$TMPD/summary.py" <<'PYEOF'
"""summary.json from steps.tsv, env.json, gpu-tests.xml and the benchmarks' JSON."""
import glob, json, os, re, sys, xml.etree.ElementTree as ET
out, budget, elapsed = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
def load(name):
    try:
        with open(os.path.join(out, name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None
steps = {}
for row in open(os.path.join(out, "steps.tsv")):
    name, status, rc, secs, limit, note = (row.rstrip("\n").split("\t") + [""] * 6)[:6]
    steps[name] = {"status": status, "rc": int(rc) if rc.lstrip("-").isdigit() else None,
                   "seconds": float(secs or 0), "limit_s": int(limit) if limit.isdigit() else None,
                   "note": note}
env = load("env.json") or {}
cuda = env.get("cuda", {})
LOGS = {"install": "install.log", "env": "env.log", "tests": "gpu-tests.log",
        "tests_w_default": "gpu-tests-w-default.log", "bench_quick": "bench-quick.log",
        "bench_factor": "bench-factor.log", "bench_sparse": "bench-sparse.log",
        "bench_parts": "bench-parts.log"}
for name, step in steps.items():  # what went wrong, at a glance
    if step["status"] in ("failed", "timeout", "no_tests") and name in LOGS:
        try:
            with open(os.path.join(out, LOGS[name]), errors="replace") as f:
                step["log_tail"] = [line.rstrip()[:300] for line in f.readlines()[-8:]]
        except OSError:
            pass
WARNED = re.compile(r"\b\w*Warning: ")
def pytest_counts(step, xml):
    """Counts from the pytest summary line and from its junit XML (absent when killed)."""
    py = {"summary_line": steps.get(step, {}).get("note", "")}
    for count, word in re.findall(r"(\d+) (passed|failed|skipped|errors?|deselected|xfailed"
                                  r"|xpassed|warnings?)", py["summary_line"]):
        py[word.rstrip("s") if word in ("errors", "warnings") else word] = int(count)
    py["all_skipped"] = bool(py.get("skipped")) and not any(
        py.get(k) for k in ("passed", "failed", "error", "xfailed", "xpassed"))
    try:
        root = ET.parse(os.path.join(out, xml)).getroot()
        suite = root if root.tag == "testsuite" else root.find("testsuite")
        py["junit"] = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
        py["junit"]["time_s"] = float(suite.get("time", 0))
        bad, warned = [], []
        for case in suite.iter("testcase"):
            for kind in ("failure", "error"):
                el = case.find(kind)
                if el is None:
                    continue
                test = f"{case.get('classname')}::{case.get('name')}"
                message = el.get("message") or ""
                msg = message.splitlines()[0][:200] if message else ""
                bad.append(f"{kind}: {test}: {msg}")
                if WARNED.search(message) or WARNED.search((el.text or "")[-2000:]):
                    warned.append(f"{test}: {msg}")
        py["failed_tests"], py["warning_failures"] = bad[:40], warned[:40]
    except (OSError, ET.ParseError, AttributeError) as exc:
        py["junit"] = None
        py["junit_missing"] = f"{type(exc).__name__}: {exc}"
    return py
py = pytest_counts("tests", "gpu-tests.xml")
def bench(name, keys):
    data = load(name)
    return None if data is None else {k: data.get(k) for k in keys if k in data}
devices = cuda.get("devices") or []
summary = {
    "budget_s": budget, "elapsed_s": elapsed, "within_budget": elapsed <= budget,
    "gpu_ok": bool(env.get("gpu_ok")),
    "device": devices[0] if devices else None,
    "cuda": {k: cuda.get(k) for k in ("runtime_version", "driver_version", "device_count",
                                      "mem_free_gib", "smoke", "smoke_sparse", "error",
                                      "warnings") if k in cuda},
    "versions": {k: v.get("version") or v.get("error")
                 for k, v in env.get("modules", {}).items()},
    "import_warnings": {k: v["import_warnings"] for k, v in env.get("modules", {}).items()
                        if v.get("import_warnings")},
    "steps": steps, "pytest": py,
    "pytest_w_default": (pytest_counts("tests_w_default", "gpu-tests-w-default.xml")
                         if "tests_w_default" in steps else None),
    "bench_quick": bench("bench-quick.json", ("complete", "emulated", "device_path",
                                              "roofline", "pass", "decode", "sparse_crossover")),
    "bench_factor": bench("bench-factor.json", ("complete", "emulated", "device_path", "factor",
                                                "device_factor_min_m", "device_wins_from")),
    "bench_parts": bench("bench-parts.json", ("complete", "emulated", "device_path", "parts",
                                              "roofline", "pass", "decode", "pcg")),
    "bench_sparse": bench("bench-sparse.json", ("complete", "emulated", "device_path",
                                                "sparse_crossover", "device_sparse_max_density")),
}
if summary["bench_sparse"] is not None:
    summary["bench_sparse"]["rows"] = len((load("bench-sparse.json") or {}).get("sparse_rows") or [])
summary["ok"] = (summary["gpu_ok"] and py.get("passed", 0) > 0 and not py.get("failed")
                 and not py.get("error")
                 and all(s["status"] in ("ok", "skipped") for s in steps.values()))
summary["files"] = sorted(os.path.basename(p) for p in glob.glob(os.path.join(out, "*")))
if "summary.json" not in summary["files"]:
    summary["files"].append("summary.json")
with open(os.path.join(out, "summary.json.tmp"), "w") as f:
    json.dump(summary, f, indent=1, default=str)
os.replace(os.path.join(out, "summary.json.tmp"), os.path.join(out, "summary.json"))
PYEOF
if ! timeout -k 1 3 "$PY" "$TMPD/summary.py" "$OUT" "$BUDGET" "$ELAPSED" >"$OUT/summary.log" 2>&1; then
    # the interpreter itself is broken: a bare summary from the step table, so that one exists
    {
        printf '{"budget_s": %s, "elapsed_s": %s, "summary_error": "see summary.log", "steps": {' \
            "$BUDGET" "$ELAPSED"
        sep=""
        while IFS=$'\t' read -r name status rc secs _limit _note; do
            printf '%s"%s": {"status": "%s", "rc": %s, "seconds": %s}' \
                "$sep" "$name" "$status" "${rc:-null}" "${secs:-0}"
            sep=", "
        done <"$STEPS_TSV"
        printf '}}\n'
    } >"$OUT/summary.json"
fi
[[ -s $OUT/summary.log ]] || rm -f "$OUT/summary.log"
say "done in ${ELAPSED}s of ${BUDGET}s; summary.json:"
cat "$OUT/summary.json"
echo
exit 0
