"""What a new user hit, model side: intercepts, honest metrics, SISOKR.score,
a light ``import distsketch``. Each test failed before its fix."""

from __future__ import annotations

import subprocess
import sys

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


# --------------------------------------------------------------------------- fit_intercept


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


# --------------------------------------------------------------------------- metrics


def test_f1_refuses_real_valued_predictions():
    T = np.array([[1, 0, 1], [0, 1, 0]])
    with pytest.raises(ValueError, match="Y_pred: F1 and Hamming loss need binary"):
        metrics.f1_samples(T, np.array([[0.3, 2.0, 1.0], [1.0, 1.0, 1.0]]))
    with pytest.raises(ValueError, match="Y_true: .*binary"):
        metrics.hamming_loss(T * 2.5, T)
    assert metrics.f1_samples(T, T.astype(bool)) == 1.0


def test_regression_metrics_refuse_non_finite_and_r2_matches_scikit_learn():
    from sklearn.metrics import r2_score

    rng = np.random.default_rng(0)
    Y = rng.normal(size=(30, 3))
    P = Y + 0.3 * rng.normal(size=Y.shape)
    assert metrics.r2_score(Y, P) == pytest.approx(r2_score(Y, P), rel=1e-12)
    Y[:, 1] = 4.0  # a constant output: scikit-learn's force_finite convention
    assert metrics.r2_score(Y, P) == pytest.approx(r2_score(Y, P), rel=1e-12)
    P[3, 0] = np.nan
    with pytest.raises(ValueError, match="Y_pred: regression metrics need finite values"):
        metrics.rmse(Y, P)


def test_check_metrics_names_and_applicability():
    X, Y = _data(60)
    krr = ds.SketchedKRR(ds.Gaussian(gamma=GAMMA), sketch=ds.SubSampling(10), lam=1e-3,
                         random_state=0).fit(X, Y)
    with pytest.raises(ValueError, match=r"--metrics: unknown metric 'f1'; known metrics are "
                                         r"f1_samples, "):
        metrics.check_metrics(["rmse", "f1"], argument="--metrics")
    with pytest.raises(ValueError, match="metric 'pinball' does not apply to a SketchedKRR"):
        metrics.check_metrics(["pinball"], model=krr)
    with pytest.raises(ValueError, match="metric 'surrogate_mse' does not apply"):
        metrics.check_metrics("surrogate_mse", model=krr)
    assert metrics.check_metrics(["rmse", "r2"], model=krr) == ["rmse", "r2"]


def test_r2_of_a_vector_output_sisokr_is_a_number():
    """``r2`` used ``model.score``, which SISOKR lacked: it printed nan."""
    X, Y = _data()
    est = ds.SISOKR(ds.Gaussian(gamma=GAMMA), output_kernel=ds.Linear(),
                    input_sketch=ds.SubSampling(40), lam=1e-3, random_state=0).fit(X, Y)
    value = metrics.METRICS["r2"].func(est, X, Y, est.predict(X))
    assert np.isfinite(value) and value == pytest.approx(
        metrics.r2_score(Y, est.predict(X)), rel=1e-12)


# --------------------------------------------------------------------------- SISOKR.score


def test_sisokr_score_is_the_negative_surrogate_error_and_drives_grid_search():
    from sklearn.model_selection import GridSearchCV, cross_val_score

    rng = np.random.default_rng(2)
    X = rng.normal(size=(120, 4))
    Y = (X[:, :3] + 0.3 * rng.normal(size=(120, 3)) > 0).astype(float)
    est = ds.SISOKR(ds.Gaussian(gamma=0.2), output_kernel=ds.Gaussian(gamma=0.5),
                    input_sketch=ds.SubSampling(30), lam=1e-3, random_state=0).fit(X, Y)
    # dense form (exact output side): ĥ(x) = Σ_j g_j(x) ψ(y_j) over the output landmarks, so
    # ‖ĥ(x) − ψ(y)‖² = k(y, y) − 2 Σ_j g_j k(y_j, y) + gᵀ K_Y g, with k(y, y) = 1
    g = est.surrogate(X)
    L = est.output_landmarks_
    K_ly = ds.Gaussian(gamma=0.5)(L, Y)
    K_ll = ds.Gaussian(gamma=0.5)(L, L)
    dense = np.mean(1.0 - 2.0 * np.einsum("ij,ji->i", g, K_ly)
                    + np.einsum("ij,ij->i", g @ K_ll, g))
    assert est.score(X, Y) == pytest.approx(-dense, rel=1e-10)
    scores = cross_val_score(ds.SISOKR(ds.Gaussian(gamma=0.2), output_kernel=ds.Gaussian(gamma=0.5),
                                       input_sketch=ds.SubSampling(30), lam=1e-3, random_state=0),
                             X, Y, cv=3)
    assert scores.shape == (3,) and np.isfinite(scores).all()
    search = GridSearchCV(ds.SISOKR(ds.Gaussian(gamma=0.2), output_kernel=ds.Gaussian(gamma=0.5),
                                    input_sketch=ds.SubSampling(30), random_state=0),
                          {"lam": [1e-1, 1e-4]}, cv=3).fit(X, Y)
    assert search.best_params_["lam"] in (1e-1, 1e-4)


# --------------------------------------------------------------------------- start-up

_IMPORT_PROBE = """
import sys
import distsketch as ds
after_import = sorted(m for m in ("sklearn", "dask.array", "zarr", "distributed") if m in sys.modules)
import numpy as np
rng = np.random.default_rng(0)
X, y = rng.normal(size=(80, 2)), rng.normal(size=80)
ds.SketchedKRR(ds.Gaussian(), sketch=ds.SubSampling(10), lam=1e-3, random_state=0).fit(X, y)
ds.SketchedRegressor(ds.Gaussian(), loss="huber", sketch=ds.SubSampling(10), lam=1e-3,
                     random_state=0).fit(X, y).predict(X)
print(",".join(after_import))
print("sklearn" in sys.modules)
"""


def test_import_and_fits_do_not_import_scikit_learn():
    """``import distsketch`` loads no heavy module (lazy package), and fits never import
    scikit-learn (≈ 0.6 s): only NotFittedError / ConvergenceWarning, when used, do."""
    out = subprocess.run([sys.executable, "-c", _IMPORT_PROBE], capture_output=True, text=True,
                         timeout=300, check=True)
    after_import, sklearn_after_fit = out.stdout.rstrip("\n").split("\n")[-2:]
    assert after_import == ""
    assert sklearn_after_fit == "False"


def test_lazy_names_resolve_and_not_fitted_error_is_scikit_learns():
    from sklearn.exceptions import NotFittedError

    assert set(ds.__all__) <= set(dir(ds))
    for name in ds.__all__:
        assert getattr(ds, name) is not None
    assert issubclass(ds.NotFittedError, NotFittedError)
    with pytest.raises(NotFittedError):
        ds.SketchedKRR().predict(np.zeros((2, 2)))
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        ds.nope  # noqa: B018
