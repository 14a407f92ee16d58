"""Appended rows (``partial_fit``) and forgotten batches (``forget``) of the cross-validation
estimators against fresh fits on the same rows with the fitted model's realised sketches
(``sketch=model.sketch_``), and against dense per-fold refits where no fresh fit has the same
folds (a batch forgotten before others)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import distsketch as ds
from conftest import SKETCH_TYPES
from distsketch.engine.sums import fold_ids
from distsketch.kernels import Gaussian
from growinghelpers import appended, cv_problem, nan_rel
from reference.closed_forms import dense, white

F64 = ds.EngineOptions(block_dtype="float64", block_rows=37)
LAMS = [1e-6, 1e-4, 1e-2, 1.0]
FOLDS = "4:7"  # seeded folds: a hash of the row's position
GX, GY = 0.3, 0.5


def krr_cv(sketch, options=F64, **kw):
    kw = {"lams": LAMS, "cv": FOLDS, **kw}
    return ds.SketchedKRRCV(Gaussian(gamma=GX), sketch=sketch, random_state=0,
                            options=options, **kw)


def sisokr_cv(input_sketch, output_sketch, options=F64, **kw):
    kw = {"ranks": [1, 3, 100], "cv": FOLDS, "scoring": "surrogate", **kw}
    return ds.SISOKRCV(Gaussian(gamma=GX), Gaussian(gamma=GY), input_sketch=input_sketch,
                       output_sketch=output_sketch, lams=LAMS[1:], random_state=0,
                       options=options, **kw)


def scores(model):
    return np.stack([model.cv_results_[f"split{k}_test_score"] for k in range(model.n_splits_)])


def assert_same_selection(model, fresh, tol):
    """The same grid, scores (to ``tol``), ranks and choice as ``fresh``."""
    assert model.cv_results_["params"] == fresh.cv_results_["params"]
    assert nan_rel(scores(model), scores(fresh)) < tol
    assert nan_rel(model.cv_results_["mean_test_score"], fresh.cv_results_["mean_test_score"]) < tol
    np.testing.assert_array_equal(np.isnan(scores(model)), np.isnan(scores(fresh)))
    np.testing.assert_array_equal(model.cv_results_["rank_test_score"],
                                  fresh.cv_results_["rank_test_score"])
    assert model.best_params_ == fresh.best_params_ and model.best_index_ == fresh.best_index_


@pytest.mark.parametrize("name", ["subsampling", "gaussian", "psparse_rademacher", "count"])
@pytest.mark.parametrize("fit_intercept", [True, False])
def test_krr_cv_appended_rows_equal_a_fresh_fit_with_the_same_sketch(name, fit_intercept):
    X, y, _ = cv_problem()
    model = appended(krr_cv(SKETCH_TYPES[name](24), fit_intercept=fit_intercept), X, y,
                     [110, 160])
    assert [b["rows"] for b in model.batches_] == [110, 50, 40]
    assert model.sketch_.n == 200 and model.sketch_.rows_drawn == 110
    fresh = krr_cv(model.sketch_, fit_intercept=fit_intercept).fit(X, y)
    assert_same_selection(model, fresh, 1e-10)
    assert model.lam_ == fresh.lam_
    for lam in LAMS:  # the refit's whole λ path
        assert nan_rel(model.set_lam(lam).predict(X), fresh.set_lam(lam).predict(X)) < 1e-10
    np.testing.assert_allclose(model.intercept_, fresh.intercept_, rtol=1e-12)


def test_krr_cv_r2_scoring_and_vector_targets():
    X, y, _ = cv_problem()
    Y = np.c_[y, np.cos(X[:, 1])]
    model = appended(krr_cv(ds.SubSampling(24), scoring="r2"), X, Y, [120])
    fresh = krr_cv(model.sketch_, scoring="r2").fit(X, Y)
    assert_same_selection(model, fresh, 1e-10)
    assert nan_rel(model.predict(X), fresh.predict(X)) < 1e-10


@pytest.mark.parametrize("ranks", [None, [1, 3, 100]])
@pytest.mark.parametrize("sides", [("subsampling", "subsampling"), ("gaussian", "count"),
                                   ("accumulation", "psparse_gaussian")])
def test_sisokr_cv_appended_rows_equal_a_fresh_fit_with_the_same_sketches(sides, ranks):
    X, _, Y = cv_problem()
    sx, sy = (SKETCH_TYPES[s](m) for s, m in zip(sides, (24, 16)))
    model = appended(sisokr_cv(sx, sy, ranks=ranks), X, Y, [120, 170])
    fresh = sisokr_cv(model.input_sketch_, model.output_sketch_, ranks=ranks).fit(X, Y)
    assert_same_selection(model, fresh, 1e-10)
    assert (model.lam_, model.rank_) == (fresh.lam_, fresh.rank_)
    np.testing.assert_array_equal(model.candidates_, fresh.candidates_)  # all batches' outputs
    Yc = Y[:30]
    assert nan_rel(model.score_candidates(X[:20], Yc), fresh.score_candidates(X[:20], Yc)) < 1e-10


def test_float32_blocks_agree_to_float32_rounding():
    X, y, Y = cv_problem()
    f32 = ds.EngineOptions(block_rows=37)
    model = appended(krr_cv(ds.SubSampling(24), options=f32), X, y, [120])
    fresh = krr_cv(model.sketch_, options=f32).fit(X, y)
    assert nan_rel(scores(model), scores(fresh)) < 1e-4
    assert nan_rel(model.predict(X), fresh.predict(X)) < 1e-4
    sis = appended(sisokr_cv(ds.SubSampling(24), ds.SubSampling(16), options=f32), X, Y, [130])
    fresh = sisokr_cv(sis.input_sketch_, sis.output_sketch_, options=f32).fit(X, Y)
    assert nan_rel(scores(sis), scores(fresh)) < 1e-4
    assert nan_rel(sis.score_candidates(X[:20], Y[:30]), fresh.score_candidates(X[:20], Y[:30])) \
        < 1e-4


def test_an_unfitted_model_fits():
    X, y, _ = cv_problem()
    a = krr_cv(ds.SubSampling(24)).partial_fit(X, y)
    b = krr_cv(ds.SubSampling(24)).fit(X, y)
    np.testing.assert_array_equal(scores(a), scores(b))
    assert [r["rows"] for r in a.batches_] == [200]


def test_the_current_lams_are_scored():
    X, y, _ = cv_problem()
    model = krr_cv(ds.SubSampling(24)).fit(X[:120], y[:120])
    lams = [1e-5, 1e-3, 1e-1, 10.0]
    model.set_params(lams=lams)
    model.partial_fit(X[120:], y[120:])
    fresh = krr_cv(model.sketch_, lams=lams).fit(X, y)
    assert [p["lam"] for p in model.cv_results_["params"]] == lams
    assert_same_selection(model, fresh, 1e-10)


def test_forgetting_the_last_batch_equals_a_fresh_fit_without_it():
    X, y, Y = cv_problem()
    model = appended(krr_cv(ds.SubSampling(24)), X, y, [110, 160])
    model.forget(2)
    fresh = krr_cv(model.sketch_).fit(X[:160], y[:160])
    assert_same_selection(model, fresh, 1e-10)
    assert nan_rel(model.predict(X), fresh.predict(X)) < 1e-10
    sis = appended(sisokr_cv(ds.SubSampling(24), ds.SubSampling(16)), X, Y, [120, 170])
    sis.forget(2)
    fresh = sisokr_cv(sis.input_sketch_, sis.output_sketch_).fit(X[:170], Y[:170])
    assert_same_selection(sis, fresh, 1e-10)
    np.testing.assert_array_equal(sis.candidates_, fresh.candidates_)


def dense_krr_cv(sketch, X, y, folds, lams, n_drawn_landmarks=None, intercept=True):
    """Per-fold refits, densely, with the fixed feature map of the realised ``sketch``
    (landmarks ``L = X_drawn[support]``, given as ``n_drawn_landmarks``: the landmark rows):
    ``C = k(X, L) R_mixᵀ``, ``B = R_mix k(L, L) R_mixᵀ``,
    ``β_k = (C_trᵀ C_tr + n_tr λ B)^† C_trᵀ (y_tr − ȳ_tr)``, minus the mean squared error
    of ``C_va β_k + ȳ_tr`` on the fold ``folds == k``."""
    k = Gaussian(gamma=GX)
    mix = dense(sketch.mixing)
    L = n_drawn_landmarks
    C = k(X, L) @ mix.T
    B = mix @ k(L, L) @ mix.T
    out = np.empty((folds.max() + 1, len(lams)))
    for f in range(folds.max() + 1):
        tr, va = folds != f, folds == f
        ybar = y[tr].mean() if intercept else 0.0
        for j, lam in enumerate(lams):
            A = C[tr].T @ C[tr] + tr.sum() * lam * B
            beta = np.linalg.pinv(0.5 * (A + A.T), rtol=1e-12, hermitian=True) \
                @ C[tr].T @ (y[tr] - ybar)
            out[f, j] = -np.mean((y[va] - C[va] @ beta - ybar) ** 2)
    return out


def test_rows_keep_the_fold_they_arrived_in():
    """Forgetting a batch before others: the later rows keep the folds of the positions they
    were appended at (a fresh fit on the remaining rows would hash their new positions);
    forgetting the fit's batch keeps its landmarks as the dictionary (``B`` stays)."""
    X, y, _ = cv_problem()
    model = appended(krr_cv(ds.SubSampling(24)), X, y, [100, 140])
    model.forget(1)  # rows 100–139
    keep = np.r_[0:100, 140:200]
    arrived = fold_ids(0, 200, 200, FOLDS)[keep]
    L = X[:100][model.sketch_.support]
    want = dense_krr_cv(model.sketch_, X[keep], y[keep], arrived, LAMS, L)
    assert nan_rel(scores(model), want) < 1e-8
    assert model.best_params_ == {"lam": LAMS[int(np.argmax(want.mean(axis=0)))]}
    # the refit reads the summed folds: a fresh fit on the remaining rows at any λ
    fresh = krr_cv(model.sketch_).fit(X[keep], y[keep])
    assert nan_rel(model.predict(X), fresh.set_lam(model.lam_).predict(X)) < 1e-10
    assert (fold_ids(0, 160, 160, FOLDS) != arrived).any()  # the fresh fit's other folds
    assert nan_rel(scores(model), scores(fresh)) > 1e-6
    model.forget(0)  # rows 0–99 leave the sums, their landmarks stay
    assert [b["batch"] for b in model.batches_] == [2]
    model.partial_fit(X[100:120] + 0.01, y[100:120])  # placed after the sketch's rows
    rows = np.r_[X[140:200], X[100:120] + 0.01]
    want = dense_krr_cv(model.sketch_, rows, np.r_[y[140:200], y[100:120]],
                        np.r_[fold_ids(140, 200, 200, FOLDS), fold_ids(100, 120, 200, FOLDS)],
                        LAMS, L)
    assert nan_rel(scores(model), want) < 1e-8


