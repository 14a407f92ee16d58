"""Large m: Falkon's preconditioned conjugate gradient for sketched KRR with landmarks.

Glossary (docs/design.md, "Large m: preconditioned conjugate gradient")::

    n, m, t     training rows, landmarks (the sketch's support J), target columns
    K_nm        k(X, X_J), n × m — never formed: its row blocks K_I are recomputed per pass
    K_mm        k(X_J, X_J), m × m
    α           the dual coefficients on the landmarks, f(x) = k(x, X_J) α + ȳ (m × t)
    z           K_nmᵀ (Y − 1ȳᵀ) (ȳ = 0 without an intercept)
    H           K_nmᵀ K_nm + nλ K_mm

The sketched KRR problem with a sub-sampling sketch ``R = diag(r) S_J`` (uniform or
leverage-score landmarks), ``min_f (1/n) Σ ‖f(x_i) − y_i‖² + λ‖f‖²`` over
``f = k(·, X) Rᵀ β``, has the normal equations ``(G + nλB) β = b`` with ``G = CᵀC``,
``B = R K Rᵀ``, ``b = Cᵀ Y``, ``C = K Rᵀ = K_nm diag(r)`` (Chen & Yang 2021, eq. 3). In
``α = diag(r) β`` (the model's ``dual_coef_``) they read ``H α = z``, the system of Falkon
(Rudi, Carratino & Rosasco, NeurIPS 2017; Meanti et al., NeurIPS 2020); ``r`` drops out.
:class:`~distsketch.SketchedKRR`'s direct route solves the same system through ``H``'s
eigendecomposition (``B`` whitened), so both give the same ``α`` when ``K_mm`` has full rank.

:class:`~distsketch.SketchedRegressor`'s squared loss (``fit_pcg(..., centre=True)``) fits its
intercept jointly, ``b₀ = ȳ − αᵀ s/n`` with ``s = K_nmᵀ 1``: the centred system
``(K_nmᵀ K_nm − s sᵀ/n + nλ K_mm) α = z``, the rank-one term applied on the driver
(:func:`pcg_path`).

:class:`~distsketch.SISOKR`'s input side (:func:`fit_pcg_sisokr`) is the same system with the
r_Y whitened output features as targets, ``z = K_nmᵀ D T_Y = diag(1/r) Mᵀ T_Y``, its right-hand
side from one streaming pass (``M``, ``E``; no ``G``), solved by :func:`lam_path`, the λ loop
:func:`pcg_path` uses.

Landmarks (:func:`select_landmarks`): PCG solves in the distinct, numerically independent
landmarks — repeated rows merged exactly (equal rows, equal kernel columns: the same
functions, every prediction unchanged; a repeated landmark's coefficient on its first copy,
0 on the others), and where ``K_mm``'s factor shows a landmark within rounding of the span
of the others, a pivoted Cholesky factorisation keeps those above the rounding level
``u·m·max diag K_mm`` (as the direct route's pivoted stage) — so that ``K_mm`` is safely
positive definite: with a singular ``K_mm`` the preconditioner amplifies the rounding of its
null directions until CG diverges. The coefficients of the landmarks left out are 0.

Falkon's preconditioner is built from ``K_mm`` alone: ``T`` upper-triangular with
``TᵀT = K_mm + εI`` (a small jitter ε, raised until the Cholesky factorisation succeeds), ``A``
upper-triangular with ``AᵀA = T Tᵀ/m + λI``, and ``P = n^{-1/2} T^{-1} A^{-1}``, so that
``P Pᵀ = ((n/m) K_mm² + nλ K_mm)^{-1}`` up to ε: the inverse of ``H`` under the Nyström
approximation ``K_nmᵀ K_nm ≈ (n/m) K_mm²``. Conjugate gradient runs on ``Pᵀ H P u = Pᵀ z``,
``α = P u``, one column of ``z`` at a time (vectorised: the columns share the passes but not
their step sizes, and a column that has converged is frozen, so each column's result is the
one it would have alone). Every iteration is ONE block map-reduce over the training rows
(:class:`distsketch.sweep.Sweeper` with :func:`_pcg_block`): each task recomputes its kernel
block ``K_I`` from the rows (in ``EngineOptions.block_dtype``, float64 accumulation; no ``C``
stored, no ``G`` formed) and returns ``K_Iᵀ (K_I V)``, reduced in the engine's fixed tree; the
first pass also returns ``K_Iᵀ Y``, ``K_Iᵀ 1`` and ``Σ y``. ``H`` is applied exactly:
``K_nmᵀ K_nm v`` from the pass plus ``nλ K_mm v`` on the driver with the unjittered ``K_mm``
(the jitter touches only the preconditioner, never the solution). Driver memory O(m² + m t),
task memory O(b m).

Stopping rule: the relative residual ``‖Pᵀ(z − H α)‖ ≤ tol ‖Pᵀ z‖`` of each column (the
recursively updated residual of CG), or ``max_iter`` iterations (a ``ConvergenceWarning``),
or the divergence guard (:func:`_solve_lam`): a column whose residual grows to
:data:`DIVERGE_GROWTH` times its lowest, or has not gone below it for :data:`STALL_WINDOW`
iterations, stops and returns its best iterate, its residual recomputed by one more pass
(or its start, where that is lower), with a ``ConvergenceWarning`` that says what happened
and what to do (``solver="direct"``, a larger λ, float64 blocks).
A λ path is solved in decreasing order, each λ warm-started from the previous solution; the
products ``K_nmᵀ K_nm α`` are carried along the iterations, so a warm start costs no pass.
With a kept store, the right-hand side and each iteration's state (``u``, residual, direction,
``K_nmᵀ K_nm α``) are written under ``solver/<key>`` (double-buffered, checksummed:
:class:`distsketch.newton.SolverState`): a fit killed between iterations resumes from the
last one and ends with the identical model, after one pass that checks the rows' fingerprints
against those the first pass recorded (other data: ``DataChanged``). The store keeps no kernel
blocks.
"""

from __future__ import annotations

import dataclasses
import logging
import warnings
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.linalg import LinAlgError, cholesky, solve_triangular
from scipy.linalg.lapack import dpstrf

from .._hashing import data_fingerprint, fingerprint
from ..backends.base import dense
from ..linalg.blocks import distinct_rows
from .lipschitz.newton import SolverState, convergence_warning, state_key
from ..options import driver_threads
from ..engine.rows import check_finite_block
from ..engine.store import DataChanged
from ..engine.sweep import SweepData, Sweeper, block_native, gram_product
from ..tuning import check_tuning, store_config

__all__ = ["landmark_sketches", "Preconditioner", "LandmarkGram", "PCGResult", "pcg_path", "fit_pcg",
           "lam_path", "fit_pcg_sisokr",
           "check_pcg_sketch", "choose_solver", "AUTO_STORE_BYTES"]

logger = logging.getLogger(__name__)

def landmark_sketches() -> list[str]:
    """Names of the registered sketches PCG supports: those that declare
    :attr:`~distsketch.sketches.Sketch.selects_landmarks` (a support of m training rows and a
    diagonal ``R_mix``, so ``B = diag(r) K_mm diag(r)`` is the landmarks' own Gram matrix, the
    preconditioner's input; mixing sketches have no Nyström structure to precondition by)."""
    from ..sketches.base import SKETCHES

    return list(dict.fromkeys(cls.__name__ for cls in SKETCHES.values()
                              if cls.selects_landmarks))  # in registration order

