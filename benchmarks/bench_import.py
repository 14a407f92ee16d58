"""Start-up cost: ``import distsketch`` and ``distsketch --help``.

Protocol
--------
Each command runs in a fresh interpreter (``python -c ...``), interleaved round-robin so that
the machine's load hits every command alike, ``--repeats`` times; medians reported.

- ``python -c pass``: the interpreter's own start.
- the dependencies alone: ``import numpy, scipy.linalg, scipy.sparse, dask.array, zarr``.
- the dependencies, then ``import distsketch``: the package's own cost is the difference.
- the dependencies, then the estimators (``from distsketch import SISOKR, ...``): what a script
  that fits pays (the package itself is lazy).
- ``python -m distsketch --help`` and ``--version``: the CLI's start, against the bare
  interpreter.

Targets: ``import distsketch`` ≤ 1.0 s beyond its dependencies; ``--help`` ≤ 0.5 s
beyond Python's own start. Also listed: whether scikit-learn / distributed were imported, by
the import and by a first (tiny) fit and prediction, and what importing distributed costs.

Writes the ``import`` section of RESULTS.md and results/import.jsonl (not with ``--quick`` or
``--no-record``).

    python benchmarks/bench_import.py [--repeats 9] [--quick]
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time

from _common import parser, record

DEPS = "import numpy, scipy.linalg, scipy.sparse, dask.array, zarr"
COMMANDS = {
    "python": ["-c", "pass"],
    "dependencies": ["-c", DEPS],
    "dependencies + distsketch": ["-c", DEPS + "; import distsketch"],
    "dependencies + the estimators": ["-c", DEPS + "; from distsketch import SISOKR, SketchedKRR, "
                                      "SketchedRegressor, Gaussian, SubSampling"],
    "distsketch --help": ["-m", "distsketch", "--help"],
    "distsketch --version": ["-m", "distsketch", "--version"],
}
#: A first fit and prediction, as a script's first call pays them (tiny: start-up dominates).
FIRST_FIT = ("import numpy as np, distsketch as ds; "
             "X = np.random.default_rng(0).normal(size=(300, 4)); Y = (X[:, :3] > 0) * 1.0; "
             "m = ds.SISOKR(ds.Gaussian(0.3), ds.Gaussian(0.5), input_sketch=ds.SubSampling(40), "
             "output_sketch=ds.SubSampling(30), lam=1e-3, random_state=0).fit(X, Y); "
             "m.predict(X[:20])")
COMMANDS["dependencies + a first fit"] = ["-c", DEPS + "; " + FIRST_FIT]
#: What a first computation paid while dask's scheduler lookup imported distributed.
COMMANDS["dependencies + import distributed"] = ["-c", DEPS + "; import distributed"]
PROBE = ("import sys, json, distsketch; print(json.dumps({m: m in sys.modules for m in "
         "('sklearn', 'distributed', 'matplotlib', 'pandas')}))")
FIT_PROBE = ("import sys, json; " + FIRST_FIT.replace("; ", "\n") + "\nprint(json.dumps("
             "{m: m in sys.modules for m in ('sklearn', 'distributed', 'matplotlib', 'pandas')}))")


def _time(args: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, *args], check=True, capture_output=True)
    return time.perf_counter() - t


def main(argv=None) -> None:
    ap = parser(__doc__, quick="2 repeats", repeats=9,
                repeats_help="runs of each command, interleaved (medians reported)")
    args = ap.parse_args(argv)
    repeats = 2 if args.quick else args.repeats
    times: dict[str, list[float]] = {k: [] for k in COMMANDS}
    for _ in range(repeats):
        for name, cmd in COMMANDS.items():
            times[name].append(_time(cmd))
    med = {k: statistics.median(v) for k, v in times.items()}
    own = med["dependencies + distsketch"] - med["dependencies"]
    used = med["dependencies + the estimators"] - med["dependencies"]
    cli = med["distsketch --help"] - med["python"]
    fit = med["dependencies + a first fit"] - med["dependencies"]
    dist = med["dependencies + import distributed"] - med["dependencies"]
    loaded = json.loads(subprocess.run([sys.executable, "-c", PROBE], check=True,
                                       capture_output=True, text=True).stdout)
    fit_loaded = json.loads(subprocess.run([sys.executable, "-c", FIT_PROBE], check=True,
                                           capture_output=True, text=True).stdout)
    print(json.dumps({"median_s": med, "import_beyond_deps_s": own,
                      "estimators_beyond_deps_s": used, "help_beyond_python_s": cli,
                      "first_fit_beyond_deps_s": fit, "distributed_beyond_deps_s": dist,
                      "imported": loaded, "imported_by_a_fit": fit_loaded}, indent=1))
    rows = "\n".join(f"| {k} | {v:.3f} |" for k, v in med.items())
    md = f"""Fresh interpreters, commands interleaved, medians of {repeats} runs (seconds).

| command | median wall (s) |
|---|---|
{rows}

- `import distsketch` beyond its dependencies: **{own:.3f} s** (target ≤ 1.0 s); the package
  is lazy, so also: importing the estimators (`from distsketch import SISOKR, SketchedKRR,
  SketchedRegressor, Gaussian, SubSampling`, which loads the modules a fit needs) beyond the
  dependencies: **{used:.3f} s**.
- `distsketch --help` beyond Python's own start: **{cli:.3f} s** (target ≤ 0.5 s).
- Modules loaded by `import distsketch`: {", ".join(f"{k} {'yes' if v else 'no'}" for k, v in loaded.items())}.
- A first fit and prediction (`SISOKR` on 300 rows, the estimators' imports included) beyond
  the dependencies: **{fit:.3f} s**; modules it loaded: {", ".join(f"{k} {'yes' if v else 'no'}" for k, v in fit_loaded.items())}.
  Importing `distributed` (which a fit without a cluster does not do: `engine.local_scheduler`)
  costs **{dist:.3f} s** beyond the dependencies.
"""
    record("import", md, {"median_s": med, "import_beyond_deps_s": own,
                          "estimators_beyond_deps_s": used,
                          "help_beyond_python_s": cli, "first_fit_beyond_deps_s": fit,
                          "distributed_beyond_deps_s": dist, "imported": loaded,
                          "imported_by_a_fit": fit_loaded, "repeats": repeats}, args=args)


if __name__ == "__main__":
    main()
