"""Test doubles of a compute device: numpy dressed as a device for
:class:`~distsketch.backends.cuda.CupyBackend`.

:class:`HostModules` stands in for :class:`~distsketch.backends.cuda.CupyModules` (CuPy and
cupyx): its arrays are a distinct ndarray subclass (:class:`EmulatedDeviceArray`) that refuses
host ndarrays in ufuncs and products, as CuPy does — so the whole code path (staging, streams,
sparse operands, device top-k) runs in tests on any machine; its CSR matrices
(:class:`EmulatedCSR`) are not scipy.sparse matrices, as cupyx's are not, so the kernels take
their device routes::

    from distsketch.backends.base import register_backend
    from distsketch.backends.cuda import CupyBackend
    from distsketch.testing.devices import HostModules

    backend = register_backend(CupyBackend(HostModules(), name="cuda-emulated"))

Importing this module imports :mod:`distsketch.testing`, whose contract suites need pytest.
"""

from __future__ import annotations

import collections

import numpy as np
import scipy.sparse as sp

__all__ = ["HostModules", "EmulatedDeviceArray", "EmulatedCSR"]


class EmulatedDeviceArray(np.ndarray):
    """A host array standing for a device array in tests (:class:`HostModules`).

    Like a CuPy array it refuses host ndarrays (of any dimension > 0) as ufunc operands,
    outputs and product factors: a block that forgot :meth:`~distsketch.backends.Backend.asarray` fails here as
    it would on a GPU.
    """

    def __array_ufunc__(self, ufunc, method, *inputs, out=None, **kwargs):
        for x in inputs + (out or ()):
            if type(x) is np.ndarray and x.ndim > 0:
                raise TypeError(f"emulated device: {ufunc.__name__} got a host ndarray of shape "
                                f"{x.shape}; move it with Backend.asarray first")
        args = [_host_view(x) for x in inputs]
        if out is not None:
            kwargs["out"] = tuple(_host_view(o) for o in out)
        result = getattr(ufunc, method)(*args, **kwargs)
        if out is not None:
            return out[0] if len(out) == 1 else out
        if isinstance(result, tuple):
            return tuple(_as_device(r) for r in result)
        return _as_device(result)

    def set(self, arr, stream=None):
        """CuPy's ``ndarray.set``: copy host ``arr`` into this array (synchronously here)."""
        np.copyto(self.view(np.ndarray), arr)


def _host_view(x):
    return x.view(np.ndarray) if isinstance(x, EmulatedDeviceArray) else x


def _as_device(x):
    if type(x) is np.ndarray:
        return x.view(EmulatedDeviceArray)
    if sp.issparse(x) and not isinstance(x, EmulatedCSR):
        return EmulatedCSR(x)
    return x


class EmulatedCSR:
    """A host CSR matrix standing for a ``cupyx.scipy.sparse.csr_matrix`` in tests.

    Like the CuPy class it is *not* a scipy.sparse matrix (``scipy.sparse.issparse`` is False),
    so the kernels take the routes they take for device sparse blocks on a GPU (the density
    rule's device threshold, :data:`~distsketch.backends.cuda.DEVICE_SPARSE_MAX_DENSITY`; the "another backend's
    sparse blocks" products), never the host-only scipy routes. It offers what those routes
    and the backend use of cupyx's CSR (``shape``, ``nnz``, products with device arrays or
    device CSR, ``multiply``, ``sum``, ``toarray``, ``T``, ``astype``, row slices); host
    ndarrays are refused as operands, as CuPy refuses them.

    Parameters
    ----------
    M : scipy.sparse matrix or array, shape (n, d)
        The values (converted to CSR).
    """

    format = "csr"
    ndim = 2
    #: numpy defers every binary operator with a device array to this class (as CuPy's ndarray
    #: defers to cupyx's sparse matrices)
    __array_ufunc__ = None

    def __init__(self, M):
        if isinstance(M, EmulatedCSR):
            M = M._m
        self._m = sp.csr_matrix(M)

    shape = property(lambda self: self._m.shape)
    dtype = property(lambda self: self._m.dtype)
    nnz = property(lambda self: self._m.nnz)
    data = property(lambda self: _as_device(self._m.data))
    indices = property(lambda self: _as_device(self._m.indices))
    indptr = property(lambda self: _as_device(self._m.indptr))

    def __repr__(self) -> str:
        return f"<emulated device CSR {self.shape}, nnz={self.nnz}, {self.dtype}>"

    @staticmethod
    def _check(other):
        if type(other) is np.ndarray and other.ndim > 0:
            raise TypeError("emulated device: a sparse product got a host ndarray; move it with "
                            "Backend.asarray first")
        if sp.issparse(other):
            raise TypeError("emulated device: a sparse product got a host scipy.sparse matrix; "
                            "move it with Backend.asarray first")
        return other._m if isinstance(other, EmulatedCSR) else _host_view(other)

    def __matmul__(self, other):
        return _as_device(self._m @ self._check(other))

    def __rmatmul__(self, other):
        return _as_device(self._check(other) @ self._m)

    def __mul__(self, other):
        if not np.isscalar(other):
            return NotImplemented  # cupyx: ``*`` of two matrices is a product; not used here
        return EmulatedCSR(self._m * other)

    __rmul__ = __mul__

    def multiply(self, other):
        return _as_device(self._m.multiply(self._check(other)))

    def sum(self, axis=None, dtype=None, out=None):
        return _as_device(np.asarray(self._m.sum(axis=axis, dtype=dtype)))

    def toarray(self, order=None, out=None):
        return _as_device(self._m.toarray(order=order))

    def tocsr(self, copy=False):
        return EmulatedCSR(self._m.copy()) if copy else self

    def copy(self):
        return EmulatedCSR(self._m.copy())

    def __getitem__(self, key):
        return _as_device(self._m[key])

    @property
    def T(self):
        return EmulatedCSR(self._m.T)

    def astype(self, dtype, copy=True):
        return EmulatedCSR(self._m.astype(dtype, copy=copy))