def test_sisokr_cv_forgets_the_fits_batch():
    """SISOKRCV without the fit's batch: the per-fold surrogate errors of the model in the
    feature maps of the first batch's landmarks, densely (``E`` and ``B`` kept)."""
    X, _, Y = cv_problem()
    model = appended(sisokr_cv(ds.SubSampling(24), ds.SubSampling(16), ranks=None), X, Y,
                     [100])
    model.forget(0)
    kx, ky = Gaussian(gamma=GX), Gaussian(gamma=GY)
    Rx, Ry = model.input_sketch_, model.output_sketch_
    mx, my = dense(Rx.mixing), dense(Ry.mixing)
    Lx, Ly = X[:100][Rx.support], Y[:100][Ry.support]
    Xr, Yr = X[100:], Y[100:]
    Px = kx(Xr, Lx) @ mx.T @ white(mx @ kx(Lx, Lx) @ mx.T)
    Py = ky(Yr, Ly) @ my.T @ white(my @ ky(Ly, Ly) @ my.T)
    folds = fold_ids(100, 200, 200, FOLDS)
    want = np.empty((4, len(LAMS) - 1))
    for f in range(4):
        tr, va = folds != f, folds == f
        for j, lam in enumerate(LAMS[1:]):
            A = Px[tr].T @ Px[tr] + tr.sum() * lam * np.eye(Px.shape[1])
            g = Px[va] @ np.linalg.solve(A, Px[tr].T @ Py[tr])
            err = np.ones(va.sum()) - 2.0 * np.sum(g * Py[va], axis=1) + np.sum(g * g, axis=1)
            want[f, j] = -np.mean(err)  # k_Y(y, y) = 1 for the Gaussian kernel
    assert nan_rel(scores(model), want) < 1e-8


