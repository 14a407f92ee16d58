"""Lipschitz-loss machines against scikit-learn's Nystroem pipelines at equal m.

Protocol
--------
- Data: ``casp/CASP.csv`` as ``bench_casp.py`` (80/20 split with ``--split-seed``, features
  standardised with the training statistics); the first ``--n`` shuffled training rows, the
  whole test set. Gaussian kernel, ``γ = 1 / median ‖x_i − x_j‖²``; ``m = --m`` landmarks.
- Three problems, each with scikit-learn's linear solver on ``m`` kernel features:

  ====================  ===========================================  =========================
  problem               scikit-learn (on Nystroem features)          distsketch
  ====================  ===========================================  =========================
  κ-Huber              ``HuberRegressor(epsilon=1.35, alpha=α)``     ``Huber(κ = 1.35 σ̂)``,
                                                                     ``λ = α σ̂ / n``
  ε-insensitive         ``LinearSVR(epsilon=ε, C=C,                  ``EpsilonInsensitive(ε)``,
                        fit_intercept=False)``                       ``λ = 1/(C n)``, no
                                                                     intercept
  quantile τ            ``QuantileRegressor(quantile=τ, alpha=0,     ``Pinball(τ)``,
                        solver="highs")``                            ``λ = --quantile-lam``
  ====================  ===========================================  =========================

  ``HuberRegressor`` minimises ``Σ σ + σ H_ε(r_i/σ) + α‖w‖²`` jointly in ``(w, σ)``; at its
  fitted scale ``σ̂`` that is ``(2/σ̂) Σ huber_κ(r_i) + α‖w‖²`` with ``κ = ε σ̂``, i.e.
  distsketch's ``(1/n) Σ huber_κ + (λ/2)‖w‖²`` with ``λ = α σ̂ / n``. ``LinearSVR`` without
  intercept minimises ``½‖w‖² + C Σ max(|r_i| − ε, 0)``: distsketch's objective times
  ``C n``. ``QuantileRegressor`` with ``alpha = 0`` is the unpenalised linear program;
  distsketch adds the small ridge ``λ``.
- Timed (median of ``--repeats`` fits, from the raw rows): the scikit-learn pipeline
  ``make_pipeline(Nystroem(m), estimator)`` and ``SketchedRegressor(sketch=SubSampling(m),
  tol=--tol)`` (float64 blocks; no store: the blocks held in memory for the sweeps).
- Objectives on the same features: the scikit-learn estimator is fitted again on
  distsketch's own features ``Φ = SketchedFeatures(kernel, sketch=SubSampling(m))`` (the same
  landmarks as the regressor: same ``random_state``), and both solutions are evaluated with
  one function, ``(1/n) Σ ℓ(f(x_i) − y_i) + (λ/2)‖f‖²_H`` (``‖f‖_H = ‖w‖`` for
  ``f = φ(·)ᵀw + b``). distsketch's must be ≤ scikit-learn's (its certified gap bounds how
  far above the optimum it is).
- Test metric: MAE (Huber, ε-insensitive) or mean pinball loss at τ (quantile).

Writes the ``pipelines`` section of RESULTS.md and results/pipelines.jsonl (not with
``--quick`` or ``--no-record``, nor when ``--problems`` leaves a problem out).

    python benchmarks/bench_pipelines.py [--n 20000] [--m 200] [--quick] [--problems svr]
"""

from __future__ import annotations

import time
import warnings

import numpy as np

from _common import casp_path, load_casp, parser, record, require
from bench_casp import median_gamma

EPS_HUBER = 1.35
ALPHA_HUBER = 1e-4
EPSILON = 0.5
C_SVR = 1.0
TAU = 0.9


def _median_time(fit, repeats):
    runs = []
    for _ in range(repeats):
        t = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = fit()
        runs.append(time.perf_counter() - t)
    return out, float(np.median(runs))


def objective(loss, lam, f, y, norm_sq):
    """``(1/n) Σ ℓ(f_i − y_i) + (λ/2)‖f‖²_H`` (the distsketch objective, any model)."""
    r = (np.asarray(f, dtype=np.float64) - y).reshape(-1, 1)
    return float(loss.value(r, 0.0).sum() / len(y) + 0.5 * lam * norm_sq)


