"""PCG's preconditioner on the driver's device: ``K_mm``'s factor, Falkon's ``A`` and each
iteration's products with ``T``, ``A`` and ``K_mm`` on a device backend.

With ``EngineOptions(device="cuda")`` a PCG iteration's kernel blocks and their products run
on the GPU (``distsketch.engine.deviceblocks``). The driver's share of the iteration is small
in size but not in time. It makes four triangular solves with ``T`` and ``A`` and one
product with ``K_mm``, each m × m, against a few right-hand sides. So each iteration reads
``5 · 8m²`` bytes, memory-bound on the host: 16 GB at m = 2·10⁴. Each λ also factors
``T Tᵀ/m + λI``, and the fit factors ``K_mm`` once; together about ``m³`` flops.
From ``m ≥ factor_min_m`` (the backend's threshold, or ``Tuning.device_factor_min_m``),
:class:`DeviceAlgebra` keeps ``K_mm``, ``T`` and ``A`` on the device instead. Only ``T`` comes
back to the host, for the landmarks left out of the solve
(``distsketch.solvers.pcg._expand``). The iterates stay m × t host arrays, kept in the store
as before.

The equations are those of :class:`~distsketch.solvers.preconditioner.Preconditioner` and
:func:`~distsketch.solvers.preconditioner.factor_kmm`: the same jitter sequence and the same
check of the pivots. The rounding is cuSOLVER's and cuBLAS's instead of LAPACK's, so the factors
differ from the host's by about ``κ·u`` relative (κ the factored matrix's condition
number). CG's iterates then differ by rounding, and its solution by less than the solver's
``tol`` (tests/test_gpu_factor.py: 1e-8 at ``tol = 1e-12``). A killed fit resumes on the same
device bitwise, since cuSOLVER's ``potrf`` is deterministic for one device and one input.

Device memory: ``K_mm``, ``T`` and ``A`` held (``3 · 8m²`` bytes, 9.6 GB at m = 2·10⁴) and one
or two m × m work arrays while factoring.
"""

from __future__ import annotations

import logging

import numpy as np

from ..backends.base import BackendUnavailable, get_backend

__all__ = ["DeviceAlgebra", "DevicePreconditioner", "device_algebra"]

logger = logging.getLogger(__name__)


def device_algebra(backend, m: int, tuning=None) -> DeviceAlgebra | None:
    """The algebra of ``m`` landmarks on the driver's device, or None for the host.

    Parameters
    ----------
    backend : str or Backend or None
        The fit's compute backend (``EngineOptions.backend``).
    m : int
        Landmarks PCG solves in.
    tuning : Tuning or None
        The fit's ``options.tuning``: ``device_factor_min_m`` overrides the backend's
        ``factor_min_m``.

    Returns
    -------
    DeviceAlgebra or None
        None for a host backend, a backend that factors nowhere else (``factor_min_m``
        None), ``m`` below the threshold, or a driver where the backend is unavailable
        (a driver without CuPy or a GPU whose workers have one: logged).
    """
    if backend is None or backend == "numpy":
        return None
    limit = None if tuning is None else tuning.device_factor_min_m
    try:
        be = get_backend(backend)
    except BackendUnavailable as exc:
        logger.info("PCG: the preconditioner is factored on the host: the driver has no %s "
                    "device (%s)", backend, exc)
        return None
    limit = be.factor_min_m if limit is None else limit
    if limit is None or m < limit:
        return None
    return DeviceAlgebra(be)


