"""Helpers shared by the pass tests and the subprocess they kill (importable by name)."""

import sys
import time

import numpy as np

import distsketch as ds

N, D, L = 120, 4, 6


def problem(seed: int = 7):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(N, D))
    Y = (rng.random((N, L)) < 0.35).astype(float)
    return X, Y


_gauss = ds.Gaussian(gamma=0.4)


def slow_gaussian(A, B):
    """A Gaussian kernel slow enough that a pass can be killed half-way."""
    time.sleep(0.15)
    return _gauss(A, B)


def model(kernel=None, store=None, block_rows=10, **kw):
    return ds.SISOKR(kernel or _gauss, ds.Gaussian(gamma=0.5), input_sketch=ds.SubSampling(30),
                     output_sketch=ds.GaussianSketch(12), lam=1e-3, random_state=11, store=store,
                     options=ds.EngineOptions(block_rows=block_rows, **kw))


if __name__ == "__main__":  # python passhelpers.py STORE X.zarr : a slow fit to be killed
    import zarr

    import passhelpers  # by module name, so the kernel's recorded name matches the tests'

    store, xpath = sys.argv[1], sys.argv[2]
    X = zarr.open_array(xpath, mode="r")
    _, Y = passhelpers.problem()
    with __import__("dask").config.set(scheduler="synchronous"):
        kernel = ds.kernels.CallableKernel(passhelpers.slow_gaussian)
        passhelpers.model(kernel=kernel, store=store, block_dtype="float64").fit(X, Y)