class _EmulatedNamespace:
    """numpy's namespace returning :class:`EmulatedDeviceArray` results (calls counted)."""

    def __init__(self, counts: collections.Counter):
        self._counts = counts

    def __getattr__(self, name):
        f = getattr(np, name)
        if not callable(f) or isinstance(f, type):
            return f

        def call(*args, **kwargs):
            self._counts[f"xp.{name}"] += 1
            args = [_host_view(a) for a in args]
            kwargs = {k: _host_view(v) for k, v in kwargs.items()}
            result = f(*args, **kwargs)
            if isinstance(result, tuple):
                return tuple(_as_device(r) for r in result)
            return _as_device(result)

        call.__name__ = name
        return call


class _EmulatedSparse:
    """``cupyx.scipy.sparse`` as far as the backend uses it."""

    @staticmethod
    def csr_matrix(M):
        return EmulatedCSR(sp.csr_matrix(M, copy=True))  # a copy, as the device's is

    @staticmethod
    def issparse(a) -> bool:
        return isinstance(a, EmulatedCSR)


class _NullStream:
    def synchronize(self) -> None:
        pass


class HostModules:
    """numpy dressed as a device for :class:`~distsketch.backends.cuda.CupyBackend` in tests: arrays are
    :class:`EmulatedDeviceArray`, sparse matrices :class:`EmulatedCSR`, the "pinned" buffers
    ordinary host memory, streams and events no-ops (numpy runs synchronously)."""

    def __init__(self):
        #: what the backend did, for tests: ``pinned`` buffer allocations, ``staged`` copies,
        #: ``to_host`` copies, ``xp.<name>`` namespace calls
        self.counts: collections.Counter = collections.Counter()
        self.xp = _EmulatedNamespace(self.counts)
        self.stable_kind = "stable"
        self.sparse = _EmulatedSparse()
        self.array_types = (EmulatedDeviceArray, EmulatedCSR)

    def pinned_empty(self, nbytes: int) -> np.ndarray:
        self.counts["pinned"] += 1
        return np.empty(nbytes, np.uint8)

    def stream(self):
        return _NullStream()

    def event(self):
        return _NullStream()

    def copy_to_device(self, host: np.ndarray, stream):
        self.counts["staged"] += 1
        return np.array(host).view(EmulatedDeviceArray)

    def record(self, event, stream) -> None:
        pass

    def wait(self, event) -> None:
        pass

    def to_host(self, a) -> np.ndarray:
        self.counts["to_host"] += 1
        return np.array(a.view(np.ndarray))

    def cholesky(self, M):
        """numpy's (LAPACK ``potrf``, lower); raises ``LinAlgError`` as CuPy's does under
        ``errstate(linalg="raise")``."""
        self.counts["cholesky"] += 1
        return _as_device(np.linalg.cholesky(_host_view(M)))

    def solve_triangular(self, A, B, *, lower: bool, trans: bool):
        """scipy's, on host views (as ``cupyx.scipy.linalg.solve_triangular``)."""
        from scipy.linalg import solve_triangular

        self.counts["solve_triangular"] += 1
        for x in (A, B):
            if type(x) is np.ndarray:
                raise TypeError("emulated device: solve_triangular got a host ndarray; move it "
                                "with Backend.asarray first")
        return _as_device(solve_triangular(_host_view(A), _host_view(B), lower=lower,
                                           trans="T" if trans else "N", check_finite=False))
