"""SISOKRCV's folds by the Woodbury route: the fold Gram ``G_k = L Lᵀ`` (rank ≤ n_k),
``(Λ + c − U Uᵀ)^{-1}`` by the Woodbury identity, against brute force and the band route."""

import dataclasses

import numpy as np
import pytest

import distsketch as ds
import distsketch.model_selection.fold_algebra
from distsketch.engine.sums import fold_ids
from reference.errors import norm_rel_err
from reference.folds import sisokr_brute_force

F64 = ds.EngineOptions(block_dtype="float64", block_rows=64)
WOODBURY = dataclasses.replace(F64, tuning=ds.Tuning(fold_route="woodbury"))
GX, GY = 0.3, 0.5


def _data(n=160, seed=5, duplicates=False):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4))
    if duplicates:  # fold 0 (rows 0..39 of 4 contiguous folds): 25 copies of one row
        X[10:35] = X[10]
    Y = (X[:, :3] @ rng.normal(size=(3, 6)) + 0.3 * rng.normal(size=(n, 6)) > 0.5)
    return X, Y.astype(np.float64)


def _fit(X, Y, lams, ranks, m_in=40, cv=4, options=F64):
    return ds.SISOKRCV(ds.Gaussian(gamma=GX), ds.Gaussian(gamma=GY),
                       input_sketch=ds.SubSampling(m_in), output_sketch=ds.SubSampling(30),
                       lams=lams, ranks=ranks, cv=cv, random_state=0, options=options,
                       scoring="surrogate").fit(X, Y)


def _scores(model, K):
    return np.stack([model.cv_results_[f"split{k}_test_score"] for k in range(K)])


@pytest.mark.parametrize("case", ["duplicates", "n_k > r_X", "plain"])
@pytest.mark.parametrize("ranks", [None, [1, 3, 8, 100]])
def test_woodbury_route_equals_brute_force(case, ranks, monkeypatch):
    """Every fold by the Woodbury route: a fold whose rows have rank below n_k (25 equal
    rows: G_k of rank ≤ 16), folds of n_k = 40 rows against r_X ≤ 15 features (U wider than
    tall), and the plain case; 1e-8 relative to the dense per-fold refits."""
    calls = []
    real = distsketch.model_selection.fold_algebra._woodbury_lam

    def counted(*args, **kw):
        out = real(*args, **kw)
        calls.append(out is not None)
        return out

    monkeypatch.setattr(distsketch.model_selection.fold_algebra, "_woodbury_lam", counted)
    X, Y = _data(duplicates=case == "duplicates")
    lams = [1e-4, 1e-2, 1.0]
    model = _fit(X, Y, lams, ranks, m_in=15 if case == "n_k > r_X" else 40, options=WOODBURY)
    assert calls == [True] * 12  # 4 folds × 3 λ: no fold fell back to the band route
    want = sisokr_brute_force(model, X, Y, lams, ranks, "4", GX, GY)
    assert norm_rel_err(_scores(model, 4), want) <= 1e-8
    best = model.cv_results_["params"][int(np.argmax(want.mean(axis=0)))]
    assert model.best_params_ == best


def test_fold_factor_rank_and_product():
    """``U Uᵀ = Pᵀ G_k P`` with ``k`` = the rank of the fold's rows (duplicates counted once),
    to the rounding of ``G_k`` (1e-12 relative at ‖G_k‖ ≈ 1e2)."""
    rng = np.random.default_rng(0)
    C = rng.normal(size=(30, 50))
    C[5:20] = C[5]  # 16 distinct rows
    G = C.T @ C
    P = rng.normal(size=(50, 45))
    U = distsketch.model_selection.fold_algebra.fold_factor(G, P)
    assert U.shape == (45, 16)
    assert norm_rel_err(U @ U.T, P.T @ G @ P) <= 1e-12
    assert distsketch.model_selection.fold_algebra.fold_factor(np.zeros((50, 50)), P).shape == (45, 0)


