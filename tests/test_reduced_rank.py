"""Reduced-rank IOKR: the pipeline's scores against the paper's dense algorithms."""

import numpy as np
import pytest

import distsketch as ds
from reference.closed_forms import reduced_rank_scores
from reference.errors import norm_rel_err

KX = ds.Gaussian(gamma=1.0)
KY = ds.Gaussian(gamma=0.5)
LAM = 1e-3
F64 = ds.EngineOptions(block_dtype="float64")
SIDES = {"IOKR": (None, None), "SIOKR": (ds.SubSampling(30), None),
         "ISOKR": (None, ds.SubSampling(25)), "SISOKR": (ds.SubSampling(30), ds.SubSampling(25))}


def _problem(n=80, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4))
    Y = (X[:, :5 % 4 + 2] @ rng.normal(size=(3, 6)) + 0.3 * rng.normal(size=(n, 6)) > 0.5)
    Y = Y.astype(np.float64)
    Xq = rng.normal(size=(7, 4))
    Yc = (rng.random((12, 6)) < 0.4).astype(np.float64)
    return X, Y, Xq, Yc


def _fit(X, Y, side, **kw):
    sx, sy = SIDES[side]
    kw = {"lam": LAM, **kw}
    return ds.SISOKR(KX, KY, input_sketch=sx, output_sketch=sy, random_state=3, options=F64,
                     **kw).fit(X, Y)


@pytest.mark.slow
@pytest.mark.parametrize("side", sorted(SIDES))
def test_scores_equal_the_dense_algorithm(side):
    X, Y, Xq, Yc = _problem()
    model = _fit(X, Y, side, rank=[1, 3, 7])
    Rx, Ry = model.input_sketch_.matrix(), model.output_sketch_.matrix()
    for p in (1, 3, 7):
        model.set_rank(p)
        assert model.coef_.shape[0] == p
        got = model.score_candidates(Xq, Yc)
        want = reduced_rank_scores(KX, KY, Rx, Ry, X, Y, Xq, Yc, LAM, p)
        assert norm_rel_err(got, want) <= 1e-8, (side, p)
        # decoding in p dimensions ranks by the same scores
        idx, scores = model.predict_topk(Xq, Yc, k=3)
        assert np.allclose(scores, np.take_along_axis(got, idx, axis=1), rtol=1e-10, atol=1e-12)
        assert np.array_equal(idx[:, 0], np.argmin(got, axis=1))


@pytest.mark.slow
@pytest.mark.parametrize("side", ["IOKR", "SIOKR", "SISOKR"])
def test_projection_lambda_differs_from_the_regressor_lambda(side):
    X, Y, Xq, Yc = _problem(seed=1)
    model = _fit(X, Y, side, rank=4, rank_lam=0.05)
    want = reduced_rank_scores(KX, KY, model.input_sketch_.matrix(),
                               model.output_sketch_.matrix(), X, Y, Xq, Yc, LAM, 4, lam1=0.05)
    assert norm_rel_err(model.score_candidates(Xq, Yc), want) <= 1e-8
    same = _fit(X, Y, side, rank=4)
    assert norm_rel_err(same.score_candidates(Xq, Yc), want) > 1e-6  # λ₁ matters


@pytest.mark.parametrize("side", sorted(SIDES))
def test_full_rank_is_the_full_model_exactly(side):
    X, Y, Xq, Yc = _problem(seed=2)
    full = _fit(X, Y, side)
    model = _fit(X, Y, side, rank=10_000)
    assert np.array_equal(model.score_candidates(Xq, Yc), full.score_candidates(Xq, Yc))
    assert np.array_equal(model.predict(Xq), full.predict(Xq))
    model.set_rank(None)
    assert model.rank_ is None and model.principal_values_ is None