def main() -> None:
    ap = parser(__doc__, quick="3 000 CASP rows, n = 1 000, m = 100, 1 fit each", repeats=3,
                repeats_help="fits of each (median time)")
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--m", type=int, default=200)
    ap.add_argument("--tol", type=float, default=1e-6)
    ap.add_argument("--quantile-lam", type=float, default=1e-6)
    ap.add_argument("--quantile-n", type=int, default=5000,
                    help="training rows of the quantile problem (HiGHS on 20 000 rows x 200 "
                         "features took over 10 minutes per fit here)")
    ap.add_argument("--split-seed", type=int, default=0)
    ap.add_argument("--problems", default="huber,svr,quantile",
                    help="comma-separated subset of huber, svr, quantile to run (RESULTS.md is "
                         "written only when all three run)")
    args = ap.parse_args()
    chosen = [p.strip() for p in args.problems.split(",") if p.strip()]
    unknown = sorted(set(chosen) - {"huber", "svr", "quantile"})
    if unknown or not chosen:
        ap.error(f"--problems: expected names among huber, svr, quantile, got {args.problems!r}")
    require(casp_path(), "CASP data")
    from sklearn.kernel_approximation import Nystroem
    from sklearn.linear_model import HuberRegressor, QuantileRegressor
    from sklearn.pipeline import make_pipeline
    from sklearn.svm import LinearSVR

    import distsketch as ds
    from distsketch.losses.quantile import Pinball
    from distsketch.losses.radial import EpsilonInsensitive, Huber

    X, y, Xt, yt = load_casp(args.split_seed, 3000 if args.quick else None)
    n = min(1000 if args.quick else args.n, len(X))
    m = min(args.m, 100) if args.quick else args.m
    repeats = 1 if args.quick else args.repeats
    X, y = X[:n], y[:n]
    gamma, _ = median_gamma(X, args.split_seed)
    seed = args.split_seed
    kernel = ds.Gaussian(gamma=gamma)
    f64 = ds.EngineOptions(block_dtype="float64")
    Phi = ds.SketchedFeatures(kernel, sketch=ds.SubSampling(m), random_state=seed,
                              options=f64).fit(X).transform(X)

    def nystroem():
        return Nystroem(kernel="rbf", gamma=gamma, n_components=m, random_state=seed)

    # the Huber scale first: distsketch's κ and λ are the ones scikit-learn's fit arrives at
    hub = HuberRegressor(epsilon=EPS_HUBER, alpha=ALPHA_HUBER, max_iter=1000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hub.fit(Phi, y)
    sigma = float(hub.scale_)
    problems = [
        ("κ-Huber", Huber(EPS_HUBER * sigma), ALPHA_HUBER * sigma / n, True,
         lambda: HuberRegressor(epsilon=EPS_HUBER, alpha=ALPHA_HUBER, max_iter=1000), "mae"),
        ("ε-insensitive", EpsilonInsensitive(EPSILON), 1.0 / (C_SVR * n), False,
         lambda: LinearSVR(epsilon=EPSILON, C=C_SVR, loss="epsilon_insensitive",
                           fit_intercept=False, dual=True, max_iter=100_000, tol=1e-5,
                           random_state=seed), "mae"),
        (f"quantile τ = {TAU}", Pinball(TAU), args.quantile_lam, True,
         lambda: QuantileRegressor(quantile=TAU, alpha=0.0, solver="highs"), "pinball"),
    ]
    keys = ("huber", "svr", "quantile")
    problems = [p for key, p in zip(keys, problems) if key in chosen]
    rows = []
    full = (X, y, Phi)
    for name, loss, lam, intercept, make_sk, metric in problems:
        X, y, Phi = full
        if metric == "pinball":  # the LP solver's time grows fast with n: fewer rows
            nq = min(n, 1000 if args.quick else args.quantile_n)
            X, y, Phi = X[:nq], y[:nq], ds.SketchedFeatures(
                kernel, sketch=ds.SubSampling(m), random_state=seed,
                options=f64).fit(X[:nq]).transform(X[:nq])

        def test_metric(pred):
            r = yt - pred
            if metric == "mae":
                return float(np.mean(np.abs(r)))
            return float(np.mean(np.maximum(TAU * r, (TAU - 1.0) * r)))

        est, ds_s = _median_time(lambda: ds.SketchedRegressor(
            kernel, loss=loss, sketch=ds.SubSampling(m), lam=lam, tol=args.tol,
            fit_intercept=intercept, max_iter=1000, random_state=seed, options=f64).fit(X, y),
            repeats)
        pipe, sk_s = _median_time(lambda: make_pipeline(nystroem(), make_sk()).fit(X, y),
                                  repeats)
        same = make_sk()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            same.fit(Phi, y)
        coef = np.ravel(same.coef_)
        sk_obj = objective(loss, lam, Phi @ coef + float(np.ravel(same.intercept_)[0] if
                                                          intercept else 0.0), y, coef @ coef)
        ours = objective(loss, lam, est.predict(X), y, float(np.sum(est.coefs_[0] ** 2)))
        row = {"problem": name, "n": len(X), "m": m, "lam": lam,
               "distsketch_s": ds_s, "sklearn_s": sk_s,
               "distsketch_objective": ours, "sklearn_objective": sk_obj,
               "distsketch_reported_objective": float(est.objective_),
               "distsketch_rel_gap": float(est.duality_gap_ / est.objective_),
               "sweeps": int(est.n_iter_), "metric": metric,
               "distsketch_test": test_metric(est.predict(Xt)),
               "sklearn_test": test_metric(pipe.predict(Xt))}
        rows.append(row)
        print(row, flush=True)
    if len(problems) < len(keys):
        print(f"--problems {args.problems}: RESULTS.md is written only when all three run")
        return
    lines = ["| problem | n | scikit-learn pipeline fit (s) | distsketch fit (s) | speed-up | "
             "objective, scikit-learn on the same features | objective, distsketch | "
             "certified relative gap | sweeps | test metric, pipeline | test metric, "
             "distsketch |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['problem']} | {r['n']} | {r['sklearn_s']:.2f} | {r['distsketch_s']:.2f} | "
                     f"{r['sklearn_s'] / r['distsketch_s']:.1f}× | "
                     f"{r['sklearn_objective']:.8g} | {r['distsketch_objective']:.8g} | "
                     f"{r['distsketch_rel_gap']:.1e} | {r['sweeps']} | "
                     f"{r['metric']} {r['sklearn_test']:.4f} | {r['distsketch_test']:.4f} |")
    md = (f"CASP, the first n training rows (test: {len(yt)}), Gaussian kernel γ = 1/median "
          f"distance², m = {m}: `make_pipeline(Nystroem(m), estimator)` against "
          f"`SketchedRegressor(sketch=SubSampling(m), tol={args.tol})` (float64 blocks); "
          f"times are medians of {repeats} fits from the raw rows. Objectives: both "
          f"solutions evaluated as `(1/n) Σ ℓ + (λ/2)‖f‖²_H`, scikit-learn's estimator "
          f"refitted on distsketch's features (the same landmarks). Huber: "
          f"HuberRegressor(epsilon={EPS_HUBER}, alpha={ALPHA_HUBER}), whose fitted scale "
          f"σ̂ = {sigma:.4g} gives κ = {EPS_HUBER} σ̂ and λ = α σ̂ / n; ε-insensitive: "
          f"LinearSVR(epsilon={EPSILON}, C={C_SVR}, fit_intercept=False), λ = 1/(C n); "
          f"quantile: QuantileRegressor(quantile={TAU}, alpha=0, solver='highs'), "
          f"λ = {args.quantile_lam:g} (theirs unpenalised). Target: faster than "
          f"every pipeline at equal m with an objective ≤ theirs.\n\n" + "\n".join(lines))
    record("pipelines", md, {"rows": rows, "sigma": sigma, "tol": args.tol,
                             "repeats": repeats}, args=args)


if __name__ == "__main__":
    main()