class DeviceAlgebra:
    """``K_mm``, its factor and the preconditioner's products on a device backend's device.

    Parameters
    ----------
    backend : Backend
        A device backend offering ``cholesky_upper`` and ``solve_triangular``
        (:class:`~distsketch.backends.cuda.CupyBackend`).
    """

    def __init__(self, backend):
        self.backend = backend
        self.xp = backend.xp
        self._K, self._gram = None, None
        self._factor: tuple | None = None  # (host T, device T) of the last factorisation

    def upload(self, a: np.ndarray):
        """A device copy of a host m × m array in one synchronous copy (no pinned staging of
        gigabytes); a Fortran-ordered array goes as its transpose's bytes, transposed back."""
        a = np.asarray(a, dtype=np.float64)
        if a.flags.f_contiguous and not a.flags.c_contiguous:
            return self.xp.array(a.T).T
        return self.xp.array(np.ascontiguousarray(a))

    def _put(self, v: np.ndarray):
        return self.backend.asarray(np.ascontiguousarray(v, dtype=np.float64))

    def kmm(self, gram):
        """``K_mm`` of a :class:`~distsketch.solvers.preconditioner.LandmarkGram` on the
        device (its host matrix's values, copied once per gram)."""
        if self._K is None or self._gram is not gram:
            self._K, self._gram = None, None  # free the other gram's copy first
            self._K, self._gram = self.upload(gram.matrix()), gram
        return self._K

    def diag(self, gram) -> np.ndarray:
        """``diag K_mm`` (m,), host."""
        return self.backend.to_numpy(self.xp.diagonal(self.kmm(gram)).copy())

    def factor(self, gram, eps: float) -> np.ndarray | None:
        """``T`` upper-triangular with ``TᵀT = K_mm + εI``, factored on the device (the device
        copy kept for :meth:`preconditioner`); returned to the host (m × m, Fortran order, as
        scipy's), or None where the factorisation fails."""
        K = self.kmm(gram)
        shifted = K.copy()
        i = self.xp.arange(K.shape[0])
        shifted[i, i] += eps
        try:
            U = self.backend.cholesky_upper(shifted)
        except np.linalg.LinAlgError:
            return None
        del shifted
        T = self.backend.to_numpy(U.T).T
        self._factor = (T, U)
        return T

    def device_factor(self, T: np.ndarray):
        """``T`` on the device: the copy :meth:`factor` kept when ``T`` is its result, else
        uploaded (and kept)."""
        if self._factor is not None and self._factor[0] is T:
            return self._factor[1]
        U = self.upload(T)
        self._factor = (T, U)
        return U

    def dot(self, gram, v: np.ndarray) -> np.ndarray:
        """``K_mm v`` (host in, host out)."""
        return self.backend.to_numpy(self.kmm(gram) @ self._put(v))

    def preconditioner(self, T: np.ndarray, lam: float, n: int, *,
                       centre: bool = False) -> DevicePreconditioner:
        """Falkon's ``P`` for one λ, built and applied on the device."""
        return DevicePreconditioner(self, T, lam, n, centre=centre)


class DevicePreconditioner:
    """Falkon's ``P = n^{-1/2} T^{-1} A^{-1}`` on the device: ``AᵀA = T Tᵀ/m + λI`` (centred:
    ``T (I − 11ᵀ/m) Tᵀ/m + λI``), as :class:`~distsketch.solvers.preconditioner.Preconditioner`;
    its products take and return host arrays.

    Parameters
    ----------
    algebra : DeviceAlgebra
    T : ndarray (m, m)
        ``K_mm``'s factor (host; its device copy from ``algebra``).
    lam : float
    n : int
    centre : bool
        Precondition the centred system of an unpenalised intercept.
    """

    def __init__(self, algebra: DeviceAlgebra, T: np.ndarray, lam: float, n: int, *,
                 centre: bool = False):
        be, xp = algebra.backend, algebra.xp
        self._algebra = algebra
        self.T = U = algebra.device_factor(T)
        m = U.shape[0]
        self.n, self.m = n, m
        M = U @ U.T
        if centre:
            w = U.sum(axis=1) / np.sqrt(float(m))  # T 1 / √m
            M -= xp.outer(w, w)
        M /= m
        i = xp.arange(m)
        M[i, i] += lam
        self.A = be.cholesky_upper(M)
        self._root = np.sqrt(float(n))

    def apply(self, u: np.ndarray) -> np.ndarray:
        """``P u = n^{-1/2} T^{-1} A^{-1} u``."""
        be = self._algebra.backend
        v = be.solve_triangular(self.A, self._algebra._put(u))
        return be.to_numpy(be.solve_triangular(self.T, v)) / self._root

    def apply_t(self, v: np.ndarray) -> np.ndarray:
        """``Pᵀ v = n^{-1/2} A^{-T} T^{-T} v``."""
        be = self._algebra.backend
        w = be.solve_triangular(self.T, self._algebra._put(v), trans=True)
        return be.to_numpy(be.solve_triangular(self.A, w, trans=True)) / self._root

    def inverse(self, a: np.ndarray) -> np.ndarray:
        """``P^{-1} a = n^{1/2} A T a`` (a warm start's ``u``)."""
        be = self._algebra.backend
        return self._root * be.to_numpy(self.A @ (self.T @ self._algebra._put(a)))
