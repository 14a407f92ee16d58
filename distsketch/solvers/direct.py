"""Direct route: every λ's closed form from the input side's factors, and the assembly of a
model from the pass's sums.

The SISOKR family's ``W(λ)`` (:func:`sisokr_operator`, :func:`sisokr_coef`) and sketched KRR's
``β(λ)`` (:func:`krr_coef`) in the input features of :func:`input_basis`: in the eigenbasis of
``H`` (a λ only rescales coordinates) or by a Cholesky factorisation per λ, the route a λ path
takes by its length (:data:`EIGEN_PATH_LENGTH`, :func:`eigen_pays`); which sums each model
needs from the pass and how it is assembled from them (:func:`solve_sisokr`,
:func:`solve_krr`, :func:`solve_features`); estimators call one of them. The glossary, the
formulas and their normalisation are :mod:`distsketch.linalg.solve`'s (docs/design/math.md,
"Driver solve"). numpy and scipy only, no dask.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np

from ..backends.base import dense
from ..linalg.solve import InputSolution, solve_input, solve_input_exact, whitening
from ..tuning import check_tuning

__all__ = [
    "EIGEN_PATH_LENGTH", "eigen_pays", "input_basis", "sisokr_operator", "sisokr_coef",
    "krr_coef", "sisokr_sums", "krr_sums", "feature_sums", "solve_input_side", "SisokrSolution",
    "solve_sisokr", "solve_krr", "solve_features",
]


# An exact input side (H = K_X) factors H + nλI by Cholesky per λ: r³/3 flops against the
# ~9r³ of a symmetric eigendecomposition with vectors, and K_X itself carries only rounding
# error. A λ path longer than this shares one eigendecomposition instead.
EIGEN_PATH_LENGTH = 8


# Path length from which one eigendecomposition beats a Cholesky factorisation per λ on a
# sketched input side, by the r of H: EngineOptions.tuning.eigen_crossover (distsketch.Tuning,
# where its measurements are: `python benchmarks/bench_bibtex.py --driver-crossover`,
# docs/design/math.md, "Driver routes"). The eigen route costs a generalized symmetric
# eigendecomposition (scipy eigh(H, metric)) and one product Vᵀ R, then O(r·r_Y) per λ; the
# Cholesky route one safety factorisation, then per λ a factorisation and its solve with r_Y
# right-hand sides (one right-hand side, KRR, moves the crossover up 1.2–3.5×). Interpolated
# between the sizes, the end values beyond them.


def eigen_pays(n_lams: int, r: int, *, tuning=None) -> bool:
    """Whether a sketched input side of ``r`` features solves ``n_lams`` values of λ faster
    from one eigendecomposition than by a Cholesky factorisation per λ (the measured crossover
    ``tuning.eigen_crossover``; ``tuning``: the fit's ``options.tuning``, None: the
    defaults)."""
    sizes, lengths = zip(*check_tuning(tuning).eigen_crossover)
    return n_lams > float(np.interp(r, sizes, lengths))


def input_basis(sol: InputSolution) -> np.ndarray | None:
    """The map from sketch coordinates to the input features the model uses.

    Eigen route: the eigenbasis of ``H``, ``T_X V`` (sketched) or ``V`` (exact input), so
    that every λ only rescales coordinates (``diag((Λ + nλ)^{-1})``). Cholesky route (exact
    input): ``None``, the features are ``k_X(X, x)`` themselves.
    """
    if sol.V is None:
        return None if sol.exact else sol.T
    if sol.support is not None:  # T = E_keep: the rows keep of V placed, no 2 m r² product
        P = np.zeros((sol.T.shape[0], sol.V.shape[1]))
        P[sol.support] = sol.V
        return P
    return sol.V if sol.exact else sol.T @ sol.V


def sisokr_operator(sol: InputSolution, T_Y: np.ndarray | None, M: np.ndarray | None,
                    D: np.ndarray | None = None) -> np.ndarray | None:
    """``R`` (r_X × r_Y) with ``W(λ)ᵀ = (H + nλI)^{-1} R`` in the input features of
    :func:`input_basis`, see :func:`sisokr_coef`.

    In the coordinates ``φ_X(x) = T_Xᵀ R_X k_X(X, x)`` (``k_X(X, x)`` for an exact input):

    - sketched input, sketched output: ``R = T_Xᵀ Mᵀ T_Y`` (``M = DᵀC``);
    - sketched input, exact output (``T_Y=None``): pass ``M = C = K_X R_Xᵀ`` (n × m_X);
      ``R = T_Xᵀ Cᵀ`` acts on the output features ``k_Y(Y, y)`` directly, because
      ``k_Y(y, Y) K_Y^† K_Y = k_Y(y, Y)``;
    - exact input, sketched output: pass ``D = K_Y R_Yᵀ`` (n × m_Y); ``R = D T_Y``;
    - exact input, exact output: ``R = I_n`` (returned as ``None`` on the Cholesky route).

    On the eigen route the result is ``Vᵀ R``, in the eigenbasis of ``H``.
    """
    if sol.exact:
        R = None if T_Y is None else np.asarray(D, dtype=np.float64) @ T_Y
    else:
        M = np.asarray(M, dtype=np.float64)
        # (r_Y or n) × r_X; the generalized form's T selects columns
        MT = M[:, sol.support] if sol.support is not None else M @ sol.T
        R = (MT if T_Y is None else T_Y.T @ MT).T
    if sol.V is None:
        return R
    return sol.V.T.copy() if R is None else sol.V.T @ R


def sisokr_coef(sol: InputSolution, R: np.ndarray | None, lam: float) -> np.ndarray:
    """``W(λ)`` of shape (r_Y, r_X), ``R`` from :func:`sisokr_operator`.

    Eigen route: ``W(λ) = (diag((Λ + nλ)^{-1}) R)ᵀ``, O(r_X r_Y) per λ. Cholesky route:
    ``W(λ) = ((K_X + nλI)^{-1} R)ᵀ``, i.e. ``(D T_Y)ᵀ (K_X + nλI)^{-1}`` with a sketched
    output side and IOKR's ``(K_X + nλI)^{-1}`` when both sides are exact. Both equal
    Prop. 1's ``(T_Yᵀ M T_X)(H + nλI)^{-1}`` in their feature coordinates.
    """
    if sol.V is not None:
        return (R / (sol.evals + sol.n * float(lam))[:, None]).T
    return sol.inverse(lam) if R is None else sol.solve(R, lam).T


def krr_coef(sol: InputSolution, b: np.ndarray, lam: float) -> np.ndarray:
    """Coefficients of ``f(x) = (R_X k_X(X, x))ᵀ β(λ)``, shape (m_X, t).

    Sketched input: ``β(λ) = T_X (H + nλI)^{-1} T_Xᵀ b`` with ``b = R_X K_X Y``
    (Chen & Yang eq. 3); in the generalized form ``β(λ) = E_keep (G_kk + nλ B_kk)^{-1} b_keep``.
    Exact input: ``β(λ) = (K_X + nλI)^{-1} Y``; pass ``b = Y``.
    """
    b = np.asarray(b, dtype=np.float64)
    basis = input_basis(sol)
    if sol.V is not None:
        return basis @ ((basis.T @ b) / (sol.evals + sol.n * float(lam))[:, None])
    if sol.exact:  # Cholesky route
        return sol.solve(b, lam)
    if sol.support is not None:  # T = E_keep: select and scatter
        beta = np.zeros((sol.T.shape[0],) + b.shape[1:])
        beta[sol.support] = sol.solve(b[sol.support], lam)
        return beta
    return sol.T @ sol.solve(sol.T.T @ b, lam)


# --------------------------------------------------------------------------- assembly
# What each model needs from the pass (names of distsketch.engine.sums.SUM_TERMS) and how it is
# assembled from those sums. ``x_exact`` / ``y_exact``: the side's sketch is the identity.


def sisokr_sums(*, x_exact: bool, y_exact: bool, linear_output: bool) -> tuple[str, ...]:
    """Sums of the SISOKR family: ``G, B`` (sketched input) or ``C`` (exact input, ``H = K_X``);
    ``M, E`` (sketched output; ``D, E`` with an exact input, which takes ``D`` itself) or ``C``
    (exact output: ``k_Y(y, Y) K_Y^† K_Y = k_Y(y, Y)``, so the model needs ``C``); ``U``
    (unique training outputs, the default candidates) unless the output kernel is linear."""
    sums = ["C"] if x_exact else ["G", "B"]
    if y_exact:
        if "C" not in sums:
            sums.append("C")
    else:
        sums += ["D", "E"] if x_exact else ["M", "E"]
    if not linear_output:
        sums.append("U")
    return tuple(sums)


def krr_sums(*, x_exact: bool) -> tuple[str, ...]:
    """Sums of sketched KRR: ``G, B, b`` (sketched), or ``C, Y`` (exact: ``(K + nλI)^{-1} Y``)."""
    return ("C", "Y") if x_exact else ("G", "B", "b")


def feature_sums(*, x_exact: bool) -> tuple[str, ...]:
    """Sums of the whitened features: ``B = R K Rᵀ`` alone (``C = K`` when exact)."""
    return ("C",) if x_exact else ("B",)


def solve_input_side(sums: dict, *, exact: bool, n: int, rtol: float, n_lams: int,
                     argument: str = "input_kernel", eigen: bool = False,
                     tuning=None) -> InputSolution:
    """The λ-independent input solution from the pass's sums.

    Exact: ``H + nλI`` factored per λ unless the λ path is longer than
    :data:`EIGEN_PATH_LENGTH`. Sketched: the generalized form where ``B`` is certified (else
    the whitened ``H``), factored per λ behind the safety test, unless the path is long
    enough that one eigendecomposition pays off (:func:`eigen_pays`); this module's notes
    explain both. ``eigen``: the eigen route whatever the path (callers that need the
    eigenbasis). ``tuning``: the fit's ``options.tuning`` (its ``eigen_crossover``; None: the
    defaults).
    """
    if exact:  # H = K_X = C itself
        sol = solve_input_exact(sums["C"], n=n, argument=argument)
        return sol.with_eigen() if eigen or n_lams > EIGEN_PATH_LENGTH else sol
    sol = solve_input(sums["G"], sums["B"], n=n, rtol=rtol, argument=argument)
    pays = eigen_pays(n_lams, sol.H.shape[0], tuning=tuning)
    return sol.with_eigen() if eigen or pays else sol


@dataclass(frozen=True)
class SisokrSolution:
    """Everything λ-independent of a SISOKR-family model (``W(λ)`` from :func:`sisokr_coef`).

    Attributes
    ----------
    input : InputSolution
    input_projection : ndarray of shape (s'_X, r_X) or None
        ``R_Xmixᵀ (T_X V)`` (sketched), ``V`` (exact input, eigen route) or None (exact input,
        Cholesky route: the features are ``k_X(X, x)`` themselves).
    output_whitening : ndarray of shape (m_Y, r_Y) or None
        ``T_Y``; None for an exact output side.
    output_projection : ndarray of shape (s'_Y, r_Y) or None
        ``R_Ymixᵀ T_Y``; None for an exact output side (features ``k_Y(Y, y)``).
    operator : ndarray or None
        See :func:`sisokr_operator`.
    output_map : ndarray of shape (r_Y, d_Y) or None
        Linear output kernel: ``h(x) = output_mapᵀ W φ_X(x)`` (``ψ(y) = y``).
    """

    input: InputSolution
    input_projection: np.ndarray | None
    output_whitening: np.ndarray | None
    output_projection: np.ndarray | None
    operator: np.ndarray | None
    output_map: np.ndarray | None = None


def solve_sisokr(sums: dict, x_sketch, y_sketch, y_landmarks, *, n: int, rtol: float,
                 n_lams: int, linear_output: bool, eigen: bool = False,
                 threads=None, tuning=None) -> SisokrSolution:
    """Assemble a SISOKR-family model (docs/design/math.md, "Driver solve") from the pass's sums.

    ``x_sketch``, ``y_sketch``: the realised sketches (``transpose_dot`` maps sketch
    coordinates to landmark columns); ``y_landmarks``: the output landmarks (a linear output
    kernel's ``output_map`` is ``(R_Ymixᵀ T_Y)ᵀ Y_J``). ``eigen``: the input side's eigen
    route whatever the λ path (:func:`solve_input_side`). ``threads``: a function of a
    factorisation's order giving the BLAS-thread context it runs in (the estimators pass
    :func:`distsketch.options.driver_threads`); the output side's whitening, of order
    ``m_Y``, takes its own instead of the input side's. ``tuning``: the fit's
    ``options.tuning`` (:func:`solve_input_side`; None: the defaults).
    """
    if threads is None:
        def threads(size: int):
            return contextlib.nullcontext()
    sol = solve_input_side(sums, exact=x_sketch.is_identity, n=n, rtol=rtol, n_lams=n_lams,
                           eigen=eigen, tuning=tuning)
    # input features: (T_X V)ᵀ R_X k_X(X, x) in the eigenbasis of H, T_Xᵀ R_X k_X(X, x) on
    # the Cholesky route ((R_X k_X(X, x))_keep in the generalized form), or k_X(X, x) itself
    # (exact input side, Cholesky route)
    basis = input_basis(sol)
    input_projection = None if basis is None else x_sketch.transpose_dot(basis)
    if y_sketch.is_identity:  # exact output: raw features k_Y(Y, y)
        T_Y = output_projection = None
        operator = sisokr_operator(sol, None, sums.get("C"))
    else:
        with threads(sums["E"].shape[0]):
            T_Y = whitening(sums["E"], rtol=rtol, argument="output_kernel")
        operator = sisokr_operator(sol, T_Y, sums.get("M"), sums.get("D"))
        output_projection = y_sketch.transpose_dot(T_Y)
    output_map = None
    if linear_output:
        L_Y = dense(y_landmarks)
        output_map = L_Y if output_projection is None else output_projection.T @ L_Y
    return SisokrSolution(sol, input_projection, T_Y, output_projection, operator, output_map)


def solve_krr(sums: dict, x_sketch, *, n: int, rtol: float, n_lams: int, tuning=None
              ) -> tuple[InputSolution, np.ndarray]:
    """Sketched KRR's input solution and right-hand side: ``b = R_X K_X Y`` (sketched) or
    ``Y`` itself (exact), for :func:`krr_coef`; ``tuning``: the fit's ``options.tuning``
    (:func:`solve_input_side`; None: the defaults)."""
    sol = solve_input_side(sums, exact=x_sketch.is_identity, n=n, rtol=rtol, n_lams=n_lams,
                           argument="kernel", tuning=tuning)
    return sol, (sums["Y"] if "Y" in sums else sums["b"])


def solve_features(sums: dict, x_sketch, *, rtol: float) -> tuple[np.ndarray, np.ndarray]:
    """Whitened features ``φ(x) = T_Xᵀ R_X k(X, x)``: ``(T_X, R_Xmixᵀ T_X)``.

    ``T_X`` whitens ``B = R_X K R_Xᵀ`` (``K`` itself for an exact side), so the Gram matrix of
    the features on the training rows is ``K R_Xᵀ B^† R_X K``, the sketched kernel.
    """
    B = sums["C"] if x_sketch.is_identity else sums["B"]
    T = whitening(B, rtol=rtol, argument="kernel")  # refuses non-finite sums, naming the kernel
    return T, x_sketch.transpose_dot(T)
