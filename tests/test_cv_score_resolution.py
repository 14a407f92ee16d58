"""CV fold scores that cannot lie: each is resolved above its rounding error bound or NaN,
never positive (as a negative error) and never selected when unresolved; checked against exact
arithmetic and against brute-force refits of every fold at ill-conditioned points (wide
Gaussian kernels, λ down to 1e-12, float32 and float64 blocks).

Tolerances. A resolved score's squared error is within ``SCORE_RTOL`` (ρ) of the exact
validation error of the fold's model (:func:`distsketch.model_selection.scoring.resolved`: its bound is at most ρ
times it), which the exact-arithmetic test checks against its bound directly. Against the brute
force (the same ridge problem on each fold solved densely as augmented least squares, scored
by residuals) the tolerance is the same ρ; that the two computed fold models agree to well
within it wherever the library resolves the score is checked here, not derived (at most 1e-2
relative on these grids; the unresolved points are where they can differ). The selection
guarantee follows from ρ: a point chosen over another resolved one has a true error at most
``(1 + ρ)/(1 − ρ)`` times the other's.
"""

from __future__ import annotations

import warnings
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import distsketch as ds
from distsketch.engine.sums import fold_ids
from distsketch.model_selection import scoring as dcv
from distsketch.model_selection.grid import GridEdgeWarning
from reference.closed_forms import white
from reference.folds import sisokr_brute_force, width_sketch
from reference.kernels import gaussian_gram

ROOT = Path(__file__).resolve().parents[1]
RHO = dcv.SCORE_RTOL
CHOICE = (1 + RHO) / (1 - RHO)  # worst ratio of true errors between chosen and any resolved
LAMS = [1e-12, 1e-10, 1e-8, 1e-6, 1e-4, 1e-2]
GAMMAS = [1e-4, 1e-2, 1e-1]  # ‖x − x'‖² ≈ 6 here: the widest kernel is nearly constant


