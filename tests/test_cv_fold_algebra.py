"""SISOKRCV's driver work after the pass (CV cost): the eigenbasis ``P = T_X V`` placed
without a product, the fold factor's triangular product, and the fold tasks scheduled without
a barrier — each against a dense formula or brute force."""

import dataclasses

import numpy as np
import pytest

import distsketch as ds
import distsketch.model_selection.fold_algebra
from distsketch.linalg.solve import InputSolution
from distsketch.solvers.direct import input_basis
from reference.errors import norm_rel_err
from reference.folds import sisokr_brute_force

F64 = ds.EngineOptions(block_dtype="float64", block_rows=64)
GX, GY = 0.3, 0.5


def _data(n=160, seed=3):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4))
    Y = (X[:, :3] @ rng.normal(size=(3, 6)) + 0.3 * rng.normal(size=(n, 6)) > 0.5)
    return X, Y.astype(np.float64)


def _scores(model, K):
    return np.stack([model.cv_results_[f"split{k}_test_score"] for k in range(K)])


def test_input_basis_places_the_rows_of_V():
    """Generalized form (``T = E_keep``): ``input_basis`` equals the product ``T V`` bitwise
    (every entry of the product is one entry of ``V`` times 1 plus exact zeros); without a
    ``support`` (a loaded model) it is the product itself."""
    rng = np.random.default_rng(0)
    m, keep = 12, np.array([0, 2, 3, 7, 8, 11])
    T = np.zeros((m, len(keep)))
    T[keep, np.arange(len(keep))] = 1.0
    V = rng.normal(size=(len(keep), len(keep)))
    H = np.eye(len(keep))
    sol = InputSolution(T=T, H=H, n=50, V=V, evals=np.ones(len(keep)), metric=H, support=keep)
    P = input_basis(sol)
    assert P.shape == (m, len(keep))
    assert np.array_equal(P, T @ V)
    loaded = InputSolution(T=T, H=H, n=50, V=V, evals=np.ones(len(keep)), metric=H)
    assert np.array_equal(input_basis(loaded), T @ V)


@pytest.mark.parametrize("rows", [8, 30, 60])  # rank 8 < m, rank 30 < m, full rank m = 40
def test_fold_factor_triangular_product_equals_dense(rows):
    """``U = P[piv]ᵀ tril(L)`` by trmm on the triangle plus GEMM below it: equal to the dense
    product with the explicit lower trapezoidal factor (1e-13 relative: the same products,
    summed in another order) and ``U Uᵀ = Pᵀ G_k P`` (1e-12), full rank included (no rows
    below the triangle)."""
    from scipy.linalg.lapack import dpstrf

    rng = np.random.default_rng(rows)
    m, r = 40, 37
    C = rng.normal(size=(rows, m))
    G = C.T @ C
    P = rng.normal(size=(m, r))
    c, piv, k, info = dpstrf(np.array(G, order="F"), lower=1)
    assert info >= 0 and k == min(rows, m)
    piv = np.asarray(piv, dtype=np.intp) - 1
    dense = P[piv].T @ np.tril(c[:, :k])
    U = distsketch.model_selection.fold_algebra._pivoted_product(P, piv, c.copy(order="F"), k)
    assert U.shape == (r, k)
    assert norm_rel_err(U, dense) <= 1e-13
    assert norm_rel_err(distsketch.model_selection.fold_algebra.fold_factor(G, P) @ distsketch.model_selection.fold_algebra.fold_factor(G, P).T,
                        P.T @ G @ P) <= 1e-12


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_woodbury_tasks_without_barrier_equal_brute_force(threads):
    """The Woodbury route's (fold, λ) tasks each wait for their fold's factor (no barrier
    after the factors): on 1, 2 or 3 threads the scores are bitwise those of one thread and
    within 1e-8 of the dense per-fold refits; the same best (λ, p)."""
    X, Y = _data()
    lams, ranks = [1e-4, 1e-2, 1.0], [1, 3, 8, 100]

    def fit(t):
        options = dataclasses.replace(F64, tuning=ds.Tuning(fold_route="woodbury",
                                                            fold_threads=t))
        return ds.SISOKRCV(ds.Gaussian(gamma=GX), ds.Gaussian(gamma=GY),
                           input_sketch=ds.SubSampling(40), output_sketch=ds.SubSampling(30),
                           lams=lams, ranks=ranks, cv=5, random_state=0,
                           options=options, scoring="surrogate").fit(X, Y)

    model, one = fit(threads), fit(1)
    assert np.array_equal(_scores(model, 5), _scores(one, 5))
    want = sisokr_brute_force(model, X, Y, lams, ranks, "5", GX, GY)
    assert norm_rel_err(_scores(model, 5), want) <= 1e-8
    assert model.best_params_ == model.cv_results_["params"][int(np.argmax(want.mean(axis=0)))]


def test_woodbury_factor_failure_propagates(monkeypatch):
    """A fold factor that raises stops the fit with its error (a task waiting on it re-raises
    it instead of hanging)."""
    options = dataclasses.replace(F64, tuning=ds.Tuning(fold_route="woodbury", fold_threads=2))

    def broken(*args, **kw):
        raise RuntimeError("factor failed")

    monkeypatch.setattr(distsketch.model_selection.fold_algebra, "_woodbury_prepare", broken)
    X, Y = _data()
    with pytest.raises(RuntimeError, match="factor failed"):
        ds.SISOKRCV(ds.Gaussian(gamma=GX), ds.Gaussian(gamma=GY),
                    input_sketch=ds.SubSampling(40), output_sketch=ds.SubSampling(30),
                    lams=[1e-3], cv=4, random_state=0, options=options,
                    scoring="surrogate").fit(X, Y)
