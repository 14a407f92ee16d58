"""Joint quantile regression: 10 random 70/30 splits, test pinball and crossing loss.

Protocol
--------
- Data: CASP (``casp/CASP.csv``), a seeded random subset of ``--rows`` rows; each split
  ``s = 0..9`` a seeded 70/30 permutation; inputs standardised on the training part.
- Levels ``τ = (0.1, 0.3, 0.5, 0.7, 0.9)``, Gaussian kernel ``γ = 1/median ‖x − x'‖²``,
  ``SubSampling(m)``, ``λ = --lam``.
- Models: ``SketchedQuantileRegressor(quantile_gamma=1)`` (joint, ``M_ij = exp(−(τ_i−τ_j)²)``)
  and ``quantile_gamma=1e4`` (``M ≈ I``: five independent pinball problems with the same
  solver), both to a relative duality gap ``--tol``; and scikit-learn ``Nystroem(m) +
  QuantileRegressor(alpha=λ·?, solver="highs")`` per level (a linear program per level on
  the same number of features; ``alpha`` is its L1 penalty, so its problem differs: it is the
  tool users reach for, reported with its own time).
- Reported: mean ± std over splits of the test pinball loss (summed over levels), the test
  crossing loss ``mean_x Σ_j max(0, q_j − q_{j+1})``, fit time.

Writes the ``quantile`` section of RESULTS.md and results/quantile.jsonl (not with ``--quick``
or ``--no-record``).

    python benchmarks/bench_quantile.py [--rows 3000] [--m 200] [--splits 10] [--quick]
"""

from __future__ import annotations

import time
import warnings

import numpy as np

from _common import casp_path, parser, read_casp, record, require
from bench_casp import median_gamma

TAUS = (0.1, 0.3, 0.5, 0.7, 0.9)


def split(A, rows, seed):
    sub = A[np.sort(np.random.default_rng(1000).choice(len(A), rows, replace=False))]
    perm = np.random.default_rng(seed).permutation(rows)
    tr, te = perm[: int(0.7 * rows)], perm[int(0.7 * rows):]
    y, X = sub[:, 0], sub[:, 1:]
    mu, sd = X[tr].mean(axis=0), X[tr].std(axis=0)
    sd[sd == 0] = 1.0
    X = (X - mu) / sd
    return X[tr], y[tr], X[te], y[te]


def main() -> None:
    ap = parser(__doc__, quick="600 rows, m = 50, 2 splits")
    ap.add_argument("--rows", type=int, default=3000)
    ap.add_argument("--m", type=int, default=200)
    ap.add_argument("--splits", type=int, default=10)
    ap.add_argument("--lam", type=float, default=1e-4)
    ap.add_argument("--tol", type=float, default=1e-4)
    args = ap.parse_args()
    require(casp_path(), "CASP data")
    import distsketch as ds
    from distsketch.metrics import crossing_loss, pinball_loss

    A = read_casp()
    rows, m, splits = (600, 50, 2) if args.quick else (args.rows, args.m, args.splits)
    res: dict[str, list] = {}
    for s in range(splits):
        X, y, Xt, yt = split(A, rows, s)
        gamma, _ = median_gamma(X, s)
        for name, qg in (("joint (γ_τ = 1)", 1.0), ("independent (γ_τ = 1e4)", 1e4)):
            est = ds.SketchedQuantileRegressor(ds.Gaussian(gamma=gamma), quantiles=TAUS,
                                               quantile_gamma=qg, sketch=ds.SubSampling(m),
                                               lam=args.lam, tol=args.tol, max_iter=500,
                                               random_state=s)
            t = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                est.fit(X, y)
            secs = time.perf_counter() - t
            Q = est.predict(Xt)
            res.setdefault(name, []).append(
                (pinball_loss(yt, Q, TAUS), crossing_loss(Q), secs, est.n_iter_,
                 est.duality_gap_ / est.objective_))
        try:
            from sklearn.kernel_approximation import Nystroem
            from sklearn.linear_model import QuantileRegressor
        except ImportError:
            continue
        t = time.perf_counter()
        ny = Nystroem(gamma=gamma, n_components=m, random_state=s).fit(X)
        F, Ft = ny.transform(X), ny.transform(Xt)
        Q = np.column_stack([QuantileRegressor(quantile=q, alpha=args.lam, solver="highs")
                             .fit(F, y).predict(Ft) for q in TAUS])
        res.setdefault("scikit-learn Nystroem + QuantileRegressor (highs)", []).append(
            (pinball_loss(yt, Q, TAUS), crossing_loss(Q), time.perf_counter() - t, 0, 0.0))
    rows_out = []
    for name, r in res.items():
        a = np.array(r, dtype=float)
        row = {"model": name, "pinball_mean": a[:, 0].mean(), "pinball_std": a[:, 0].std(),
               "crossing_mean": a[:, 1].mean(), "crossing_std": a[:, 1].std(),
               "fit_s_median": float(np.median(a[:, 2])), "sweeps_median": float(np.median(a[:, 3])),
               "rel_gap_max": float(a[:, 4].max())}
        rows_out.append(row)
        print(row, flush=True)
    lines = ["| model | test pinball (Σ over 5 levels) | test crossing | fit (s, median) | sweeps "
             "(median) | max certified relative gap |", "|---|---|---|---|---|---|"]
    for r in rows_out:
        sweeps = f"{r['sweeps_median']:.0f}" if r["sweeps_median"] else "–"
        gap = f"{r['rel_gap_max']:.1e}" if r["sweeps_median"] else "–"
        lines.append(f"| {r['model']} | {r['pinball_mean']:.4f} ± {r['pinball_std']:.4f} | "
                     f"{r['crossing_mean']:.4f} ± {r['crossing_std']:.4f} | "
                     f"{r['fit_s_median']:.2f} | {sweeps} | {gap} |")
    md = (f"CASP, {rows} random rows, {splits} random 70/30 splits; τ = {TAUS}; Gaussian kernel "
          f"γ = 1/median distance²; SubSampling({m}) / Nystroem({m}); λ = {args.lam} "
          f"(scikit-learn: L1 alpha = {args.lam}, a different penalty); tol = {args.tol}. "
          f"Mean ± std over splits.\n\n" + "\n".join(lines))
    record("quantile", md, {"rows": rows_out, "n": rows, "m": m, "lam": args.lam}, args=args)


if __name__ == "__main__":
    main()
