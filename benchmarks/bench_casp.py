"""CASP regression: SketchedKRR vs scikit-learn Nystroem + Ridge.

Targets, measured in the same run (this machine is shared and noisy): distsketch's fit wall
time ≤ 1.0 × scikit-learn's, and test RMSE within 1 % of scikit-learn's.

Protocol
--------
- Data: ``casp/CASP.csv`` of the data folder (``_common.load_casp``): 45 730 proteins,
  target RMSD (column 0), 9 physicochemical features. One seeded permutation
  (``--split-seed``): 80 % training rows, the rest test. Features standardised with the
  training mean and standard deviation.
- Kernel: Gaussian ``exp(−γ‖x − x'‖²)`` with ``γ = 1 / median ‖x_i − x_j‖²`` over a 2 000-row
  training subsample, fixed before any timing.
- λ: chosen once, on a validation split of the training rows (80 / 20), from one distsketch
  fit with ``lam=[grid]`` and ``set_lam``; used for both tools.
- Models: ``SketchedKRR(Gaussian(γ), sketch=SubSampling(m), lam=λ)`` (``store=None``, numpy
  input, exactly as a user calls ``fit``) vs ``Nystroem(n_components=m, gamma=γ,
  random_state=seed)`` then ``Ridge(alpha=n·λ)``. The regularisation matches: with Nyström
  features ``Φ = K_nJ K_JJ^{-1/2}`` Ridge solves ``(ΦᵀΦ + αI) w = Φᵀ y``, i.e. minimises
  ``‖Φw − y‖² + α‖w‖² = n [(1/n)‖f(X) − y‖² + (α/n)‖f‖²]`` with ``‖f‖ = ‖w‖``, so ``α = nλ``.
  Before timing, both are fitted at the *same* landmarks (Nystroem fitted on distsketch's
  ``landmarks_``) and their predictions compared (``tests/test_bench_equivalence.py`` holds
  the same check on small data).
- Intercept: Ridge fits one by default, SketchedKRR has none. The script measures it at the
  same landmarks: Ridge with / without intercept, and distsketch on ``y − mean(y)``.
- Timing: ``--repeats`` rounds, round ``r`` uses sketch seed ``r`` for both tools, the order
  alternates between rounds; medians are reported. distsketch with ``store=None`` writes no
  pass blocks (its sums stay in memory). An information-only third contender keeps a store
  on local disk (``store=PATH``: the row blocks ``C``, n × m float64, written for resuming),
  removed after each round, to show the cost of that I/O. BLAS threads: distsketch limits
  BLAS to ``distsketch.blas-threads`` (default 1) inside ``fit`` and runs its tasks on dask's
  threaded scheduler; scikit-learn runs with the BLAS library's default threads.
- Optional reference: exact KRR on a ``--exact-n``-row training subset, distsketch
  ``sketch=None`` vs scikit-learn ``KernelRidge(alpha=n_sub·λ)``.

Writes the ``casp`` section of RESULTS.md and results/casp.jsonl (not with ``--quick`` or
``--no-record``).

    python benchmarks/bench_casp.py [--m 1000] [--repeats 5] [--quick] [--no-record]
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common

LAM_GRID = (1e-3, 1e-4, 1e-5, 1e-6, 1e-7, 1e-8, 1e-9)
GAMMA_ROWS = 2_000  # training rows of the median heuristic
ICPT_DEFAULT = "Ridge(fit_intercept=True) (scikit-learn default)"


def rmse(y: np.ndarray, p: np.ndarray) -> float:
    return float(np.sqrt(np.mean((np.asarray(p) - y) ** 2)))


def median_gamma(X: np.ndarray, seed: int) -> tuple[float, float]:
    from scipy.spatial.distance import pdist

    rows = np.random.default_rng(seed).choice(len(X), min(GAMMA_ROWS, len(X)), replace=False)
    med = float(np.median(pdist(X[rows], "sqeuclidean")))
    return 1.0 / med, med


def ridge(alpha: float, *, fit_intercept: bool = True):
    from sklearn.linear_model import Ridge

    return Ridge(alpha=alpha, fit_intercept=fit_intercept)


def fit_quiet(est, *args):
    """``est.fit(*args)``, returning the number of warnings it raised (ill-conditioning)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est.fit(*args)
    return len(caught)


# --------------------------------------------------------------------------- contenders


