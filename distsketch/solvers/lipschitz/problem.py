"""What the Lipschitz-loss solvers share: the problem, its dual, the solution, the state in a store.

The problem (docs/design/lipschitz.md), in the pipeline's whitened features
``φ(x) = Tᵀ R k(X, x)`` (r of them; ``Φ = C T`` on the training rows), with d outputs, the
output matrix ``M = S²`` (``S = M^{1/2}``) and an optional intercept ``b₀``::

    P(Ξ, b₀) = (1/n) Σ_i h(S Ξᵀ φ_i + b₀ − y_i) + (λ/2) ‖Ξ‖²_F          Ξ: r × d
    f(x)     = S Ξᵀ φ(x) + b₀ = k(x, X_J) R_mixᵀ (T Ξ S) + b₀

Its Fenchel dual, with ``β_i ∈ dom h*`` (and ``Σ_i β_i = 0`` with an intercept)::

    D(β) = −(1/n) Σ_i [y_iᵀ β_i + h*(β_i)] − (1/(2λn²)) ‖Φᵀ β S‖²_F,     P ≥ D,

equal at the optimum, where ``λ n Ξ = −Φᵀ β S``. Every iterate gives a feasible ``β``: the
gradients ``α_i = ∇h_μ(r_i)`` (in ``dom h*``), centred and scaled back into the domain when
there is an intercept (``β = t(α − ᾱ)``, :meth:`~distsketch.losses.Loss.dual_scale`). The
relative gap ``(P − D)/P`` certifies the iterate: a solver stops when it is ≤ ``tol``.

Two solvers iterate on it, one sweep over the row blocks per iteration: Newton
(:mod:`distsketch.solvers.lipschitz.newton`) and ADMM (:mod:`distsketch.solvers.lipschitz.admm`).
Both import from here the :class:`Problem` (its λ-independent, m-sized data), the :class:`Solution`
of one λ, :func:`objective` and :func:`dual_values` (the certificate), and the persistence of the
iterations: :class:`SolverState` (a store group, double-buffered, with checksums — also the PCG
route's), :func:`state_key`, :func:`save_state` and :func:`finish` (the end of one λ, saved as
done). The driver state a solver persists is a plain dict of JSON values and float64 arrays; its
keys are the solver's (:class:`distsketch.solvers.lipschitz.newton.NewtonState` converts its fields
to and from them), so a store written by an earlier release resumes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..._hashing import checksum
from ...losses.base import Loss

__all__ = ["Problem", "Solution", "SolverState", "state_key", "objective", "dual_values",
           "save_state", "finish", "convergence_warning", "STATE_VERSION"]

logger = logging.getLogger(__name__)

_CONVERGENCE: type | None = None


def convergence_warning() -> type:
    """The ``ConvergenceWarning`` category: scikit-learn's when installed (so its filters
    apply), else a ``UserWarning`` subclass. Resolved on first use, so that importing
    distsketch never imports scikit-learn."""
    global _CONVERGENCE
    if _CONVERGENCE is None:
        try:
            from sklearn.exceptions import ConvergenceWarning as cls
        except ImportError:  # pragma: no cover - exercised without scikit-learn
            cls = type("ConvergenceWarning", (UserWarning,), {
                "__doc__": "The solver stopped at ``max_iter`` before reaching ``tol``.",
                "__module__": __name__})
        _CONVERGENCE = cls
    return _CONVERGENCE


def __getattr__(name: str):
    if name == "ConvergenceWarning":
        return convergence_warning()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: Format of the solver state in a store (part of its key); 2: the window of the restricted
#: polish (``nwin``); 3: the last sweep's Grams (``Q``, ``Q_Xi``, ``Q_b0``).
STATE_VERSION = 3


@dataclass(frozen=True)
class Problem:
    """λ-independent data of the problem, all m-sized.

    Attributes
    ----------
    T : ndarray (m, r)
        Whitening of ``B = R K Rᵀ`` (features ``Φ = C T``).
    S : ndarray (d, d)
        ``M^{1/2}``; ``nu``, ``U``: ``M = U diag(nu) Uᵀ``.
    Gt : ndarray (m+1, m+1)
        ``[C 1]ᵀ[C 1]`` (``G``, ``Cᵀ1``, ``n``).
    b : ndarray (m, d)
        ``Cᵀ Y`` (targets broadcast to d outputs); ``y1``: ``Σ_i y_i`` (d,).
    """

    T: np.ndarray
    S: np.ndarray
    nu: np.ndarray
    U: np.ndarray
    Gt: np.ndarray
    b: np.ndarray
    y1: np.ndarray
    n: int
    loss: Loss
    intercept: bool
    exact_curvature: bool = True

    @property
    def r(self) -> int:
        return self.T.shape[1]

    @property
    def d(self) -> int:
        return self.S.shape[0]

    def feature_gram(self) -> np.ndarray:
        """``P̃ᵀ G̃ P̃ / n`` (r+1, r+1), ``P̃ = diag(T, 1)``: the Gram of ``[φ 1]`` (cached)."""
        cached = self.__dict__.get("_feature_gram")
        if cached is None:
            m, r = self.T.shape
            cached = np.empty((r + 1, r + 1))
            TG = self.T.T @ self.Gt[:m]
            cached[:r, :r] = TG[:, :m] @ self.T
            cached[:r, r] = TG[:, m]
            cached[r, :r] = TG[:, m]
            cached[r, r] = self.Gt[m, m]
            cached /= self.n
            object.__setattr__(self, "_feature_gram", cached)  # a cache, not state
        return cached

    def coef(self, Xi: np.ndarray) -> np.ndarray:
        """``A = T Ξ S`` (m, d): predictions ``C A + b₀`` on the training rows."""
        return self.T @ Xi @ self.S

    def with_rows(self, *, G: np.ndarray, s: np.ndarray, b: np.ndarray, y1: np.ndarray,
                  n: int) -> Problem:
        """This problem over its rows and ``n`` more, from their sums (same ``T``, ``S``,
        loss): ``G = C_newᵀ C_new`` (m, m), ``s = C_newᵀ 1`` (m,), ``b = C_newᵀ Y_new``
        (m, d, or (m, 1) broadcast to d outputs), ``y1 = Σ y`` (d or 1,), added to ``G̃``,
        ``b``, ``Σy`` and ``n``::

            G̃ ← G̃ + [G s; sᵀ n],   b ← b + b_new,   Σy ← Σy + y1_new,   n ← n + n_new
        """
        m, d = self.b.shape
        add = np.empty((m + 1, m + 1))
        add[:m, :m], add[:m, m], add[m, :m], add[m, m] = G, s, s, n
        b = np.broadcast_to(np.asarray(b, dtype=np.float64).reshape(m, -1), (m, d))
        y1 = np.broadcast_to(np.asarray(y1, dtype=np.float64).reshape(-1), (d,))
        return dataclasses.replace(self, Gt=self.Gt + add, b=self.b + b, y1=self.y1 + y1,
                                   n=self.n + int(n))


@dataclass
class Solution:
    """The solution for one λ (and how it was reached)."""

    lam: float
    Xi: np.ndarray
    b0: np.ndarray
    objective: float
    gap: float
    n_iter: int
    converged: bool
    history: list = field(default_factory=list)

    @classmethod
    def from_state(cls, lam: float, st: dict) -> "Solution":
        """The solution a finished solver state (``done``, see :func:`finish`) holds."""
        return cls(lam, st["Xi"], st["b0"], st["objective"], st["gap"], st["n_iter"],
                   st["converged"], st.get("history", []))


# --------------------------------------------------------------------------- objective, dual


def objective(prob: Problem, lam: float, loss_sum: float, Xi: np.ndarray) -> float:
    """``P = (1/n) Σ_i h(r_i) + (λ/2)‖Ξ‖²_F`` from a sweep's loss sum ``Σ_i h(r_i)``."""
    return float(loss_sum) / prob.n + 0.5 * lam * float(np.sum(Xi * Xi))


