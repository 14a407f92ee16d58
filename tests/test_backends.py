"""The compute-backend seam: a backend defined in this test file (no package file edited, the
"How to add a backend" recipe of docs/guide/extending.md) runs the pass's block math — kernel fills,
block products, partial sums — and fits the same model as numpy."""

from __future__ import annotations

import collections

import numpy as np
import pytest
import scipy.sparse as sp

import distsketch as ds
from conftest import CLOSED_FORM_RTOL
from distsketch.backends.base import NUMPY, Backend, backend_of, get_backend, register_backend
from reference.errors import norm_rel_err

CALLS: collections.Counter = collections.Counter()


class TracedArray(np.ndarray):
    """A host array that belongs to the traced backend and counts every ufunc applied to it."""

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        CALLS[f"ufunc.{ufunc.__name__}"] += 1
        args = [x.view(np.ndarray) if isinstance(x, TracedArray) else x for x in inputs]
        out = kwargs.get("out")
        if out is not None:
            kwargs["out"] = tuple(o.view(np.ndarray) if isinstance(o, TracedArray) else o
                                  for o in out)
        result = getattr(ufunc, method)(*args, **kwargs)
        if out is not None:
            return out[0] if len(out) == 1 else out
        return _wrap(result)


def _wrap(x):
    return x.view(TracedArray) if type(x) is np.ndarray else x


class TracedNamespace:
    """numpy's namespace, counting calls, returning traced arrays."""

    def __getattr__(self, name):
        f = getattr(np, name)
        if not callable(f) or isinstance(f, type):
            return f

        def call(*args, **kwargs):
            CALLS[f"xp.{name}"] += 1
            return _wrap(f(*args, **kwargs))

        return call


class TracedBackend(Backend):
    name = "traced-test"
    xp = TracedNamespace()
    array_types = (TracedArray,)

    def asarray(self, a, dtype=None):
        CALLS["asarray"] += 1
        if sp.issparse(a):
            a = a.toarray()  # this backend has no sparse matrices
        return np.asarray(a, dtype=dtype).view(TracedArray)

    def to_numpy(self, a):
        CALLS["to_numpy"] += 1
        return np.asarray(a).view(np.ndarray)

    def operand(self, M):
        return (M.toarray() if sp.issparse(M) else np.asarray(M)).view(TracedArray)

    def cityblock(self, A, B):
        return _wrap(NUMPY.cityblock(np.asarray(A).view(np.ndarray), np.asarray(B).view(np.ndarray)))


TRACED = register_backend(TracedBackend())


def test_registered_by_name_and_by_array_type():
    assert get_backend("traced-test") is TRACED
    assert backend_of(np.zeros(3).view(TracedArray)) is TRACED
    assert backend_of(np.zeros(3)) is NUMPY and backend_of(sp.csr_array((2, 2))) is NUMPY
    with pytest.raises(ValueError, match=r"^options.backend: unknown backend 'nope'"):
        ds.SketchedKRR(options=ds.EngineOptions(backend="nope")).fit(np.ones((4, 2)), np.ones(4))


@pytest.mark.parametrize("kernel", [ds.Gaussian(0.4), ds.Laplacian(0.3), ds.Matern(1.5)], ids=repr)
def test_kernel_fill_runs_in_the_namespace_of_out(kernel):
    rng = np.random.default_rng(0)
    A, B = rng.normal(size=(9, 3)), rng.normal(size=(6, 3))
    CALLS.clear()
    out = kernel.fill(A, B, TRACED.xp.empty((9, 6)))
    assert isinstance(out, TracedArray)
    assert CALLS["ufunc.exp"] >= 1 and CALLS["asarray"] >= 2
    np.testing.assert_array_equal(out.view(np.ndarray), kernel(A, B))


@pytest.mark.parametrize(("sx", "sy", "same_ops"), [
    (ds.SubSampling(20), ds.GaussianSketch(8), True),
    (None, ds.SubSampling(9), True),
    (ds.CountSketch(15), ds.PSparsified(10, p=0.3), False),
], ids=["sub-gauss", "exact-sub", "count-psr"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_a_fit_on_another_backend_is_the_numpy_fit(sx, sy, same_ops, dtype):
    """Same operations in another namespace: bitwise the same sums and model; the pass's
    kernel fills, block products and sums all went through the backend, and only the small
    partial sums came back to the host. Sparse mixing (CountSketch, p-sparsified) is a scipy
    sparse product on numpy and a dense one here (this backend has no sparse matrices), which
    sums in another order: the same model to rounding, amplified by the solve (tolerances as
    tests/conftest.py's CLOSED_FORM_RTOL)."""
    rng = np.random.default_rng(1)
    X, Y = rng.normal(size=(60, 3)), (rng.random((60, 5)) < 0.4).astype(float)

    def fit(backend):
        opts = ds.EngineOptions(block_rows=11, gram_chunk=7, block_dtype=dtype, backend=backend)
        return ds.SISOKR(ds.Gaussian(0.4), ds.Gaussian(0.3), input_sketch=sx, output_sketch=sy,
                         lam=1e-3, random_state=0, options=opts).fit(X, Y)

    ref = fit("numpy")
    CALLS.clear()
    got = fit("traced-test")
    if same_ops:
        np.testing.assert_array_equal(got.coef_, ref.coef_)
        np.testing.assert_array_equal(got.predict_topk(X[:5], k=2)[1],
                                      ref.predict_topk(X[:5], k=2)[1])
    else:
        assert norm_rel_err(got.surrogate(X), ref.surrogate(X)) <= CLOSED_FORM_RTOL[dtype]
    n_blocks = -(-60 // 11)
    assert CALLS["ufunc.exp"] >= n_blocks  # kernel fills
    assert CALLS["xp.empty"] + CALLS["xp.zeros"] >= n_blocks  # block products' results
    assert CALLS["ufunc.matmul"] >= n_blocks  # sums such as CᵀC, DᵀC
    assert CALLS["to_numpy"] >= n_blocks  # partial sums back on the host
