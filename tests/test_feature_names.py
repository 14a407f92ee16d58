"""Data frames in, scikit-learn's ``feature_names_in_`` rule: columns are matched by position,
so a frame whose names differ from the fit's (other columns, or the same in another order) is
refused instead of predicting silently wrong; names on one side only warn."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import distsketch as ds

pd = pytest.importorskip("pandas")

COLUMNS = ["a", "b", "c", "d"]


@pytest.fixture(scope="module")
def frame():
    rng = np.random.default_rng(0)
    X = pd.DataFrame(rng.normal(size=(200, 4)), columns=COLUMNS)
    y = pd.Series(np.sin(X["a"].to_numpy()) + 0.3 * X["c"].to_numpy(), name="y")
    return X, y


def _krr(**kw):
    return ds.SketchedKRR(ds.Gaussian(0.3), sketch=ds.SubSampling(40), random_state=0,
                          **{"lam": 1e-4, **kw})


def test_names_are_kept_and_a_reordered_or_renamed_frame_is_refused(frame):
    X, y = frame
    model = _krr().fit(X, y)
    assert model.feature_names_in_.dtype == object
    np.testing.assert_array_equal(model.feature_names_in_, COLUMNS)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the fit's own columns: no warning
        want = model.predict(X)
    with pytest.raises(ValueError, match="Feature names must be in the same order as they were"):
        model.predict(X[["b", "a", "c", "d"]])
    with pytest.raises(ValueError, match=r"unseen at fit time:\n- e\n.*yet now missing:\n- d"):
        model.predict(X.rename(columns={"d": "e"}))
    with pytest.raises(ValueError, match="X: The feature names should match"):
        model.score(X[COLUMNS[::-1]], y)
    np.testing.assert_array_equal(model.predict(X[COLUMNS]), want)  # the fix the message names


def test_names_on_one_side_warn_once(frame):
    X, y = frame
    named = _krr().fit(X, y)
    with pytest.warns(UserWarning, match="does not have valid feature names") as record:
        named.score(X.to_numpy(), y.to_numpy())  # score calls predict: one warning, not two
    assert len([w for w in record if "feature names" in str(w.message)]) == 1
    plain = _krr().fit(X.to_numpy(), y.to_numpy())
    assert not hasattr(plain, "feature_names_in_")
    with pytest.warns(UserWarning, match="X has feature names, but SketchedKRR was fitted without"):
        plain.predict(X)
    named.fit(X.to_numpy(), y.to_numpy())  # a refit without names forgets them
    assert not hasattr(named, "feature_names_in_")


def test_integer_column_labels_are_not_names(frame):
    X, y = frame
    model = _krr().fit(pd.DataFrame(X.to_numpy()), y)
    assert not hasattr(model, "feature_names_in_")


def test_every_prediction_method_checks_the_names(frame, tmp_path):
    X, y = frame
    rng = np.random.default_rng(1)
    Y = (rng.random((len(X), 5)) < 0.4).astype(float)
    bad = X[["d", "c", "b", "a"]]
    sis = ds.SISOKR(ds.Gaussian(0.3), ds.Gaussian(0.5), input_sketch=ds.SubSampling(40),
                    output_sketch=ds.SubSampling(20), lam=1e-3, random_state=0).fit(X, Y)
    reg = ds.SketchedRegressor(ds.Gaussian(0.3), loss="huber", sketch=ds.SubSampling(40),
                               lam=1e-3, random_state=0).fit(X, y)
    feats = ds.SketchedFeatures(ds.Gaussian(0.3), sketch=ds.SubSampling(40),
                                random_state=0).fit(X)
    calls = [lambda: sis.predict(bad), lambda: sis.predict_topk(bad, k=2),
             lambda: sis.surrogate(bad), lambda: sis.score(bad, Y),
             lambda: sis.score_candidates(bad, Y[:7]), lambda: sis.input_features(bad),
             lambda: reg.predict(bad), lambda: reg.score(bad, y), lambda: feats.transform(bad)]
    for call in calls:
        with pytest.raises(ValueError, match="same order as they were in fit"):
            call()


def test_a_saved_model_keeps_the_names(frame, tmp_path):
    X, y = frame
    model = _krr(store=str(tmp_path / "k.zarr")).fit(X, y)
    loaded = ds.load(str(tmp_path / "k.zarr"))
    np.testing.assert_array_equal(loaded.feature_names_in_, model.feature_names_in_)
    np.testing.assert_array_equal(loaded.predict(X), model.predict(X))
    with pytest.raises(ValueError, match="same order"):
        loaded.predict(X[COLUMNS[::-1]])


def test_dask_data_frames_have_names(frame):
    dd = pytest.importorskip("dask.dataframe")
    X, y = frame
    model = _krr().fit(dd.from_pandas(X, npartitions=3), dd.from_pandas(y, npartitions=3))
    np.testing.assert_array_equal(model.feature_names_in_, COLUMNS)
    np.testing.assert_array_equal(np.asarray(model.predict(X)), _krr().fit(X, y).predict(X))


@pytest.mark.filterwarnings("ignore::distsketch.model_selection.grid.GridEdgeWarning")  # not about the choice
def test_model_selection_on_data_frames(frame):
    """``select`` took rows of a pandas frame through ``dask.array.asarray``, which failed
    (a frame has no ``dtype``); its rows are now taken by position, the names kept."""
    from distsketch.model_selection.select import select

    X, y = frame
    for kw in (dict(validation=0.25), dict(cv=3)):
        sel = select(_krr(lam=[1e-4, 1e-2]), X, y, gammas=[0.1, 0.3], **kw)
        np.testing.assert_array_equal(sel.model.feature_names_in_, COLUMNS)
        arrays = select(_krr(lam=[1e-4, 1e-2]), X.to_numpy(), y.to_numpy(),
                        gammas=[0.1, 0.3], **kw)
        assert sel.best == arrays.best
        np.testing.assert_allclose(sel.model.predict(X), arrays.model.predict(X.to_numpy()),
                                   rtol=0, atol=1e-12)
