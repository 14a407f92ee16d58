"""Compute backends: the array namespace that block math runs in.

Block math (kernel block fills, the block product ``C_I = k(X_I, X_J) R_mixᵀ``, the partial
sums of the pass) never names numpy directly: it asks :func:`backend_of` for the backend of
the arrays it was given and calls that backend's ``xp`` namespace — the array-API habit
(``xp = array_namespace(x)``) of scikit-learn and SciPy. A fit chooses its backend by name
(:class:`~distsketch.EngineOptions` ``backend``): the pass moves each block's inputs there
(:meth:`Backend.asarray`), computes, and brings the small partial sums back to the host
(:meth:`Backend.to_numpy`). The driver's ``m × m`` solve always runs on the host.

Only the numpy backend is built here. Another backend is a new module that subclasses
:class:`Backend` and calls :func:`register_backend` — nothing else in the package changes
(docs/guide/extending.md, "How to add a backend"; tests/test_backends.py builds one in its
test file).
A backend shipped with the package but needing an optional dependency is listed in
:data:`LAZY_BACKENDS` and made on first use: ``"cuda"`` (:mod:`distsketch.backends.cuda`, CuPy), so
importing distsketch never imports CuPy.

This module imports neither dask nor anything but numpy and scipy.
"""

from __future__ import annotations

import threading
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp

from .._registry import Registry

__all__ = ["Backend", "NumpyBackend", "register_backend", "get_backend", "backend_of", "BACKENDS",
           "LAZY_BACKENDS", "BackendUnavailable", "known_backend", "dense"]


class BackendUnavailable(RuntimeError):
    """A registered backend that cannot run in this process (a missing optional dependency or
    device); the message names what to install."""


class Backend:
    """An array namespace for block math.

    Subclasses set ``name``, ``xp`` (a module with numpy's API: ``empty``, ``matmul``, ``exp``
    with ``out=``, …) and ``array_types`` (the array classes that belong to it), and override
    the conversions and the few operations the array API does not cover.
    """

    name: ClassVar[str] = ""
    xp: Any = None
    array_types: ClassVar[tuple[type, ...]] = ()
    #: Bytes of a row tile when a kernel fills a block in place (None: the kernels' default,
    #: sized for CPU caches; a GPU backend takes far larger tiles).
    tile_bytes: ClassVar[int | None] = None
    #: Density (stored entries / (rows × columns)) above which this backend's own sparse blocks
    #: are densified before a built-in kernel's product (``kernels.sparse.cheaper_form``); None:
    #: kept sparse (their rates not measured). ``Tuning.device_sparse_max_density``, when set,
    #: overrides it; host scipy.sparse blocks follow ``Tuning.sparse_max_density`` whatever
    #: the backend.
    sparse_max_density: ClassVar[float | None] = None
    #: Landmarks (m) from which PCG factors ``K_mm`` and applies its preconditioner on this
    #: backend's device, on the driver (``distsketch.solvers.devicefactor``); None: never (the
    #: host's LAPACK). Such a backend also offers ``cholesky_upper`` and ``solve_triangular``.
    #: ``Tuning.device_factor_min_m``, when set, overrides it.
    factor_min_m: ClassVar[int | None] = None

    def asarray(self, a, dtype=None):
        """A host array (ndarray, or scipy.sparse for backends with sparse support) or one of
        this backend's arrays, as an array of this backend (no copy when already one)."""
        raise NotImplementedError

    def to_numpy(self, a) -> np.ndarray:
        """This backend's array as a host ndarray."""
        raise NotImplementedError

    def issparse(self, a) -> bool:
        """Whether ``a`` is a sparse matrix of this backend."""
        return False

    def exp(self, a, out=None):
        """``exp(a)`` of a float64 array, in place or into ``out`` (float64 or float32).

        Into float32, ``a`` is rounded to float32 and the float32 ``exp`` runs (numpy's ufunc
        buffering casts in cache-sized pieces): the exponent's rounding (relative 6e-8, so an
        absolute 6e-8·|a|) plus about 1 float32 ulp. Every kernel's exponential goes through
        here: the one hook for another implementation of ``exp``.
        """
        if out is None:
            out = a
        return self.xp.exp(a, out=out, dtype=out.dtype, casting="same_kind")

    def operand(self, M):
        """A host matrix (sketch mixing: scipy.sparse or ndarray) as the right operand of
        ``block @ M`` for blocks of this backend."""
        raise NotImplementedError

    def cached_operand(self, owner, key, make):
        """``operand(make())`` for a host matrix that belongs to ``owner`` (a realised sketch's
        mixing columns, a feature map's projection) and is the same for every block: backends
        whose operands are copies (a device) keep it between blocks; here it is made each
        time (a host operand is the matrix itself, no copy)."""
        return self.operand(make())

    def cityblock(self, A, B):
        """``Σ_k |a_ik − b_jk|`` of dense blocks, shape (n_a, n_b), float64."""
        raise NotImplementedError

    def argsort_stable(self, a, axis: int = -1):
        """Stable argsort along ``axis`` (equal keys keep their order)."""
        return self.xp.argsort(a, axis=axis, kind="stable")

    def __repr__(self) -> str:
        return f"<distsketch backend {self.name!r}>"


