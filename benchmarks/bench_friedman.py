"""κ-Huber on Friedman #1 with outliers: test error and time against m and the sketch's p
(the synthetic study of El Ahmad, Laforgue & d'Alché-Buc, TMLR 2023, Fig. 1).

Protocol (ours; the paper's figure is the model, not its exact settings)
-------------------------------------------------------------------------
- Data: ``sklearn.datasets.make_friedman1(n_features=10, noise=1.0)``: ``--n`` training and
  ``--n-test`` test rows (seeded). A fraction ``--outliers`` of the *training* targets gets
  a gross error ``N(0, (10 σ_y)²)`` (σ_y: the targets' standard deviation); the test targets
  stay clean. Inputs as drawn (uniform on [0, 1]).
- Model: ``SketchedRegressor(Gaussian(γ), loss=Huber(κ), lam=λ, tol=--tol)``,
  ``γ = 1/median ‖x_i − x_j‖²``, ``κ = --kappa`` (the noise level), ``λ = --lam``;
  sketches ``SubSampling(m)``, ``PSparsified(m, p)`` for each ``--p`` (Rademacher entries,
  a fraction ``p`` of each row non-zero) and ``GaussianSketch(m)`` (``p = 1``), for each ``m``
  in ``--ms``; ``--seeds`` sketch draws each (the data fixed).
- Baseline in the same run: the squared loss (``loss="squared"``, i.e. ``SketchedKRR``) on
  the same sketches, which the outliers pull away.
- Reported: test relative MSE ``mean((f − y)²) / var(y)`` (mean over seeds) and the fit's
  wall time (median), sweeps (median).

Writes the ``friedman`` section of RESULTS.md and results/friedman.jsonl (not with
``--quick`` or ``--no-record``).

    python benchmarks/bench_friedman.py [--n 10000] [--ms 50 100 200 400 800] [--quick]
"""

from __future__ import annotations

import time
import warnings

import numpy as np

from _common import parser, record


def make_data(n, n_test, outliers, seed):
    from sklearn.datasets import make_friedman1

    X, y = make_friedman1(n_samples=n + n_test, n_features=10, noise=1.0, random_state=seed)
    X, Xt, y, yt = X[:n], X[n:], y[:n].copy(), y[n:]
    rng = np.random.default_rng(seed + 1)
    bad = rng.choice(n, size=int(round(outliers * n)), replace=False)
    y[bad] += rng.normal(scale=10.0 * y.std(), size=len(bad))
    return X, y, Xt, yt


def median_gamma(X, seed):
    rng = np.random.default_rng(seed)
    S = X[rng.choice(len(X), size=min(2000, len(X)), replace=False)]
    d2 = ((S[:, None, :] - S[None, :, :]) ** 2).sum(-1)
    return 1.0 / float(np.median(d2[np.triu_indices(len(S), 1)]))


def sketches(m, ps):
    import distsketch as ds

    out = [("SubSampling", ds.SubSampling(m))]
    out += [(f"PSparsified p = {p:g}", ds.PSparsified(m, p=p)) for p in ps]
    out.append(("Gaussian (p = 1)", ds.GaussianSketch(m)))
    return out


def main() -> None:
    ap = parser(__doc__, quick="n = 1 000, 500 test rows, m = 50, 1 seed")
    ap.add_argument("--n", type=int, default=10000)
    ap.add_argument("--n-test", type=int, default=5000)
    ap.add_argument("--ms", type=int, nargs="+", default=[50, 100, 200, 400, 800])
    ap.add_argument("--p", type=float, nargs="+", default=[0.001, 0.01, 0.1])
    ap.add_argument("--outliers", type=float, default=0.1)
    ap.add_argument("--kappa", type=float, default=1.0)
    ap.add_argument("--lam", type=float, default=1e-5)
    ap.add_argument("--tol", type=float, default=1e-6)
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args()
    import distsketch as ds
    from distsketch.losses.radial import Huber

    n = 1000 if args.quick else args.n
    ms = [50] if args.quick else args.ms
    seeds = range(1 if args.quick else args.seeds)
    X, y, Xt, yt = make_data(n, 500 if args.quick else args.n_test, args.outliers, seed=0)
    gamma = median_gamma(X, 0)
    kernel = ds.Gaussian(gamma=gamma)
    var = float(np.var(yt))
    rows = []
    for m in ms:
        for sk_name, sketch in sketches(m, args.p):
            for loss_name, loss in (("κ-Huber", Huber(args.kappa)), ("squared", "squared")):
                errs, secs, sweeps = [], [], []
                for seed in seeds:
                    est = ds.SketchedRegressor(kernel, loss=loss, sketch=sketch, lam=args.lam,
                                               tol=args.tol, max_iter=500, random_state=seed)
                    t = time.perf_counter()
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        est.fit(X, y)
                    secs.append(time.perf_counter() - t)
                    errs.append(float(np.mean((est.predict(Xt) - yt) ** 2) / var))
                    sweeps.append(int(est.n_iter_))
                row = {"m": m, "sketch": sk_name, "loss": loss_name,
                       "rel_mse": float(np.mean(errs)), "rel_mse_std": float(np.std(errs)),
                       "seconds": float(np.median(secs)), "sweeps": int(np.median(sweeps))}
                rows.append(row)
                print(row, flush=True)
    names = [name for name, _ in sketches(ms[0], args.p)]
    lines = []
    for loss_name in ("κ-Huber", "squared"):
        lines += [f"**{loss_name}**: test relative MSE (fit seconds)", "",
                  "| sketch | " + " | ".join(f"m = {m}" for m in ms) + " |",
                  "|---|" + "---|" * len(ms)]
        for name in names:
            cells = []
            for m in ms:
                r = next(r for r in rows if r["m"] == m and r["sketch"] == name
                         and r["loss"] == loss_name)
                cells.append(f"{r['rel_mse']:.4f} ({r['seconds']:.2f} s)")
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines.append("")
    md = (f"Friedman #1 (10 features, noise 1.0), n = {n} training rows with "
          f"{args.outliers:.0%} gross outliers (N(0, (10 σ_y)²) added), {len(yt)} clean test "
          f"rows; Gaussian kernel γ = 1/median distance² = {gamma:.4g}; κ = {args.kappa}, "
          f"λ = {args.lam:g}, tol = {args.tol:g}; mean test relative MSE over "
          f"{len(seeds)} sketch seeds, median fit time. The paper's Fig. 1 shows the same "
          f"shape of study (κ-Huber, error and time against m and p).\n\n" + "\n".join(lines))
    record("friedman", md, {"rows": rows, "gamma": gamma, "kappa": args.kappa,
                            "lam": args.lam, "outliers": args.outliers, "n": n}, args=args)


if __name__ == "__main__":
    main()