def test_refusals_name_the_argument():
    from sklearn.model_selection import KFold

    X, y, Y = cv_problem()
    for est in (ds.SketchedKRRCV(sketch=ds.SubSampling(5)),  # cv=5: contiguous folds
                krr_cv(ds.SubSampling(5), cv=KFold(4)),
                ds.SISOKRCV(input_sketch=ds.SubSampling(5), output_sketch=ds.SubSampling(5))):
        assert not hasattr(est, "partial_fit") and not hasattr(est, "forget")
        with pytest.raises(AttributeError, match=r"has no partial_fit: cv: contiguous folds "
                                                 r"\(cv=.*\).*shuffle=True"):
            est.partial_fit(X, y)
    assert hasattr(krr_cv(ds.SubSampling(5), cv=KFold(4, shuffle=True, random_state=3)),
                   "partial_fit")
    for kw in ({"gammas": [0.1, 1.0]}, {"kernels": ["gaussian", "laplacian"]}):
        # a kernel grid appends (tests/test_growing_cv_grid.py); contiguous folds still refuse
        assert hasattr(krr_cv(ds.SubSampling(5), **kw), "partial_fit")
        assert not hasattr(krr_cv(ds.SubSampling(5), cv=4, **kw), "partial_fit")
    with pytest.raises(AttributeError, match=r"sketch=None \(exact\)"):
        krr_cv(None).partial_fit(X, y)
    with pytest.raises(AttributeError, match="scoring: scoring='f1_samples' decodes"):
        sisokr_cv(ds.SubSampling(5), ds.SubSampling(5), scoring="f1_samples").partial_fit(X, Y)
    exact = krr_cv(None).fit(X[:40], y[:40]).set_params(sketch=ds.SubSampling(5))
    with pytest.raises(ValueError, match=r"cannot take appended rows: an exact side \(sketch="):
        exact.partial_fit(X[40:], y[40:])  # fitted as SubSampling(n): no batch sums kept
    # fitted with contiguous folds, then given seeded ones: the fit's folds decide
    model = krr_cv(ds.SubSampling(20), cv=4).fit(X[:120], y[:120])
    model.set_params(cv=FOLDS)
    with pytest.raises(ValueError, match=r"cannot take appended rows: cv: contiguous folds"):
        model.partial_fit(X[120:], y[120:])
    with pytest.raises(AttributeError, match="holds no batches: cv: contiguous"):
        model.batches_