#: ``solver="auto"``'s cost model (:func:`choose_solver`): direct while forming ``G`` costs no
#: more than PCG's passes, ``2nm² ≤ auto_pcg_passes · n·m · auto_pass_flops`` (``m ≤ 8 100``
#: whatever n), fields of ``EngineOptions.tuning`` (:class:`~distsketch.Tuning`, where their
#: measurements are: benchmarks/bench_large_m.py, RESULTS.md ``large_m``) …
#: … and while a kept store's ``C`` (``n m`` values, 4 bytes in float32) takes at most this.
AUTO_STORE_BYTES = 32 * 2**30
#: Jitter of the preconditioner's Cholesky factor: ``ε = JITTER · m · mean(diag K_mm)``, raised
#: 100-fold until the factorisation succeeds (Falkon's ``ε · M``).
JITTER = 1e-13
#: ``K_mm`` is held on the driver while it takes at most this many bytes (m ≤ 11 585), else
#: recomputed for each product (:class:`LandmarkGram`).
KMM_MEMORY = 2**30
#: Divergence guard of the iterations (:func:`_solve_lam`): a column stops when its relative
#: residual exceeds this multiple of the lowest it has reached (impossible in exact arithmetic
#: unless ``cond(Pᵀ H P) ≥ DIVERGE_GROWTH²``) …
DIVERGE_GROWTH = 1e3
#: … or has not gone below that lowest for this many iterations.
STALL_WINDOW = 50
#: Format of the PCG state in a store (part of its key).
PCG_STATE_VERSION = 1


# --------------------------------------------------------------------------- choosing a solver


def check_pcg_sketch(sketch, *, solver: str, argument: str = "sketch") -> None:
    """Refuse a sketch PCG cannot use, naming ``solver``, the sketch's ``argument`` and the
    supported sketches."""
    name = type(sketch).__name__
    if not getattr(sketch, "selects_landmarks", False):
        exact = "exact KRR" if argument == "sketch" else "an exact input side"
        what = f"{argument}=None ({exact})" if name == "Identity" else f"{argument}={sketch!r}"
        raise ValueError(
            f"solver={solver!r}: the preconditioned conjugate gradient needs landmarks, a sketch "
            f"that sub-samples rows ({', '.join(landmark_sketches())}): its preconditioner is "
            f"built from the landmarks' kernel matrix K_mm alone; {what} has none. Use one of "
            f"those sketches, or solver='direct'")


def choose_solver(solver: str, *, n: int, m: int | None, sketch, store, tuning=None) -> str:
    """``"direct"`` or ``"pcg"`` for a fit of ``n`` rows and ``m`` landmarks.

    ``"auto"``: direct while forming ``G`` costs no more than PCG's passes,
    ``2nm² ≤ auto_pcg_passes · n·m · auto_pass_flops`` (``tuning``'s fields: ``m ≤ 8 100`` at
    the defaults), and (with a kept ``store``) the stored ``C``, ``4nm`` bytes in float32, is
    at most ``AUTO_STORE_BYTES``; PCG beyond, when the sketch picks landmarks
    (``Sketch.selects_landmarks``; any other sketch stays direct). ``tuning``: the fit's
    ``options.tuning`` (:class:`~distsketch.Tuning`; None: the defaults).
    """
    if solver != "auto":
        return solver
    if m is None or not getattr(sketch, "selects_landmarks", False):
        return "direct"
    tuning = check_tuning(tuning)
    cheaper = 2.0 * n * m * m <= tuning.auto_pcg_passes * n * m * tuning.auto_pass_flops
    affordable = store is None or 4.0 * n * m <= AUTO_STORE_BYTES
    return "direct" if cheaper and affordable else "pcg"


# --------------------------------------------------------------------------- the block task


@dataclass(frozen=True)
class PCGStep:
    """What one PCG sweep ships to the tasks: directions ``V`` (m × k, or None) whose
    ``K_nmᵀ K_nm V`` is wanted, and whether to also return the right-hand side's sums."""

    V: np.ndarray | None
    first: bool = False
    check: bool = False  # first pass of lazy inputs: check the rows for NaN / inf
    fingerprint: bool = False  # return the rows' fingerprints (a resumed fit checks the data)


def _pcg_block(shared, item, ws) -> dict:
    """``K_Iᵀ (K_I V)`` of one row block (and on the first pass ``K_Iᵀ Y``, ``K_Iᵀ 1``,
    ``Σ y`` and ``Σ y²`` per column), float64, from the kernel block recomputed from the rows."""
    data, step = shared
    i, ref, crc, yb = item
    if step.check:  # lazy inputs are checked block by block, as the streaming pass does
        start = data.rows(i)[0]
        check_finite_block(ref, argument="X", start=start)
        check_finite_block(yb, argument="y", start=start)
    out = {}
    if step.fingerprint:  # 64-bit hashes of the rows as exact 32-bit halves (sums are exact)
        fp = np.zeros((data.n_blocks, 4))
        for j, h in enumerate((data_fingerprint(ref), data_fingerprint(yb))):
            fp[i, 2 * j], fp[i, 2 * j + 1] = h >> 32, h & 0xFFFFFFFF
        out["fp"] = fp
        if step.V is None and not step.first:
            return out
    K = block_native(data, i, ref, crc, ws)  # k(X_I, X_J) at the block dtype
    if step.V is not None:  # float32 blocks converted tile by tile, accumulated in float64
        out["GV"] = gram_product(K, step.V, ws)
    if step.first:
        K = K.astype(np.float64, copy=False)
        Y = dense(yb).astype(np.float64, copy=False).reshape(K.shape[0], -1)
        out["b"] = K.T @ Y
        out["s"] = K.sum(axis=0)
        out["y1"] = Y.sum(axis=0)
        out["yy"] = np.einsum("ij,ij->j", Y, Y)
    return out


# --------------------------------------------------------------------------- the preconditioner


class Preconditioner:
    """Falkon's ``P = n^{-1/2} T^{-1} A^{-1}`` for one λ (see the module's notes).

    Parameters
    ----------
    Kmm : ndarray (m, m) or LandmarkGram
        The landmarks' kernel matrix (float64, symmetric); only read when ``T`` is not given.
    lam : float
    n : int
    centre : bool
        Precondition the centred system of an unpenalised intercept,
        ``K_nmᵀ K_nm − s sᵀ/n + nλ K_mm`` (``s = K_nmᵀ 1``): its Nyström approximation is
        ``(n/m) K_mm (I − 11ᵀ/m) K_mm + nλ K_mm``, so ``AᵀA = T (I − 11ᵀ/m) Tᵀ/m + λI``.
        (The deflation ``s sᵀ/n`` removes the data term's direction of the constant function,
        which the uncentred preconditioner still counts.) Measured on 3000 Gaussian rows,
        m = 300, γ = 0.5, tol = 1e-9: 13 / 66 / 397 iterations at λ = 1e-2 / 1e-4 / 1e-6,
        against 16 / 81 / 543 with the uncentred ``A``.
    """

    def __init__(self, Kmm, lam: float, n: int, *, T: np.ndarray | None = None,
                 centre: bool = False):
        m = Kmm.m if isinstance(Kmm, LandmarkGram) else Kmm.shape[0]
        self.n, self.m = n, m
        self.T = factor_kmm(Kmm) if T is None else T
        M = upper_gram(self.T)  # T Tᵀ's upper triangle, factored in place below
        if centre:
            w = self.T.sum(axis=1) / np.sqrt(float(m))  # T 1 / √m
            for s in range(0, m, LandmarkGram.CHUNK):
                e = min(s + LandmarkGram.CHUNK, m)
                M[s:e, s:] -= np.outer(w[s:e], w[s:])
        M /= m
        M[np.diag_indices(m)] += lam
        self.A = cholesky(M, lower=False, overwrite_a=True, check_finite=False)
        self._root = np.sqrt(float(n))

    def apply(self, u: np.ndarray) -> np.ndarray:
        """``P u = n^{-1/2} T^{-1} A^{-1} u``."""
        v = solve_triangular(self.A, u, lower=False, check_finite=False)
        return solve_triangular(self.T, v, lower=False, check_finite=False) / self._root

    def apply_t(self, v: np.ndarray) -> np.ndarray:
        """``Pᵀ v = n^{-1/2} A^{-T} T^{-T} v``."""
        w = solve_triangular(self.T, v, lower=False, trans="T", check_finite=False)
        return solve_triangular(self.A, w, lower=False, trans="T", check_finite=False) / self._root

    def inverse(self, a: np.ndarray) -> np.ndarray:
        """``P^{-1} a = n^{1/2} A T a`` (a warm start's ``u``)."""
        return self._root * (self.A @ (self.T @ a))