def _data(n=300, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    Y = np.sin(X[:, :1]) + 0.5 * X[:, 1:2] * X[:, 2:3] + 0.1 * rng.normal(size=(n, 2))
    return X, Y + 3.0  # an offset the intercept must absorb (without one, the model fits it)


def _scores(model):
    return np.stack([model.cv_results_[f"split{k}_test_score"]
                     for k in range(model.n_splits_)])


def _fit_recording(est, X, Y):
    """Fit, returning the UserWarnings it emitted (checked by the caller after the numbers);
    a chosen point at an edge of its grid (GridEdgeWarning) is not what these tests check."""
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        est.fit(X, Y)
    return [w for w in rec if issubclass(w.category, UserWarning)
            and not issubclass(w.category, GridEdgeWarning)]


def _features(model, X, gamma, dtype):
    """``(C, R)``: the pass's features ``C = k(X, X_J) R_mixᵀ`` at width ``gamma`` in the block
    dtype, as float64 (float32 values are exact in float64), and the sketch matrix ``R`` of
    that width (a pre-whitened sketch is whitened for each width's kernel)."""
    from distsketch.engine.features import FeatureMap

    sketch = width_sketch(model.sketch_, ds.Gaussian(gamma), model.landmarks_)
    fmap = FeatureMap(ds.Gaussian(gamma), model.landmarks_, sketch)
    R = sketch.matrix()
    R = R.toarray() if hasattr(R, "toarray") else np.asarray(R)
    return np.asarray(fmap.block(X, dtype=np.dtype(dtype)), dtype=np.float64), R


def _krr_brute_force(C, R, Y, lams, folds, intercept):
    """Per fold and λ, minus the validation MSE of ridge on the whitened features ``Φ = C T``
    (``Tᵀ B T = I``, ``B = R C``, eigenvalues above 1e-10·max: the library's threshold),
    solved as least squares ``[Φ_tr; √(n_tr λ) I] z ≈ [Y_tr − ȳ; 0]`` (backward stable, no
    normal equations) and scored by residuals (no cancellation)."""
    n = len(C)
    Phi = C @ white(R @ C)
    r = Phi.shape[1]
    f = fold_ids(0, n, n, folds)
    out = np.empty((f.max() + 1, len(lams)))
    for k in range(f.max() + 1):
        tr, va = f != k, f == k
        ybar = Y[tr].mean(axis=0) if intercept else np.zeros(Y.shape[1])
        for j, lam in enumerate(lams):
            A = np.vstack([Phi[tr], np.sqrt(tr.sum() * lam) * np.eye(r)])
            z = np.linalg.lstsq(A, np.vstack([Y[tr] - ybar, np.zeros((r, Y.shape[1]))]),
                                rcond=None)[0]
            out[k, j] = -np.mean((Y[va] - ybar - Phi[va] @ z) ** 2)
    return out


def _assert_against_brute_force(est, rec, S, bf, *, unresolved=True):
    """Every resolved score ``S`` within ρ of the brute force's ``bf`` (folds × grid), the
    unresolved ranked last and named in the one warning ``rec``, and the choice within
    ``CHOICE`` of the brute force's best. ``unresolved=False``: a grid the fit resolves
    everywhere (a pre-whitened sketch, whose fold sums are of whitened features): no NaN and
    no warning."""
    ok = ~np.isnan(S)
    assert np.all(np.abs(S[ok] - bf[ok]) <= RHO * np.abs(S[ok])), \
        np.max(np.abs(S[ok] - bf[ok]) / np.abs(S[ok]))
    _assert_ranked_nan_last(est)
    if unresolved:
        _assert_warned_exactly_the_unresolved(rec, est)
    else:
        assert ok.all() and rec == [], [str(w.message) for w in rec]
    want = -bf.mean(axis=0)
    assert want[est.best_index_] <= CHOICE * want.min(), (est.best_params_, want)


def _assert_warned_exactly_the_unresolved(rec, model):
    """One warning naming every point whose mean score is NaN, and nothing else."""
    mean = model.cv_results_["mean_test_score"]
    bad = [p for p, s in zip(model.cv_results_["params"], mean) if np.isnan(s)]
    assert bad, "the grid was meant to hold unresolved points"
    assert len(rec) == 1, [str(w.message) for w in rec]
    msg = str(rec[0].message)
    assert f"{len(bad)} of {len(mean)} points" in msg
    for p in model.cv_results_["params"]:
        named = dcv._describe_point(p) in msg
        assert named == (p in bad), p


def _assert_ranked_nan_last(model):
    res = model.cv_results_
    mean, rank = res["mean_test_score"], res["rank_test_score"]
    ok = np.isfinite(mean)
    assert sorted(rank[ok]) == list(range(1, ok.sum() + 1))
    assert np.all(rank[~ok] == ok.sum() + 1)  # scikit-learn: NaN means share the worst rank
    assert np.isfinite(model.best_score_) and model.best_index_ == int(np.nanargmax(mean))


# --------------------------------------------------------------------------- exact arithmetic


def test_fold_error_is_within_its_bound_of_exact_arithmetic():
    """The trace form from float64 fold sums of features, against the exact validation
    error (rational arithmetic on the same float values), for coefficients from ridge solves
    at λ = 1e-12 … 1e-2 and with null directions of the features added at scales up to 1e12
    (they leave the exact error unchanged): always within its bound; where resolved, within
    ρ; and the trace form does fail (error beyond 50 %, or a negative error) on some of them,
    all of which are unresolved."""
    rng = np.random.default_rng(1)
    n_k, m = 64, 12
    X, L = rng.normal(size=(n_k, 3)), rng.normal(size=(m, 3))
    C = gaussian_gram(X, L, gamma=1e-3).astype(np.float32)
    C = C.astype(np.float64)  # nearly collinear columns: a wide kernel
    # exact null directions (sums of float32 values are exact in float64), which the
    # float64 fold sums do not cancel exactly
    C[:, 2], C[:, 5] = C[:, 0] + C[:, 1], C[:, 3] - C[:, 4]
    null = np.zeros((m, 2))
    null[[0, 1, 2], 0], null[[3, 4, 5], 1] = (1.0, 1.0, -1.0), (1.0, -1.0, -1.0)
    assert not (C @ null).any()
    Y = np.column_stack([np.sin(X[:, 0]), X[:, 1]]) + 0.1 * rng.normal(size=(n_k, 2))
    # the pass's sums: float64 sums of block products, in a tree over blocks of 16 rows
    parts = [(C[i:i + 16].T @ C[i:i + 16], C[i:i + 16].T @ Y[i:i + 16],
              (Y[i:i + 16] ** 2).sum(0)) for i in range(0, n_k, 16)]
    G = (parts[0][0] + parts[1][0]) + (parts[2][0] + parts[3][0])
    b = (parts[0][1] + parts[1][1]) + (parts[2][1] + parts[3][1])
    yy = (parts[0][2] + parts[1][2]) + (parts[2][2] + parts[3][2])
    betas = [np.linalg.solve(G + n_k * lam * np.eye(m), b) for lam in LAMS]
    betas += [betas[-1] + scale * null @ rng.normal(size=(2, 2))
              for scale in 10.0 ** np.arange(0, 13)]
    Cq = [[Fraction(v) for v in row] for row in C]
    Yq = [[Fraction(v) for v in row] for row in Y]
    failed = resolved_cases = 0
    for beta in betas:
        sse, bound = dcv.krr_fold_error(beta, G, b, yy, y_size=np.sqrt(yy), n_rows=n_k)
        for t in range(2):
            bq = [Fraction(v) for v in beta[:, t]]
            exact = sum((Yq[i][t] - sum(c * w for c, w in zip(Cq[i], bq))) ** 2
                        for i in range(n_k))
            err = abs(Fraction(sse[t]) - exact)
            assert err <= Fraction(bound[t]), (sse[t], float(exact), bound[t])
            ok = bool(dcv.resolved(sse[t], bound[t]))
            if ok:
                resolved_cases += 1
                assert exact > 0 and err <= Fraction(RHO) * Fraction(sse[t])
            if err > exact / 2 or sse[t] < 0:
                failed += 1
                assert not ok
    assert failed >= 4 and resolved_cases >= 12, (failed, resolved_cases)


# --------------------------------------------------------------------------- SketchedKRRCV


@pytest.mark.parametrize("intercept", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(("sketch", "prewhiten"),
                         [(ds.SubSampling(60), False), (ds.SubSampling(60), None),
                          (ds.PSparsified(60, p=0.1), None), (ds.GaussianSketch(60), None)],
                         ids=["subsampling", "subsampling-prewhitened", "psparsified",
                              "gaussian"])
def test_krr_cv_scores_at_ill_conditioned_points_against_brute_force(sketch, prewhiten, dtype,
                                                                      intercept):
    """Wide kernels and λ down to 1e-12: no positive neg-MSE; every resolved fold score within
    ρ of the brute-force refit of its fold; the unresolved ones NaN, named in one warning,
    ranked last; the chosen point's brute-force error within (1 + ρ)/(1 − ρ) of the grid's
    best brute-force error. Sub-sampling pre-whitened (the default) resolves every point of
    this grid; without it (``prewhiten=False``) the grid holds unresolved points."""
    X, Y = _data()
    Y = Y if intercept else Y - 3.0
    est = ds.SketchedKRRCV(ds.Gaussian(GAMMAS[0]), sketch=sketch, lams=LAMS, gammas=GAMMAS,
                           cv=5, fit_intercept=intercept, random_state=0,
                           options=ds.EngineOptions(block_dtype=dtype, prewhiten=prewhiten))
    rec = _fit_recording(est, X, Y)
    S = _scores(est)
    assert np.all(np.isnan(S) | (S < 0)), S[S > 0]
    bf = np.concatenate([_krr_brute_force(*_features(est, X, g, dtype), Y, LAMS, "5",
                                          intercept) for g in GAMMAS], axis=1)
    ok = ~np.isnan(S)
    assert ok.sum() >= S.size // 3  # the moderate λ stay resolved
    whitened = isinstance(est.sketch_, ds.sketches.WhitenedSketch)
    assert whitened is (prewhiten is None and isinstance(sketch, ds.SubSampling))
    _assert_against_brute_force(est, rec, S, bf, unresolved=not whitened)


def test_krr_cv_with_every_point_unresolved_refuses_to_choose():
    """Without pre-whitening, every point of this grid is unresolved: refused. Pre-whitened
    (the default), the same grid resolves."""
    X, Y = _data()
    est = ds.SketchedKRRCV(ds.Gaussian(1e-4), sketch=ds.SubSampling(60), lams=[1e-12, 1e-10],
                           cv=5, fit_intercept=False, random_state=0,
                           options=ds.EngineOptions(prewhiten=False))
    with pytest.raises(dcv.UnresolvedScoresError, match=r"no point of the grid.*lam=1e-12.*"
                                                        r"block_dtype='float64'"):
        est.fit(X, Y - 3.0)
    assert np.isnan(est.cv_results_["mean_test_score"]).all()
    assert list(est.cv_results_["rank_test_score"]) == [1, 1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", GridEdgeWarning)  # λ = 1e-12 chosen: not the subject
        est.set_params(options=None).fit(X, Y - 3.0)
    assert np.isfinite(est.cv_results_["mean_test_score"]).all()


# --------------------------------------------------------------------------- SISOKRCV


@pytest.mark.parametrize("prewhiten", [False, None], ids=["", "prewhitened"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("ranks", [None, [2, 4]])
def test_sisokr_cv_surrogate_scores_at_ill_conditioned_points_against_brute_force(dtype,
                                                                                   ranks,
                                                                                   prewhiten):
    """SISOKRCV's surrogate scores at wide input kernels and λ down to 1e-12: every resolved
    one within ρ of the dense per-fold refit, the unresolved NaN (named, ranked last, never
    chosen), the choice within (1 + ρ)/(1 − ρ) of the brute force's best. Pre-whitened
    sketches (the default) resolve every point of this grid."""
    rng = np.random.default_rng(0)
    n = 240
    X = rng.normal(size=(n, 3))
    Y = (X @ rng.normal(size=(3, 6)) + 0.5 * rng.normal(size=(n, 6)) > 0).astype(float)
    lams, gammas, gy = [1e-12, 1e-8, 1e-6, 1e-4, 1e-2], [1e-3, 1e-1], 0.5
    est = ds.SISOKRCV(ds.Gaussian(gammas[0]), ds.Gaussian(gy), input_sketch=ds.SubSampling(80),
                      output_sketch=ds.SubSampling(50), lams=lams, ranks=ranks, gammas=gammas,
                      cv=4, random_state=0,
                      options=ds.EngineOptions(block_dtype=dtype, prewhiten=prewhiten),
                      scoring="surrogate")
    rec = _fit_recording(est, X, Y)
    S = _scores(est)
    assert np.all(np.isnan(S) | (S < 0))
    # the widths share the sketches (drawn once from the rows): one brute force per width
    bf = [sisokr_brute_force(est, X, Y, lams, ranks, "4", g, gy) for g in gammas]
    bf = np.concatenate(bf, axis=1)
    ok = ~np.isnan(S)
    assert ok.any()
    assert isinstance(est.input_sketch_, ds.sketches.WhitenedSketch) is (prewhiten is None)
    _assert_against_brute_force(est, rec, S, bf, unresolved=prewhiten is False)


# --------------------------------------------------------------------------- select


def test_select_cv_skips_a_kernel_entry_with_no_resolved_score():
    """``[select]``'s cv route: an entry whose every CV score is unresolved has NaN rows and
    is not chosen; the others choose as usual."""
    from distsketch.model_selection.select import select

    X, Y = _data()
    y = Y[:, 0] - 3.0
    model = ds.SketchedKRR(sketch=ds.SubSampling(60), lam=[1e-12, 1e-10], fit_intercept=False,
                           random_state=0, options=ds.EngineOptions(prewhiten=False))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the narrow entry's own NaN points
        sel = select(model, X, y, cv=5, kernels=[ds.Gaussian(1e-4), ds.Gaussian(1.0)])
    wide = [r for r in sel.table if r["kernel"].startswith("gaussian(gamma=0.0001")]
    narrow = [r for r in sel.table if r not in wide]
    assert len(wide) == len(narrow) == 2
    assert all(np.isnan(r["score"]) for r in wide)
    assert all(np.isfinite(r["score"]) and r["score"] < 0 for r in narrow)
    assert sel.best["kernel"] == narrow[0]["kernel"]
    assert sel.model.kernel.gamma == 1.0


# --------------------------------------------------------------------------- rf1


def _rf1():
    import os

    base = Path(os.environ.get("DISTSKETCH_DATA", ROOT.parent / "shared" / "data")) / "mtr"
    if not (base / "rf1-train.arff").exists():
        pytest.skip(f"real data set not available: {base / 'rf1-train.arff'} "
                    f"(set DISTSKETCH_DATA)")
    from distsketch.io.arff import load_arff

    X, Y = load_arff(base / "rf1-train.arff", n_targets=8)
    Xt, Yt = load_arff(base / "rf1-test.arff", n_targets=8)
    mean = np.nanmean(X, axis=0)  # missing inputs: the training mean of their column
    X, Xt = np.where(np.isnan(X), mean, X), np.where(np.isnan(Xt), mean, Xt)
    mu, sd = X.mean(axis=0), X.std(axis=0)
    sd[sd == 0] = 1.0
    ym, ys = Y.mean(axis=0), Y.std(axis=0)
    return (X - mu) / sd, (Y - ym) / ys, (Xt - mu) / sd, (Yt - ym) / ys


@pytest.mark.slow
def test_rf1_float32_cv_selects_within_5_percent_of_the_grids_best():
    """rf1 as shipped (train/test split, training means imputed, standardised),
    ``PSparsified(100, p=20/n)``, λ = 1e-10 … 1e-3, γ = (1e-5 … 1e-1)/median‖x − x'‖², 5
    folds, no intercept, float32 blocks: no positive neg-MSE, and the chosen point's test
    ARRMSE within 5 % of the best over the grid (every point refitted on all rows)."""
    from scipy.spatial.distance import pdist

    from distsketch.metrics import arrmse

    X, Y, Xt, Yt = _rf1()
    n = len(X)
    med = float(np.median(pdist(X, "sqeuclidean")))
    lams = [1e-10, 1e-9, 1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3]
    gammas = [c / med for c in (1e-5, 1e-4, 1e-3, 1e-2, 1e-1)]
    sketch = ds.PSparsified(100, p=20 / n)
    est = ds.SketchedKRRCV(ds.Gaussian(gammas[0]), sketch=sketch, lams=lams, gammas=gammas,
                           cv=5, fit_intercept=False, random_state=0,
                           options=ds.EngineOptions(block_dtype="float32"))
    rec = _fit_recording(est, X, Y)
    S = _scores(est)
    assert np.all(np.isnan(S) | (S < 0)), S[S > 0]
    chosen = arrmse(Yt, est.predict(Xt), Y.mean(axis=0))
    grid = []
    for g in gammas:  # every λ of a width from one fit (set_lam)
        ref = ds.SketchedKRR(ds.Gaussian(g), sketch=sketch, lam=lams, fit_intercept=False,
                             random_state=0, options=ds.EngineOptions(block_dtype="float32"))
        ref.fit(X, Y)
        for lam in lams:
            ref.set_lam(lam)
            grid.append(arrmse(Yt, ref.predict(Xt), Y.mean(axis=0)))
    assert chosen <= 1.05 * min(grid), (est.best_params_, chosen, min(grid))
    _assert_warned_exactly_the_unresolved(rec, est)
