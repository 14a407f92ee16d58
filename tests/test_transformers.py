"""SketchedFeatures: scikit-learn's transformer contract, Ridge on its features = SketchedKRR,
dask in → dask out, saved like every model. (The sketched-kernel identity of its features runs
for every sketch type in distsketch.testing.SketchContract, tests/test_sketches.py.)"""

import functools

import dask.array as da
import numpy as np
import pytest
import zarr

import distsketch as ds
from conftest import all_sketches
from reference.errors import norm_rel_err

#: The papers' estimator (no intercept): what the dense formulas here write.
_KRR = functools.partial(ds.SketchedKRR, fit_intercept=False)

F64 = ds.EngineOptions(block_dtype="float64", block_rows=13)


def data(n=60, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = np.sin(2 * X[:, 0]) + X[:, 1] * X[:, 2] + 0.1 * rng.normal(size=n)
    return X, y, rng.normal(size=(25, d))


# distsketch deliberately does not depend on scikit-learn, so it cannot inherit BaseEstimator
@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:Estimator SketchedFeatures does not inherit:UserWarning")
@pytest.mark.parametrize("sketch", [None, ds.SubSampling(5), ds.PSparsified(6, p=0.3)],
                         ids=["exact", "subsampling-5", "psparse-6"])
def test_sklearn_check_estimator(sketch):
    checks = pytest.importorskip("sklearn.utils.estimator_checks")
    # partial_fit (a sketched side) refuses the rows of a batch it holds unless repeat=True
    expected = {} if sketch is None else {
        "check_fit_score_takes_y": "partial_fit refuses the rows of a batch it holds"}
    results = checks.check_estimator(ds.SketchedFeatures(sketch=sketch, random_state=0),
                                     on_fail=None, on_skip=None, expected_failed_checks=expected)
    failed = [f"{r['check_name']}: {r['exception']!r}"[:300] for r in results
              if r["status"] == "failed"]
    assert not failed, "\n".join(failed)
    assert sum(r["status"] == "passed" for r in results) >= 35


@pytest.mark.parametrize("name", sorted(all_sketches(60, m=20)))
@pytest.mark.parametrize("lam", [1e-2, 1e-4])
def test_ridge_on_the_features_is_sketched_krr(name, lam):
    """``make_pipeline(SketchedFeatures(k, sketch=S, random_state=r), Ridge(alpha=n·λ,
    fit_intercept=False))`` = ``SketchedKRR(k, sketch=S, lam=λ, random_state=r)``. The two
    solve the same normal equations ``(ΦᵀΦ + nλ I) w = Φᵀy`` in different ways, so they agree
    to rounding times its condition number (at most ‖Φ‖² / (nλ) ≈ 60 / 0.006 here)."""
    pipeline = pytest.importorskip("sklearn.pipeline")
    linear = pytest.importorskip("sklearn.linear_model")
    X, y, Xq = data()
    sketch = all_sketches(60, m=20)[name]
    k = ds.Laplacian(0.5)
    n = len(X)
    pipe = pipeline.make_pipeline(
        ds.SketchedFeatures(k, sketch=sketch, random_state=3, options=F64),
        linear.Ridge(alpha=n * lam, fit_intercept=False, solver="cholesky")).fit(X, y)
    krr = _KRR(k, sketch=sketch, lam=lam, random_state=3, options=F64).fit(X, y)
    assert norm_rel_err(pipe.predict(Xq), krr.predict(Xq)) <= 1e-8
    assert norm_rel_err(pipe.predict(X), krr.predict(X)) <= 1e-8


def test_fit_needs_only_the_sketched_gram_matrix(tmp_path):
    """The pass computes ``B = R K Rᵀ`` alone (``C = K`` for an exact side), never ``CᵀC``."""
    X, _, _ = data()
    ds.SketchedFeatures(sketch=ds.SubSampling(15), random_state=0, store=tmp_path / "s").fit(X)
    ds.SketchedFeatures(sketch=None, random_state=0, store=tmp_path / "e").fit(X)
    sums = {p: set(zarr.open_group(str(tmp_path / p), mode="r")["sums"].array_keys())
            for p in ("s", "e")}
    assert sums == {"s": {"B", "digest"}, "e": {"C"}}  # digest: the rows' identity (partial_fit)


def test_dask_in_dask_out_and_zarr(tmp_path):
    X, _, Xq = data()
    f = ds.SketchedFeatures(ds.Gaussian(0.5), sketch=ds.GaussianSketch(12), random_state=1).fit(
        da.from_array(X, chunks=(17, 3)))
    ref = ds.SketchedFeatures(ds.Gaussian(0.5), sketch=ds.GaussianSketch(12), random_state=1).fit(X)
    np.testing.assert_array_equal(f.whitening_, ref.whitening_)
    lazy = f.transform(da.from_array(Xq, chunks=(10, 3)))
    assert isinstance(lazy, da.Array) and lazy.shape == (25, f.n_components_)
    np.testing.assert_allclose(lazy.compute(), f.transform(Xq), rtol=1e-13, atol=1e-13)
    z = zarr.create_array(str(tmp_path / "q.zarr"), shape=Xq.shape, chunks=(7, 3), dtype="f8")
    z[:] = Xq
    np.testing.assert_allclose(f.transform(z), f.transform(Xq), rtol=1e-13, atol=1e-13)
    assert f.transform(Xq).shape == (25, f.n_components_) == (25, 12)
    assert list(f.get_feature_names_out()[:2]) == ["sketchedfeatures0", "sketchedfeatures1"]


def test_saved_and_loaded_in_a_store(tmp_path):
    X, _, Xq = data()
    f = ds.SketchedFeatures(ds.Matern(1.5), sketch=ds.Accumulation(10, q=2), random_state=2,
                            store=tmp_path / "s").fit(X)
    again = ds.load(tmp_path / "s")
    assert type(again) is ds.SketchedFeatures
    assert again.set_params(store=f.store).get_params() == f.get_params()
    np.testing.assert_array_equal(again.transform(Xq), f.transform(Xq))
    assert again.sketch_.support_size == f.sketch_.support_size


def test_not_fitted_and_bad_input():
    X, _, _ = data()
    with pytest.raises(ds.NotFittedError):
        ds.SketchedFeatures().transform(X)
    with pytest.raises(ValueError, match=r"^sketch: SubSampling\(m=100\) needs m <= n_samples"):
        ds.SketchedFeatures(sketch=ds.SubSampling(100)).fit(X)
    f = ds.SketchedFeatures(sketch=ds.SubSampling(10), random_state=0).fit(X)
    with pytest.raises(ValueError, match="X has 2 features, but SketchedFeatures is expecting 3"):
        f.transform(X[:, :2])


def test_set_output_pandas_and_in_a_pipeline():
    """scikit-learn's set_output API: a pandas frame with get_feature_names_out's columns and
    the input's index, reached through Pipeline.set_output; values those of the numpy output."""
    pd = pytest.importorskip("pandas")
    sklearn_pipeline = pytest.importorskip("sklearn.pipeline")
    rng = np.random.default_rng(0)
    X = pd.DataFrame(rng.normal(size=(60, 3)), columns=["a", "b", "c"],
                     index=pd.RangeIndex(100, 160))
    plain = ds.SketchedFeatures(ds.Gaussian(0.5), sketch=ds.SubSampling(12), random_state=0).fit(X)
    expected = plain.transform(X)
    framed = ds.SketchedFeatures(ds.Gaussian(0.5), sketch=ds.SubSampling(12), random_state=0)
    assert framed.set_output(transform="pandas") is framed
    out = framed.fit_transform(X)
    assert isinstance(out, pd.DataFrame)
    assert list(out.columns) == list(plain.get_feature_names_out())
    assert out.index.equals(X.index)
    np.testing.assert_array_equal(out.to_numpy(), expected)
    pipe = sklearn_pipeline.make_pipeline(
        ds.SketchedFeatures(ds.Gaussian(0.5), sketch=ds.SubSampling(12), random_state=0))
    pipe.set_output(transform="pandas")
    np.testing.assert_array_equal(pipe.fit_transform(X).to_numpy(), expected)
    assert isinstance(framed.set_output(transform="default").transform(X), np.ndarray)
    with pytest.raises(ValueError, match="set_output: transform must be"):
        framed.set_output(transform="arrow")
    import dask.array as da

    framed = ds.SketchedFeatures(ds.Gaussian(0.5), sketch=ds.SubSampling(12), random_state=0)
    framed.fit(X.to_numpy()).set_output(transform="pandas")
    with pytest.raises(ValueError, match="^X: a dask array cannot become a pandas frame"):
        framed.transform(da.from_array(X.to_numpy(), chunks=20))
