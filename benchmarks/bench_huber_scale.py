"""A large κ-Huber fit: time, passes and peak RSS against n, d = 20 outputs.

Protocol
--------
- Data: synthetic, generated block by block into a zarr array on local disk before timing
  (so that the fit reads its input like a user's out-of-core data): ``x ~ N(0, I_10)``,
  ``y_j = sin(x·w_j) + 0.1 ε``, 5 % of the rows with gross errors (+5 on every output).
- Model: ``SketchedRegressor(Gaussian(0.1), loss=Huber(1.0), sketch=SubSampling(m),
  lam=1e-5, tol=1e-6, store=PATH)`` (d = 20 > 8: scalar curvature majorants,
  ``exact_hessian=None``), each n in a fresh process (peak RSS of that process).
- Reported: fit wall time, passes (the streaming pass + sweeps), certified relative duality
  gap, peak RSS, and the RSS of the stored ``C`` it would take to hold in memory.

Writes the ``huber_scale`` section of RESULTS.md and results/huber_scale.jsonl (not with
``--quick`` or ``--no-record``).

    python benchmarks/bench_huber_scale.py [--sizes 100000 1000000] [--m 1000] [--quick]
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
import warnings
from pathlib import Path

import numpy as np

from _common import parser, peak_rss_mib, record, run_child

D_IN, D_OUT = 10, 20
ROOT = Path(__file__).resolve().parent.parent / ".benchmarks-tmp"


def make_data(n: int, path: Path, seed: int = 0):
    import zarr

    rows = 100_000
    X = zarr.create_array(path / "X", shape=(n, D_IN), chunks=(rows, D_IN), dtype="float64",
                          overwrite=True)
    Y = zarr.create_array(path / "Y", shape=(n, D_OUT), chunks=(rows, D_OUT), dtype="float64",
                          overwrite=True)
    W = np.random.default_rng(seed).normal(size=(D_IN, D_OUT)) / np.sqrt(D_IN)
    for s in range(0, n, rows):
        rng = np.random.default_rng([seed, s])
        x = rng.normal(size=(min(rows, n - s), D_IN))
        y = np.sin(x @ W) + 0.1 * rng.normal(size=(len(x), D_OUT))
        y[rng.random(len(x)) < 0.05] += 5.0
        X[s:s + len(x)] = x
        Y[s:s + len(x)] = y
    return X, Y


def child(n: int, m: int) -> None:
    import zarr

    import distsketch as ds
    from distsketch.losses.radial import Huber

    data = ROOT / f"huber-{n}"
    X, Y = zarr.open_array(data / "X", mode="r"), zarr.open_array(data / "Y", mode="r")
    store = ROOT / f"huber-{n}-fit.zarr"
    shutil.rmtree(store, ignore_errors=True)
    est = ds.SketchedRegressor(ds.Gaussian(gamma=0.1), loss=Huber(1.0), sketch=ds.SubSampling(m),
                               lam=1e-5, tol=1e-6, max_iter=100, random_state=0, store=store)
    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, Y)
    secs = time.perf_counter() - t
    shutil.rmtree(store, ignore_errors=True)
    print(json.dumps({"n": n, "m": m, "fit_s": secs, "passes": est.n_passes_,
                      "sweeps": int(est.n_iter_),
                      "rel_gap": est.duality_gap_ / est.objective_,
                      "peak_rss_mib": peak_rss_mib(), "C_mib": n * m * 4 / 2**20}))


def main() -> None:
    ap = parser(__doc__, quick="n = 20 000, m = 200")
    ap.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--m", type=int, default=1000)
    ap.add_argument("--child", nargs=2, type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(*args.child)
        return
    sizes, m = ([20_000], 200) if args.quick else (args.sizes, args.m)
    rows = []
    for n in sizes:
        make_data(n, ROOT / f"huber-{n}")
        row = run_child([__file__, "--child", str(n), str(m)])
        shutil.rmtree(ROOT / f"huber-{n}", ignore_errors=True)
        rows.append(row)
        print(row, flush=True)
    lines = ["| n | fit (s) | passes (pass + sweeps) | certified relative gap | peak RSS (MiB) | "
             "C on disk (MiB, float32) |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['n']} | {r['fit_s']:.1f} | {r['passes']} (1 + {r['sweeps']}) | "
                     f"{r['rel_gap']:.1e} | {r['peak_rss_mib']:.0f} | {r['C_mib']:.0f} |")
    md = (f"κ-Huber (κ = 1), d = {D_OUT} outputs, m = {m}, zarr input on local disk, store on "
          f"local disk. Target: a 1e6-row fit in < 5 minutes with flat peak RSS.\n\n"
          + "\n".join(lines))
    record("huber_scale", md, {"rows": rows}, args=args)


if __name__ == "__main__":
    main()