def dual_values(prob: Problem, lam: float, stats: dict, mu: float) -> tuple[float, float]:
    """``(D_μ, D)``: the smoothed and the true dual at the sweep's gradients (see module)."""
    n, d = prob.n, prob.d
    loss = prob.loss
    if prob.intercept:
        c = stats["sa"] / n
        t = np.broadcast_to(np.asarray(loss.dual_scale(c), dtype=np.float64), (d,))
    else:
        c = np.zeros(d)
        t = np.ones(d)
    m = prob.T.shape[0]
    CtB = (stats["Ca"] - np.outer(prob.Gt[:m, m], c)) * t  # Cᵀβ, with Cᵀ1 from the pass
    Z = prob.T.T @ CtB @ prob.S
    quad = float(np.sum(Z * Z)) / (2.0 * lam * n * n)
    ytb = float(np.sum(t * (stats["ya"] - c * prob.y1)))
    scale = float(t[0]) if np.all(t == t[0]) else t
    conj_mu = loss.conjugate_sum(stats, scale, c, n, mu)
    conj = loss.conjugate_sum(stats, scale, c, n, 0.0) if mu else conj_mu
    return (-ytb - conj_mu) / n - quad, (-ytb - conj) / n - quad


# --------------------------------------------------------------------------- state in the store


