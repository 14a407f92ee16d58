"""Small fits of the Lipschitz models against scikit-learn's SVR: the fits a user tries first.

Protocol
--------
- Data: synthetic, ``y = sin(x₀) + 0.5 x₁ + 0.2·noise`` on ``--features`` standard normal
  inputs (standardised), seeded; the first ``n`` rows.
- Kernel: Gaussian with ``γ = 1/d`` (scikit-learn's ``gamma="scale"`` on standardised
  inputs), the same γ for both.
- ``eps``: ``SketchedRegressor(Gaussian(γ), loss=EpsilonInsensitive(ε), sketch=
  SubSampling(m), lam=1/(C n))`` (default ``tol``, ``max_iter``) at n = 400, m = 100,
  against ``SVR(kernel="rbf", gamma=γ, C=C, epsilon=ε)`` — the same objective divided by
  ``C n`` (the exact kernel). Fit + predict on the training rows, both.
- ``huber`` and ``squared``: the same SketchedRegressor with those losses (no baseline of
  their own: reported against the same SVR).
- ``quantile``: ``SketchedQuantileRegressor(quantiles=(0.1, 0.5, 0.9), lam=4 values,
  sketch=SubSampling(100))`` at n = 300 (one joint fit of the 4-λ path), against one
  ``SVR`` fit per (level, λ) (12 fits, ``C = 1/(λ n)`` clipped to [1e-2, 1e3]; a stand-in
  for "one kernel machine per setting": libsvm has no pinball loss).
- ``select``: :func:`distsketch.model_selection.select.select` over 4 γ × 6 λ on 300 rows with ``cv=5``
  (the CLI's ``[select]`` default) and ``validation=0.2``, for the ε-insensitive regressor
  and the joint quantile model; against one SVR fit per (γ, λ, fold) (the same work in
  scikit-learn's ``GridSearchCV`` without its overhead).
- Reported: median over ``--repeats`` runs (distsketch and the baseline alternate in the same
  run: the machine is shared) of the wall time, distsketch's sweeps, and the ratio.

Prints its table and writes nothing (``--no-record`` changes nothing): the ``small_fits``
section of RESULTS.md is written by hand from that table.

    python benchmarks/bench_small_fits.py [--repeats 5] [--quick] [--cases eps quantile select]
"""

from __future__ import annotations

import warnings

import numpy as np

from _common import cpu_name, parser, timed

C_SVR = 1.0
EPSILON = 0.1
TAUS = (0.1, 0.5, 0.9)
Q_LAMS = [1e-2, 1e-3, 1e-4, 1e-6]
S_LAMS = [1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6]


