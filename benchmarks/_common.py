"""The benchmarks' one harness: arguments, data, measurements, result files.

Every script measures distsketch and its baselines in the same run (this machine is shared
and noisy), prints its figures, appends a JSON record to ``results/<name>.jsonl`` and
replaces its own section of ``RESULTS.md`` (what an adopter asks: accuracy, speed and memory
against other tools, scaling, GPU) or of ``ENGINE.md`` (how the engine spends its time:
:data:`ENGINE_SECTIONS`), between the markers ``<!-- name -->`` and ``<!-- /name -->``.
Text outside the markers (the summary table, notes) is written by hand and kept by a rerun.

- Arguments: :func:`parser` gives every script ``--quick`` (a smoke run on small sizes),
  ``--no-record`` (print the section instead of writing it; RESULTS.md, ENGINE.md and
  ``results/`` stay as they are; ``--quick`` implies it) and, where a script repeats its
  timings, ``--repeats``.
- Data: the public data sets under ``$DISTSKETCH_DATA``, else ``../shared/data`` beside the
  clone (:func:`data_root`); :func:`require` ends a script cleanly (status 0) when its data
  are absent.
- Measurements: :func:`gemm_gflops`, :func:`exp_rate_all_cores`, :func:`peak_rss_mib`,
  :func:`run_child` (a fresh process), :func:`timed`, :func:`load_average`,
  :func:`watch_pass` (the pass time distsketch logs).
- Results: :func:`record`.
"""

from __future__ import annotations

import argparse
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
import threading
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
RESULTS_MD = HERE / "RESULTS.md"
ENGINE_MD = HERE / "ENGINE.md"
RESULTS_DIR = HERE / "results"

#: Sections of ENGINE.md (engine internals: the pass against the roofline, the driver's
#: threads, sparse kernel blocks, the store's costs, code against a base revision, the CV fold
#: algebra, the Lipschitz solver routes, the device's sparse crossover and PCG preconditioner);
#: a family name also
#: covers its ``<name>_<size>`` variants (``lipschitz_admm_1e5``). Every other section is in
#: RESULTS.md.
ENGINE_SECTIONS = frozenset({"pass", "compare", "store", "sparse_blocks", "driver_threads", "cv",
                             "lipschitz_admm", "gpu_sparse", "gpu_factor"})

_HEADERS = {
    RESULTS_MD: "# Benchmark results\n\nEach section is written by the script named in it; rerun "
                "the command to refresh it. Raw records: `results/*.jsonl`.\n\n",
    ENGINE_MD: "# Engine benchmarks\n\nEach section is written by the script named in it; rerun "
               "the command to refresh it. Raw records: `results/*.jsonl`.\n\n",
}


# --------------------------------------------------------------------------- arguments


def parser(doc: str | None, *, quick: str, repeats: int | None = None,
           repeats_help: str = "timed repetitions (medians reported)") -> argparse.ArgumentParser:
    """The argument parser every benchmark starts from.

    Parameters
    ----------
    doc : str or None
        The script's docstring; its first line describes the script.
    quick : str
        What ``--quick`` runs (sizes, repeats); it writes nothing.
    repeats : int, optional
        The default of ``--repeats``; None: the script has no such option.
    repeats_help : str
        The help of ``--repeats``.
    """
    ap = argparse.ArgumentParser(description=doc.strip().splitlines()[0] if doc else None)
    ap.add_argument("--quick", action="store_true",
                    help=f"smoke run: {quick}; nothing written (implies --no-record)")
    if repeats is not None:
        ap.add_argument("--repeats", type=int, default=repeats, help=repeats_help)
    ap.add_argument("--no-record", action="store_true",
                    help="leave RESULTS.md, ENGINE.md and results/ as they are (no section, "
                         "no results/*.jsonl record, no figure): print the section instead")
    return ap


def recording(args: argparse.Namespace) -> bool:
    """Whether this run writes its results (not with ``--quick`` or ``--no-record``)."""
    return not (getattr(args, "quick", False) or getattr(args, "no_record", False))


# --------------------------------------------------------------------------- data


def data_root() -> Path:
    """The folder of the public data sets: ``$DISTSKETCH_DATA``, else ``../shared/data``
    beside the clone."""
    root = os.environ.get("DISTSKETCH_DATA")
    return Path(root) if root else HERE.parent.parent / "shared" / "data"


def data_path(*parts: str) -> Path:
    """``data_root() / parts``."""
    return data_root().joinpath(*parts)


def require(path: Path, what: str) -> Path:
    """``path`` when it exists; else say what is missing and end the script (status 0)."""
    if not path.exists():
        print(f"skipped: {what} not found at {path} (set DISTSKETCH_DATA to the folder holding "
              f"its data sets)")
        raise SystemExit(0)
    return path


