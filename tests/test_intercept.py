"""``fit_intercept``: an unpenalised intercept for SketchedKRR and linear-output SISOKR, equal to
kernel ridge regression on centred targets (exact) and to a fit on centred targets plus their
mean (sketched); it follows ``set_lam``, is saved with the model, and is refused where it does
not exist."""

from __future__ import annotations

import numpy as np
import pytest

import distsketch as ds
from distsketch import metrics

F64 = ds.EngineOptions(block_dtype="float64")
GAMMA = 0.3


def _data(n=160, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    Y = np.c_[np.sin(X[:, 0]) + 50.0, X[:, 1] ** 2 - 7.0]  # far-from-zero means
    return X, Y


@pytest.mark.parametrize("lam", [1e-2, 1e-5])
def test_exact_intercept_is_kernel_ridge_on_centred_targets(lam):
    from sklearn.kernel_ridge import KernelRidge

    X, Y = _data()
    n = len(X)
    est = ds.SketchedKRR(ds.Gaussian(gamma=GAMMA), lam=lam, fit_intercept=True,
                         options=F64).fit(X, Y)
    ref = KernelRidge(alpha=n * lam, kernel="rbf", gamma=GAMMA).fit(X, Y - Y.mean(axis=0))
    Xt = _data(50, seed=1)[0]
    expect = ref.predict(Xt) + Y.mean(axis=0)
    # both solve (K + nλI) a = Y − ȳ: agreement to the system's conditioning times ε
    cond = (np.linalg.norm(ref.dual_coef_) * n) / np.linalg.norm(Y - Y.mean(axis=0))
    assert np.allclose(est.predict(Xt), expect, rtol=0,
                       atol=1e3 * np.finfo(float).eps * max(cond, 1.0) * np.abs(Y).max())
    assert np.array_equal(est.intercept_, Y.mean(axis=0))


@pytest.mark.parametrize("sketch", [ds.SubSampling(40), ds.PSparsified(30, p=0.1),
                                    ds.GaussianSketch(30)])
def test_sketched_intercept_is_centring_the_targets(sketch):
    """R K (Y − 1ȳᵀ) = b − s ȳᵀ from the pass's sums: the same model as a fit without
    intercept on centred targets, plus ȳ; and it matters when the targets are shifted."""
    X, Y = _data()
    kw = dict(sketch=sketch, lam=1e-3, random_state=3, options=F64)
    est = ds.SketchedKRR(ds.Gaussian(gamma=GAMMA), fit_intercept=True, **kw).fit(X, Y)
    ref = ds.SketchedKRR(ds.Gaussian(gamma=GAMMA), fit_intercept=False, **kw).fit(
        X, Y - Y.mean(axis=0))
    scale = np.abs(Y).max()
    assert np.allclose(est.predict(X), ref.predict(X) + Y.mean(axis=0), rtol=0,
                       atol=1e-9 * scale)
    plain = ds.SketchedKRR(ds.Gaussian(gamma=GAMMA), fit_intercept=False, **kw).fit(X, Y)
    rmse_i = metrics.rmse(Y, est.predict(X))
    rmse_p = metrics.rmse(Y, plain.predict(X))
    assert rmse_i < rmse_p  # the offset costs the penalised model accuracy


def test_intercept_follows_set_lam_and_is_saved(tmp_path):
    X, Y = _data()
    y = Y[:, 0]
    est = ds.SketchedKRR(ds.Gaussian(gamma=GAMMA), sketch=ds.SubSampling(30), lam=[1e-1, 1e-4],
                         fit_intercept=True, random_state=0, options=F64,
                         store=str(tmp_path / "s")).fit(X, y)
    for lam in (1e-1, 1e-4):
        est.set_lam(lam)
        one = ds.SketchedKRR(ds.Gaussian(gamma=GAMMA), sketch=ds.SubSampling(30), lam=lam,
                             fit_intercept=True, random_state=0, options=F64).fit(X, y)
        assert np.allclose(est.predict(X), one.predict(X), rtol=0, atol=1e-9 * np.abs(y).max())
        assert est.predict(X).shape == (len(X),)
    loaded = ds.load(str(tmp_path / "s")).set_lam(1e-4)
    assert np.array_equal(loaded.predict(X), est.predict(X))
    assert np.array_equal(loaded.intercept_, est.intercept_)


def test_fit_intercept_must_be_a_bool():
    X, Y = _data()
    with pytest.raises(ValueError, match="fit_intercept: expected True or False"):
        ds.SketchedKRR(fit_intercept="false").fit(X, Y)


@pytest.mark.slow
@pytest.mark.parametrize("isk, osk", [(None, None), (ds.SubSampling(40), None),
                                      (None, ds.SubSampling(30)),
                                      (ds.SubSampling(40), ds.GaussianSketch(20))])
def test_linear_output_sisokr_intercept_is_centring_the_outputs(isk, osk, tmp_path):
    X, Y = _data()
    kw = dict(input_sketch=isk, output_sketch=osk, lam=1e-3, random_state=0, options=F64)
    est = ds.SISOKR(ds.Gaussian(gamma=GAMMA), ds.Linear(), fit_intercept=True,
                    store=str(tmp_path / "s"), **kw).fit(X, Y)
    ref = ds.SISOKR(ds.Gaussian(gamma=GAMMA), ds.Linear(), **kw).fit(X, Y - Y.mean(axis=0))
    scale = np.abs(Y).max()
    assert np.allclose(est.predict(X), ref.predict(X) + Y.mean(axis=0), rtol=0,
                       atol=1e-12 * scale)
    C = Y[::4]  # decoding among candidates ranks ‖ĥ(x) + ȳ − y‖², returns the rows as given
    assert np.allclose(est.predict(X, C), ref.predict(X, C - Y.mean(axis=0)) + Y.mean(axis=0),
                       rtol=0, atol=1e-12 * scale)
    assert est.score(X, Y) == pytest.approx(ref.score(X, Y - Y.mean(axis=0)), rel=1e-10)
    loaded = ds.load(str(tmp_path / "s"))
    assert np.array_equal(loaded.predict(X), est.predict(X))
    if osk is None and isk is not None:  # the same estimator as sketched KRR
        krr = ds.SketchedKRR(ds.Gaussian(gamma=GAMMA), sketch=isk, lam=1e-3, fit_intercept=True,
                             random_state=0, options=F64).fit(X, Y)
        assert np.allclose(est.predict(X), krr.predict(X), rtol=0, atol=1e-9 * scale)


def test_sisokr_intercept_needs_vector_outputs_and_array_candidates(tmp_path):
    X, Y = _data()
    with pytest.raises(ValueError, match="fit_intercept: an intercept exists for vector outputs"):
        ds.SISOKR(ds.Gaussian(), ds.Gaussian(), fit_intercept=True,
                  store=str(tmp_path / "never")).fit(X, Y)
    assert not (tmp_path / "never").exists()
    est = ds.SISOKR(ds.Gaussian(gamma=GAMMA), ds.Linear(), input_sketch=ds.SubSampling(30),
                    lam=1e-3, fit_intercept=True, random_state=0).fit(X, Y)
    store = ds.CandidateStore.create(str(tmp_path / "c"), Y[:20])
    with pytest.raises(ValueError, match="candidates: a CandidateStore caches features"):
        est.predict(X, store)