class SolverState:
    """The iterations' state in a store group (``solver/<key>``), double-buffered: arrays go
    to the slot not in use, then the attributes (with the arrays' checksums) switch to it.

    The state is a dict: the names in ``ARRAYS`` are float64 arrays (or None), stored as
    arrays of the group; every other entry is a JSON value, stored in the attribute
    ``state`` with the slot and the arrays' checksums. Subclasses name their own ``ARRAYS``.
    """

    ARRAYS = ("Xi", "b0", "dXi", "db0", "fix_C", "fix_col", "fix_y", "fix_beta", "best_Xi",
              "best_b0", "Q", "Q_Xi", "Q_b0")

    def __init__(self, group: Any) -> None:
        self.group = group

    def load(self) -> dict | None:
        if self.group is None:
            return None
        meta = self.group.attrs.get("state")
        if not isinstance(meta, dict):
            return None
        slot = meta["slot"]
        out = dict(meta)
        try:
            for name in self.ARRAYS:
                key = f"{name}_{slot}"
                if meta["checksums"].get(name) is None:
                    out[name] = None
                    continue
                arr = np.asarray(self.group[key][...])
                if checksum(arr) != meta["checksums"][name]:
                    raise ValueError(f"{key} fails its checksum")
                out[name] = arr
        except Exception as exc:
            logger.warning("solver state in the store is damaged (%s); starting the iterations "
                           "for this λ again", exc)
            return None
        return out

    def save(self, state: dict) -> None:
        if self.group is None:
            return
        old = self.group.attrs.get("state")
        slot = 1 - old["slot"] if isinstance(old, dict) else 0
        sums = {}
        for name in self.ARRAYS:
            value = state.get(name)
            if value is None:
                sums[name] = None
                continue
            arr = np.asarray(value, dtype=np.float64)
            self.group.create_array(f"{name}_{slot}", data=arr, overwrite=True)
            sums[name] = checksum(arr)
        meta = {k: v for k, v in state.items() if k not in self.ARRAYS}
        meta.update(slot=slot, checksums=sums)
        self.group.attrs["state"] = meta


def state_key(config: dict) -> str:
    """Key of a solver state: a hash of everything that determines the iterations."""
    text = json.dumps({**config, "version": STATE_VERSION}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def save_state(state: SolverState | None, v: dict) -> None:
    """Save the driver state ``v`` of an unfinished λ (``done: False``); no-op without a store."""
    if state is not None:
        state.save({**v, "done": False})


def finish(prob: Problem, lam: float, v: dict, tol: float, state: SolverState | None, result: Any,
           why: str | None = None) -> Solution:
    """The solution of this λ (saved as done) from the driver state ``v`` (a dict with
    ``Xi``, ``b0``, ``n_iter``, ``history`` and, when recorded, the best certified point
    ``best_rel``, ``best_p``, ``best_Xi``, ``best_b0``); ``result``: ``(objective, gap,
    converged)``, or None when stopped without a fresh gap: then the best certified point of
    the iterations (the lowest relative gap) is returned, or the last one, with a
    ``ConvergenceWarning`` when its gap is above ``tol`` (``why``: the reason, e.g. ``max_iter``).
    Called by a solver's ``solve_lam`` itself (the warning's stack level)."""
    if result is None:
        if v["history"]:
            _, p_true, rel, _ = v["history"][-1]
        else:
            p_true, rel = float("nan"), float("inf")
        if v.get("best_Xi") is not None and v["best_rel"] < rel:
            # the continuation can move past its best point (μ shrunk below what float64
            # certifies): the best one the iterations certified is the answer
            v["Xi"], v["b0"] = v["best_Xi"], v["best_b0"]
            p_true, rel = v["best_p"], v["best_rel"]
        result = (p_true, rel * abs(p_true), rel <= tol)
        if rel > tol:
            reason = (f"stopped at {why}" if why else "no further decrease is possible in "
                      "float64")
            warnings.warn(f"{prob.loss.name} loss, λ = {lam:g}: {reason} with relative duality "
                          f"gap {rel:.3g} > tol = {tol:g}"
                          + ("; increase max_iter or tol" if why else ""),
                          convergence_warning(), stacklevel=4)
    p_true, gap, converged = result
    sol = Solution(lam, v["Xi"], v["b0"], float(p_true), float(gap), int(v["n_iter"]),
                   bool(converged), v["history"])
    if state is not None:
        state.save({**v, "dXi": None, "db0": None, "mode": None, "done": True,
                    "objective": float(p_true), "gap": float(gap), "converged": bool(converged)})
    return sol