class LandmarkGram:
    """``K_mm = k(X_J, X_J)`` of a landmark feature map ``FeatureMap(kernel, X_J, None)``, held
    (float64) while it takes at most :data:`KMM_MEMORY`, else recomputed in row chunks for
    each product (``m² `` kernel values per iteration, about m/n of a pass), so that the
    driver holds two m × m arrays (``T`` and ``A``), not three."""

    CHUNK = 1024

    def __init__(self, fmap, *, hold: bool | None = None):
        self.fmap = fmap
        self.m = m = fmap.landmarks.shape[0]
        self.hold = m * m * 8 <= KMM_MEMORY if hold is None else bool(hold)
        self._K = None
        if self.hold:
            K = self._full()
            self._K = np.ascontiguousarray(0.5 * (K + K.T))

    def _rows(self, s: int, e: int) -> np.ndarray:
        return np.asarray(self.fmap.block(self.fmap.landmarks[s:e], dtype=np.float64))

    def _full(self) -> np.ndarray:
        K = np.empty((self.m, self.m), order="F")
        for s in range(0, self.m, self.CHUNK):
            K[s:s + self.CHUNK] = self._rows(s, min(s + self.CHUNK, self.m))
        return K

    def matrix(self) -> np.ndarray:
        """A fresh Fortran-ordered copy (the caller may factor it in place)."""
        return np.array(self._K, order="F") if self._K is not None else self._full()

    def dot(self, v: np.ndarray) -> np.ndarray:
        """``K_mm v``."""
        if self._K is not None:
            return self._K @ v
        out = np.empty((self.m, v.shape[1]))
        for s in range(0, self.m, self.CHUNK):
            e = min(s + self.CHUNK, self.m)
            out[s:e] = self._rows(s, e) @ v
        return out


#: Rows per block of :func:`upper_gram` (blocks of GEMMs, each large enough for its rate).
GRAM_BLOCK = 1024


def upper_gram(T: np.ndarray) -> np.ndarray:
    """``T Tᵀ`` of an upper-triangular ``T`` (m × m) into a fresh Fortran-ordered array: its
    upper triangle (what an upper Cholesky factorisation reads; below it the diagonal blocks
    hold their mirror image and the rest is 0).

    Block ``(i, j)``, ``i ≤ j``, is ``T[i, j:] T[j, j:]ᵀ`` (the zeros left of the diagonal
    skipped): ``≈ m³/3`` flops in GEMMs of :data:`GRAM_BLOCK` rows, against ``2m³`` for the
    plain product. Measured at m = 4000 (2 cores): 0.40 s against 2.10 s for ``T @ T.T``,
    0.90 s for ``dsyrk`` and 2.15 s for LAPACK's ``dlauum`` (OpenBLAS).
    """
    m = T.shape[0]
    edges = list(range(0, m, GRAM_BLOCK)) + [m]
    out = np.zeros((m, m), order="F")
    for a in range(len(edges) - 1):
        i0, i1 = edges[a], edges[a + 1]
        for b in range(a, len(edges) - 1):
            j0, j1 = edges[b], edges[b + 1]
            out[i0:i1, j0:j1] = T[i0:i1, j0:] @ T[j0:j1, j0:].T
    return out


def factor_kmm(Kmm) -> np.ndarray:
    """``T`` upper-triangular with ``TᵀT = K_mm + εI``, ε the smallest of
    ``JITTER · m · mean(diag) · 100^k`` for which the factorisation succeeds (``Kmm``: an
    ndarray or a :class:`LandmarkGram`; factored in place of a fresh copy)."""
    fresh = Kmm.matrix if isinstance(Kmm, LandmarkGram) else (
        lambda: np.array(Kmm, dtype=np.float64, order="F"))
    K = fresh()
    m = K.shape[0]
    scale = float(np.mean(np.diag(K))) or 1.0
    eps = JITTER * m * scale
    for attempt in range(8):
        if attempt:
            K = fresh()
        K[np.diag_indices(m)] += eps
        try:
            return cholesky(K, lower=False, overwrite_a=True, check_finite=False)
        except LinAlgError:
            eps *= 100.0
    raise ValueError("kernel: the landmarks' kernel matrix K_mm is not positive semi-definite "
                     "(its Cholesky factorisation fails even with a jitter of "
                     f"{eps / 100:.3g}); check the kernel or use solver='direct'")


# --------------------------------------------------------------------------- the iterations


class _RhsState(SolverState):
    """The first pass's sums in a store group (``solver/<key>``)."""

    ARRAYS = ("b", "s", "y1", "fp", "yy")


class _PCGState(SolverState):
    """One λ's CG state in a store group: ``u``, residual ``r``, direction ``p``, the carried
    ``K_nmᵀ K_nm α`` (``galpha``), ``‖r‖²`` (``rr``), iterations per column, and when done
    the solution ``alpha``."""

    ARRAYS = ("u", "r", "p", "galpha", "rr", "iters", "alpha", "u_best", "g_best", "rr_best",
              "it_best", "stopped")


@dataclass
class PCGResult:
    """Solutions of a λ path (in the order of ``lams``).

    Attributes
    ----------
    alphas : ndarray (n_lams, m, t)
        ``α(λ)``.
    intercept : ndarray (t,)
        ``ȳ`` (zeros without an intercept).
    n_iters : ndarray (n_lams,) of int
        CG iterations (passes) of each λ: the most over the columns.
    residuals : ndarray (n_lams, t)
        Relative residuals ``‖Pᵀ(z − Hα)‖ / ‖Pᵀ z‖`` reached (recursive).
    converged : ndarray (n_lams,) of bool
    n_passes : int
        Passes over the training rows this call made (a resumed fit makes fewer).
    intercepts : ndarray (n_lams, t)
        The intercept of each λ: ``ȳ`` for every λ, or with ``centre=True`` the unpenalised
        bias ``b₀(λ) = ȳ − α(λ)ᵀ s / n`` (``s = K_nmᵀ 1``).
    rss : ndarray (n_lams, t)
        ``‖K_nm α + 1 b₀ᵀ − Y‖²`` per column, from the pass's sums without another pass:
        ``αᵀ K_nmᵀK_nm α − 2 αᵀ z + ‖Y − 1ȳᵀ‖²`` (``− (sᵀα)²/n`` centred; ``z`` and ȳ
        zero-centred without an intercept). Absolute rounding ``≈ ε ‖Y − 1ȳᵀ‖²``.
    penalties : ndarray (n_lams, t)
        ``αᵀ K_mm α`` per column (``‖f‖²`` in the RKHS).
    galphas : ndarray (n_lams, m, t)
        ``K_nmᵀ K_nm α(λ)``, carried along the iterations (no pass): SISOKR's reduced rank
        takes ``Σ_i g(x_i) g(x_i)ᵀ = αᵀ K_nmᵀ K_nm α`` from it. (A landmark left out of the
        solve, :func:`select_landmarks`: its first copy's row, or for a numerically
        dependent one the projection on the kept landmarks, :func:`_expand`.)
    """

    alphas: np.ndarray
    intercept: np.ndarray
    n_iters: np.ndarray
    residuals: np.ndarray
    converged: np.ndarray
    n_passes: int
    intercepts: np.ndarray | None = None
    rss: np.ndarray | None = None
    penalties: np.ndarray | None = None
    galphas: np.ndarray | None = None


