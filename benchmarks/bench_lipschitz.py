"""Lipschitz-loss machines against what users run today: scikit-learn's SVR on CASP.

Protocol
--------
- Data: ``casp/CASP.csv`` (as ``bench_casp.py``: 80/20 split with ``--split-seed``, features
  standardised with the training statistics). Training subsets of ``--sizes`` rows (the first
  rows of the shuffled training set); the whole test set.
- Kernel: Gaussian, ``γ = 1 / median ‖x_i − x_j‖²`` (2 000-row subsample), fixed.
- scikit-learn: ``SVR(kernel="rbf", gamma=γ, C=C, epsilon=ε)`` (libsvm, the exact kernel),
  which minimises ``C Σ max(|r_i| − ε, 0) + ½‖w‖²``; distsketch:
  ``SketchedRegressor(Gaussian(γ), loss=EpsilonInsensitive(ε), sketch=SubSampling(m),
  lam=1/(C n))`` — the same objective divided by ``C n``, on the sketched space — fitted to a
  relative duality gap ``--tol`` with ``store=None``. Both fit an intercept.
- Reported per size and sketch size m: fit wall time of each (median of ``--repeats`` runs;
  the machine is shared and noisy: read ratios, not seconds), test MAE of each, distsketch's
  sweeps (passes over the rows after the streaming pass) and its certified relative gap.
  Without a store, distsketch keeps the sketched blocks of this size in memory for its
  sweeps (``EngineOptions.sweep_memory``).

Writes the ``lipschitz_svr`` section of RESULTS.md and results/lipschitz_svr.jsonl
(not with ``--quick`` or ``--no-record``).

    python benchmarks/bench_lipschitz.py [--sizes 5000 10000 20000] [--m 200 1000] [--quick]
"""

from __future__ import annotations

import time
import warnings

import numpy as np

from _common import casp_path, load_casp, parser, record, require
from bench_casp import median_gamma

C_SVR = 1.0
EPSILON = 0.5


def fit_distsketch(X, y, *, gamma, m, tol, seed):
    import distsketch as ds
    from distsketch.losses.radial import EpsilonInsensitive

    est = ds.SketchedRegressor(ds.Gaussian(gamma=gamma), loss=EpsilonInsensitive(EPSILON),
                               sketch=ds.SubSampling(m), lam=1.0 / (C_SVR * len(X)), tol=tol,
                               max_iter=500, random_state=seed)
    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, y)
    return est, time.perf_counter() - t


def fit_svr(X, y, *, gamma):
    from sklearn.svm import SVR

    est = SVR(kernel="rbf", gamma=gamma, C=C_SVR, epsilon=EPSILON, cache_size=2000)
    t = time.perf_counter()
    est.fit(X, y)
    return est, time.perf_counter() - t


def _median_fit(fit, repeats):
    runs = [fit() for _ in range(repeats)]
    return runs[-1][0], float(np.median([t for _, t in runs]))


def main() -> None:
    ap = parser(__doc__, quick="3 000 CASP rows, n = 1 000, m = 200, 1 run", repeats=3,
                repeats_help="fits of each (median time)")
    ap.add_argument("--sizes", type=int, nargs="+", default=[5000, 10000, 20000])
    ap.add_argument("--m", type=int, nargs="+", default=[200, 300, 1000])
    ap.add_argument("--tol", type=float, default=1e-3)
    ap.add_argument("--split-seed", type=int, default=0)
    args = ap.parse_args()
    require(casp_path(), "CASP data")
    X, y, Xt, yt = load_casp(args.split_seed, 3000 if args.quick else None)
    sizes = [min(s, len(X)) for s in ([1000] if args.quick else args.sizes)]
    ms = [min(args.m[0], 200)] if args.quick else args.m
    repeats = 1 if args.quick else args.repeats
    gamma, _ = median_gamma(X, args.split_seed)
    rows = []
    for n in sizes:
        sv_est, sv_s = _median_fit(lambda: fit_svr(X[:n], y[:n], gamma=gamma), repeats)
        svr_mae = float(np.mean(np.abs(sv_est.predict(Xt) - yt)))
        for m in ms:
            ds_est, ds_s = _median_fit(lambda: fit_distsketch(
                X[:n], y[:n], gamma=gamma, m=m, tol=args.tol, seed=args.split_seed), repeats)
            row = {"n": n, "m": m, "distsketch_s": ds_s, "svr_s": sv_s,
                   "distsketch_mae": float(np.mean(np.abs(ds_est.predict(Xt) - yt))),
                   "svr_mae": svr_mae, "sweeps": int(ds_est.n_iter_),
                   "rel_gap": float(ds_est.duality_gap_ / ds_est.objective_)}
            rows.append(row)
            print(row, flush=True)
    lines = ["| n | m | SVR fit (s) | distsketch fit (s) | speed-up | SVR test MAE | distsketch "
             "test MAE | MAE difference | sweeps | certified relative gap |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['n']} | {r['m']} | {r['svr_s']:.2f} | {r['distsketch_s']:.2f} | "
                     f"{r['svr_s'] / r['distsketch_s']:.1f}× | {r['svr_mae']:.4f} | "
                     f"{r['distsketch_mae']:.4f} | "
                     f"{100 * (r['distsketch_mae'] / r['svr_mae'] - 1):+.1f} % | {r['sweeps']} | "
                     f"{r['rel_gap']:.1e} |")
    md = (f"ε-SVR (ε = {EPSILON}, C = {C_SVR}, γ = 1/median distance²) on CASP training "
          f"subsets; distsketch `SketchedRegressor(loss=EpsilonInsensitive({EPSILON}), "
          f"sketch=SubSampling(m), lam=1/(C n), tol={args.tol})` (no store: the blocks held in "
          f"memory for the sweeps) vs scikit-learn `SVR` (libsvm, exact kernel); fit times "
          f"are medians of {repeats} runs. Target at n = 20 000: ≥ 20× faster with "
          f"test MAE within 2 %.\n\n" + "\n".join(lines))
    record("lipschitz_svr", md, {"rows": rows, "tol": args.tol, "epsilon": EPSILON, "C": C_SVR,
                                 "repeats": repeats}, args=args)


if __name__ == "__main__":
    main()
