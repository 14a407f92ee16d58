"""Leverage-score sub-sampling: scores, the draw, the model, saving."""

import functools

import numpy as np
import pytest

import distsketch as ds
from distsketch.engine.rows import as_row_source
from reference.closed_forms import dense, sketched_krr_predict
from reference.errors import norm_rel_err

#: The papers' estimator (no intercept): what the dense formulas here write.
_KRR = functools.partial(ds.SketchedKRR, fit_intercept=False)

K = ds.Gaussian(gamma=0.5)


def _data(n=600, seed=0):
    """Non-uniform input density: a dense cluster and a sparse one."""
    rng = np.random.default_rng(seed)
    X = np.vstack([rng.normal(size=(5 * n // 6, 2)) * 0.3, rng.normal(size=(n // 6, 2)) * 3 + 5])
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=n)
    return X, y


def _exact_scores(X, lam):
    n = len(X)
    Km = K(X, X)
    return np.diag(Km @ np.linalg.inv(Km + n * lam * np.eye(n)))


def test_scores_exact_with_every_row_in_the_dictionary():
    X, _ = _data()
    n, lam = len(X), 1e-3
    got = ds.LeverageScores(50, lam=lam, dictionary=n).scores(
        n, seed=0, data=as_row_source(X, argument="X"), kernel=K, block_rows=128)
    assert norm_rel_err(got, _exact_scores(X, lam)) <= 1e-9


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_scores_within_a_factor_3_with_a_large_enough_dictionary(seed):
    """Alaoui & Mahoney (2015), Thm 2 / Rudi et al. (2018): a uniform dictionary of
    q ≳ n·max_i τ_i rows gives 1/t ≤ τ̃/τ ≤ t (t = 3 here) with high probability."""
    X, _ = _data()
    n, lam = len(X), 1e-2
    tau = _exact_scores(X, lam)
    q = int(min(n, 4 * n * tau.max()))
    got = ds.LeverageScores(50, lam=lam, dictionary=q).scores(
        n, seed=seed, data=as_row_source(X, argument="X"), kernel=K, block_rows=97)
    ratio = got / tau
    assert ratio.min() >= 1 / 3 and ratio.max() <= 3


def test_draw_reproducible_and_independent_of_chunking():
    da = pytest.importorskip("dask.array")
    X, _ = _data()
    n = len(X)
    spec = ds.LeverageScores(40, lam=1e-3)
    a = spec.realize(n, seed=5, data=as_row_source(X, argument="X"), kernel=K)
    b = spec.realize(n, seed=5, data=as_row_source(da.from_array(X, chunks=(77, 2)),
                                                     argument="X"), kernel=K)
    assert np.array_equal(a.support, b.support)
    assert np.array_equal(a.matrix().toarray(), b.matrix().toarray())
    c = spec.realize(n, seed=6, data=as_row_source(X, argument="X"), kernel=K)
    assert not np.array_equal(a.support, c.support)
    # rows of high leverage (the sparse cluster) are drawn more often than uniformly
    assert np.mean(a.support >= 5 * n // 6) > 2 * (1 / 6)


def test_sketched_krr_with_leverage_scores_equals_eq3_and_is_saved(tmp_path):
    X, y = _data(n=300)
    # a narrower kernel keeps R K Rᵀ well conditioned (about 1e-6) with 40 landmarks, many in
    # the dense cluster: the closed form's pseudo-inverse and the whitening then cut the same
    # directions (with γ = 0.5 the condition is 1e-12 and they differ by 3e-4)
    k = ds.Gaussian(gamma=5.0)
    opts = ds.EngineOptions(block_dtype="float64", block_rows=64)
    model = _KRR(k, sketch=ds.LeverageScores(40, lam=1e-3), lam=1e-3, random_state=2,
                           options=opts, store=tmp_path / "lev.zarr").fit(X, y)
    R = model.sketch_.matrix()
    want = sketched_krr_predict(k, R, X, y, X[:20], 1e-3)
    assert norm_rel_err(model.predict(X[:20]), want) <= 1e-8
    loaded = ds.load(tmp_path / "lev.zarr")
    assert np.array_equal(loaded.sketch_.support, model.sketch_.support)
    assert np.array_equal(dense(loaded.sketch_.matrix()), dense(R))  # pre-whitened: dense
    assert np.array_equal(loaded.predict(X), model.predict(X))
    other = _KRR(k, sketch=ds.LeverageScores(40, lam=1e-3), lam=1e-3, random_state=2,
                           options=ds.EngineOptions(block_dtype="float64", block_rows=37)).fit(X, y)
    assert np.array_equal(other.sketch_.support, model.sketch_.support)


@pytest.mark.parametrize("sketch, match", [
    (ds.LeverageScores(0), r"^sketch: LeverageScores: m must be a positive integer"),
    (ds.LeverageScores(500), r"^sketch: LeverageScores\(m=500\) needs m <= n_samples"),
    (ds.LeverageScores(10, lam=0.0), r"^sketch: LeverageScores: lam must be a positive"),
    (ds.LeverageScores(10, dictionary=0), r"^sketch: LeverageScores: dictionary must be"),
])
def test_bad_parameters_before_anything_is_written(tmp_path, sketch, match):
    X, y = _data(n=300)
    with pytest.raises(ValueError, match=match):
        _KRR(K, sketch=sketch, store=tmp_path / "s.zarr").fit(X, y)
    assert not (tmp_path / "s.zarr").exists()


def test_automatic_lambda_matches_the_effective_dimension():
    """lam=None: d_eff(λ) from the dictionary's spectrum solves d log d = m."""
    X, _ = _data()
    m = 60
    spec = ds.LeverageScores(m)
    D = X[::3][:4 * m]
    lam = spec._auto_lam(K, D)
    s = np.clip(np.linalg.eigvalsh(K(D, D)), 0, None)
    d = np.sum(s / (s + lam * len(D)))
    assert d * np.log(d) == pytest.approx(m, rel=1e-6)
    R = spec.realize(len(X), seed=0, data=as_row_source(X, argument="X"), kernel=K)
    assert R.m == m and len(R.support) == m