def _first_pass(sweeper: Sweeper, state) -> dict:
    """The right-hand side's sums (and the rows' fingerprints): from the store, after one
    pass of fingerprints only that checks the data are the recorded ones, or computed."""
    st = state.load() if state is not None else None
    if st is not None and st.get("done") and st.get("yy") is not None:  # (older: no Σ y²)
        found = sweeper(PCGStep(None, fingerprint=True))["fp"]
        bad = np.flatnonzero(np.any(found != st["fp"], axis=1))
        if len(bad):
            s, e = sweeper.data.rows(int(bad[0]))
            which = "X" if np.any(found[bad[0], :2] != st["fp"][bad[0], :2]) else "y"
            raise DataChanged(
                f"store {sweeper.data.location!r}: the training data differ from those the "
                f"stored PCG iterations were computed from ({which}, rows {s}–{e - 1}); fit on "
                f"the same data, or use EngineOptions(overwrite=True) or a new store path")
        return {k: st[k] for k in ("b", "s", "y1", "yy")}
    sums = sweeper(PCGStep(None, first=True, check=sweeper.X.lazy or sweeper.Y.lazy,
                           fingerprint=state is not None))
    if state is not None:
        state.save({**sums, "done": True})
    return sums


def _solve_lam(Kmm, T, z, lam, n, sweeper, *, alpha0, galpha0, tol, max_iter, state,
               c=None):
    """CG on ``Pᵀ H P u = Pᵀ z`` for one λ; returns ``(α, Kᵀ K α, n_iter, residuals, ok)``.

    ``c``: None, or ``s/√n`` (``s = K_nmᵀ 1``) for the centred system of an unpenalised
    intercept, ``H = K_nmᵀ K_nm − c cᵀ + nλ K_mm`` (the rank-one term on the driver, no pass).
    ``Kᵀ K α`` is returned uncentred in both cases.

    Divergence guard (per column, :data:`DIVERGE_GROWTH`, :data:`STALL_WINDOW`): each column
    keeps its best iterate, the one of lowest relative residual ``ρ_k = ‖r_k‖ / ‖Pᵀ z‖`` so far
    (its start included). In exact arithmetic CG decreases the error's energy norm at every
    step, so ``ρ_k ≤ √κ · min_{j<k} ρ_j`` (``κ = cond(Pᵀ H P)``); a column whose ``ρ_k`` exceeds
    ``DIVERGE_GROWTH`` times its best (κ ≥ 10⁶, or the recurrences lost to rounding), or that
    has not improved on its best for ``STALL_WINDOW`` iterations, stops. A column that stopped
    so is set back to its best iterate, certified by one more pass: ``K_nmᵀ K_nm α``
    recomputed and the residual ``‖Pᵀ(z − H α)‖`` formed from it (not the recursion), the
    value reported; where the start ``α₀`` (cold: 0; warm: the previous λ's solution, with its
    carried ``K_nmᵀ K_nm α₀``) has the lower residual, the start is kept instead. A diverged
    or stalled column warns (``ConvergenceWarning``) with what happened, what was kept and
    what to do. (A column at ``max_iter`` keeps its last iterate, as CG's error decreases in
    the energy norm, not necessarily its residual.)
    """
    with driver_threads(Kmm.m if isinstance(Kmm, LandmarkGram) else len(Kmm)):
        P = Preconditioner(Kmm, lam, n, T=T, centre=c is not None)
    nlam = n * lam

    def hv(gv, v):  # H v from K_nmᵀ K_nm v
        out = gv + nlam * Kmm.dot(v)
        if c is not None:
            out -= np.outer(c, c @ v)
        return out
    rhs = P.apply_t(z)
    norm0 = np.sqrt(np.einsum("ij,ij->j", rhs, rhs))
    st = state.load() if state is not None else None
    if st is not None and st.get("done"):
        logger.info("pcg λ = %.3g: solution found in the store (%d iterations)", lam,
                    st["n_iter"])
        rr = st["rr"]
        return (st["alpha"], st["galpha"], int(st["n_iter"]), _rel(rr, norm0),
                bool(st["converged"]))
    t = z.shape[1]
    if st is not None:
        u, r, p, galpha, rr = st["u"], st["r"], st["p"], st["galpha"], st["rr"]
        iters, n_iter = st["iters"], int(st["n_iter"])
        logger.info("pcg λ = %.3g: resuming at iteration %d from the store", lam, n_iter)
    else:
        u = P.inverse(alpha0)
        galpha = galpha0.copy()
        r = rhs - P.apply_t(hv(galpha, alpha0))
        p = r.copy()
        rr = np.einsum("ij,ij->j", r, r)
        iters, n_iter = np.zeros(t), 0
    if st is not None and st.get("u_best") is not None:
        u_best, g_best, rr_best = st["u_best"], st["g_best"], st["rr_best"]
        it_best, stopped = st["it_best"], st["stopped"]
        failures = {int(j): tuple(f) for j, f in (st.get("failures") or {}).items()}
    else:  # a fresh start (or a state saved without the guard): the current iterate is best
        u_best, g_best, rr_best = u.copy(), galpha.copy(), rr.copy()
        it_best, stopped = iters.copy(), np.zeros(t)
        failures = {}

    def save(**extra):
        state.save({"u": u, "r": r, "p": p, "galpha": galpha, "rr": rr, "iters": iters,
                    "u_best": u_best, "g_best": g_best, "rr_best": rr_best,
                    "it_best": it_best, "stopped": stopped,
                    "failures": {str(j): list(f) for j, f in failures.items()}, **extra})
    while True:
        active = np.flatnonzero((np.sqrt(rr) > tol * norm0) & (stopped == 0))
        if len(active) == 0 or n_iter >= max_iter:
            break
        pa = p[:, active]
        v = P.apply(pa)
        gv = sweeper(PCGStep(v))["GV"]
        q = P.apply_t(hv(gv, v))
        step = rr[active] / np.einsum("ij,ij->j", pa, q)
        u[:, active] += step * pa
        galpha[:, active] += step * gv
        ra = r[:, active] - step * q
        r[:, active] = ra
        rr_new = np.einsum("ij,ij->j", ra, ra)
        p[:, active] = ra + (rr_new / rr[active]) * pa
        rr[active] = rr_new
        iters[active] += 1
        n_iter += 1
        better = active[rr_new < rr_best[active]]
        u_best[:, better], g_best[:, better] = u[:, better], galpha[:, better]
        rr_best[better], it_best[better] = rr[better], iters[better]
        _guard_columns(active, n_iter, rr, rr_best, iters, it_best, norm0, stopped, failures)
        if state is not None:
            save(alpha=None, n_iter=n_iter, done=False)
        logger.debug("pcg λ = %.3g: iteration %d, relative residuals %s", lam, n_iter,
                     _rel(rr, norm0))
    res = _rel(rr, norm0)
    back = np.flatnonzero(stopped > 0)
    if len(back):  # set back to the best iterates, certified by one pass
        start = _set_back(back, P, sweeper, hv, rhs, alpha0, galpha0,
                          u=u, galpha=galpha, r=r, rr=rr, u_best=u_best)
        res = _rel(rr, norm0)
        logger.info("pcg λ = %.3g: %d column(s) set back to their best iterate (%d to the "
                    "start), certified relative residuals %s", lam, len(back), len(start),
                    res[back])
    else:
        start = back
    ok = bool(np.all(res <= tol))
    if failures:
        warnings.warn(_divergence_message(lam, tol, failures, res, start),
                      convergence_warning(), stacklevel=4)
    elif not ok:
        warnings.warn(f"solver='pcg', λ = {lam:g}: stopped at max_iter = {max_iter} with relative "
                      f"residual {res.max():.3g} > tol = {tol:g}; increase max_iter or tol",
                      convergence_warning(), stacklevel=4)
    alpha = P.apply(u)
    alpha[:, start] = alpha0[:, start]
    if state is not None:
        save(alpha=alpha, n_iter=n_iter, done=True, converged=ok)
    return alpha, galpha, n_iter, res, ok