def test_linear_output_kernel_projects_the_vectors():
    """ψ(y) = y: ĥ_p(x) is the projection of ĥ(x) ∈ R^d onto the top-p principal axes of the
    training predictions (uncentred PCA)."""
    X, Y, Xq, _ = _problem(seed=4)
    kw = dict(input_sketch=ds.SubSampling(30), output_sketch=ds.SubSampling(25), lam=LAM,
              random_state=3, options=F64)
    full = ds.SISOKR(KX, ds.Linear(), **kw).fit(X, Y)
    model = ds.SISOKR(KX, ds.Linear(), rank=2, **kw).fit(X, Y)
    H = full.predict(X)
    w, E = np.linalg.eigh(H.T @ H)
    E2 = E[:, ::-1][:, :2]
    want = full.predict(Xq) @ E2 @ E2.T
    assert norm_rel_err(model.predict(Xq), want) <= 1e-8


def test_principal_values_and_set_lam_recompute_the_projection():
    X, Y, Xq, Yc = _problem(seed=5)
    model = _fit(X, Y, "SISOKR", lam=[LAM, 0.1], rank=3)
    mu = model.principal_values_
    assert mu.ndim == 1 and np.all(np.diff(mu) <= 1e-12 * mu[0])
    model.set_lam(0.1)
    want = reduced_rank_scores(KX, KY, model.input_sketch_.matrix(), model.output_sketch_.matrix(),
                               X, Y, Xq, Yc, 0.1, 3)
    assert norm_rel_err(model.score_candidates(Xq, Yc), want) <= 1e-8


@pytest.mark.slow
@pytest.mark.parametrize("side", ["IOKR", "SIOKR"])
def test_switching_rank_at_one_lambda_factors_once(side, monkeypatch):
    """A hand sweep of ranks at one λ reuses the active λ's Cholesky factor of
    ``H + nλI`` (an exact side's is n × n, O(n³)): one factorisation per λ, not per call;
    the scores are those of a fresh model at each rank."""
    from distsketch.linalg import solve

    X, Y, Xq, Yc = _problem(seed=2)
    ranks, lams = (2, 3, 4, 5, 6, None), (0.1, LAM)
    fresh = {(lam, p): _fit(X, Y, side, lam=lam, rank=p).score_candidates(Xq, Yc)
             for lam in lams for p in ranks}
    model = _fit(X, Y, side, lam=[LAM, 0.1])
    calls = []
    real = solve.cholesky
    monkeypatch.setattr(solve, "cholesky", lambda *a, **k: calls.append(1) or real(*a, **k))
    for lam in lams:
        model.set_lam(lam)
        start = len(calls)
        for p in ranks:
            model.set_rank(p)
            np.testing.assert_array_equal(model.score_candidates(Xq, Yc), fresh[lam, p])
        assert len(calls) == start, "set_rank refactored H + nλI"  # set_lam factored it


def test_saved_model_keeps_the_rank(tmp_path):
    X, Y, Xq, Yc = _problem(seed=6)
    model = _fit(X, Y, "SISOKR", rank=[2, 5])
    model.set_rank(5)
    path = model.save(tmp_path / "rr.zarr")
    loaded = ds.load(path)
    assert loaded.rank_ == 5 and loaded.ranks_ == (2, 5)
    assert np.array_equal(loaded.score_candidates(Xq, Yc), model.score_candidates(Xq, Yc))
    assert loaded.output_key_ == model.output_key_
    assert loaded.set_rank(2).output_key_ != model.output_key_  # candidate caches keyed by p


@pytest.mark.parametrize("kw, match", [
    (dict(rank=0), r"^rank: the rank of the reduced-rank estimator must be None or a positive"),
    (dict(rank=[3, "a"]), r"^rank: "),
    (dict(rank=[]), r"^rank: empty sequence"),
    (dict(rank=2, rank_lam=-1.0), r"^rank_lam: "),
    (dict(rank=2, rank_lam=[0.1, 0.2]), r"^rank_lam: give one"),
])
def test_bad_rank_before_anything_is_written(tmp_path, kw, match):
    X, Y, _, _ = _problem()
    store = tmp_path / "s.zarr"
    with pytest.raises(ValueError, match=match):
        ds.SISOKR(KX, KY, store=store, **kw).fit(X, Y)
    assert not store.exists()
    model = _fit(X, Y, "SISOKR")
    with pytest.raises(ValueError, match=r"^rank: "):
        model.set_rank(0)
