"""Shared helpers of the benchmark scripts: machine summary, baselines, result files.

Every script measures distsketch and its baselines in the same run (this machine is shared
and noisy), prints its figures, appends a JSON record to ``results/<name>.jsonl`` and
replaces its own section of ``RESULTS.md`` (between ``<!-- name -->`` markers).
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import os
import platform
import re
import resource
import shlex
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
RESULTS_MD = HERE / "RESULTS.md"
RESULTS_DIR = HERE / "results"


def machine() -> dict:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    import dask
    import zarr

    return {"cpu": cpu, "cores": os.cpu_count(), "ram_gib": round(mem, 1),
            "python": platform.python_version(), "numpy": np.__version__,
            "dask": dask.__version__, "zarr": zarr.__version__}


def gemm_gflops(n: int = 2000, repeats: int = 5) -> float:
    """Median float64 GEMM rate of numpy on this machine, now (GFLOP/s)."""
    a = np.random.default_rng(0).standard_normal((n, n))
    rates = []
    for _ in range(repeats):
        t = time.perf_counter()
        a @ a
        rates.append(2 * n**3 / (time.perf_counter() - t) / 1e9)
    return float(np.median(rates))


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far (MiB, Linux ru_maxrss is KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_child(args: list[str], env: dict | None = None) -> dict:
    """Run ``python <args>`` in a fresh process; it prints one JSON line last."""
    out = subprocess.run([sys.executable, *args], check=True, capture_output=True, text=True,
                         env={**os.environ, **(env or {})})
    return json.loads(out.stdout.strip().splitlines()[-1])


def command_line() -> str:
    return "python " + " ".join(shlex.quote(a) for a in [os.path.relpath(sys.argv[0])] + sys.argv[1:])


def record(name: str, markdown: str, data: dict) -> None:
    """Append ``data`` to results/<name>.jsonl and replace the section ``name`` of RESULTS.md."""
    RESULTS_DIR.mkdir(exist_ok=True)
    stamp = _dt.datetime.now().astimezone().isoformat(timespec="seconds")
    with open(RESULTS_DIR / f"{name}.jsonl", "a") as f:
        f.write(json.dumps({"date": stamp, "command": command_line(), "machine": machine(), **data}) + "\n")
    m = machine()
    header = (f"<!-- {name} -->\n## {name}\n\n"
              f"Command: `{command_line()}`  \nDate: {stamp}  \n"
              f"Machine: {m['cpu']}, {m['cores']} cores, {m['ram_gib']} GiB RAM; Python {m['python']}, "
              f"numpy {m['numpy']}, dask {m['dask']}, zarr {m['zarr']}\n\n")
    section = header + markdown.strip() + f"\n<!-- /{name} -->\n"
    text = RESULTS_MD.read_text() if RESULTS_MD.exists() else (
        "# Benchmark results\n\nEach section is written by the script named in it; rerun the "
        "command to refresh it. Raw records: `results/*.jsonl`.\n\n")
    pattern = re.compile(rf"<!-- {re.escape(name)} -->.*?<!-- /{re.escape(name)} -->\n", re.S)
    text = pattern.sub(lambda _: section, text) if pattern.search(text) else text + "\n" + section
    RESULTS_MD.write_text(text)


class PassTimes(logging.Handler):
    """Collects the pass wall time that ``distsketch.engine.accumulate`` logs after each pass."""

    def __init__(self):
        super().__init__(level=logging.INFO)
        self.seconds: list[float] = []

    def emit(self, record: logging.LogRecord) -> None:
        if hasattr(record, "pass_seconds"):
            self.seconds.append(record.pass_seconds)


def watch_pass() -> PassTimes:
    """A :class:`PassTimes` attached to distsketch's pass logger (INFO)."""
    times = PassTimes()
    logger = logging.getLogger("distsketch.engine.accumulate")
    logger.addHandler(times)
    logger.setLevel(logging.INFO)
    return times