def _guard_columns(active, n_iter, rr, rr_best, iters, it_best, norm0, stopped,
                   failures) -> None:
    """The divergence guard of :func:`_solve_lam` after an iteration (``rr_best ≤ rr``: the
    current one included): an active column whose residual grew :data:`DIVERGE_GROWTH`-fold
    past its best, or went non-finite, or has not improved for :data:`STALL_WINDOW`
    iterations, is marked in ``stopped`` and recorded in ``failures`` (both updated in place)."""
    for j in active:
        if rr[j] > DIVERGE_GROWTH ** 2 * rr_best[j] or not np.isfinite(rr[j]):
            failures[int(j)] = ("grew", n_iter, float(rr_best[j]), float(rr[j]),
                                int(it_best[j]), float(norm0[j]))
        elif iters[j] - it_best[j] >= STALL_WINDOW:
            failures[int(j)] = ("stalled", n_iter, float(rr_best[j]), float(rr[j]),
                                int(it_best[j]), float(norm0[j]))
        else:
            continue
        stopped[j] = 1.0


def _set_back(back, P, sweeper, hv, rhs, alpha0, galpha0, *, u, galpha, r, rr,
              u_best) -> np.ndarray:
    """Columns ``back`` of :func:`_solve_lam`'s iterate (``u``, ``galpha``, ``r``, ``rr``,
    updated in place) set back to their best iterates, certified by one pass — or to the
    start where that is better (its residual from the given ``K_nmᵀ K_nm α₀``). Returns the
    columns set back to the start."""
    u[:, back] = u_best[:, back]
    a_b = P.apply(u[:, back])
    gv = sweeper(PCGStep(a_b))["GV"]
    galpha[:, back] = gv
    r[:, back] = rhs[:, back] - P.apply_t(hv(gv, a_b))
    rr[back] = np.einsum("ij,ij->j", r[:, back], r[:, back])
    r0 = rhs[:, back] - P.apply_t(hv(galpha0[:, back], alpha0[:, back]))
    rr0 = np.einsum("ij,ij->j", r0, r0)
    worse = rr0 < rr[back]
    start = back[worse]
    u[:, start], galpha[:, start] = P.inverse(alpha0[:, start]), galpha0[:, start]
    r[:, start], rr[start] = r0[:, worse], rr0[worse]
    return start


def _divergence_message(lam: float, tol: float, failures: dict, res: np.ndarray,
                        start: np.ndarray) -> str:
    """The warning of columns the divergence guard stopped: what happened (the worst column's
    residual history), what was kept (the best iterate, or the start where that certified
    better: ``start``) and what to do."""
    j = max(failures, key=lambda k: res[k])
    how, at, best, last, it_best, norm0 = failures[j]
    rel = (lambda v: np.sqrt(v) / norm0) if norm0 > 0 else (lambda v: 0.0)
    cols = f"{len(failures)} of the target columns" if len(res) > 1 else "the solve"
    what = (f"the relative residual grew from its lowest {rel(best):.3g} (iteration {it_best}) "
            f"to {rel(last):.3g} at iteration {at}" if how == "grew" else
            f"the relative residual has not gone below its lowest {rel(best):.3g} (iteration "
            f"{it_best}) in the {STALL_WINDOW} iterations to iteration {at}")
    kept = (f"Stopped and kept the starting point (the best iterate, iteration {it_best}, "
            f"was worse once recomputed)" if j in set(start.tolist()) else
            f"Stopped and kept the best iterate (iteration {it_best})")
    verb = "diverged" if how == "grew" else "stalled"
    return (f"solver='pcg', λ = {lam:g}: the conjugate gradient {verb} for {cols}: {what}. "
            f"{kept}, whose relative residual, recomputed (not the recursion's), is "
            f"{res[j]:.3g} "
            f"({'≤' if res[j] <= tol else '>'} tol = {tol:g}). More iterations will not help: "
            f"the preconditioned system is too ill-conditioned in floating point (nearly "
            f"coincident landmarks, or λ too small for the block dtype). Use solver='direct' "
            f"(which drops the numerically null directions of K_mm), a larger λ, or "
            f"EngineOptions(block_dtype='float64')")


def _rel(rr: np.ndarray, norm0: np.ndarray) -> np.ndarray:
    return np.where(norm0 > 0, np.sqrt(rr) / np.where(norm0 > 0, norm0, 1.0), 0.0)


def pcg_path(data: SweepData, X, Y, *, Kmm: LandmarkGram, lams, tol: float, max_iter: int,
             fit_intercept: bool, split_every: int = 4, progress: bool = False,
             states=None, centre: bool = False, T: np.ndarray | None = None) -> PCGResult:
    """Solve ``(K_nmᵀ K_nm + nλ K_mm) α = K_nmᵀ (Y − 1ȳᵀ)`` for every λ of ``lams`` by PCG.

    With ``centre=True`` (and ``fit_intercept``) the intercept is an unpenalised bias fitted
    jointly with α, as :class:`~distsketch.SketchedRegressor`'s: minimising
    ``(1/2n)‖K_nm α + 1 b₀ᵀ − Y‖² + (λ/2) Tr(αᵀ K_mm α)`` over ``b₀`` gives
    ``b₀ = ȳ − αᵀ s/n`` (``s = K_nmᵀ 1``), and over α the centred system
    ``(K_nmᵀ K_nm − s sᵀ/n + nλ K_mm) α = K_nmᵀ (Y − 1ȳᵀ)`` (the features' mean removed; the
    rank-one term is applied on the driver, so an iteration still costs one pass).

    Parameters
    ----------
    data : SweepData
        The sweep's layout; ``data.x`` is ``FeatureMap(kernel, X_J, None)`` (raw kernel blocks
        ``K_I``, recomputed: ``data.C`` and ``data.held`` None).
    X, Y : RowSource
        Training inputs and targets (n rows; Y of t columns, or 1-D).
    Kmm : LandmarkGram
        ``K_mm`` (products and the matrix to factor).
    lams : sequence of float
    tol, max_iter : float, int
        Relative residual to reach per column; most iterations per λ.
    fit_intercept : bool
        Centre the targets (``ȳ`` from the first pass).
    states : callable or None
        ``states(key: dict) -> SolverState group or None``: where to keep the state of the
        right-hand side (``key["what"] == "rhs"``) and of each λ (kept store), or None.
    centre : bool
        Also centre the features: the jointly fitted intercept (see above).
    T : ndarray (m, m), optional
        ``K_mm``'s factor (:func:`factor_kmm`) when already computed.

    Returns
    -------
    PCGResult
    """
    sweeper = Sweeper(data, X, Y, split_every=split_every, progress=progress, block=_pcg_block,
                      name="pcg")
    n = data.n
    sums = _first_pass(sweeper, None if states is None else _RhsState(states({"what": "rhs"})))
    b = np.asarray(sums["b"], dtype=np.float64)
    y1 = np.asarray(sums["y1"], dtype=np.float64).reshape(-1)
    s = np.asarray(sums["s"], dtype=np.float64).reshape(-1)
    yy = np.asarray(sums["yy"], dtype=np.float64).reshape(-1)
    centre = bool(centre and fit_intercept)
    if fit_intercept:
        ybar = y1 / n
        z = b - np.outer(s, ybar)
        yyc = yy - n * ybar * ybar  # ‖Y − 1ȳᵀ‖² per column
    else:
        ybar, z, yyc = np.zeros_like(y1), b, yy
    c = s / np.sqrt(float(n)) if centre else None
    # SketchedKRR's keys as they were; the centred system is another one
    key = {"intercept": bool(fit_intercept), **({"centre": True} if centre else {})}
    res = lam_path(sweeper, Kmm, z, lams, tol=tol, max_iter=max_iter, states=states, key=key,
                   c=c, T=T)
    t = z.shape[1]
    intercepts = np.tile(ybar, (len(lams), 1))
    rss, penalties = np.empty((len(lams), t)), np.empty((len(lams), t))
    for k in range(len(lams)):
        # C-ordered operands: the same rounding whether α was computed or read from a store
        a, ga = res.alphas[k], np.ascontiguousarray(res.galphas[k])
        sa = s @ a
        rss[k] = (np.einsum("ij,ij->j", a, ga) - 2.0 * np.einsum("ij,ij->j", a, z)
                  + yyc - (sa * sa / n if centre else 0.0))
        penalties[k] = np.einsum("ij,ij->j", a, Kmm.dot(a))
        if centre:
            intercepts[k] = ybar - sa / n
    return dataclasses.replace(res, intercept=ybar, intercepts=intercepts,
                               rss=np.maximum(rss, 0.0), penalties=penalties)


