"""CASP protein-structure regression: sketched KRR vs exact KRR vs scikit-learn Nyström + Ridge.

What it shows
-------------
Scalar kernel ridge regression on 36 584 training rows with :class:`distsketch.SketchedKRR`
and a ``SubSampling(m)`` (Nyström) sketch: one streaming pass serves the whole λ path
(``lam=[...]``, then :meth:`~distsketch.SketchedKRR.set_lam`; each λ costs an ``m × m``
factorisation), so λ is chosen on a validation split almost for free.
It is compared with

- exact KRR, ``SketchedKRR(sketch=None)``: the dense closed form ``α = (K + nλI)^{-1} y``
  (one Cholesky factorisation per λ), on a random subset of ``--n-exact`` training rows
  (default 10 000): exact KRR on all training rows needs the dense 29 000² (fit part)
  Gram matrix, 7 GB in float64 (several copies during the solve), and an O(n³)
  factorisation per λ, which this 2-core machine cannot hold next to anything else;
- scikit-learn's ``Nystroem(n_components=m, gamma=γ)`` features followed by
  ``Ridge(alpha=n·λ, fit_intercept=False)``: the same estimator family as sub-sampled
  sketched KRR (Nyström features ``Φ = K_nm K_mm^{-1/2}`` and ``‖w‖ = ‖f‖_H``), solved by a
  different code path, with its own landmark draw.

It prints, per method, the λ chosen on validation, the test RMSE, the wall time of one fit
at the chosen λ and of the whole λ path, with the training-mean predictor as a baseline.

Paper setting
-------------
CASP ("Physicochemical Properties of Protein Tertiary Structure", UCI; 45 730 rows, 9
features, target RMSD) is one of the scalar regression sets of the accumulation-sketch
appendix (Chen & Yang, AISTATS 2021; also used in El Ahmad et al., TMLR 2023). This script
does not reproduce a table of those papers; its protocol is:

- seeded (``--seed``) 80/20 train/test split; 20 % of the training rows are carved out as
  the validation split on which every method chooses its λ; the models are fitted on the
  remaining 80 % of the training rows (the "fit part", 29 267 rows);
- features standardised with the fit part's mean and standard deviation; targets centred
  with the fit part's mean (none of the three models has an intercept; the mean is added
  back to the predictions);
- Gaussian kernel ``k(a, b) = exp(−γ‖a − b‖²)`` with ``γ = 1/(2σ²)``, σ by the median
  heuristic: the median Euclidean distance between pairs of standardised fit-part rows,
  estimated on a random subsample of 2 000 rows;
- the library's λ convention (docs/design/math.md, "Driver solve"; :mod:`distsketch.linalg.solve`): every model minimises
  ``(1/n) Σ_i (f(x_i) − y_i)² + λ‖f‖²``, so exact KRR solves ``(K + nλI) α = y`` with n its
  own number of rows and Ridge gets ``alpha = n · λ`` (Ridge minimises the *sum* of squared
  residuals plus ``alpha‖w‖²``); the three methods search the same λ grid.

Run
---
::

    python examples/casp_regression.py            # full setting (see examples/README.md for the time)
    python examples/casp_regression.py --quick    # 3000 training rows, m = 200, n_exact = 2000

Data: ``--data`` (default ``$DISTSKETCH_DATA``, else ``../shared/data``), file
``casp/CASP.csv`` (header line starting with ``# ``; RMSD in column 0, features F1..F9 in
columns 1..9), read with :func:`distsketch.io.load_csv`; when it is absent the script prints
``skipped: ...`` and exits 0.
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from pathlib import Path

import numpy as np
from scipy.spatial.distance import pdist

import distsketch as ds
from distsketch.io.delimited import load_csv

logger = logging.getLogger(__name__)

DEFAULT_DATA = Path(os.environ.get("DISTSKETCH_DATA")
                    or Path(__file__).resolve().parents[1].parent / "shared" / "data")
LAMS = tuple(np.logspace(-9, -2, 8))
MEDIAN_ROWS = 2000  # rows of the median-heuristic subsample


def rmse(y, p) -> float:
    return float(np.sqrt(np.mean((np.asarray(y) - np.asarray(p)) ** 2)))


def split(n: int, *, rng: np.random.Generator, n_train: int | None):
    """Indices of the fit part, validation split and test split (seeded)."""
    perm = rng.permutation(n)
    n_test = n // 5
    test, train = perm[:n_test], perm[n_test:]
    if n_train is not None:
        train = train[:n_train]
    n_val = len(train) // 5
    return train[n_val:], train[:n_val], test


def median_gamma(X, *, rng: np.random.Generator) -> tuple[float, float]:
    """``σ`` = median pairwise distance of a row subsample, and ``γ = 1/(2σ²)``."""
    rows = rng.choice(len(X), size=min(MEDIAN_ROWS, len(X)), replace=False)
    sigma = float(np.median(pdist(X[rows])))
    return sigma, 1.0 / (2.0 * sigma**2)


def select(val_rmse: list[float]) -> int:
    return int(np.argmin(val_rmse))


def run_sketched(X, y, Xv, yv, Xt, *, gamma: float, m: int, seed: int) -> dict:
    """SketchedKRR with SubSampling(m): one fit for the λ path, λ chosen on validation."""
    model = ds.SketchedKRR(ds.Gaussian(gamma), fit_intercept=False, sketch=ds.SubSampling(m), lam=list(LAMS),
                           random_state=seed)
    t = time.perf_counter()
    model.fit(X, y)
    fit_s = time.perf_counter() - t
    val = [rmse(yv, model.set_lam(lam).predict(Xv)) for lam in LAMS]
    path_s = time.perf_counter() - t
    i = select(val)
    return {"lam": LAMS[i], "val": val[i], "pred": model.set_lam(LAMS[i]).predict(Xt),
            "fit_s": fit_s, "path_s": path_s}


def run_exact(X, y, Xv, yv, Xt, *, gamma: float) -> dict:
    """Exact KRR ``α = (K + nλI)^{-1} y`` with ``SketchedKRR(sketch=None)``.

    With an exact input side distsketch keeps ``K`` and factors ``K + nλI`` by Cholesky for
    each λ (:meth:`~distsketch.SketchedKRR.set_lam`): one fit serves the λ search, then a
    fresh fit at the chosen λ is timed.
    """
    start = time.perf_counter()
    path = ds.SketchedKRR(ds.Gaussian(gamma), fit_intercept=False, sketch=None, lam=list(LAMS)).fit(X, y)
    val = [rmse(yv, path.set_lam(lam).predict(Xv)) for lam in LAMS]
    path_s = time.perf_counter() - start
    i = select(val)
    t = time.perf_counter()
    model = ds.SketchedKRR(ds.Gaussian(gamma), fit_intercept=False, sketch=None, lam=LAMS[i]).fit(X, y)
    fit_s = time.perf_counter() - t
    return {"lam": LAMS[i], "val": val[i], "pred": model.predict(Xt), "fit_s": fit_s,
            "path_s": path_s}


def run_nystroem(X, y, Xv, yv, Xt, *, gamma: float, m: int, seed: int) -> dict:
    """scikit-learn ``Nystroem(m, gamma) + Ridge(alpha = n λ)`` on the same λ grid."""
    from sklearn.kernel_approximation import Nystroem
    from sklearn.linear_model import Ridge

    n = len(X)
    start = time.perf_counter()
    features = Nystroem(kernel="rbf", gamma=gamma, n_components=m, random_state=seed).fit(X)
    F = features.transform(X)
    map_s = time.perf_counter() - start
    Fv = features.transform(Xv)
    val, solve_s, ridges = [], [], []
    for lam in LAMS:
        t = time.perf_counter()
        ridge = Ridge(alpha=n * lam, fit_intercept=False).fit(F, y)
        solve_s.append(time.perf_counter() - t)
        ridges.append(ridge)
        val.append(rmse(yv, ridge.predict(Fv)))
    path_s = time.perf_counter() - start
    i = select(val)
    return {"lam": LAMS[i], "val": val[i], "pred": ridges[i].predict(features.transform(Xt)),
            "fit_s": map_s + solve_s[i], "path_s": path_s}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA,
                    help="folder holding casp/CASP.csv (default: $DISTSKETCH_DATA or ../shared/data)")
    ap.add_argument("--m", type=int, default=1000,
                    help="sketch size of SketchedKRR and n_components of Nystroem")
    ap.add_argument("--n-exact", type=int, default=10_000,
                    help="fit-part rows used by dense exact KRR (n² float64 Gram matrix)")
    ap.add_argument("--n-train", type=int, default=None,
                    help="use only this many of the training rows (default: all)")
    ap.add_argument("--seed", type=int, default=0, help="split, subsamples and sketches")
    ap.add_argument("--quick", action="store_true",
                    help="3000 training rows, m = 200, n_exact = 2000")
    ap.add_argument("-v", "--verbose", action="store_true", help="log the library's progress")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")

    path = args.data / "casp" / "CASP.csv"
    if not path.exists():
        print(f"skipped: CASP data not found at {path} (use --data or set DISTSKETCH_DATA)")
        return 0
    if args.quick:
        args.n_train, args.m, args.n_exact = 3000, 200, 2000
    t_start = time.perf_counter()

    X_all, Y_all = load_csv(path, target_columns=0)
    y_all = Y_all[:, 0]
    rng = np.random.default_rng(args.seed)
    fit_rows, val_rows, test_rows = split(len(X_all), rng=rng, n_train=args.n_train)
    mean, std = X_all[fit_rows].mean(axis=0), X_all[fit_rows].std(axis=0)
    std[std == 0] = 1.0
    X, Xv, Xt = ((X_all[r] - mean) / std for r in (fit_rows, val_rows, test_rows))
    y_mean = float(y_all[fit_rows].mean())
    y, yv, yt = (y_all[r] - y_mean for r in (fit_rows, val_rows, test_rows))
    sigma, gamma = median_gamma(X, rng=rng)
    n_exact = min(args.n_exact, len(X))
    exact_rows = np.sort(rng.choice(len(X), size=n_exact, replace=False))
    print(f"CASP: {len(X_all)} rows × {X_all.shape[1]} features; fit part {len(X)}, validation "
          f"{len(Xv)}, test {len(Xt)} (seed {args.seed}); Gaussian kernel, median heuristic "
          f"σ = {sigma:.3f}, γ = 1/(2σ²) = {gamma:.4g}; λ grid {len(LAMS)} values in "
          f"[{LAMS[0]:g}, {LAMS[-1]:g}], objective (1/n) Σ (f(x_i) − y_i)² + λ‖f‖²")
    print(f"predict the training mean: test RMSE {rmse(yt, 0.0):.4f}\n")

    runs = [
        (f"SketchedKRR SubSampling({args.m})", len(X),
         lambda: run_sketched(X, y, Xv, yv, Xt, gamma=gamma, m=args.m, seed=args.seed)),
        ("exact KRR (sketch=None)", n_exact,
         lambda: run_exact(X[exact_rows], y[exact_rows], Xv, yv, Xt, gamma=gamma)),
        (f"sklearn Nystroem({args.m}) + Ridge(nλ)", len(X),
         lambda: run_nystroem(X, y, Xv, yv, Xt, gamma=gamma, m=args.m, seed=args.seed)),
    ]
    header = (f"{'method':<36} {'n_fit':>6} {'λ':>8} {'val RMSE':>9} {'test RMSE':>10} "
              f"{'fit s':>8} {'λ-path s':>9}")
    print(header)
    print("-" * len(header))
    for name, n_fit, run in runs:
        r = run()
        print(f"{name:<36} {n_fit:>6} {r['lam']:>8.0e} {r['val']:>9.4f} {rmse(yt, r['pred']):>10.4f} "
              f"{r['fit_s']:>8.2f} {r['path_s']:>9.2f}", flush=True)
    print("\nexact KRR: SketchedKRR(sketch=None), the closed form α = (K + nλI)⁻¹y by one Cholesky "
          f"factorisation per λ, on {n_exact} random fit-part rows")
    print("fit s: one fit at the chosen λ (SketchedKRR: its single fit, which already solves "
          "every λ); λ-path s: the whole λ search, fits and validation predictions for every λ")
    print(f"total {time.perf_counter() - t_start:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