def run_distsketch(X, y, Xt, yt, *, gamma, m, lam, seed, store=None) -> dict:
    import distsketch as ds

    model = ds.SketchedKRR(ds.Gaussian(gamma), fit_intercept=False, sketch=ds.SubSampling(m), lam=lam,
                           random_state=seed, store=store)
    t = time.perf_counter()
    model.fit(X, y)
    fit_s = time.perf_counter() - t
    t = time.perf_counter()
    p = model.predict(Xt)
    return {"fit_s": fit_s, "predict_s": time.perf_counter() - t, "rmse": rmse(yt, p)}


def run_distsketch_disk(X, y, Xt, yt, **kw) -> dict:
    """distsketch with a kept fit store in a fresh directory on local disk, removed after."""
    tmp = tempfile.mkdtemp(prefix="distsketch-bench-", dir=Path(__file__).resolve().parent)
    try:
        return run_distsketch(X, y, Xt, yt, store=os.path.join(tmp, "fit"), **kw)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run_sklearn(X, y, Xt, yt, *, gamma, m, lam, seed) -> dict:
    """``make_pipeline(Nystroem, Ridge).fit`` done step by step to time both parts."""
    from sklearn.kernel_approximation import Nystroem
    from sklearn.pipeline import make_pipeline

    nys = Nystroem(n_components=m, gamma=gamma, random_state=seed)
    reg = ridge(len(X) * lam)
    t = time.perf_counter()
    Z = nys.fit_transform(X)
    t_nys = time.perf_counter() - t
    n_warn = fit_quiet(reg, Z, y)
    fit_s = time.perf_counter() - t
    t = time.perf_counter()
    p = make_pipeline(nys, reg).predict(Xt)
    return {"fit_s": fit_s, "nystroem_s": t_nys, "ridge_s": fit_s - t_nys,
            "predict_s": time.perf_counter() - t, "rmse": rmse(yt, p), "warnings": n_warn}


# --------------------------------------------------------------------------- checks


def select_lam(X, y, *, gamma, m, seed) -> tuple[float, dict]:
    """λ minimising the validation RMSE of one distsketch fit over LAM_GRID (80 / 20 split)."""
    import distsketch as ds

    perm = np.random.default_rng(seed).permutation(len(X))
    n_fit = int(0.8 * len(X))
    a, v = perm[:n_fit], perm[n_fit:]
    model = ds.SketchedKRR(ds.Gaussian(gamma), fit_intercept=False, sketch=ds.SubSampling(min(m, n_fit)),
                           lam=list(LAM_GRID), random_state=seed).fit(X[a], y[a])
    val = {lam: rmse(y[v], model.set_lam(lam).predict(X[v])) for lam in LAM_GRID}
    return min(val, key=val.get), val