def lam_path(sweeper: Sweeper, Kmm, z: np.ndarray, lams, *, tol: float, max_iter: int,
             states=None, key: dict | None = None, c: np.ndarray | None = None,
             T: np.ndarray | None = None) -> PCGResult:
    """Solve ``(K_nmᵀ K_nm + nλ K_mm) α = z`` (``− c cᵀ`` with ``c``) for every λ of ``lams``
    by PCG, all columns of ``z`` (m × t) at once, from a right-hand side already computed.

    The λ are solved in decreasing order, each warm-started from the previous ``α`` and its
    carried ``K_nmᵀ K_nm α`` (no pass). ``states``: as for :func:`pcg_path`; each λ's state is
    kept under ``{"what": "lam", "lam", "tol", "warm", **key}``. ``sweeper``: a
    :class:`~distsketch.sweep.Sweeper` running :func:`_pcg_block`. Returns a
    :class:`PCGResult` with ``galphas`` (``K_nmᵀ K_nm α(λ)``) and zero ``intercept``;
    ``n_passes`` counts the sweeper's passes so far. ``T``: ``K_mm``'s factor
    (:func:`factor_kmm`) when already computed.
    """
    n = sweeper.data.n
    m, t = z.shape
    if T is None:
        with driver_threads(m):  # between passes: the driver's factorisations on idle cores
            T = factor_kmm(Kmm)
    order = sorted(range(len(lams)), key=lambda k: -lams[k])
    alphas, galphas = np.empty((len(lams), m, t)), np.empty((len(lams), m, t))
    n_iters = np.zeros(len(lams), dtype=np.int64)
    residuals = np.empty((len(lams), t))
    converged = np.zeros(len(lams), dtype=bool)
    alpha, galpha = np.zeros((m, t)), np.zeros((m, t))
    for k in order:
        lam = float(lams[k])
        state = None
        if states is not None:
            state = _PCGState(states({"what": "lam", "lam": lam, "tol": float(tol),
                                      "warm": sorted(float(v) for v in lams if v > lam),
                                      **(key or {})}))
        alpha, galpha, n_iters[k], residuals[k], converged[k] = _solve_lam(
            Kmm, T, z, lam, n, sweeper, alpha0=alpha, galpha0=galpha, tol=tol,
            max_iter=max_iter, state=state, c=c)
        alphas[k], galphas[k] = alpha, galpha
        logger.info("pcg λ = %.3g: %d iterations, relative residual %.3g", lam, n_iters[k],
                    residuals[k].max())
    return PCGResult(alphas, np.zeros(t), n_iters, residuals, converged, sweeper.count,
                     galphas=galphas)


# --------------------------------------------------------------------------- a whole fit



def distinct_landmarks(landmarks) -> tuple[np.ndarray, np.ndarray] | None:
    """``(first, inverse)`` of the landmark rows (dense or scipy.sparse, m × d) compared
    exactly (as :func:`~distsketch.blocks.distinct_rows`: ``first`` each distinct row's first
    position, ascending; ``inverse`` (m,) every row's index into ``first``), or None when no
    row repeats."""
    if sp.issparse(landmarks):  # canonical CSR rows (sorted, no explicit zeros) as bytes
        A = sp.csr_array(landmarks, dtype=np.float64, copy=True)
        A.sum_duplicates()
        A.eliminate_zeros()
        A.sort_indices()
        seen: dict = {}
        inverse = np.empty(A.shape[0], dtype=np.int64)
        for i in range(A.shape[0]):
            a, b = A.indptr[i], A.indptr[i + 1]
            key = (A.indices[a:b].astype(np.int64).tobytes(), (A.data[a:b] + 0.0).tobytes())
            inverse[i] = seen.setdefault(key, len(seen))
        first = np.unique(inverse, return_index=True)[1]
    else:
        first, inverse = distinct_rows(np.asarray(landmarks))
    return None if len(first) == landmarks.shape[0] else (first, inverse)


def select_landmarks(kernel, landmarks, *, chunk: int = 2048, what: str = "PCG", tuning=None):
    """The landmarks PCG solves in, their :class:`LandmarkGram` and its factor ``T``
    (:func:`factor_kmm`): ``(keep, Kmm, T)``, ``keep`` the positions in ``landmarks`` (m × d)
    of those solved in (ascending), or None for all of them.

    With repeated or numerically dependent landmarks ``K_mm`` is singular (to rounding) and
    ``H = K_nmᵀ K_nm + nλ K_mm`` with it: α is not unique, only the function
    ``f = k(·, X_J) α`` is, and the preconditioner, built from ``K_mm``, amplifies the rounding
    of its null directions until CG diverges. So PCG solves in a subset ``L_S`` spanning the
    same functions, and the caller maps α back with zeros elsewhere (:func:`_expand`):

    1. repeated rows are merged exactly (:func:`distinct_landmarks`, as
       :class:`~distsketch.features.FeatureMap` merges them): equal rows give equal columns
       of ``K_nm`` and ``K_mm``, so the function space, the minimiser ``f`` and every
       prediction are those of the full system; a repeated landmark's coefficient sits on
       its first copy;
    2. the distinct ones are factored, ``TᵀT = K_uu + ε₀ I`` (:func:`factor_kmm`'s first
       jitter); where that fails, or a pivot may show a landmark within rounding of the
       span of the earlier ones (``T_ii² ≤ 2ε₀ + u·m·max diag K_uu``, ``u`` the float64 unit
       roundoff: with the jitter on the earlier landmarks too, ``T_ii² = S_i + ε₀(1 + θ)``,
       ``0 ≤ θ ≤ 1``, ``S_i`` the unjittered Schur complement),
       a pivoted Cholesky factorisation (LAPACK ``pstrf`` at its default tolerance
       ``u·m·max diag``, as the direct route's pivoted stage, :mod:`distsketch.solve`)
       keeps the landmarks whose Schur complement is above the rounding level and drops the
       others: a dropped landmark's feature lies within ``√(u·m·max diag)`` of the kept ones'
       span (RKHS norm), so the function space changes by rounding only.

    Landmarks that are distinct and numerically independent are kept in full and factored as
    before (the same ``T``, the same iterations, bitwise). ``tuning``: the fit's
    ``options.tuning``, carried by the landmarks' feature map (its kernel products' density
    rule, in every sweep; None: the defaults).
    """
    from ..engine.features import FeatureMap

    m = landmarks.shape[0]
    merged = distinct_landmarks(landmarks)
    keep = None if merged is None else merged[0]
    sub = landmarks if keep is None else landmarks[keep]
    Kmm = LandmarkGram(FeatureMap(kernel, sub, None, chunk, tuning))
    with driver_threads(Kmm.m):  # the driver's factorisation on idle cores
        T, dependent = _factor_checked(Kmm)
        if dependent:
            K = Kmm.matrix()
            c, piv, rank, info = dpstrf(K, lower=0)
            if info < 0 or rank < 1:
                raise ValueError("kernel: the landmarks' kernel matrix K_mm is not positive "
                                 "semi-definite; check the kernel or use solver='direct'")
            if rank < Kmm.m:
                kept = np.sort(np.asarray(piv[:rank], dtype=np.int64) - 1)
                keep = kept if keep is None else keep[kept]
                Kmm = LandmarkGram(FeatureMap(kernel, landmarks[keep], None, chunk, tuning))
            T = factor_kmm(Kmm)
    if keep is not None:
        logger.info("%s: %d landmarks, %d distinct, %d numerically independent: PCG solves in "
                    "those (the others' coefficients 0, a repeated landmark's on its first "
                    "copy)", what, m, m if merged is None else len(merged[0]), len(keep))
    return keep, Kmm, T


