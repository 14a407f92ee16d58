"""Fit stores written by release 0.1.0 (tests/data/fit_stores_0.1.0.tar.gz: a SISOKR, a
SketchedKRR and a Newton SketchedRegressor fit, 60 rows in blocks of 10, float64 blocks) load,
predict and are reused by a refit on the same data exactly as then. Stores name classes and
registered parts, never module paths, so moving code inside the package cannot break them."""

from __future__ import annotations

import tarfile
from pathlib import Path

import numpy as np
import pytest

import distsketch as ds
from distsketch.engine.storeguard import StoreError
from passhelpers import CountingGaussian

ARCHIVE = Path(__file__).parent / "data" / "fit_stores_0.1.0.tar.gz"
OPTIONS = dict(block_rows=10, block_dtype="float64")


def _model(name, kernel, store, **options):
    opts = ds.EngineOptions(**OPTIONS, **options)
    common = dict(lam=1e-3, random_state=1, store=store, options=opts)
    if name == "sisokr":
        return ds.SISOKR(kernel, ds.Linear(), input_sketch=ds.SubSampling(20), **common)
    if name == "krr":
        return ds.SketchedKRR(kernel, sketch=ds.SubSampling(20), **common)
    return ds.SketchedRegressor(kernel, sketch=ds.SubSampling(20), loss="huber", **common)


def _outputs(name, model, expected):
    Xq = expected["X"][:7]
    return (model.score_candidates(Xq, expected["Y"][:9]) if name == "sisokr"
            else model.predict(Xq))


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    root = tmp_path_factory.mktemp("stores")
    with tarfile.open(ARCHIVE) as tar:
        tar.extractall(root, filter="data")
    return root


@pytest.mark.parametrize("name", ["sisokr", "krr", "regressor"])
def test_a_saved_store_loads_and_predicts_as_when_written(stores, name):
    expected = np.load(stores / "expected.npz")
    model = ds.load(str(stores / f"{name}.zarr"))
    assert np.array_equal(np.asarray(_outputs(name, model, expected)), expected[name])


@pytest.mark.slow
@pytest.mark.parametrize("name", ["sisokr", "krr", "regressor"])
def test_a_saved_store_is_reused_by_a_refit_without_a_pass(stores, tmp_path, name):
    """The stores were written before pre-whitening existed: a refit with the default options
    reuses them (their landmarks' ``R K Rᵀ`` is well conditioned, so the default does not
    whiten it); ``prewhiten=True`` is another pass, refused with the option named."""
    expected = np.load(stores / "expected.npz")
    kernel = CountingGaussian(gamma=0.4)
    data = expected["Y"] if name == "sisokr" else expected["y"]
    with pytest.raises(StoreError, match=r"input\.sketch\.whitened.*EngineOptions\.prewhiten"):
        _model(name, kernel, str(stores / f"{name}.zarr"), prewhiten=True).fit(
            expected["X"], data)
    kernel.calls["blocks"] = 0
    model = _model(name, kernel, str(stores / f"{name}.zarr")).fit(expected["X"], data)
    assert kernel.calls["blocks"] == 0
    assert np.array_equal(np.asarray(_outputs(name, model, expected)), expected[name])