def same_landmarks(X, y, Xt, yt, *, gamma, m, lam, seed) -> dict:
    """distsketch vs Ridge on Nyström features built on distsketch's own landmarks.

    Nystroem with ``n_components = m`` fitted on the m landmarks keeps all of them (in a
    permuted order, which does not change the span), so both minimise the same objective over
    the same space, up to numerics: distsketch drops eigen-directions of ``R K Rᵀ`` below
    ``rtol · max`` (``EngineOptions.rtol``, 1e-10) while Nystroem keeps every direction above
    1e-12 (absolute). A second distsketch fit with ``rtol=1e-12`` keeps all m directions here,
    and a ridge solved through the SVD of the Nyström features (``w = V Σ (Σ² + nλ)^{-1} Uᵀy``,
    no normal equations) is the numerically stable reference for both.
    Returns the prediction gaps along the λ path and the intercept variants.
    """
    from sklearn.kernel_approximation import Nystroem

    import distsketch as ds

    n = len(X)
    grid = sorted(set(LAM_GRID) | {lam}, reverse=True)

    def fit(rtol=None, target=y, lams=grid):
        return ds.SketchedKRR(ds.Gaussian(gamma), fit_intercept=False, sketch=ds.SubSampling(m), lam=lams, random_state=seed,
                              options=None if rtol is None else ds.EngineOptions(rtol=rtol)).fit(X, target)

    model, full = fit(), fit(rtol=1e-12)
    assert np.array_equal(model.landmarks_, full.landmarks_)
    nys = Nystroem(n_components=m, gamma=gamma).fit(model.landmarks_)
    Z, Zt = nys.transform(X), nys.transform(Xt)
    U, sv, Vt = np.linalg.svd(Z, full_matrices=False)
    Uty = U.T @ y
    del U

    def gap(a, b):
        return float(np.linalg.norm(a - b) / np.linalg.norm(b))

    path = []
    for value in grid:
        p_ds, p_full = model.set_lam(value).predict(Xt), full.set_lam(value).predict(Xt)
        reg = ridge(n * value, fit_intercept=False)
        n_warn = fit_quiet(reg, Z, y)
        p_sk = reg.predict(Zt)
        p_svd = Zt @ (Vt.T @ (sv / (sv**2 + n * value) * Uty))
        path.append({"lam": value, "rel_l2": gap(p_ds, p_sk), "max_abs": float(np.max(np.abs(p_ds - p_sk))),
                     "rel_l2_full": gap(p_full, p_sk), "ds_vs_svd": gap(p_ds, p_svd),
                     "full_vs_svd": gap(p_full, p_svd), "ridge_vs_svd": gap(p_sk, p_svd),
                     "rmse_ds": rmse(yt, p_ds), "rmse_ds_full": rmse(yt, p_full), "rmse_ridge": rmse(yt, p_sk),
                     "rmse_svd": rmse(yt, p_svd), "ridge_warnings": n_warn})
    model.set_lam(lam)
    y_mean = float(y.mean())
    centred = fit(target=y - y_mean, lams=lam)
    with_icpt = ridge(n * lam)
    fit_quiet(with_icpt, Z, y)
    no_icpt = ridge(n * lam, fit_intercept=False)
    fit_quiet(no_icpt, Z, y)
    no_icpt_c = ridge(n * lam, fit_intercept=False)
    fit_quiet(no_icpt_c, Z, y - y_mean)
    variants = {"distsketch": rmse(yt, model.predict(Xt)),
                "distsketch, y centred (fit on y − ȳ, add ȳ back)": rmse(yt, centred.predict(Xt) + y_mean),
                "Ridge(fit_intercept=False)": rmse(yt, no_icpt.predict(Zt)),
                "Ridge(fit_intercept=False), y centred": rmse(yt, no_icpt_c.predict(Zt) + y_mean),
                ICPT_DEFAULT: rmse(yt, with_icpt.predict(Zt))}
    at = next(r for r in path if r["lam"] == lam)
    k_eig = np.linalg.eigvalsh(_rbf(model.landmarks_, gamma))
    return {"path": path, "at_lam": at, "variants": variants, "intercept": float(with_icpt.intercept_),
            "y_mean": y_mean, "kept_default": int(model.input_solution_.T.shape[1]),
            "kept_full": int(full.input_solution_.T.shape[1]),
            "kjj_eig_min": float(k_eig[0]), "kjj_eig_max": float(k_eig[-1])}


def _rbf(A: np.ndarray, gamma: float) -> np.ndarray:
    from scipy.spatial.distance import cdist

    return np.exp(-gamma * cdist(A, A, "sqeuclidean"))


def exact_subset(X, y, Xt, yt, *, gamma, n_sub, repeats, seed) -> dict:
    """Exact KRR on ``n_sub`` training rows: distsketch ``sketch=None`` vs KernelRidge.

    λ of its own: the m = 1000 Nyström λ over-fits an exact model on fewer rows, so the
    λ grid is scanned once more (one distsketch fit, ``set_lam``) on ``n_sub`` other
    training rows held out for validation.
    """
    from sklearn.kernel_ridge import KernelRidge

    import distsketch as ds

    perm = np.random.default_rng(seed).permutation(len(X))
    rows, held = perm[:n_sub], perm[n_sub : 2 * n_sub]
    Xs, ys = X[rows], y[rows]
    path = ds.SketchedKRR(ds.Gaussian(gamma), fit_intercept=False, lam=list(LAM_GRID)).fit(Xs, ys)
    val = {v: rmse(y[held], path.set_lam(v).predict(X[held])) for v in LAM_GRID}
    lam = min(val, key=val.get)
    out = {"ds": [], "sk": []}
    preds = {}
    for r in range(repeats):
        for who in (("ds", "sk") if r % 2 == 0 else ("sk", "ds")):
            est = (ds.SketchedKRR(ds.Gaussian(gamma), fit_intercept=False, lam=lam) if who == "ds"
                   else KernelRidge(alpha=n_sub * lam, kernel="rbf", gamma=gamma))
            t = time.perf_counter()
            fit_quiet(est, Xs, ys)
            out[who].append(time.perf_counter() - t)
            preds[who] = np.asarray(est.predict(Xt)).ravel()
    return {"n": n_sub, "lam": lam, "fit_s_ds": float(np.median(out["ds"])),
            "fit_s_sk": float(np.median(out["sk"])), "rmse_ds": rmse(yt, preds["ds"]),
            "rmse_sk": rmse(yt, preds["sk"]),
            "rel_l2": float(np.linalg.norm(preds["ds"] - preds["sk"]) / np.linalg.norm(preds["sk"]))}


