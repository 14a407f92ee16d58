"""Driver solve: the small ``m × m`` systems of the SISOKR family and sketched KRR.

Glossary (DESIGN §2)
--------------------
C = K_X R_Xᵀ  (n × m_X)        D = K_Y R_Yᵀ  (n × m_Y)
G = CᵀC      = R_X K_X² R_Xᵀ    B = R_X C     = R_X K_X R_Xᵀ
M = DᵀC      = R_Y K_Y K_X R_Xᵀ E = R_Y D     = R_Y K_Y R_Yᵀ
b = Cᵀ Y     (vector targets)
T_X           whitening of B:  B = U diag(s) Uᵀ, T_X = U_r diag(s_r^{-1/2}), s_r > rtol·max(s);
              when B is safely far from that threshold, T_X = L^{-T} for B = L Lᵀ (same model)
H = T_Xᵀ G T_X = V diag(Λ) Vᵀ   (one eigendecomposition serves every λ)

Objective normalisation, written once: every model minimises
``(1/n) Σ_i ‖h(x_i) − ψ(y_i)‖² + λ ‖h‖²``, hence the ``n λ`` below.

- SISOKR (Prop. 1 of El Ahmad et al., AISTATS 2024)::

      W(λ) = (T_Yᵀ M T_X) V (Λ + nλ)^{-1} Vᵀ          (r_Y × r_X)
      ⟨ĥ(x), ψ(y)⟩ = φ_Y(y)ᵀ W(λ) φ_X(x),  φ_X(x) = T_Xᵀ R_X k_X(X, x)

  which equals the dense closed form
  ``k_Y(y,Y) R_Yᵀ (R_Y K_Y R_Yᵀ)^† R_Y K_Y K_X R_Xᵀ (R_X K_X² R_Xᵀ + nλ R_X K_X R_Xᵀ)^† R_X k_X(X,x)``.
- Sketched KRR (eq. 3 of Chen & Yang, JMLR 2021)::

      β(λ) = T_X V (Λ + nλ)^{-1} Vᵀ T_Xᵀ b,   f(x) = (R_X k_X(X, x))ᵀ β(λ)

- Exact input side (``R_X = I``: IOKR, ISOKR, exact KRR), :class:`ExactInputSolution`::

      W(λ) = (D T_Y)ᵀ (K_X + nλI)^{-1}    or  (K_X + nλI)^{-1} (exact output),
      β(λ) = (K_X + nλI)^{-1} Y,           φ_X(x) = k_X(X, x)

  by one Cholesky factorisation per λ.

Sketched sides: symmetrise, eigen-decompose once, threshold relatively; no inverse is
formed. The one explicit inverse is IOKR's ``(K_X + nλI)^{-1}`` (exact on both sides),
whose coefficients are that matrix: it comes from the Cholesky factor (``potri``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.linalg import LinAlgError, cho_solve, cholesky
from scipy.linalg.lapack import dpocon, dpotri, dtrtri

__all__ = [
    "whitening", "InputSolution", "ExactInputSolution", "solve_input", "sisokr_operator",
    "sisokr_coef", "krr_coef",
]


def _sym(A: np.ndarray) -> np.ndarray:
    A = np.asarray(A, dtype=np.float64)
    return 0.5 * (A + A.T)


# The Cholesky whitening is used only when LAPACK's estimate of the reciprocal condition
# number exceeds rtol by this factor. The estimate of ‖B⁻¹‖₁ is a lower bound, rarely off
# by more than 10× (Higham, "Accuracy and Stability of Numerical Algorithms", §15.3), and
# cond₂ ≤ cond₁ for symmetric B, so then every eigenvalue lies above rtol · max(s): the
# eigen-decomposition would have kept every direction, and both whitenings give the same
# model (they differ by a rotation Q, T_chol = T_eig Q, which V absorbs).
_CHOLESKY_MARGIN = 1e3


def whitening(B: np.ndarray, *, rtol: float, argument: str = "kernel") -> np.ndarray:
    """``T`` with ``Tᵀ B T = I_r`` and ``T Tᵀ = B^†`` on the retained eigenspace.

    ``T = U_r diag(s_r^{-1/2})`` for ``B = U diag(s) Uᵀ`` keeping ``s > rtol · max(s)``.
    When ``B`` is well conditioned (every eigenvalue kept, with a margin),
    ``T = L^{-T}`` for the Cholesky factor ``B = L Lᵀ`` instead: the same whitened space
    (``T_chol = T_eig Q`` with ``Q`` orthogonal, which leaves every model unchanged) at
    about a twentieth of the cost of the eigendecomposition.

    Parameters
    ----------
    B : ndarray of shape (m, m)
        Symmetric positive semi-definite (``R K Rᵀ``).
    rtol : float
        Relative eigenvalue threshold.

    Returns
    -------
    ndarray of shape (m, r)
    """
    B = _sym(B)
    T = _cholesky_whitening(B, rtol=rtol)
    if T is not None:
        return T
    s, U = np.linalg.eigh(B)
    top = s[-1] if s.size else 0.0
    if not np.isfinite(top) or top <= 0.0:
        raise ValueError(
            f"{argument}: the sketched Gram matrix R K Rᵀ has no positive eigenvalue; "
            f"check the kernel (is it positive definite?) and that the sketch is not empty"
        )
    keep = s > rtol * top
    return U[:, keep] / np.sqrt(s[keep])


def _cholesky_whitening(B: np.ndarray, *, rtol: float) -> np.ndarray | None:
    """``L^{-T}`` for ``B = L Lᵀ`` if ``B`` is safely well conditioned, else None."""
    if B.size == 0 or not np.isfinite(B).all():
        return None
    try:
        L = cholesky(B, lower=True, check_finite=False)
    except LinAlgError:
        return None
    rcond, info = dpocon(L, np.abs(B).sum(axis=0).max(), uplo="L")
    if info != 0 or not rcond > _CHOLESKY_MARGIN * rtol:
        return None
    L_inv, info = dtrtri(L, lower=1)
    if info != 0:
        return None
    return np.ascontiguousarray(L_inv.T)


@dataclass(frozen=True)
class InputSolution:
    """λ-independent input-side factors: ``T_X``, ``V``, ``Λ`` and ``n``.

    Attributes
    ----------
    T : ndarray of shape (m_X, r_X)
    V : ndarray of shape (r_X, r_X)
    evals : ndarray of shape (r_X,)
        ``Λ``, eigenvalues of ``H = T_Xᵀ G T_X`` (clipped at 0).
    n : int
    """

    T: np.ndarray
    V: np.ndarray | None
    evals: np.ndarray
    n: int

    def V_dot(self, X: np.ndarray) -> np.ndarray:
        """``V X``."""
        return X if self.V is None else self.V @ X

    def TV(self) -> np.ndarray:
        """``T_X V`` of shape (m_X, r_X)."""
        return self.T if self.V is None else self.T @ self.V

    def shrinkage(self, lam: float) -> np.ndarray:
        """``(Λ + nλ)^{-1}`` of shape (r_X,)."""
        return 1.0 / (self.evals + self.n * float(lam))


def solve_input(G: np.ndarray, B: np.ndarray, *, n: int, rtol: float) -> InputSolution:
    """Whiten ``B`` and eigen-decompose ``H = T_Xᵀ G T_X`` once for the whole λ path."""
    T = whitening(B, rtol=rtol, argument="input_kernel")
    H = _sym(T.T @ _sym(G) @ T)
    evals, V = np.linalg.eigh(H)
    return InputSolution(T=T, V=V, evals=np.clip(evals, 0.0, None), n=int(n))


@dataclass(frozen=True)
class ExactInputSolution:
    """Exact input side (``R_X = I``): ``(K_X + nλI)^{-1}`` by Cholesky, once per λ.

    With ``R_X = I`` the closed forms reduce to the classical ones (IOKR, exact KRR):
    ``⟨ĥ(x), ψ(y)⟩ = k_Y(y, Y) P_Y (K_X + nλI)^{-1} k_X(X, x)`` and
    ``β(λ) = (K_X + nλI)^{-1} Y``. A Cholesky factorisation (n³/3 flops) per λ is
    cheaper than the n × n eigendecomposition a λ path would share unless the path has
    more than about twenty values, and it keeps every direction of ``K_X`` (no ``rtol``
    threshold): the dense formula exactly, as scikit-learn's ``KernelRidge`` solves it.

    Attributes
    ----------
    K : ndarray of shape (n, n)
        ``K_X``.
    n : int
    """

    K: np.ndarray
    n: int

    def _shifted(self, lam: float) -> np.ndarray:
        A = _sym(self.K)
        A.flat[:: A.shape[0] + 1] += self.n * float(lam)
        return A

    def _factor(self, lam: float) -> np.ndarray:
        """Lower Cholesky factor of ``K + nλI``."""
        try:
            return cholesky(self._shifted(lam), lower=True, overwrite_a=True, check_finite=False)
        except LinAlgError:
            raise ValueError(
                f"lam: K_X + nλI is not numerically positive definite at λ = {lam:g} "
                f"(nλ = {self.n * lam:.3g} is below the rounding error of K_X); use a larger λ "
                f"or a sketched input side"
            ) from None

    def solve(self, rhs: np.ndarray, lam: float) -> np.ndarray:
        """``(K + nλI)^{-1} rhs`` of shape (n, k)."""
        return cho_solve((self._factor(lam), True), np.asarray(rhs, dtype=np.float64),
                         check_finite=False)

    def inverse(self, lam: float) -> np.ndarray:
        """``(K + nλI)^{-1}`` of shape (n, n), from the Cholesky factor (LAPACK ``potri``)."""
        inv, info = dpotri(self._factor(lam), lower=1)
        if info != 0:  # pragma: no cover - the factor exists, so potri cannot fail
            raise ValueError(f"lam: inverting K_X + nλI failed (LAPACK info {info})")
        upper = np.triu_indices_from(inv, 1)
        inv[upper] = inv.T[upper]  # potri fills the lower triangle only
        return inv


def sisokr_operator(sol: InputSolution, T_Y: np.ndarray | None, M: np.ndarray) -> np.ndarray:
    """``A = T_Yᵀ M T_X V`` (r_Y × r_X); then ``W(λ) = A diag((Λ+nλ)^{-1}) Vᵀ``.

    Exact output side (``T_Y=None``): pass ``M = C = K_X R_Xᵀ`` (n × m_X); then
    ``A = C T_X V`` acts on the output features ``k_Y(Y, y)`` directly, because
    ``k_Y(y, Y) K_Y^† K_Y = k_Y(y, Y)``.
    """
    MT = np.asarray(M, dtype=np.float64) @ sol.TV()
    return MT if T_Y is None else T_Y.T @ MT


def sisokr_coef(sol: InputSolution | ExactInputSolution, A: np.ndarray | None,
                lam: float) -> np.ndarray:
    """``W(λ)``, the map from input features to output features.

    Sketched input: ``W(λ) = A diag((Λ + nλ)^{-1}) Vᵀ`` of shape (r_Y, r_X), with ``A``
    from :func:`sisokr_operator`. Exact input (:class:`ExactInputSolution`, input features
    ``k_X(X, x)``): ``W(λ) = Aᵀ (K_X + nλI)^{-1}`` of shape (r_Y, n) with
    ``A = D T_Y = K_Y R_Yᵀ T_Y`` (n × r_Y) for a sketched output side, and
    ``W(λ) = (K_X + nλI)^{-1}`` for an exact one (``A=None``, output features ``k_Y(Y, y)``).
    """
    if isinstance(sol, ExactInputSolution):
        return sol.inverse(lam) if A is None else sol.solve(A, lam).T
    W = A * sol.shrinkage(lam)
    return W if sol.V is None else W @ sol.V.T


def krr_coef(sol: InputSolution | ExactInputSolution, b: np.ndarray, lam: float) -> np.ndarray:
    """Coefficients of ``f(x) = (R_X k_X(X, x))ᵀ β(λ)``, shape (m_X, t).

    Sketched input: ``β(λ) = T_X V (Λ + nλ)^{-1} Vᵀ T_Xᵀ b`` with ``b = R_X K_X Y``
    (Chen & Yang eq. 3). Exact input: ``β(λ) = (K_X + nλI)^{-1} Y``; pass ``b = Y``.
    """
    if isinstance(sol, ExactInputSolution):
        return sol.solve(b, lam)
    Vb = sol.TV().T @ np.asarray(b, dtype=np.float64)
    return sol.TV() @ (sol.shrinkage(lam)[:, None] * Vb)
