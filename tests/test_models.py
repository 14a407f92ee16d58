"""Estimator contract and bad input (errors name the argument, raised before any store write)."""

import functools
import pickle
import time

import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp

import distsketch as ds
from reference.errors import norm_rel_err

#: The papers' estimator (no intercept): what the dense formulas here write.
_KRR = functools.partial(ds.SketchedKRR, fit_intercept=False)


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 3))
    Y = (rng.random((30, 5)) < 0.4).astype(float)
    return X, Y


def sisokr(**kw):
    base = dict(input_sketch=ds.SubSampling(10), output_sketch=ds.PSparsified(8, p=0.3), lam=1e-3,
                random_state=0)
    base.update(kw)
    return ds.SISOKR(ds.Gaussian(gamma=0.5), ds.Gaussian(gamma=0.5), **base)


BAD_INPUTS = {
    "nan-in-X": (lambda X, Y: (np.where(np.arange(30)[:, None] == 4, np.nan, X), Y), {}, r"^X: contains NaN"),
    "inf-in-Y": (lambda X, Y: (X, np.where(np.arange(30)[:, None] == 9, np.inf, Y)), {}, r"^Y: contains NaN or infinity \(first at row 9\)"),
    "nan-in-sparse-X": (lambda X, Y: (sp.csr_array(np.where(X > 1.5, np.nan, X)), Y), {}, r"^X: contains NaN"),
    "row-mismatch": (lambda X, Y: (X, Y[:-1]), {}, r"^Y: has 29 rows but X has 30"),
    "subsampling-m-gt-n": (None, {"input_sketch": ds.SubSampling(31)}, r"^input_sketch: SubSampling\(m=31\) needs m <= n_samples = 30"),
    "output-subsampling-m-gt-n": (None, {"output_sketch": ds.SubSampling(40)}, r"^output_sketch: SubSampling"),
    "lam-zero": (None, {"lam": 0.0}, r"^lam: the ridge parameter must be a positive"),
    "lam-negative-in-path": (None, {"lam": [1e-3, -1e-4]}, r"^lam: "),
    "lam-nan": (None, {"lam": float("nan")}, r"^lam: "),
    "p-zero": (None, {"output_sketch": ds.PSparsified(8, p=0.0)}, r"^output_sketch: PSparsified: p must be a probability in \(0, 1\]"),
    "p-above-one": (None, {"input_sketch": ds.PSparsified(8, p=1.5)}, r"^input_sketch: PSparsified: p must be"),
    "bad-kind": (None, {"input_sketch": ds.PSparsified(8, p=0.5, kind="bernoulli")}, r"^input_sketch: PSparsified: kind"),
    "unknown-input-kernel": (None, {"input_kernel": "gaussain"}, r"^input_kernel: unknown kernel 'gaussain'"),
    "unknown-output-kernel": (None, {"output_kernel": 3.0}, r"^output_kernel: "),
    "bad-sketch-type": (None, {"input_sketch": "subsampling"}, r"^input_sketch: expected None"),
    "bad-random-state": (None, {"random_state": "seed"}, r"^random_state: "),
    "bad-options": (None, {"options": ds.EngineOptions(block_rows=0)}, r"^options.block_rows: must be a positive integer"),
    "bad-block-dtype": (None, {"options": ds.EngineOptions(block_dtype="float16")}, r"^options.block_dtype"),
    "bad-direct-io": (None, {"options": ds.EngineOptions(direct_io="yes")}, r"^options.direct_io: must be True or False"),
    "bad-sweep-memory": (None, {"options": ds.EngineOptions(sweep_memory=-1)}, r"^options.sweep_memory: must be a non-negative integer"),
    "3d-X": (lambda X, Y: (X[:, :, None], Y), {}, r"^X: expected a 2-D array"),
    "one-sample": (lambda X, Y: (X[:1], Y[:1]), {}, r"^X: at least 2 samples"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_raises_before_store_is_written(tmp_path, data, case):
    transform, params, match = BAD_INPUTS[case]
    X, Y = transform(*data) if transform else data
    if "input_kernel" in params or "output_kernel" in params:
        model = sisokr()
        model.set_params(**params)
    else:
        model = sisokr(**params)
    model.set_params(store=tmp_path / "store")
    with pytest.raises(ValueError, match=match):
        model.fit(X, Y)
    assert not (tmp_path / "store").exists()


def test_krr_bad_input_names_y(tmp_path, data):
    X, Y = data
    y = Y[:, 0].copy()
    y[3] = np.nan
    with pytest.raises(ValueError, match=r"^y: contains NaN"):
        _KRR(sketch=ds.SubSampling(5), store=tmp_path / "s").fit(X, y)
    with pytest.raises(ValueError, match=r"^sketch: SubSampling\(m=50\) needs m <= n_samples = 30"):
        _KRR(sketch=ds.SubSampling(50), store=tmp_path / "s").fit(X, Y)
    with pytest.raises(ValueError, match=r"^kernel: unknown kernel"):
        _KRR(kernel="nope", store=tmp_path / "s").fit(X, Y)
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("sketch", [
    ds.GaussianSketch(10**6), ds.CountSketch(10**6), ds.PSparsified(10**6, p=0.1),
    ds.Accumulation(10**6, q=2), ds.SubSampling(10**6), ds.LeverageScores(10**6)],
    ids=lambda s: type(s).__name__)
def test_every_sketch_checks_m_against_n_before_allocating(tmp_path, data, sketch):
    """m > n is refused by every sketch with the SubSampling message, before any m × m array
    (10⁶ × 10⁶ float64 would be 7.3 TiB) or store is made; also for the output sketch."""
    X, Y = data
    name = type(sketch).__name__
    with pytest.raises(ValueError, match=rf"^sketch: {name}\(m=1000000\) needs m <= n_samples = 30"):
        _KRR(sketch=sketch, store=tmp_path / "s").fit(X, Y)
    with pytest.raises(ValueError, match=rf"^output_sketch: {name}\(m=1000000\) needs m <= n_samples"):
        ds.SISOKR(input_sketch=ds.SubSampling(10), output_sketch=sketch,
                  store=tmp_path / "s").fit(X, Y)
    assert not (tmp_path / "s").exists()


def test_prediction_input_errors(data):
    X, Y = data
    model = sisokr().fit(X, Y)
    with pytest.raises(ValueError, match=r"^candidates: rows have 4 columns but the model was fitted on outputs with 5"):
        model.score_candidates(X, Y[:, :4])
    with pytest.raises(ValueError, match=r"^candidates: empty candidate set"):
        model.score_candidates(X, Y[:0])
    with pytest.raises(ValueError, match="not fitted"):
        sisokr().predict(X)


def test_init_stores_arguments_verbatim_and_params_round_trip():
    sx = ds.SubSampling(10)
    model = ds.SISOKR("gaussian", ds.Linear(), input_sketch=sx, lam=[1e-2, 1e-3], random_state=4)
    params = model.get_params(deep=False)
    assert params["input_kernel"] == "gaussian" and params["input_sketch"] is sx
    assert params["lam"] == [1e-2, 1e-3]
    assert model.get_params()["input_sketch__m"] == 10
    model.set_params(input_sketch__m=12, lam=1e-4)
    assert sx.m == 12 and model.lam == 1e-4
    with pytest.raises(ValueError, match="unknown parameter 'alpha'"):
        model.set_params(alpha=1)
    # like scikit-learn, the repr shows only non-default arguments
    assert repr(model) == ("SISOKR(output_kernel=Linear(), input_sketch=SubSampling(12), "
                           "lam=0.0001, random_state=4)")


def test_sklearn_clone_and_pickle_of_fitted_model(data):
    sklearn_base = pytest.importorskip("sklearn.base")
    X, Y = data
    model = sisokr().fit(X, Y)
    clone = sklearn_base.clone(model)
    assert not hasattr(clone, "coef_")
    assert clone.get_params(deep=False).keys() == model.get_params(deep=False).keys()
    restored = pickle.loads(pickle.dumps(model))
    np.testing.assert_array_equal(restored.score_candidates(X, Y), model.score_candidates(X, Y))


def test_same_random_state_same_model_and_different_seeds_differ(data):
    X, Y = data
    a = sisokr(random_state=3).fit(X, Y)
    b = sisokr(random_state=3).fit(X, Y)
    c = sisokr(random_state=4).fit(X, Y)
    np.testing.assert_array_equal(a.score_candidates(X, Y), b.score_candidates(X, Y))
    assert not np.array_equal(a.input_sketch_.support, c.input_sketch_.support)
    g = np.random.default_rng(3)
    d = sisokr(random_state=g).fit(X, Y)
    assert d.input_sketch_.seed != sisokr(random_state=g).fit(X, Y).input_sketch_.seed


def test_inputs_numpy_sparse_dask_zarr_same_model(tmp_path, data):
    import zarr

    X, Y = data
    ref = sisokr().fit(X, Y).score_candidates(X, Y)
    z = zarr.create_array(str(tmp_path / "x.zarr"), shape=X.shape, chunks=(7, 3), dtype=X.dtype)
    z[:] = X
    for Xin in (sp.csr_matrix(X), da.from_array(X, chunks=(11, 3)), z):
        got = sisokr().fit(Xin, Y).score_candidates(X, Y)
        # sparse products round differently (1e-16); the solve amplifies it to ~1e-11
        assert norm_rel_err(got, ref) <= 1e-10


def test_krr_predict_dask_stays_lazy(data):
    X, Y = data
    model = _KRR(ds.Gaussian(gamma=0.5), sketch=ds.SubSampling(10), random_state=0).fit(X, Y[:, :2])
    out = model.predict(da.from_array(X, chunks=(8, 3)))
    assert isinstance(out, da.Array)
    np.testing.assert_allclose(out.compute(), model.predict(X), rtol=1e-13)
    assert model.predict(X).shape == (30, 2)
    one = _KRR(ds.Gaussian(gamma=0.5), sketch=ds.SubSampling(10), random_state=0).fit(X, Y[:, 0])
    assert one.predict(X).shape == (30,)


# distsketch deliberately does not depend on scikit-learn, so it cannot inherit BaseEstimator
@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:Estimator SketchedKRR does not inherit:UserWarning")
@pytest.mark.parametrize("sketch", [None, ds.SubSampling(5)], ids=["exact", "subsampling-5"])
def test_sklearn_check_estimator_on_sketched_krr(sketch):
    """Every scikit-learn estimator check passes (the array-API one skips without SCIPY_ARRAY_API)."""
    checks = pytest.importorskip("sklearn.utils.estimator_checks")
    expected = {}
    if sketch is not None:
        expected["check_regressors_train"] = ("5 landmarks cannot reach R² > 0.5 on the check's "
                                              "200-sample regression; the exact model does")
        expected["check_fit_score_takes_y"] = ("partial_fit refuses the rows of a batch it holds "
                                               "unless repeat=True")
    results = checks.check_estimator(ds.SketchedKRR(sketch=sketch, lam=1e-3, random_state=0),
                                     on_fail=None, on_skip=None, expected_failed_checks=expected)
    failed = [f"{r['check_name']}: {r['exception']!r}"[:300] for r in results
              if r["status"] == "failed"]
    assert not failed, "\n".join(failed)
    assert sum(r["status"] == "passed" for r in results) >= 45


def test_in_memory_features_run_on_all_cores_with_the_same_result():
    """numpy input to predict: blocks of fixed size on dask's thread pool, bitwise the same
    whatever the number of threads, and equal to the dense formula k(x, L) @ dual_coef_."""
    import threading

    import dask

    from distsketch.engine.mapreduce import map_local

    seen = set()

    def where(i):
        seen.add(threading.get_ident())
        time.sleep(0.05)
        return i * i

    with dask.config.set(num_workers=2):
        assert map_local(where, list(range(6))) == [i * i for i in range(6)]
    assert len(seen) == 2

    rng = np.random.default_rng(3)
    X, y = rng.normal(size=(300, 4)), rng.normal(size=300)
    Xq = rng.normal(size=(1500, 4))  # three blocks of 512 rows
    model = _KRR(ds.Gaussian(0.3), sketch=ds.SubSampling(60), lam=1e-3,
                           random_state=0).fit(X, y)
    with dask.config.set(num_workers=1):
        one = model.predict(Xq)
    with dask.config.set(num_workers=2):
        two = model.predict(Xq)
    np.testing.assert_array_equal(one, two)
    dense = ds.Gaussian(0.3)(Xq, model.landmarks_) @ model.dual_coef_
    np.testing.assert_allclose(one, dense[:, 0], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("sx", [None, ds.SubSampling(30)], ids=["exact", "subsampling"])
def test_surrogate_of_dask_and_zarr_queries_equals_numpy(tmp_path, sx):
    """The block-wise surrogate (features, then W inside each block) gives the same values
    for lazy queries as for in-memory ones, and equals φ_X(x) Wᵀ."""
    import zarr

    rng = np.random.default_rng(5)
    X, Y = rng.normal(size=(120, 3)), (rng.random((120, 4)) < 0.4).astype(float)
    Xq = rng.normal(size=(70, 3))
    model = ds.SISOKR(ds.Gaussian(0.5), ds.Gaussian(0.5), input_sketch=sx,
                      output_sketch=ds.GaussianSketch(10), lam=1e-3, random_state=0).fit(X, Y)
    want = np.asarray(model.input_features(Xq)) @ model.coef_.T
    got = model.surrogate(Xq)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    z = zarr.create_array(str(tmp_path / "q.zarr"), shape=Xq.shape, chunks=(16, 3), dtype="f8")
    z[:] = Xq
    for lazy in (da.from_array(Xq, chunks=(16, 3)), z):
        np.testing.assert_allclose(model.surrogate(lazy), got, rtol=1e-12, atol=1e-12)


def test_fit_logs_the_pass_wall_time(caplog):
    rng = np.random.default_rng(6)
    X, y = rng.normal(size=(90, 3)), rng.normal(size=90)
    with caplog.at_level("INFO", logger="distsketch.engine.accumulate"):
        _KRR(ds.Gaussian(0.5), sketch=ds.SubSampling(20), random_state=0).fit(X, y)
    records = [r for r in caplog.records if hasattr(r, "pass_seconds")]
    assert len(records) == 1
    assert records[0].pass_rows == 90 and records[0].pass_seconds > 0
    assert records[0].getMessage().startswith("pass: 90 rows in ")