def _factor_checked(Kmm) -> tuple[np.ndarray | None, bool]:
    """``(T, dependent)``: :func:`factor_kmm`'s factor with its first jitter ``ε₀`` and
    whether a landmark may be numerically dependent on the earlier ones (the factorisation
    fails, or a pivot ``T_ii² ≤ 2ε₀ + u·m·max diag K_mm``); ``T`` None when so."""
    K = Kmm.matrix()
    m = K.shape[0]
    diag = np.diag(K).copy()
    eps = JITTER * m * (float(np.mean(diag)) or 1.0)
    K[np.diag_indices(m)] += eps
    try:
        T = cholesky(K, lower=False, overwrite_a=True, check_finite=False)
    except LinAlgError:
        return None, True
    # a landmark j with Schur complement S_j (unjittered) has the pivot
    # T_jj² = S_j + ε₀ (1 + θ), 0 ≤ θ ≤ 1 (ε₀ on the earlier landmarks too): 2ε₀ + u·m·max diag
    # bounds the pivots of landmarks within rounding of the earlier ones' span
    floor = 2.0 * eps + np.finfo(np.float64).eps * m * float(diag.max())
    if np.min(np.diag(T) ** 2) <= floor:
        return None, True
    return T, False


def _states_for(states, keep):
    """``states`` with the number of landmarks solved in in every key (their arrays have
    that many rows), or ``states`` itself when all are."""
    if states is None or keep is None:
        return states
    u = int(len(keep))
    return lambda key: states({**key, "distinct": u})


def _expand(result: PCGResult, keep, landmarks, Kmm: LandmarkGram) -> PCGResult:
    """``result`` of the landmarks ``landmarks[keep]`` solved in, in all ``m`` landmarks:
    ``α`` 0 on the others; ``K_nmᵀ K_nm α`` of a left-out landmark ``j`` as
    ``w_jᵀ (K_nmᵀ K_nm α)_S`` with ``w_j = K_SS^{-1} k(L_S, x_j)`` (exact for a repeated
    landmark, whose ``w_j`` selects its first copy; to the rounding of ``K_mm`` for a
    dependent one)."""
    if keep is None:
        return result
    m = landmarks.shape[0]
    L, _, t = result.alphas.shape
    alphas = np.zeros((L, m, t))
    alphas[:, keep] = result.alphas
    galphas = None
    if result.galphas is not None:
        galphas = np.zeros((L, m, t))
        galphas[:, keep] = result.galphas
        out = np.setdiff1d(np.arange(m), keep)
        # exact copies: their first copy's row
        first, inverse = distinct_landmarks(landmarks) or (np.arange(m), np.arange(m))
        pos = np.full(m, -1)
        pos[keep] = np.arange(len(keep))
        src = pos[first[inverse[out]]]
        copies = src >= 0
        galphas[:, out[copies]] = result.galphas[:, src[copies]]
        rest = out[~copies]
        if len(rest):  # numerically dependent: through the projection on the kept span
            k_sr = np.asarray(Kmm.fmap.block(landmarks[rest], dtype=np.float64)).T
            w = _cho_solve_upper(factor_kmm(Kmm), k_sr)
            galphas[:, rest] = np.einsum("sr,lst->lrt", w, result.galphas)
    return dataclasses.replace(result, alphas=alphas, galphas=galphas)