def test_a_kept_store_appends_as_in_memory(tmp_path):
    """With a kept store each batch is written there (its blocks, records and per-fold sums);
    the scores and the model are those of the same appends without a store."""
    X, y, _ = cv_problem()
    stored = appended(krr_cv(ds.SubSampling(20), store=str(tmp_path / "s.zarr")), X, y, [120, 160])
    memory = appended(krr_cv(ds.SubSampling(20)), X, y, [120, 160])
    np.testing.assert_array_equal(scores(stored), scores(memory))
    np.testing.assert_array_equal(stored.predict(X), memory.predict(X))
    back = ds.load(str(tmp_path / "s.zarr"))
    assert [b["rows"] for b in back.batches_] == [120, 40, 40]
    np.testing.assert_array_equal(back.predict(X), memory.predict(X))


def test_saved_models_take_rows_after_loading(tmp_path):
    X, y, Y = cv_problem()
    model = appended(krr_cv(ds.SubSampling(24)), X, y, [100, 140])
    model.save(str(tmp_path / "m.zarr"))
    back = ds.load(str(tmp_path / "m.zarr"))
    assert back.batches_ == model.batches_
    for est in (model, back):
        est.forget(1)
        est.partial_fit(X[:30] + 0.01, y[:30])
    np.testing.assert_array_equal(scores(back), scores(model))
    np.testing.assert_array_equal(back.predict(X), model.predict(X))
    assert back.best_params_ == model.best_params_
    sis = sisokr_cv(ds.SubSampling(24), ds.SubSampling(16)).fit(X[:130], Y[:130])
    sis.save(str(tmp_path / "s.zarr"))
    back = ds.load(str(tmp_path / "s.zarr")).partial_fit(X[130:], Y[130:])
    sis.partial_fit(X[130:], Y[130:])
    np.testing.assert_array_equal(scores(back), scores(sis))
    np.testing.assert_array_equal(back.candidates_, sis.candidates_)
    np.testing.assert_array_equal(back.predict(X), sis.predict(X))
    assert back.best_params_ == sis.best_params_


