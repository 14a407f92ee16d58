"""Helpers shared by the pass tests and the subprocess they kill (importable by name)."""

import collections
import sys
import time

import numpy as np

import distsketch as ds
from distsketch.engine.store import open_fit_store

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


def sums_of(path):
    return open_fit_store(path).read_sums()


class CountingGaussian(ds.Gaussian):
    """Gaussian(gamma) with the same configuration, that counts the training blocks it sees
    and can raise on one of them (a simulated worker failure)."""

    def __init__(self, gamma=1.0, calls=None, fail_after=None):
        super().__init__(gamma)
        self.calls = collections.Counter() if calls is None else calls
        self.fail_after = fail_after

    def get_params(self, deep=True):
        return {"gamma": self.gamma}

    def block_seen(self, A):
        """Called with the rows of every kernel block the pass evaluates."""
        if len(A) == 10:  # a training block (query calls have other sizes)
            if self.fail_after is not None and self.calls["blocks"] == self.fail_after:
                raise RuntimeError("simulated failure")
            self.calls["blocks"] += 1

    def fill(self, A, B, out, scale=None):  # how the pass evaluates a landmark sketch's blocks
        self.block_seen(A)
        return super().fill(A, B, out, scale)

    def __call__(self, A, B, *, out=None):  # ... and those of a pre-whitened (mixed) sketch
        if out is None:
            self.block_seen(A)
        return super().__call__(A, B, out=out)


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
