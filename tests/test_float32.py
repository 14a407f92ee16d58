"""float32 blocks (the default): half the store and its I/O, float32 exponentials.

The pass computes each kernel block in the block dtype (with float32, kernel values rounded
to float32 and exponentials evaluated in float32) and sums exactly those values in float64,
so the store holds what the sums were made of: a resumed pass is bitwise the uninterrupted
one, and ``store=None`` fits the same model. The model differs from the float64-block model
by the float32 rounding of the kernel values, amplified by the conditioning of the solve;
tests/conftest.py (CLOSED_FORM_RTOL) bounds that against every closed form. An exact
(identity) side keeps float64 blocks.
"""

import dask
import numpy as np
import pytest
import zarr

import distsketch as ds
from distsketch.engine.store import open_fit_store
from passhelpers import CountingGaussian, N, model, problem, sums_of
from reference.errors import norm_rel_err


def _regression(n=3000, d=5, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n + 1000, d))
    y = np.sin(X @ np.ones(d) / np.sqrt(d)) + 0.1 * rng.standard_normal(n + 1000)
    return X[:n], y[:n], X[n:], y[n:]


@pytest.fixture
def one_driver_thread():
    """The driver's BLAS thread count follows the idle cores ("auto"), and LAPACK's rounding
    follows the thread count: pinned, so a bitwise comparison of two fits does not depend on
    what else the machine runs between them."""
    with dask.config.set({"distsketch.driver-threads": 1}):
        yield


@pytest.mark.slow
@pytest.mark.parametrize("sketch", [ds.SubSampling(300), ds.GaussianSketch(200), None],
                         ids=["subsampling", "gaussian", "exact"])
def test_float32_blocks_half_the_store_same_accuracy(tmp_path, sketch, one_driver_thread):
    X, y, Xt, yt = _regression()
    pred, stored, sums = {}, {}, {}
    for dtype in ("float64", "float32"):
        path = tmp_path / f"{dtype}.zarr"
        model_ = ds.SketchedKRR(ds.Gaussian(0.2), sketch=sketch, lam=1e-4, random_state=0,
                                store=path,
                                options=ds.EngineOptions(block_dtype=dtype, block_rows=500,
                                                         progress=False))
        pred[dtype] = model_.fit(X, y).predict(Xt)
        stored[dtype] = zarr.open_group(path, mode="r")["pass/C"][:]
        sums[dtype] = sums_of(path)
    if sketch is None:  # an exact side stays float64: the same model bit for bit
        assert stored["float32"].dtype == np.float64
        np.testing.assert_array_equal(pred["float32"], pred["float64"])
        return
    assert stored["float32"].dtype == np.float32
    # kernel values within about 2 float32 ulps of the float64 ones (not bitwise equal)
    err = np.abs(stored["float32"] - stored["float64"]) / np.abs(stored["float64"]).max()
    assert 0 < err.max() <= 2.5e-7
    # the sums are float64 sums of exactly the stored float32 values
    C = stored["float32"].astype(np.float64)
    assert norm_rel_err(sums["float32"]["G"], C.T @ C) <= 1e-12
    assert norm_rel_err(sums["float32"]["b"], C.T @ y[:, None]) <= 1e-12
    # the model is the float64 one up to the rounding of the kernel values, amplified by
    # the conditioning of the landmark Gram matrix (measured 1.4e-4 for sub-sampling,
    # 4e-7 for the Gaussian sketch, whose exponentials stay float64): the same test error
    assert 0 < norm_rel_err(pred["float32"], pred["float64"]) <= 1e-3
    rmse = {k: np.sqrt(np.mean((p - yt) ** 2)) for k, p in pred.items()}
    assert abs(rmse["float32"] - rmse["float64"]) <= 1e-5 * rmse["float64"]


def test_sisokr_float32_blocks_close_scores(tmp_path):
    X, Y = problem()
    scores, preds = {}, {}
    for dtype in ("float64", "float32"):
        m = model(store=tmp_path / dtype, block_dtype=dtype).fit(X, Y)
        scores[dtype] = m.score_candidates(X[:20], m.candidates_)
        preds[dtype] = m.predict(X[:20])
        assert zarr.open_group(tmp_path / dtype, mode="r")["pass/D"].dtype == np.dtype(dtype)
    assert 0 < norm_rel_err(scores["float32"], scores["float64"]) <= 1e-5
    np.testing.assert_array_equal(preds["float32"], preds["float64"])


def test_store_none_fits_the_float32_model(tmp_path):
    X, Y = problem()
    stored = model(store=tmp_path / "s").fit(X, Y)
    temporary = model(store=None).fit(X, Y)
    np.testing.assert_array_equal(stored.score_candidates(X[:20], stored.candidates_),
                                  temporary.score_candidates(X[:20], stored.candidates_))


def test_resumed_float32_pass_is_bitwise_the_uninterrupted_one(tmp_path):
    X, Y = problem()
    path = tmp_path / "s"
    with dask.config.set(scheduler="synchronous"):
        with pytest.raises(RuntimeError, match="simulated failure"):
            model(kernel=CountingGaussian(gamma=0.4, fail_after=5), store=path,
                  block_dtype="float32").fit(X, Y)
    assert open_fit_store(path).done_blocks().sum() == 5
    resumed = CountingGaussian(gamma=0.4)
    model(kernel=resumed, store=path, block_dtype="float32").fit(X, Y)
    assert resumed.calls["blocks"] == N // 10 - 5  # the stored blocks were read, not recomputed
    model(store=tmp_path / "u", block_dtype="float32").fit(X, Y)
    a, b = sums_of(path), sums_of(tmp_path / "u")
    for key in ("G", "B", "M", "E"):
        np.testing.assert_array_equal(a[key], b[key])
