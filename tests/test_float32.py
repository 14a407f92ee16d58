"""float32 stored blocks: half the store and its I/O, the same model.

The pass computes each sketched block in float64, accumulates the sums from it in float64
and stores a copy rounded to the block dtype. An uninterrupted float32 fit is therefore the
float64 model bit for bit (at the same row blocks: the default block size depends on the
dtype, and other blocks change the summation order, to about 1e-8); only blocks read back when a float32 pass resumes contribute
float32-rounded values (measured here against the uninterrupted fit).
"""

import dask
import numpy as np
import pytest
import zarr

import distsketch as ds
from distsketch.store import open_fit_store
from passhelpers import N, model, problem
from test_pass import _CountingGaussian, sums_of


def _regression(n=3000, d=5, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n + 1000, d))
    y = np.sin(X @ np.ones(d) / np.sqrt(d)) + 0.1 * rng.standard_normal(n + 1000)
    return X[:n], y[:n], X[n:], y[n:]


@pytest.mark.parametrize("sketch", [ds.SubSampling(300), ds.GaussianSketch(200), None],
                         ids=["subsampling", "gaussian", "exact"])
def test_float32_blocks_same_model_half_the_store(tmp_path, sketch):
    X, y, Xt, _ = _regression()
    pred, stored = {}, {}
    for dtype in ("float64", "float32"):
        path = tmp_path / f"{dtype}.zarr"
        model_ = ds.SketchedKRR(ds.Gaussian(0.2), sketch=sketch, lam=1e-4, random_state=0,
                                store=path,
                                options=ds.EngineOptions(block_dtype=dtype, block_rows=500,
                                                     progress=False))
        pred[dtype] = model_.fit(X, y).predict(Xt)
        stored[dtype] = zarr.open_group(path, mode="r")["pass/C"]
    np.testing.assert_array_equal(pred["float32"], pred["float64"])
    assert stored["float32"].dtype == np.float32
    np.testing.assert_array_equal(stored["float32"][:], stored["float64"][:].astype(np.float32))


def test_sisokr_float32_blocks_same_scores(tmp_path):
    X, Y = problem()
    scores = {}
    for dtype in ("float64", "float32"):
        m = model(store=tmp_path / dtype, block_dtype=dtype).fit(X, Y)
        scores[dtype] = m.score_candidates(X[:20], m.candidates_)
        assert zarr.open_group(tmp_path / dtype, mode="r")["pass/D"].dtype == np.dtype(dtype)
    np.testing.assert_array_equal(scores["float32"], scores["float64"])


def test_resumed_float32_pass_agrees_to_float32_precision(tmp_path):
    X, Y = problem()
    path = tmp_path / "s"
    with dask.config.set(scheduler="synchronous"):
        with pytest.raises(RuntimeError, match="simulated failure"):
            model(kernel=_CountingGaussian(gamma=0.4, fail_after=5), store=path,
                  block_dtype="float32").fit(X, Y)
    assert open_fit_store(path).done_blocks().sum() == 5
    resumed = _CountingGaussian(gamma=0.4)
    model(kernel=resumed, store=path, block_dtype="float32").fit(X, Y)
    assert resumed.calls["blocks"] == N // 10 - 5  # the stored blocks were read, not recomputed
    model(store=tmp_path / "u", block_dtype="float32").fit(X, Y)
    a, b = sums_of(path), sums_of(tmp_path / "u")
    for key in ("G", "B", "M", "E"):
        scale = np.abs(b[key]).max()
        np.testing.assert_allclose(a[key], b[key], rtol=0, atol=1e-6 * scale)
        assert not np.array_equal(a[key], b[key])  # the 5 resumed blocks were rounded