# --------------------------------------------------------------------------- main


def main() -> None:
    ap = _common.parser(__doc__, quick="6 000 rows, m = 300, 2 rounds (< 30 s)", repeats=5,
                        repeats_help="timing rounds (≥ 3; medians reported)")
    ap.add_argument("--m", type=int, default=1000, help="landmarks (SubSampling(m) / n_components)")
    ap.add_argument("--split-seed", type=int, default=0)
    ap.add_argument("--exact-n", type=int, default=2000,
                    help="rows of the exact-KRR reference (0 to skip)")
    args = ap.parse_args()

    _common.require(_common.casp_path(), "CASP data")
    if args.quick:
        args.m, args.repeats, args.exact_n = 300, 2, 0
    t_start = time.perf_counter()
    X, y, Xt, yt = _common.load_casp(args.split_seed, 6_000 if args.quick else None)
    n, m = len(X), args.m
    gamma, med = median_gamma(X, args.split_seed)
    gemm = _common.gemm_gflops()
    print(f"CASP: {n} train / {len(Xt)} test rows, d = {X.shape[1]}; γ = 1 / {med:.4f} = {gamma:.5f} "
          f"(median heuristic, {min(GAMMA_ROWS, n)} training rows); y mean {y.mean():.3f}, std {y.std():.3f}; "
          f"numpy GEMM {gemm:.1f} GFLOP/s", flush=True)

    lam, val = select_lam(X, y, gamma=gamma, m=m, seed=args.split_seed)
    print("validation RMSE by λ (one distsketch fit, set_lam): "
          + ", ".join(f"{k:g}: {v:.4f}" for k, v in val.items()) + f" → λ = {lam:g}, Ridge α = nλ = {n * lam:.4g}",
          flush=True)

    eq = same_landmarks(X, y, Xt, yt, gamma=gamma, m=m, lam=lam, seed=args.split_seed)
    a = eq["at_lam"]
    print(f"same landmarks, λ = {lam:g}: ‖p_ds − p_ridge‖ / ‖p_ridge‖ = {a['rel_l2']:.2e}, "
          f"max |p_ds − p_ridge| = {a['max_abs']:.2e} (Ridge without intercept, α = nλ)")
    print(f"  K_JJ eigenvalues in [{eq['kjj_eig_min']:.2e}, {eq['kjj_eig_max']:.3g}]; distsketch keeps "
          f"{eq['kept_default']} of {m} directions at rtol 1e-10, {eq['kept_full']} at rtol 1e-12")
    print("  gap to Ridge along the λ path (default rtol | rtol 1e-12 | Ridge vs SVD-stable ridge): "
          + ", ".join(f"{r['lam']:g}: {r['rel_l2']:.1e} | {r['rel_l2_full']:.1e} | {r['ridge_vs_svd']:.1e}"
                      for r in eq["path"]))
    print("  test RMSE, intercept handling: " + "; ".join(f"{k} {v:.4f}" for k, v in eq["variants"].items())
          + f" (Ridge intercept {eq['intercept']:.3f}, mean y {eq['y_mean']:.3f})", flush=True)

    disk = not args.quick
    contenders = {"distsketch": run_distsketch, "sklearn": run_sklearn}
    if disk:
        contenders["distsketch, store on disk"] = run_distsketch_disk
    runs = {name: [] for name in contenders}
    names = list(contenders)
    for r in range(args.repeats):
        order = names if r % 2 == 0 else names[::-1]
        for name in order:
            res = contenders[name](X, y, Xt, yt, gamma=gamma, m=m, lam=lam, seed=r)
            runs[name].append(res)
            print(f"round {r} {name:30s} fit {res['fit_s']:6.2f} s  predict {res['predict_s']:5.2f} s  "
                  f"test RMSE {res['rmse']:.4f}", flush=True)
    med_ = {name: {k: float(np.median([x[k] for x in rs])) for k in rs[0]} for name, rs in runs.items()}
    ds_, sk = med_["distsketch"], med_["sklearn"]
    time_ratio = ds_["fit_s"] / sk["fit_s"]
    rmse_rel = (ds_["rmse"] - sk["rmse"]) / sk["rmse"]
    pass_time = "PASS" if time_ratio <= 1.0 else "FAIL"
    pass_rmse = "PASS" if abs(rmse_rel) <= 0.01 else "FAIL"
    per_round = [d["fit_s"] / s["fit_s"] for d, s in zip(runs["distsketch"], runs["sklearn"])]
    print(f"median fit: distsketch {ds_['fit_s']:.2f} s, sklearn {sk['fit_s']:.2f} s "
          f"(Nystroem {sk['nystroem_s']:.2f} + Ridge {sk['ridge_s']:.2f}); ratio {time_ratio:.3f} "
          f"(per round {', '.join(f'{x:.2f}' for x in per_round)}) → target ≤ 1.0: {pass_time}")
    print(f"median test RMSE: distsketch {ds_['rmse']:.4f}, sklearn {sk['rmse']:.4f}; relative difference "
          f"{100 * rmse_rel:+.2f} % → target within 1 %: {pass_rmse}")
    if disk:
        kept = med_["distsketch, store on disk"]
        print(f"distsketch with a kept store on local disk: fit {kept['fit_s']:.2f} s "
              f"(store=None: {ds_['fit_s']:.2f} s)")

    exact = None
    if args.exact_n:
        exact = exact_subset(X, y, Xt, yt, gamma=gamma, n_sub=min(args.exact_n, n // 2),
                             repeats=min(args.repeats, 3), seed=args.split_seed)
        print(f"exact KRR on {exact['n']} training rows (λ = {exact['lam']:g}): distsketch {exact['fit_s_ds']:.2f} s, "
              f"KernelRidge {exact['fit_s_sk']:.2f} s; test RMSE {exact['rmse_ds']:.4f} vs "
              f"{exact['rmse_sk']:.4f}; ‖Δp‖/‖p‖ = {exact['rel_l2']:.1e}")
    total = time.perf_counter() - t_start
    print(f"total {total:.0f} s")

    rows = [(f"| distsketch `SketchedKRR(Gaussian(γ), sketch=SubSampling({m}))`, `store=None` | "
             f"{ds_['fit_s']:.2f} | – | {ds_['predict_s']:.2f} | {ds_['rmse']:.4f} |"),
            (f"| scikit-learn `Nystroem(n_components={m})` + `Ridge(alpha=nλ)` | {sk['fit_s']:.2f} | "
             f"{sk['nystroem_s']:.2f} + {sk['ridge_s']:.2f} | {sk['predict_s']:.2f} | {sk['rmse']:.4f} |")]
    if disk:
        rows.append(f"| distsketch, kept store on local disk (resumable; information) | "
                    f"{kept['fit_s']:.2f} | – | {kept['predict_s']:.2f} | {kept['rmse']:.4f} |")
    ref_v = eq["variants"][ICPT_DEFAULT]
    variants = "\n".join(f"| {k} | {v:.4f} | {100 * (v - ref_v) / ref_v:+.2f} % |" for k, v in eq["variants"].items())
    path_rows = "\n".join(
        f"| {r['lam']:g} | {r['rel_l2']:.1e} | {r['rel_l2_full']:.1e} | {r['ds_vs_svd']:.1e} | "
        f"{r['full_vs_svd']:.1e} | {r['ridge_vs_svd']:.1e} | {r['rmse_ds']:.4f} | {r['rmse_ds_full']:.4f} | "
        f"{r['rmse_ridge']:.4f} | {r['rmse_svd']:.4f} | {val.get(r['lam'], float('nan')):.4f} |" for r in eq["path"])
    exact_md = "" if exact is None else (
        f"\n\nExact KRR reference on {exact['n']} random training rows (same γ; λ = {exact['lam']:g} chosen on "
        f"{exact['n']} other training rows; median of "
        f"{min(args.repeats, 3)}): distsketch `sketch=None` {exact['fit_s_ds']:.2f} s vs scikit-learn "
        f"`KernelRidge(alpha=n_sub·λ)` {exact['fit_s_sk']:.2f} s; test RMSE {exact['rmse_ds']:.4f} vs "
        f"{exact['rmse_sk']:.4f}; relative prediction gap {exact['rel_l2']:.1e}.")
    md = (
        f"CASP (UCI protein structure), {n} training / {len(Xt)} test rows (seeded 80/20 split, seed "
        f"{args.split_seed}), 9 standardised features, target RMSD (mean {y.mean():.2f}, std {y.std():.2f}). "
        f"Gaussian kernel, γ = 1 / median ‖x_i − x_j‖² on {min(GAMMA_ROWS, n)} training rows = {gamma:.5f}; "
        f"m = {m} landmarks. λ = {lam:g} chosen on a validation split of the training rows (one distsketch fit, "
        f"`set_lam`), used for both; Ridge α = nλ = {n * lam:.4g}. Medians of {args.repeats} interleaved rounds "
        f"(round r: sketch seed r for both tools). distsketch: numpy input, `store=None` (no pass blocks "
        f"written; the kept-store row writes the n × m block C, {n * m * 8 / 2**20:.0f} MiB, to local disk "
        f"inside its fit time), BLAS 1 thread + "
        f"dask threaded scheduler; scikit-learn: BLAS default threads. numpy GEMM {gemm:.1f} GFLOP/s in the "
        f"same run. Total run {total:.0f} s.\n\n"
        "| model | fit (s) | Nystroem + Ridge (s) | predict test (s) | test RMSE |\n"
        "|---|---:|---:|---:|---:|\n" + "\n".join(rows) +
        f"\n\nFit time ratio distsketch / scikit-learn: **{time_ratio:.3f}** (target ≤ 1.0: **{pass_time}**; "
        f"per round {', '.join(f'{x:.2f}' for x in per_round)}). Test RMSE relative difference "
        f"(distsketch − scikit-learn) / scikit-learn: **{100 * rmse_rel:+.2f} %** (target within 1 %: "
        f"**{pass_rmse}**).\n\n"
        f"Same landmarks (Nystroem fitted on distsketch's `landmarks_`, seed {args.split_seed}), λ = {lam:g}: "
        f"predictions of distsketch and `Ridge(alpha=nλ, fit_intercept=False)` differ by "
        f"{a['rel_l2']:.1e} (relative L2), {a['max_abs']:.1e} at most. Intercept handling at these landmarks "
        f"(Ridge's fitted intercept {eq['intercept']:.3f}; mean training y {eq['y_mean']:.3f}):\n\n"
        "| variant | test RMSE | vs Ridge with intercept |\n|---|---:|---:|\n" + variants +
        "\n\nAlong the λ path, same landmarks, no intercept. K_JJ eigenvalues lie in "
        f"[{eq['kjj_eig_min']:.1e}, {eq['kjj_eig_max']:.3g}]: distsketch's default relative threshold "
        f"(rtol 1e-10) keeps {eq['kept_default']} of the {m} directions, `EngineOptions(rtol=1e-12)` keeps "
        f"{eq['kept_full']}, Nystroem keeps all (it clips at 1e-12 absolute). 'SVD' = ridge solved through the "
        "SVD of the Nyström features, w = V Σ (Σ² + nλ)⁻¹ Uᵀy (no normal equations): the numerically stable "
        "reference. Gaps are ‖p − p_ref‖ / ‖p_ref‖ on the test set; distsketch: one fit per rtol, `set_lam`; "
        "Ridge: one fit per λ.\n\n"
        "| λ | ds vs Ridge | ds rtol 1e-12 vs Ridge | ds vs SVD | ds rtol 1e-12 vs SVD | Ridge vs SVD | "
        "RMSE ds | RMSE ds rtol 1e-12 | RMSE Ridge | RMSE SVD | validation RMSE (selection fit) |\n"
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n" + path_rows +
        exact_md
    )
    data = {"protocol": {"n_train": n, "n_test": len(Xt), "split_seed": args.split_seed, "m": m,
                         "gamma": gamma, "median_sq_dist": med, "lam_grid": LAM_GRID, "lam": lam,
                         "alpha": n * lam, "repeats": args.repeats},
            "validation_rmse": {str(k): v for k, v in val.items()}, "runs": runs, "medians": med_,
            "time_ratio": time_ratio, "rmse_rel_diff": rmse_rel,
            "targets": {"time": pass_time, "rmse": pass_rmse}, "same_landmarks": eq, "exact": exact,
            "gemm_gflops": gemm, "total_s": total}
    _common.record("casp", md, data, args=args)


if __name__ == "__main__":
    main()