@pytest.mark.filterwarnings("ignore::distsketch.model_selection.grid.GridEdgeWarning")  # not about the choice
def test_mixed_routes_and_fallbacks(monkeypatch):
    """Folds split between the routes (by their row counts), and the Woodbury route's two
    fallbacks to the band route — an inner factor not positive definite, a condition estimate
    beyond the exact bound — give the brute-force scores."""
    import scipy.linalg.lapack as lapack

    X, Y = _data(n=161)  # 3 contiguous folds of 54, 53, 54 rows
    lams, ranks = [1e-3, 1e-1], [2, 5]
    counts = np.bincount(fold_ids(0, 161, 161, "3"))
    assert sorted(set(counts)) == [53, 54]
    routes = []

    def by_count(n_k, **kw):
        routes.append(n_k)
        return "band" if n_k == 53 else "woodbury"

    monkeypatch.setattr(distsketch.model_selection.fold_algebra, "fold_route", by_count)
    model = _fit(X, Y, lams, ranks, cv=3)
    want = sisokr_brute_force(model, X, Y, lams, ranks, "3", GX, GY)
    assert sorted(routes) == [53, 54, 54]
    assert norm_rel_err(_scores(model, 3), want) <= 1e-8

    monkeypatch.setattr(distsketch.model_selection.fold_algebra, "fold_route", lambda n_k, **kw: "woodbury")
    real_potrf = lapack.dpotrf
    for name, fake in [("dpotrf", lambda a, **kw: (real_potrf(a, **kw)[0], 1)),
                       ("dpocon", lambda a, anorm, **kw: (1e-300, 0))]:
        with monkeypatch.context() as mp:
            mp.setattr(lapack, name, fake)
            fell_back = []
            real_band = distsketch.model_selection.fold_algebra._fold_scores

            def band(*args, **kw):
                fell_back.append(True)
                return real_band(*args, **kw)

            mp.setattr(distsketch.model_selection.fold_algebra, "_fold_scores", band)
            got = _scores(_fit(X, Y, lams, ranks, cv=3), 3)
        assert fell_back == [True] * 3, name
        assert norm_rel_err(got, want) <= 1e-8, name


def test_woodbury_and_band_routes_agree_on_the_same_sums():
    """The two routes on the same fold sums (:func:`sisokr_fold_scores` called directly),
    with the decoding models: scores to 1e-10, models ``P Z`` to 1e-8 relative
    (cond(Ĥ_{−k} + c) ≤ 1e4 here)."""
    rng = np.random.default_rng(3)
    m, r_y, K, n_k = 25, 7, 3, 12
    C = rng.normal(size=(K * n_k, m))
    D = rng.normal(size=(K * n_k, r_y))
    f = np.repeat(np.arange(K), n_k)
    Gf = np.stack([C[f == k].T @ C[f == k] for k in range(K)])
    Mf = np.stack([D[f == k].T @ C[f == k] for k in range(K)])
    evals, V = np.linalg.eigh(Gf.sum(axis=0))
    P = V  # T_X = I
    T_Y = np.eye(r_y)
    operator = P.T @ Mf.sum(axis=0).T @ T_Y
    kyy = np.array([(D[f == k] ** 2).sum() for k in range(K)]) + 5.0
    cnt = np.full(K, float(n_k))
    out = {}
    for route in ("band", "woodbury"):
        out[route] = distsketch.model_selection.fold_algebra.sisokr_fold_scores(
            P, evals, operator, T_Y, Gf, Mf, kyy, cnt, n=K * n_k, lams=[1e-2, 1.0],
            ranks=(2, 4, 7), keep_models=True, band=4, tuning=ds.Tuning(fold_route=route))
    assert norm_rel_err(out["woodbury"][0], out["band"][0]) <= 1e-10
    for fb, fw in zip(out["band"][1], out["woodbury"][1]):
        for (Zb, Qb), (Zw, Qw) in zip(fb, fw):
            assert norm_rel_err(Zw, Zb) <= 1e-8
            assert norm_rel_err(Zw @ Qw, Zb @ Qb) <= 1e-6 or Qb is None


def test_route_rule():
    """Bibtex's shape (m_X = 2250, r_X = 2247, n_k = 976, r_Y = 200, 10 λ) takes the Woodbury
    route; folds as wide as the features (n_k ≥ r_X) the band route; a bad forced route is
    refused naming the setting."""
    rule = distsketch.model_selection.fold_algebra.fold_route
    assert rule(976, m=2250, r=2247, r_y=200, n_lams=10) == "woodbury"
    assert rule(3000, m=2250, r=2247, r_y=200, n_lams=10) == "band"
    assert rule(40, m=40, r=40, r_y=30, n_lams=3) == "band"
    with pytest.raises(ValueError, match="options.tuning.fold_route"):
        rule(976, m=2250, r=2247, r_y=200, n_lams=10, tuning=ds.Tuning(fold_route="eigen"))