def casp_path() -> Path:
    """``casp/CASP.csv``: 45 730 proteins, target RMSD (column 0), 9 features."""
    return data_path("casp", "CASP.csv")


def read_casp() -> np.ndarray:
    """All rows of CASP.csv as one float64 array (target first)."""
    return np.loadtxt(casp_path(), delimiter=",", comments="#")


def load_casp(split_seed: int = 0, n_rows: int | None = None):
    """CASP's standardised train / test split: ``(X, y, Xt, yt)``.

    One seeded permutation (``split_seed``): 80 % training rows, the rest test; features
    standardised with the training mean and standard deviation. ``n_rows``: a random subset
    of the rows first (seed ``split_seed + 1``).
    """
    A = read_casp()
    if n_rows is not None:
        A = A[np.sort(np.random.default_rng(split_seed + 1).choice(len(A), n_rows, replace=False))]
    y, X = A[:, 0], A[:, 1:]
    perm = np.random.default_rng(split_seed).permutation(len(A))
    n_train = int(0.8 * len(A))
    tr, te = perm[:n_train], perm[n_train:]
    mean, std = X[tr].mean(axis=0), X[tr].std(axis=0)
    std[std == 0] = 1.0
    Xs = (X - mean) / std
    return Xs[tr], y[tr], Xs[te], y[te]


def bibtex_dir() -> Path:
    """``bibtex/``: the Mulan train / test split (4 880 / 2 515 rows, 1 836 → 159)."""
    return data_path("bibtex")


def load_bibtex(*, sparse: bool = False):
    """Bibtex by the example's loader (``examples/bibtex_multilabel.py``: the same data
    protocol): ``(X, Y, Xte, Yte)``, dense standardised inputs, or CSR inputs scaled by
    ``1/std`` with ``sparse=True``."""
    examples = str(HERE.parent / "examples")
    if examples not in sys.path:
        sys.path.insert(0, examples)
    from bibtex_multilabel import load

    return load(bibtex_dir(), sparse=sparse)


def load_corel5k():
    """Mulan's Corel5k split (``corel5k/``): dense binary inputs (4500 × 499 and 500 × 499)
    and label matrices (374 labels, the last attributes)."""
    from distsketch.io.loaders import load_arff

    folder = data_path("corel5k")
    Xtr, Ytr = load_arff(folder / "Corel5k-train-sparse.arff", n_targets=374)
    Xte, Yte = load_arff(folder / "Corel5k-test-sparse.arff", n_targets=374)
    dense = lambda A: A.toarray() if hasattr(A, "toarray") else np.asarray(A)  # noqa: E731
    return dense(Xtr), dense(Ytr), dense(Xte), dense(Yte)


def usps_path() -> Path:
    """``usps/usps.h5``: 7291 training and 2007 test images, 16 × 16 in [0, 1]."""
    return data_path("usps", "usps.h5")


def load_usps():
    """USPS: the training images, the test images (float64, row-major 16 × 16) and the test
    labels."""
    from distsketch.io.loaders import load_hdf5

    train, _ = load_hdf5(usps_path(), x_key="train/data", y_key="train/target")
    test, test_labels = load_hdf5(usps_path(), x_key="test/data", y_key="test/target")
    return train.astype(np.float64), test.astype(np.float64), test_labels


# --------------------------------------------------------------------------- measurements