class NumpyBackend(Backend):
    """numpy and scipy on the host; accepts scipy.sparse blocks (CSR)."""

    name = "numpy"
    xp = np
    array_types = (np.ndarray,)

    def asarray(self, a, dtype=None):
        if sp.issparse(a):
            return a if dtype is None else a.astype(dtype, copy=False)
        return np.asarray(a, dtype=dtype)

    def to_numpy(self, a) -> np.ndarray:
        return a

    def issparse(self, a) -> bool:
        return sp.issparse(a)

    def operand(self, M):
        return M

    def cityblock(self, A, B):
        from scipy.spatial.distance import cdist

        # cdist loops in C without an (n_a, n_b, d) temporary
        return cdist(A, B, "cityblock")


#: Registered backends by name.
BACKENDS: Registry = Registry("backend")
_BY_TYPE: dict[type, Backend] = {}


def register_backend(backend: Backend) -> Backend:
    """Make ``backend`` available by name (``EngineOptions(backend=name)``) and for its arrays."""
    if not isinstance(backend, Backend) or not backend.name:
        raise ValueError(f"register_backend: expected a named distsketch Backend, got {backend!r}")
    BACKENDS[backend.name] = backend
    for t in backend.array_types:
        _BY_TYPE[t] = backend
    return backend


NUMPY = register_backend(NumpyBackend())

#: Backends made on first use, by name: ``(module, factory)``; the factory registers and
#: returns the backend or raises :class:`BackendUnavailable`. Imported by name, so this module
#: does not import them.
LAZY_BACKENDS: dict[str, tuple[str, str]] = {"cuda": ("distsketch.backends.cuda", "cuda_backend")}
_LAZY_LOCK = threading.Lock()


def known_backend(name) -> bool:
    """Whether ``name`` is a registered or a lazily made backend."""
    return isinstance(name, str) and (name in BACKENDS or name in LAZY_BACKENDS)


def get_backend(name: str | Backend) -> Backend:
    """The backend registered under ``name`` (a Backend is returned as is); a lazy backend
    (:data:`LAZY_BACKENDS`) is made on first use and may raise :class:`BackendUnavailable`."""
    if isinstance(name, Backend):
        return name
    try:
        return BACKENDS[name]
    except (KeyError, TypeError):
        pass
    if known_backend(name):
        import importlib

        with _LAZY_LOCK:  # the tasks of one process make one instance
            if name in BACKENDS:
                return BACKENDS[name]
            module, factory = LAZY_BACKENDS[name]
            return getattr(importlib.import_module(module), factory)()
    raise ValueError(f"options.backend: unknown backend {name!r}; registered backends are "
                     f"{sorted(set(BACKENDS) | set(LAZY_BACKENDS))}")


def backend_of(a) -> Backend:
    """The backend an array belongs to: by its class (most derived first), numpy for host
    ndarrays, scipy.sparse matrices and anything unregistered (lists, scalars)."""
    t = type(a)
    b = _BY_TYPE.get(t)
    if b is not None:
        return b
    for base in t.__mro__[1:]:
        b = _BY_TYPE.get(base)
        if b is not None:
            _BY_TYPE[t] = b
            return b
    return NUMPY


def dense(a: Any) -> Any:
    """``a`` as a dense array of its backend.

    Parameters
    ----------
    a : array-like or sparse matrix
        A numpy or scipy.sparse array (or a CuPy one on the CUDA backend), a list or a
        scalar.

    Returns
    -------
    ndarray
        Sparse matrices densified (``toarray``), anything else converted with the backend's
        ``asarray`` (lists and scalars as numpy).

    Examples
    --------
    >>> import scipy.sparse as sp
    >>> from distsketch.testing import dense
    >>> dense(sp.eye(2, format="csr"))
    array([[1., 0.],
           [0., 1.]])
    """
    be = backend_of(a)
    if be.issparse(a):
        return a.toarray()
    return be.xp.asarray(a)