@pytest.mark.slow
@pytest.mark.parametrize("name", ["SketchedKRRCV", "SISOKRCV"])
def test_sklearn_checks_with_partial_fit(name):
    """scikit-learn's checks of an estimator that has ``partial_fit`` (seeded folds; the
    default contiguous folds are checked in test_sklearn_checks.py)."""
    from distsketch.model_selection.grid import GridEdgeWarning

    checks = pytest.importorskip("sklearn.utils.estimator_checks")
    same_rows = "partial_fit refuses the rows of a batch it holds unless repeat=True"
    if name == "SketchedKRRCV":
        est = ds.SketchedKRRCV(sketch=ds.SubSampling(5), cv="3:0", random_state=0)
        expected = {"check_fit_score_takes_y": same_rows,
                    "check_regressors_train": "5 landmarks cannot reach R² > 0.5 on the "
                                              "check's 200-sample regression"}
    else:
        est = ds.SISOKRCV(input_sketch=ds.SubSampling(5), output_sketch=ds.SubSampling(3),
                          cv="3:0", scoring="surrogate", random_state=0)
        expected = {"check_fit_score_takes_y": same_rows}
    assert hasattr(est, "partial_fit")
    with warnings.catch_warnings():
        # distsketch deliberately does not depend on scikit-learn: no BaseEstimator to inherit
        warnings.filterwarnings("ignore", message=f"Estimator {name} does not inherit")
        # the checks' random data put the CV choice on the grid's edge: advice, not an error
        warnings.simplefilter("ignore", GridEdgeWarning)
        results = checks.check_estimator(est, on_fail=None, on_skip=None,
                                         expected_failed_checks=expected)
    failed = [f"{r['check_name']}: {r['exception']!r}"[:300] for r in results
              if r["status"] == "failed"]
    assert not failed, "\n".join(failed)
    assert {r["check_name"] for r in results if r["status"] == "xfail"} == set(expected)
    if name == "SketchedKRRCV":  # a regressor: the checks call partial_fit
        assert any(r["check_name"] == "check_estimators_partial_fit_n_features"
                   and r["status"] == "passed" for r in results)


def test_a_kfold_splitter_saves_as_its_fold_spec(tmp_path):
    """``cv=KFold(shuffle=True, random_state=s)`` is saved as the fold spec ``"K:s"``: the loaded
    model has the same folds, scores and batches, and takes rows as the saved one."""
    from sklearn.model_selection import KFold

    rng = np.random.default_rng(5)
    X = rng.normal(size=(150, 4))
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=150)
    model = ds.SketchedKRRCV(ds.Gaussian(gamma=0.3), sketch=ds.SubSampling(25),
                             lams=[1e-6, 1e-4, 1e-2, 1.0],
                             cv=KFold(n_splits=4, shuffle=True, random_state=3), random_state=0,
                             options=ds.EngineOptions(block_dtype="float64")).fit(X[:100], y[:100])
    model.save(str(tmp_path / "m.zarr"))
    back = ds.load(str(tmp_path / "m.zarr"))
    assert back.cv == "4:3"
    np.testing.assert_array_equal(back.cv_results_["mean_test_score"],
                                  model.cv_results_["mean_test_score"])
    model.partial_fit(X[100:], y[100:])
    back.partial_fit(X[100:], y[100:])
    np.testing.assert_array_equal(back.predict(X), model.predict(X))
    np.testing.assert_array_equal(back.cv_results_["mean_test_score"],
                                  model.cv_results_["mean_test_score"])