def data(n: int, d: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    y = np.sin(2 * X[:, 0]) + 0.5 * X[:, 1] + 0.2 * rng.standard_normal(n)
    X = (X - X.mean(axis=0)) / X.std(axis=0)
    return X, y


def fit_predict(est, X, y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, y)
        est.predict(X)
    return est


def svr(X, y, *, gamma, C=C_SVR, epsilon=EPSILON):
    from sklearn.svm import SVR

    return fit_predict(SVR(kernel="rbf", gamma=gamma, C=C, epsilon=epsilon), X, y)


def case_regressor(loss, n, m, d, seed=0):
    import distsketch as ds
    from distsketch.losses.radial import EpsilonInsensitive, Huber, Squared

    X, y = data(n, d, seed)
    gamma = 1.0 / d
    lossobj = {"eps": EpsilonInsensitive(EPSILON), "huber": Huber(1.0), "squared": Squared()}[loss]

    def ours():
        est = ds.SketchedRegressor(ds.Gaussian(gamma=gamma), loss=lossobj,
                                   sketch=ds.SubSampling(m), lam=1.0 / (C_SVR * n),
                                   random_state=seed)
        return fit_predict(est, X, y)

    def base():
        return svr(X, y, gamma=gamma)

    return ours, base, lambda est: int(est.n_passes_ - 1)


def case_quantile(n, m, d, seed=0):
    import distsketch as ds

    X, y = data(n, d, seed)
    gamma = 1.0 / d

    def ours():
        est = ds.SketchedQuantileRegressor(ds.Gaussian(gamma=gamma), quantiles=TAUS,
                                           sketch=ds.SubSampling(m), lam=Q_LAMS,
                                           random_state=seed)
        return fit_predict(est, X, y)

    def base():
        for _tau in TAUS:
            for lam in Q_LAMS:
                svr(X, y, gamma=gamma, C=float(np.clip(1.0 / (lam * n), 1e-2, 1e3)))

    return ours, base, lambda est: int(est.n_passes_ - 1)


def case_select(model, route, n, m, d, seed=0):
    import distsketch as ds
    from distsketch.losses.radial import EpsilonInsensitive
    from distsketch.model_selection.select import select

    X, y = data(n, d, seed)
    gammas = [0.05, 0.1, 0.2, 0.5]
    kw = {"cv": 5} if route == "cv" else {"validation": 0.2}
    folds = 5 if route == "cv" else 1

    def ours():
        if model == "eps":
            est = ds.SketchedRegressor(ds.Gaussian(), loss=EpsilonInsensitive(EPSILON),
                                       sketch=ds.SubSampling(m), lam=S_LAMS, random_state=seed)
        else:
            est = ds.SketchedQuantileRegressor(ds.Gaussian(), quantiles=TAUS,
                                               sketch=ds.SubSampling(m), lam=S_LAMS,
                                               random_state=seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return select(est, X, y, gammas=gammas, **kw)

    def base():
        from sklearn.model_selection import KFold

        splits = (list(KFold(5, shuffle=True, random_state=0).split(X)) if folds > 1
                  else [(np.arange(n)[: int(0.8 * n)], np.arange(n)[int(0.8 * n):])])
        for g in gammas:
            for lam in S_LAMS:
                for tr, va in splits:
                    s = svr(X[tr], y[tr], gamma=g, C=float(np.clip(1.0 / (lam * len(tr)), 1e-2,
                                                                    1e3)))
                    s.predict(X[va])

    return ours, base, lambda sel: sum(int(sel.model.n_passes_ - 1) for _ in [0])


def run(name, case, repeats):
    ours, base, sweeps = case
    ours()  # warm-up (imports, first-call costs), not timed
    base()
    t_ours, t_base = [], []
    est = None
    for _ in range(repeats):
        est, t = timed(ours)
        t_ours.append(t)
        _, t = timed(base)
        t_base.append(t)
    a, b = float(np.median(t_ours)), float(np.median(t_base))
    print(f"| {name:<28} | {a:8.3f} | {b:8.3f} | {a / b:7.2f} | {sweeps(est):6d} |", flush=True)
    return {"case": name, "distsketch_s": a, "sklearn_s": b, "ratio": a / b}


def main() -> None:
    ap = parser(__doc__, quick="one repeat, the ε-insensitive model's validation route only in "
                "select", repeats=5,
                repeats_help="runs of each case, alternating with the baseline (medians)")
    ap.add_argument("--features", type=int, default=5)
    ap.add_argument("--cases", nargs="+", default=["eps", "huber", "squared", "quantile",
                                                   "select"])
    args = ap.parse_args()
    repeats = 1 if args.quick else args.repeats
    d = args.features
    print(f"CPU: {cpu_name()}; repeats: {repeats} (medians)")
    print("| case                         | ours (s) | sklearn  | ratio   | sweeps |")
    print("|------------------------------|----------|----------|---------|--------|")
    for c in args.cases:
        if c in ("eps", "huber", "squared"):
            run(f"{c} n=400 m=100", case_regressor(c, 400, 100, d), repeats)
        elif c == "quantile":
            run("quantile 3τ×4λ n=300 m=100", case_quantile(300, 100, d), repeats)
        elif c == "select":
            routes = ["validation"] if args.quick else ["validation", "cv"]
            for model in ("eps",) if args.quick else ("eps", "quantile"):
                for route in routes:
                    run(f"select {model} {route} 4γ×6λ", case_select(model, route, 300, 100, d),
                        max(1, repeats // 2) if route == "cv" else repeats)


if __name__ == "__main__":
    main()