def _cho_solve_upper(T: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``(TᵀT)^{-1} b`` for an upper-triangular ``T``."""
    v = solve_triangular(T, b, lower=False, trans="T", check_finite=False)
    return solve_triangular(T, v, lower=False, check_finite=False)


def _prepare_pcg(fs, config: dict, options, *, Kmm: LandmarkGram, n: int, block_rows: int,
                 dtype):
    """Prepare the open store ``fs`` for the PCG pass ``config`` and build what the sweeps
    need: ``(data, states)`` — the :class:`~distsketch.sweep.SweepData` of kernel blocks
    recomputed against ``Kmm``'s landmarks, and ``states(key)``, the solver-state group of
    ``key`` in a kept store (None in a temporary one)."""
    fs.prepare_pass(config, overwrite=options.overwrite)
    data = SweepData(n=n, block_rows=block_rows, m=Kmm.m, d=1, C=None, crcs=(),
                     x=Kmm.fmap, dtype=dtype, location=fs.location)

    def states(key: dict):
        if fs.temporary:
            return None
        return fs.group.require_group("solver").require_group(
            state_key({"pass": config, **key}))

    return data, states


def _solve_or_reset(solve, fs, config: dict, options):
    """``solve()``; when the store's recorded data differ (``DataChanged``) and
    ``options.overwrite``, reset the store to ``config`` and solve afresh."""
    try:
        return solve()
    except DataChanged as exc:
        if not options.overwrite:
            raise
        logger.warning("%s; overwrite=True: solving afresh", exc)
        fs.reset(config)
        return solve()

@dataclass
class PCGFit:
    """What :func:`fit_pcg` gives the estimator: the realised sketch, landmarks, kernel, the
    solutions, and the open store (closed by the caller after saving the model)."""

    sketch: object
    landmarks: object
    result: PCGResult
    store: str | None
    fs: object


def fit_pcg(spec, *, kernel, sketch, store, reuse_seeds: bool, tol: float, max_iter: int,
            fit_intercept: bool, model: str = "SketchedKRR", centre: bool = False) -> PCGFit:
    """Draw the sketch (as the streaming pass draws it: the same seeds give the same
    landmarks as the direct route), open the store and solve the λ path by PCG.

    ``spec`` is the estimator's validated :class:`~distsketch.estimator.FitSpec`; ``kernel`` and
    ``sketch`` its resolved input side. The store records a pass configuration with
    ``"solver": "pcg"`` and no block arrays; the solver's states live under ``solver/``.
    ``centre``: the jointly fitted intercept of :class:`~distsketch.SketchedRegressor`
    (:func:`pcg_path`).
    """
    from ..engine.accumulate import choose_block_rows, jsonable
    from ..kernels.base import kernel_description
    from ..engine.store import StoreDirectory, open_fit_store

    check_pcg_sketch(sketch, solver="pcg")
    X, Y, options = spec.X, spec.Y, spec.options
    n = X.n
    directory = store if isinstance(store, StoreDirectory) else None
    fs = None if directory is not None else open_fit_store(store, lock=True)
    try:
        seed = int(spec.rng.integers(0, 2**63 - 1, size=2)[0])
        found = fs.recorded_seed("input") if reuse_seeds and fs is not None else None
        seed = seed if found is None else found
        if getattr(sketch, "needs_kernel", False):
            xs = sketch.realize(n, seed=seed, data=X, kernel=kernel)
        else:
            xs = sketch.realize(n, seed=seed, data=X)
        land = X.take(xs.support)
        dtype = np.dtype(options.block_dtype)
        m = xs.m
        b = choose_block_rows(options, n, m + X.shape[1] + 2 * Y.shape[1], X.native_rows,
                               dtype)
        config = jsonable({
            "model": model, "solver": "pcg", "version": PCG_STATE_VERSION, "n": n,
            "block_rows": b, "block_dtype": str(dtype), "gram_chunk": options.gram_chunk,
            "m_x": None, "m_y": None,  # no blocks are stored
            "input": {"kernel": kernel_description(kernel), "sketch": xs.to_config(),
                      "shape": X.shape, "landmarks": fingerprint(land)},
            "output": {"targets": Y.shape}, "unique_outputs": False,
            **store_config(options.tuning),  # none at the defaults: earlier stores resume
        })
        if directory is not None:
            fs = directory.open(config)
        keep, Kmm, T = select_landmarks(kernel, land, chunk=options.gram_chunk, what=model,
                                        tuning=options.tuning)
        data, states = _prepare_pcg(fs, config, options, Kmm=Kmm, n=n, block_rows=b,
                                    dtype=dtype)
        states = _states_for(states, keep)

        def solve():
            return pcg_path(data, X, Y, Kmm=Kmm, lams=spec.lams, tol=tol, max_iter=max_iter,
                            fit_intercept=fit_intercept, split_every=options.split_every,
                            progress=options.progress, states=states, centre=centre, T=T)

        result = _expand(_solve_or_reset(solve, fs, config, options), keep, land, Kmm)
    except BaseException:
        if fs is not None:
            fs.close()
        raise
    return PCGFit(xs, land, result, None if fs.temporary else fs.location, fs)


# --------------------------------------------------------------------------- SISOKR's input side


class _SisokrRhsState(SolverState):
    """SISOKR's right-hand side ``z`` in a store group: a resumed fit recomputes it by its
    first pass and reuses the stored iterates only if it is bitwise the same."""

    ARRAYS = ("z",)


@dataclass
class SisokrPCGFit:
    """What :func:`fit_pcg_sisokr` gives :class:`~distsketch.SISOKR`: both realised sides,
    the pass's sums (``M``, ``E``, ``U``), the output whitening ``T_Y``, the PCG solutions and
    the open store (closed by the caller after saving the model)."""

    x_sketch: object
    x_landmarks: object
    y_sketch: object
    y_landmarks: object
    sums: dict
    output_whitening: np.ndarray
    result: PCGResult
    store: str | None
    fs: object


def fit_pcg_sisokr(spec, *, store, reuse_seeds: bool, tol: float, max_iter: int,
                   linear_output: bool, model: str = "SISOKR") -> SisokrPCGFit:
    """SISOKR's input side by PCG: multi-output KRR of the whitened output features.

    With a sub-sampling input sketch (landmarks ``X_J``, ``C = K_nm diag(r)``) and a sketched
    output side (``D = K_Y R_Yᵀ``, ``T_Y`` whitening ``E = R_Y K_Y R_Yᵀ``), the input side is
    kernel ridge regression of ``Ψ = D T_Y`` (n × r_Y) on the inputs. In the landmark
    parametrisation ``g(x) = αᵀ k(X_J, x)`` (r_Y output coordinates) its normal equations are

        (K_nmᵀ K_nm + nλ K_mm) α = K_nmᵀ D T_Y = diag(1/r) Mᵀ T_Y,     M = Dᵀ C = Σ_I D_Iᵀ C_I

    and ``W(λ) = α(λ)ᵀ`` in the input features ``k(X_J, x)`` is the direct route's
    ``(T_Yᵀ M T_X)(H + nλI)^{-1}`` in its own features when ``K_mm`` has full rank.

    One streaming pass (:func:`~distsketch.accumulate.fit_pass`, nothing stored: no ``C``,
    no ``D``) computes ``M``, ``E`` (and ``U``, the default candidates, unless the output
    kernel is linear) — not ``G``; then :func:`lam_path` solves the r_Y columns at once, one
    pass of recomputed kernel blocks per iteration. The sketches are drawn from the same two
    seeds as the direct route's pass (same ``random_state``, same landmarks). With a kept
    store the λ states are kept under ``solver/`` as :func:`fit_pcg` keeps them; a resumed fit
    recomputes the first pass (one pass) and continues from the stored iterates only when its
    right-hand side is bitwise the recorded one (other data: ``DataChanged``, or with
    ``EngineOptions(overwrite=True)`` solved afresh).

    ``spec``: the validated :class:`~distsketch.estimator.FitSpec` of a SISOKR (kernels and
    sketches under ``input_*`` / ``output_*``).
    """
    from ..engine.accumulate import choose_block_rows, jsonable, fit_pass
    from ..kernels.base import kernel_description
    from ..linalg.solve import whitening
    from ..engine.store import StoreDirectory, open_fit_store

    kx, ky = spec.kernels["input_kernel"], spec.kernels["output_kernel"]
    xsk, ysk = spec.sketches["input_sketch"], spec.sketches["output_sketch"]
    check_pcg_sketch(xsk, solver="pcg")
    X, Y, options = spec.X, spec.Y, spec.options
    n = X.n
    directory = store if isinstance(store, StoreDirectory) else None
    fs = None if directory is not None else open_fit_store(store, lock=True)
    try:
        seeds = [int(s) for s in spec.rng.integers(0, 2**63 - 1, size=2)]
        if reuse_seeds and fs is not None:
            found = [fs.recorded_seed(side) for side in ("input", "output")]
            seeds = [s if f is None else f for f, s in zip(found, seeds)]
        sums = ("M", "E") if linear_output else ("M", "E", "U")
        res = fit_pass(X, Y, x_kernel=kx, x_sketch=xsk, y_kernel=ky, y_sketch=ysk, sums=sums,
                       rng=spec.rng, seeds=seeds, store=None, options=options, model=model)
        res.fs.close()
        xs, ys = res.x_sketch, res.y_sketch
        T_Y = whitening(np.asarray(res.sums["E"], dtype=np.float64), rtol=options.eig_rtol,
                        argument="output_kernel")
        M = np.asarray(res.sums["M"], dtype=np.float64)  # m_Y × m_X
        z = np.ascontiguousarray((M.T @ T_Y) / np.asarray(xs.scale, dtype=np.float64)[:, None])
        dtype = np.dtype(options.block_dtype)
        m = xs.m
        b = choose_block_rows(options, n, m + X.shape[1] + Y.shape[1], X.native_rows, dtype)
        config = jsonable({
            "model": model, "solver": "pcg", "version": PCG_STATE_VERSION, "n": n,
            "block_rows": b, "block_dtype": str(dtype), "gram_chunk": options.gram_chunk,
            "m_x": None, "m_y": None,  # no blocks are stored
            "input": {"kernel": kernel_description(kx), "sketch": xs.to_config(),
                      "shape": X.shape, "landmarks": fingerprint(res.x_landmarks)},
            "output": {"kernel": kernel_description(ky), "sketch": ys.to_config(),
                       "shape": Y.shape, "landmarks": fingerprint(res.y_landmarks)},
            "unique_outputs": not linear_output,
            **store_config(options.tuning),  # none at the defaults: earlier stores resume
        })
        if directory is not None:
            fs = directory.open(config)
        keep, Kmm, T = select_landmarks(kx, res.x_landmarks, chunk=options.gram_chunk,
                                        what=model, tuning=options.tuning)
        data, states = _prepare_pcg(fs, config, options, Kmm=Kmm, n=n, block_rows=b,
                                    dtype=dtype)
        states = _states_for(states, keep)
        z_solve = z if keep is None else np.ascontiguousarray(z[keep])  # the rows solved in

        def solve():
            rhs = _SisokrRhsState(states({"what": "rhs"}))
            st = rhs.load()
            if st is not None and st.get("done"):
                if not np.array_equal(st["z"], z):
                    raise DataChanged(
                        f"store {fs.location!r}: the training data differ from those the "
                        f"stored PCG iterations were computed from (the right-hand side "
                        f"K_nmᵀ D T_Y of the first pass differs); fit on the same data, or use "
                        f"EngineOptions(overwrite=True) or a new store path")
            else:
                rhs.save({"z": z, "done": True})
            sweeper = Sweeper(data, X, Y, split_every=options.split_every,
                              progress=options.progress, block=_pcg_block, name="pcg")
            return lam_path(sweeper, Kmm, z_solve, spec.lams, tol=tol, max_iter=max_iter,
                            states=states, T=T)

        result = _expand(_solve_or_reset(solve, fs, config, options), keep, res.x_landmarks,
                         Kmm)
    except BaseException:
        if fs is not None:
            fs.close()
        raise
    result = dataclasses.replace(result, n_passes=result.n_passes + 1)  # and the first pass
    return SisokrPCGFit(xs, res.x_landmarks, ys, res.y_landmarks, res.sums, T_Y, result,
                        None if fs.temporary else fs.location, fs)
