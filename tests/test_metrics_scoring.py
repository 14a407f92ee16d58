"""Scoring a model: the metrics refuse what they cannot score (real-valued labels for F1,
non-finite values for the regression metrics), ``check_metrics`` names unknown and inapplicable
metrics, ``r2`` matches scikit-learn and scores a vector-output SISOKR, and ``SISOKR.score`` is
the negative surrogate error that drives scikit-learn's model selection."""

from __future__ import annotations

import numpy as np
import pytest

import distsketch as ds
from distsketch import metrics

GAMMA = 0.3


def _data(n=160, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    Y = np.c_[np.sin(X[:, 0]) + 50.0, X[:, 1] ** 2 - 7.0]  # far-from-zero means
    return X, Y


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
