"""Appended rows of every input kind (numpy, scipy.sparse, dask, zarr) and on a
``LocalCluster``, for the structured-output and cross-validation estimators: equal to a fresh
fit on all the rows with the fitted realised sketches, and the cluster's model bitwise the
threaded scheduler's."""

from __future__ import annotations

import warnings

import dask
import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp

import distsketch as ds
from distsketch.kernels import Gaussian
from distsketch.sketches.whitened import WhitenedSketch

F64 = ds.EngineOptions(block_dtype="float64", block_rows=29)
LAMS = [1e-4, 1e-2]


def problem(n=140, seed=1):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4))
    Y = (X @ rng.normal(size=(4, 5)) + 0.3 * rng.normal(size=(n, 5)) > 0.3).astype(float)
    return X, Y


def sisokr(sx=None, sy=None):
    return ds.SISOKR(Gaussian(gamma=0.3), Gaussian(gamma=0.5),
                     input_sketch=sx or ds.SubSampling(25), output_sketch=sy or ds.GaussianSketch(6),
                     lam=LAMS, random_state=0, options=F64)


def krr_cv(sketch=None, **kw):
    return ds.SketchedKRRCV(Gaussian(gamma=0.3), sketch=sketch or ds.SubSampling(25),
                            lams=[1e-6, 1e-4, 1e-2, 1.0], cv="4:2", random_state=0, options=F64,
                            **kw)


def draw(sketch):
    """The realised draw every width of a grid shares: a whitened sketch's inner one."""
    return sketch.inner if isinstance(sketch, WhitenedSketch) else sketch


def sisokr_cv(sx=None, sy=None):
    return ds.SISOKRCV(Gaussian(gamma=0.3), Gaussian(gamma=0.5),
                       input_sketch=sx or ds.SubSampling(25), output_sketch=sy or ds.SubSampling(12),
                       lams=[1e-6, 1e-4, 1e-2, 1.0], ranks=[2, 100], cv="4:2",
                       scoring="surrogate", random_state=0, options=F64)


#: estimator name → (make(sketches of a fitted model or None), targets of X, Y, the sketches)
MODELS = {
    "SISOKR": (lambda m=None: sisokr() if m is None else sisokr(m.input_sketch_,
                                                                m.output_sketch_),
               lambda X, Y: Y),
    "SketchedKRRCV": (lambda m=None: krr_cv() if m is None else krr_cv(m.sketch_),
                      lambda X, Y: np.sin(X[:, 0]) + Y[:, 0]),
    "SISOKRCV": (lambda m=None: sisokr_cv() if m is None else sisokr_cv(m.input_sketch_,
                                                                     m.output_sketch_),
                 lambda X, Y: Y),
    "SketchedKRRCV-gammas": (
        lambda m=None: krr_cv(gammas=[0.1, 0.3, 1.0]) if m is None else krr_cv(
            draw(m.sketch_), gammas=[0.1, 0.3, 1.0]),
        lambda X, Y: np.sin(X[:, 0]) + Y[:, 0]),
}


def as_kind(A, kind, tmp_path, name):
    if kind == "sparse":
        return sp.csr_array(A) if A.ndim == 2 else A
    if kind == "dask":
        return da.from_array(A, chunks=(13,) + A.shape[1:])
    if kind == "zarr":
        import zarr

        z = zarr.create_array(str(tmp_path / f"{name}.zarr"), shape=A.shape,
                              chunks=(11,) + A.shape[1:], dtype="f8")
        z[:] = A
        return z
    return A


def prediction(model, X):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a λ at the grid's edge
        return np.asarray(model.predict(X), dtype=np.float64)


def rel(a, b):
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


@pytest.mark.parametrize("kind", ["sparse", "dask", "zarr"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_input_kind_appends_as_a_fresh_fit(name, kind, tmp_path):
    make, targets = MODELS[name]
    X, Y = problem()
    T = targets(X, Y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = make().fit(X[:90], T[:90])
        model.partial_fit(as_kind(X[90:], kind, tmp_path, "x"),
                          as_kind(T[90:], "numpy" if kind == "sparse" else kind, tmp_path, "y"))
        fresh = make(model).fit(X, T)
    assert rel(prediction(model, X), prediction(fresh, X)) < 1e-10


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_local_cluster_appends_bitwise_as_the_threaded_scheduler(name):
    distributed = pytest.importorskip("distributed")
    make, targets = MODELS[name]
    X, Y = problem()
    T = targets(X, Y)

    def grown():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = make().fit(X[:90], T[:90])
            model.partial_fit(X[90:120], T[90:120])
            return model.partial_fit(X[120:], T[120:])

    with dask.config.set(scheduler="threads"):
        want = prediction(grown(), X)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster):
        got = prediction(grown(), X)
    np.testing.assert_array_equal(got, want)