def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo), or ``"unknown"``."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def machine() -> dict:
    """CPU, cores, RAM and the library versions of this run."""
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    import dask
    import zarr

    return {"cpu": cpu_name(), "cores": os.cpu_count(), "ram_gib": round(mem, 1),
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


def exp_rate_all_cores(size: int = 4_000_000, repeats: int = 5, dtype=np.float64) -> float:
    """Aggregate ``numpy.exp`` rate with one thread per core, each on its own array (1/s)."""
    cores = os.cpu_count() or 1
    arrays = [np.random.default_rng(i).standard_normal(size).astype(dtype) for i in range(cores)]
    outs = [np.empty(size, dtype=dtype) for _ in range(cores)]
    rates = []
    for _ in range(repeats):
        threads = [threading.Thread(target=np.exp, args=(a,), kwargs={"out": o})
                   for a, o in zip(arrays, outs)]
        t = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        rates.append(cores * size / (time.perf_counter() - t))
    return float(np.median(rates))


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far (MiB): ``VmHWM`` of /proc/self/status
    where there is one (Linux), else ``ru_maxrss`` (KiB on Linux).

    ``VmHWM`` is the high-water mark of this program's own address space. ``ru_maxrss`` is
    not, in a child that :func:`run_child` started: Linux keeps the forked parent's resident
    size across ``exec`` in it, so a child of a 400 MiB parent reports at least 400 MiB
    (measured: 407 MiB against a ``VmHWM`` of 11 MiB for an empty child).
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def load_average() -> float:
    """The 1-minute load average now (NaN where the system has none)."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


def timed(fn):
    """``(fn(), wall seconds)``."""
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def run_child(args: list[str], env: dict | None = None) -> dict:
    """Run ``python <args>`` in a fresh process; it prints one JSON line last."""
    out = subprocess.run([sys.executable, *args], check=True, capture_output=True, text=True,
                         env={**os.environ, **(env or {})})
    return json.loads(out.stdout.strip().splitlines()[-1])


class PassTimes(logging.Handler):
    """Collects the pass wall time that ``distsketch.engine.accumulate`` logs after each pass."""

    def __init__(self):
        super().__init__(level=logging.INFO)
        self.seconds: list[float] = []

    def emit(self, record: logging.LogRecord) -> None:
        if hasattr(record, "pass_seconds"):
            self.seconds.append(record.pass_seconds)


def watch_pass() -> PassTimes:
    """A :class:`PassTimes` attached to distsketch's pass logger (INFO): the module's name now
    and in the flat layout before it (``bench_compare.py`` runs either as its base)."""
    times = PassTimes()
    for name in ("distsketch.engine.accumulate", "distsketch.accumulate"):
        logger = logging.getLogger(name)
        logger.addHandler(times)
        logger.setLevel(logging.INFO)
    return times


# --------------------------------------------------------------------------- results


def command_line() -> str:
    return "python " + " ".join(shlex.quote(a) for a in [os.path.relpath(sys.argv[0])] + sys.argv[1:])


def section_file(name: str) -> Path:
    """The file holding section ``name``: ENGINE.md for :data:`ENGINE_SECTIONS` (and their
    ``<name>_<size>`` variants), else RESULTS.md."""
    family = re.sub(r"_(1e\d+|\d+)$", "", name)
    return ENGINE_MD if name in ENGINE_SECTIONS or family in ENGINE_SECTIONS else RESULTS_MD


def section_text(name: str, markdown: str, *, stamp: str, m: dict,
                 command: str | None = None) -> str:
    """Section ``name`` between its markers: heading, command (default: this process's),
    date, machine, ``markdown``."""
    return (f"<!-- {name} -->\n### {name}\n\n"
            f"Command: `{command or command_line()}`  \nDate: {stamp}  \n"
            f"Machine: {m['cpu']}, {m['cores']} cores, {m['ram_gib']} GiB RAM; Python {m['python']}, "
            f"numpy {m['numpy']}, dask {m['dask']}, zarr {m['zarr']}\n\n"
            + markdown.strip() + f"\n<!-- /{name} -->\n")


def replace_section(text: str, name: str, section: str) -> str:
    """``text`` with section ``name`` (markers included) replaced by ``section``, or with
    ``section`` appended when ``text`` has none; the text outside the markers is kept."""
    pattern = re.compile(rf"<!-- {re.escape(name)} -->.*?<!-- /{re.escape(name)} -->\n", re.S)
    return pattern.sub(lambda _: section, text) if pattern.search(text) else text + "\n" + section


def record(name: str, markdown: str, data: dict, *, args: argparse.Namespace,
           measured: dict | None = None) -> bool:
    """Append ``data`` to results/<name>.jsonl and replace section ``name`` of RESULTS.md or
    ENGINE.md (:func:`section_file`); with ``--quick`` or ``--no-record`` print the section
    instead and write nothing. Returns whether it wrote.

    ``measured``: figures measured elsewhere (another machine's JSON): its ``date``,
    ``machine`` and ``command`` stand for this run's in the section and the record."""
    measured = measured or {}
    stamp = measured.get("date") or _dt.datetime.now().astimezone().isoformat(timespec="seconds")
    m = measured.get("machine") or machine()
    command = measured.get("command") or command_line()
    section = section_text(name, markdown, stamp=stamp, m=m, command=command)
    path = section_file(name)
    if not recording(args):
        print(section)
        print(f"({'--quick' if getattr(args, 'quick', False) else '--no-record'}: "
              f"{path.name} and results/{name}.jsonl not written)")
        return False
    RESULTS_DIR.mkdir(exist_ok=True)
    with open(RESULTS_DIR / f"{name}.jsonl", "a") as f:
        f.write(json.dumps({"date": stamp, "command": command, "machine": m, **data}) + "\n")
    text = path.read_text() if path.exists() else _HEADERS[path]
    path.write_text(replace_section(text, name, section))
    print(f"recorded: section {name} of {path.name}, results/{name}.jsonl")
    return True
