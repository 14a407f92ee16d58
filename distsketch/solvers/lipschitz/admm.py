"""ADMM route of the Lipschitz-loss machines (``SketchedRegressor(solver="admm")``), for large r.

The problem is the Newton route's (:mod:`distsketch.solvers.lipschitz.problem`;
docs/design/lipschitz.md, "ADMM route"), in the whitened features ``φ`` (``Φ = C T``, r of them),
``S = M^{1/2}``::

    P(Ξ, b₀) = (1/n) Σ_i h(z_i − y_i) + (λ/2) ‖Ξ‖²_F   s.t.   z_i = S Ξᵀ φ_i + b₀

with the augmented term ``(ρ/(2n)) ‖Φ Ξ S + 1 b₀ᵀ − Z + U‖²_F`` (scaled dual ``U``, n × d).
One iteration, at ``x^k = (Ξ^k, b₀^k)`` with ``F^k = Φ Ξ^k S + 1 b₀^kᵀ``:

    z-update   z_i ← y_i + prox_{h/ρ}(F_i + u_i − y_i)                 row by row (Loss.prox)
    u-update   u_i ← u_i + F_i − z_i
    x-update   (λ I + ρ ν_j H_c/n) ξ'_j = ρ √ν_j Φ_cᵀ v'_j / n,  v = Z − U,     b₀ = v̄ − S Ξᵀ φ̄

where ``H_c = Φᵀ(I − 11ᵀ/n)Φ = n·V Λ Vᵀ`` (``ΦᵀΦ`` without an intercept) is eigendecomposed
once per fit from the pass's sums, ``M = U diag(ν) Uᵀ`` and ``ξ'_j``, ``v'_j`` are the columns
of ``Ξ U`` and ``V U``: the x-update costs ``O(r² d)`` on the driver for any ρ. The n-sized
``Z`` and ``U`` live with the row blocks — in the fit store (``z_g``, ``u_g`` next to the
solver state, chunked like ``C``) or, without a store, in memory beside the held blocks —
and each iteration is ONE block map-reduce (:class:`~distsketch.engine.sweep.Sweeper` with
:func:`admm_block`) that applies the z- and u-updates to a block at the iterate and returns
the partial sums the next x-update and the certificate need: ``Cᵀz``, ``Cᵀu``, the loss at
``F^k``, the dual points' sums and the residual norms.

Certificate: ``α = ρ u`` lies in ``∂h(z − y)`` (the z-update's optimality), projected onto
``dom h*`` against rounding; the dual ``D`` of
:func:`~distsketch.solvers.lipschitz.problem.dual_values` at it and at the gradients
``∇h(F^k − y)`` (both feasible: the larger is kept) bounds ``P(x^k) − P*``.
The fit stops when ``(P − D)/P ≤ tol``, like the Newton route. ρ adapts by residual balancing
(Boyd et al. 2011, §3.4.1): ×2 when the primal residual ``‖F − Z‖/√n`` exceeds 10× the dual
one ``ρ‖Aᵀ(Z − Z_old)‖/n`` (``AᵀX = [ΦᵀX S; 1ᵀX]``), ÷2 in the opposite case, during the first
:data:`ADAPT_ITERS` iterations (a deterministic rule of the reduced sums; ``U`` is rescaled by
``ρ_old/ρ_new`` in the next sweep). Over-relaxation (:data:`RELAX`) for ε and pinball.

Resume: the blocks' ``Z, U`` are double-buffered by iteration parity (sweep k reads generation
``(k − 1) % 2`` and writes ``k % 2``); the driver state (``Ξ, b₀``, ρ, the rescale, counters) is
written to the solver state only after every block of an iteration is written, so a fit
killed mid-iteration restarts that iteration from the last complete generation and ends with
the bitwise identical model. Each stored generation carries checksums of its blocks and the
driver state that continues from it (:class:`RowState`): a resume uses only a generation
that verifies — the newer one, else the older one, else ADMM restarts from its warm start —
so damaged rows never reach the model.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..._hashing import checksum
from ...backends.base import dense
from ...engine.sweep import block_C
from ...losses.base import Loss
from ...tuning import check_tuning
from .direction import warm_start
from .problem import (
    Problem,
    Solution,
    convergence_warning,
    dual_values,
    finish,
    objective,
    save_state,
)

if TYPE_CHECKING:
    from ...engine.mapreduce import Workspace
    from ...tuning import Tuning
    from .problem import SolverState

__all__ = ["AdmmIterate", "RowState", "solve_lam", "solve_path", "choose_route", "supports",
           "admm_block"]

logger = logging.getLogger(__name__)

#: ``solver="auto"`` takes ADMM from ``EngineOptions.tuning.auto_rank`` whitened features on
#: (:class:`~distsketch.Tuning`, 4000 by default, where its reasoning is; :func:`choose_route`).
#: The tests' and the regressor benchmarks' sizes (m ≤ 1000) keep Newton.
#: Initial penalty ρ (the losses' curvature/Lipschitz scale is 1 in units of the targets).
RHO0 = 1.0
#: Residual balancing: change ρ by RHO_FACTOR when one residual exceeds RHO_RATIO times the
#: other (see solve_lam); only during the first ADAPT_ITERS iterations (then ρ is fixed, which
#: keeps ADMM's convergence guarantee).
RHO_FACTOR, RHO_RATIO, ADAPT_ITERS = 2.0, 10.0, 500
#: Bounds of ρ (relative to RHO0): residual balancing never leaves them.
RHO_MIN, RHO_MAX = 1e-8, 1e8
#: Over-relaxation ``F̂ = a F + (1 − a) z_old`` in the z- and u-updates (Boyd et al. §3.4.3):
#: ``a`` for the piecewise-linear losses (ε-insensitive, pinball; n = 200, m = 30, tol 1e-8:
#: 282–409 iterations instead of 448–604) and 1 for squared and Huber (κ-Huber, d = 3: 65
#: iterations at a = 1, 483 at a = 1.6).
RELAX = 1.6


def supports(loss: Loss) -> bool:
    """Whether ``loss`` has what the ADMM route needs: a proximal operator
    (:attr:`~distsketch.losses.Loss.has_prox`) and a projection onto a known ``dom h*``
    (:attr:`~distsketch.losses.Loss.projects_dual`): the radial losses and pinball."""
    return bool(loss.projects_dual and loss.has_prox)


def choose_route(solver: str, r: int, *, tuning: Tuning | None = None) -> str:
    """``"newton"`` or ``"admm"`` for ``solver`` (``"auto"``: ADMM when
    ``r ≥ tuning.auto_rank``; ``tuning``: the fit's ``options.tuning``, None: the defaults)."""
    if solver == "auto":
        return "admm" if r >= check_tuning(tuning).auto_rank else "newton"
    return solver


# --------------------------------------------------------------------------- per-block rows


class RowState:
    """The per-row ADMM variables ``Z``, ``U`` (n × d each), two generations (iteration
    parity): zarr arrays in a fit store's solver group (chunks = row blocks), or numpy arrays
    held in memory (a fit without a store on the local scheduler). Each block reads and
    writes only its own rows.

    In a store, each generation has a record (group attribute ``rows_<g>``), written by the
    driver after every block of the sweep wrote its rows: the iteration whose ``Z, U`` the
    generation holds, the CRC-32 (:func:`~distsketch._hashing.checksum`) of each block's ``z``
    and ``u`` as the blocks wrote them, and the driver state the next sweep starts from (``Ξ``,
    ``b₀`` in the arrays ``x_Xi_<g>``, ``x_b0_<g>``, with their checksums; ρ, the ``U``
    rescale). A generation is used on a resume only when its record is complete and every
    block matches it (:meth:`resume`); the sweeps check each block they read against it too.
    """

    def __init__(self, arrays: dict, group: Any = None, block_rows: int | None = None) -> None:
        self.arrays = arrays  # {"z_0", "z_1", "u_0", "u_1"}
        self.group = group  # the driver's handle on the solver group (None: in memory)
        self.stored = group is not None
        self.block_rows = block_rows
        self.crcs: dict[int, tuple] = {}  # generation -> (z checksums, u checksums) per block

    def __getstate__(self) -> dict:
        # the blocks need the arrays only: the group and the records stay on the driver
        return {**self.__dict__, "group": None, "crcs": {}}

    @classmethod
    def in_memory(cls, n: int, d: int) -> "RowState":
        return cls({f"{k}_{g}": np.zeros((n, d)) for k in ("z", "u") for g in (0, 1)})

    @classmethod
    def in_group(cls, group: Any, n: int, d: int, block_rows: int, *, fresh: bool) -> RowState:
        """Arrays ``z_0, z_1, u_0, u_1`` in ``group`` (created when absent or when ``fresh``;
        kept as they are on a resume). Creating one drops both generations' records."""
        arrays, created = {}, False
        for name in ("z_0", "z_1", "u_0", "u_1"):
            arr = group.get(name) if not fresh else None
            if arr is None or tuple(arr.shape) != (n, d) or tuple(arr.chunks) != (block_rows, d):
                arr = group.create_array(name, shape=(n, d), chunks=(block_rows, d),
                                         dtype="float64", fill_value=0.0, overwrite=True)
                created = True
            arrays[name] = arr
        if created:
            group.attrs.update({"rows_0": None, "rows_1": None})
        return cls(arrays, group, block_rows)

    def read(self, gen: int, s: int, e: int) -> tuple[np.ndarray, np.ndarray]:
        return (np.asarray(self.arrays[f"z_{gen}"][s:e], dtype=np.float64),
                np.asarray(self.arrays[f"u_{gen}"][s:e], dtype=np.float64))

    def write(self, gen: int, s: int, e: int, z: np.ndarray, u: np.ndarray) -> None:
        self.arrays[f"z_{gen}"][s:e] = z
        self.arrays[f"u_{gen}"][s:e] = u

    # -- records (driver side) ----------------------------------------------------------
    def commit(self, gen: int, iteration: int, sums: dict, v: dict) -> None:
        """Record generation ``gen`` as holding iteration ``iteration``'s ``Z, U`` (the
        blocks' checksums from the sweep's sums ``crc_z``, ``crc_u``) and ``v``, the driver
        state after it. Called after the sweep, before the solver state is saved."""
        if not self.stored:
            return
        crcs = tuple(tuple(int(c) for c in np.asarray(sums[key])) for key in ("crc_z", "crc_u"))
        self.crcs[gen] = crcs
        record = {"iteration": int(iteration), "z": list(crcs[0]), "u": list(crcs[1]),
                  "rho": float(v["rho"]), "u_scale": float(v["u_scale"])}
        for name in ("Xi", "b0"):
            arr = np.ascontiguousarray(v[name], dtype=np.float64)
            self.group.create_array(f"x_{name}_{gen}", data=arr, overwrite=True)
            record[name] = checksum(arr)
        self.group.attrs[f"rows_{gen}"] = record  # last: a killed commit leaves no record

    def expected(self, gen: int) -> Any:
        """The checksums the blocks' rows of generation ``gen`` must match (None: in memory
        or not recorded)."""
        return self.crcs.get(gen) if self.stored else None

    def resume(self, st: dict, n: int, shape: tuple) -> dict | None:
        """The driver state to continue the iterations of the solver state ``st`` from: that
        of the newest generation (not newer than ``st``) whose record is complete and whose
        blocks and iterate all match their checksums; None when neither does. Each generation
        not used is named in a logged warning."""
        n_blocks = -(-n // self.block_rows)
        n_iter, history = int(st["n_iter"]), list(st.get("history") or [])
        found = []
        for g in (0, 1):
            try:
                rec = self.group.attrs.get(f"rows_{g}")
            except Exception as exc:  # unreadable attributes
                rec, why = None, f"its record cannot be read ({exc})"
            else:
                why = _record_problem(rec, g, n_blocks, n_iter, len(history))
            if why is None:
                found.append((rec["iteration"], g, rec))
            elif why.endswith("newer than the solver state"):
                # a fit killed between a generation's record and its solver state: honest
                logger.info("ADMM rows, generation %d: %s; not used", g, why)
            elif rec is not None or g == (n_iter - 1) % 2:
                logger.warning("ADMM rows, generation %d: %s; not used", g, why)
        for iteration, g, rec in sorted(found, reverse=True):
            why = self._verify(g, rec, n, shape)
            if why is not None:
                logger.warning("ADMM rows, generation %d (iteration %d): %s; not used", g,
                               iteration + 1, why)
                continue
            if iteration + 1 != n_iter:
                logger.warning("ADMM: resuming from the older generation %d (iteration %d "
                               "instead of %d)", g, iteration + 1, n_iter)
            self.crcs[g] = (tuple(rec["z"]), tuple(rec["u"]))
            Xi = np.asarray(self.group[f"x_Xi_{g}"][...], dtype=np.float64)
            b0 = np.asarray(self.group[f"x_b0_{g}"][...], dtype=np.float64)
            return {"Xi": Xi, "b0": b0, "route": "admm", "rho": float(rec["rho"]),
                    "u_scale": float(rec["u_scale"]), "n_iter": iteration + 1,
                    "history": history[:iteration + 1], "mu": 0.0}
        return None

    def _verify(self, g: int, rec: dict, n: int, shape: tuple) -> str | None:
        """Why generation ``g`` does not match its record ``rec`` (None: it does)."""
        try:
            for name, want in (("Xi", tuple(shape)), ("b0", (shape[1],))):
                arr = np.asarray(self.group[f"x_{name}_{g}"][...])
                if arr.shape != want or arr.dtype != np.float64 or checksum(arr) != rec[name]:
                    return f"its stored {name} fails its checksum"
            for b, (cz, cu) in enumerate(zip(rec["z"], rec["u"])):
                s, e = b * self.block_rows, min(n, (b + 1) * self.block_rows)
                z, u = self.read(g, s, e)
                for key, arr, want in (("z", z, cz), ("u", u, cu)):
                    if checksum(arr) != want:
                        return f"block {b} (rows {s}–{e - 1}) of {key} fails its checksum"
        except Exception as exc:  # a chunk that cannot be read or decoded
            return f"cannot be read ({type(exc).__name__}: {exc})"
        return None


def _record_problem(rec, g: int, n_blocks: int, n_iter: int, n_history: int) -> str | None:
    """Why ``rec`` is not a complete record of generation ``g`` usable by a resume at
    ``n_iter`` completed iterations (None: it is)."""
    if rec is None:
        return "no record (not written completely)"
    if not isinstance(rec, dict):
        return "its record is damaged"
    it = rec.get("iteration")
    if not isinstance(it, int) or it < 0 or it % 2 != g:
        return "its record names no iteration of this generation"
    if it + 1 > min(n_iter, n_history):
        return f"its record (iteration {it + 1}) is newer than the solver state"
    for key in ("z", "u"):
        crcs = rec.get(key)
        if (not isinstance(crcs, list) or len(crcs) != n_blocks
                or not all(isinstance(c, int) and c > 0 for c in crcs)):
            return f"its record of the {key} checksums is incomplete"
    for key in ("Xi", "b0"):
        if not isinstance(rec.get(key), int) or rec[key] <= 0:
            return f"its record of the {key} checksum is incomplete"
    for key in ("rho", "u_scale"):
        if not isinstance(rec.get(key), (int, float)) or not rec[key] > 0:
            return f"its record of {key} is incomplete"
    return None


@dataclass(frozen=True)
class AdmmIterate:
    """What an ADMM sweep ships to the blocks.

    ``A = T Ξ S`` (m, d) and ``b0`` (d,): the iterate ``F = C A + b₀``; ``rho``: the penalty;
    ``u_scale``: factor applied to the stored ``U`` (``ρ_old/ρ_new`` after a change of ρ);
    ``first``: the first iteration (``Z = F``, ``U = 0`` instead of a stored generation;
    with ``dual_start``, ``U = ∇h(F − Y)/ρ``, the start's own dual point; the rows below
    ``given_rows`` read ``Z, U`` from generation ``read``, a given start's);
    ``read``, ``write``: generations; ``rows``: the :class:`RowState`; ``expect``: the
    checksums ``(z, u)`` per block of the generation read (None: rows in memory), checked
    before the rows are used.
    """

    loss: Loss
    A: np.ndarray
    b0: np.ndarray
    rho: float
    u_scale: float
    first: bool
    read: int
    write: int
    rows: Any
    relax: float = 1.0
    expect: tuple | None = None
    dual_start: bool = False
    given_rows: int = 0


def project_dual(loss: Loss, alpha: np.ndarray) -> np.ndarray:
    """``α`` projected onto ``dom h*`` (:meth:`~distsketch.losses.Loss.project_dual`: rows onto
    the ball of radius κ or 1 for radial losses, entries onto ``[−τ_j, 1 − τ_j]`` for
    pinball): exact already up to rounding."""
    return loss.project_dual(alpha)


def _dual_sums(C: np.ndarray, Y: np.ndarray, alpha: np.ndarray, prefix: str, out: dict) -> None:
    out[prefix + "Ca"] = C.T @ alpha
    out[prefix + "sa"] = alpha.sum(axis=0)
    out[prefix + "aa"] = np.einsum("ij,ij->j", alpha, alpha)
    out[prefix + "an"] = np.array(np.sqrt(np.einsum("ij,ij->i", alpha, alpha)).sum())
    out[prefix + "ya"] = np.einsum("ij,ij->j", Y, alpha)


def admm_block(shared: Any, item: Any, ws: Workspace) -> dict:
    """One block's ADMM z- and u-updates at the iterate, and its partial sums (module notes).

    Returns float64 sums: ``loss`` (``Σ h(F_i − y_i)``), the dual sums at ``α = ρu`` (``Ca``,
    ``sa``, ``aa``, ``an``, ``ya``) and at ``∇h(F − y)`` (the same with prefix ``g_``), ``Cz``,
    ``sz``, ``Cu``, ``su`` (the next x-update), ``Cdz``, ``sdz`` (``Cᵀ(z − z_old)``: the dual
    residual), ``pr`` (``‖F − z‖²``: the primal residual); with stored rows also ``crc_z``,
    ``crc_u`` (n_blocks,): the checksums of the rows written, at this block's index, 0
    elsewhere (sums of exact integers below 2³³ in float64: exact).
    Raises :class:`~distsketch.engine.storeguard.StoreError` when the rows read do not match
    ``it.expect``.
    """
    data, it = shared
    i, ref, crc, yb = item
    C = block_C(data, i, ref, crc, ws)
    s, e = data.rows(i)
    F = C @ it.A + it.b0
    Y = np.broadcast_to(dense(yb).astype(np.float64, copy=False).reshape(C.shape[0], -1),
                        F.shape)
    if it.first:
        if it.dual_start:  # a given start: its gradients as the first duals
            z_old, u_old = F, it.loss.gradient(F - Y, 0.0) / float(it.rho)
        else:
            z_old, u_old = F, np.zeros_like(F)
        if it.given_rows > s:  # the given rows' own Z, U (new arrays: F stays)
            g = min(e, it.given_rows)
            z_old, u_old = z_old.copy(), np.array(u_old, dtype=np.float64)
            z_old[:g - s], u_old[:g - s] = it.rows.read(it.read, s, g)
    else:
        z_old, u_old = it.rows.read(it.read, s, e)
        if it.expect is not None:
            for key, arr, want in (("z", z_old, it.expect[0][i]), ("u", u_old, it.expect[1][i])):
                if checksum(arr) != want:
                    from ...engine.storeguard import StoreError

                    raise StoreError(
                        f"store {data.location!r}: rows {s}–{e - 1} of the ADMM variable {key} "
                        f"(generation {it.read}) fail their checksum (damaged during the fit); "
                        f"fit again: it resumes from a generation that verifies")
        if it.u_scale != 1.0:
            u_old = u_old * it.u_scale
    loss, rho = it.loss, float(it.rho)
    Fh = F if it.relax == 1.0 else it.relax * F + (1.0 - it.relax) * z_old  # over-relaxation
    W = Fh + u_old
    z = Y + loss.prox(W - Y, 1.0 / rho)
    u = W - z
    it.rows.write(it.write, s, e, z, u)
    Rp = F - Y
    out: dict[str, Any] = {"loss": np.array(loss.value(Rp, 0.0).sum())}
    _dual_sums(C, Y, project_dual(loss, rho * u), "", out)
    _dual_sums(C, Y, loss.gradient(Rp, 0.0), "g_", out)
    out["Cz"], out["sz"] = C.T @ z, z.sum(axis=0)
    out["Cu"], out["su"] = C.T @ u, u.sum(axis=0)
    dz = z - z_old
    out["Cdz"], out["sdz"] = C.T @ dz, dz.sum(axis=0)
    out["pr"] = np.array(np.einsum("ij,ij->", F - z, F - z))
    if it.rows.stored:
        for key, arr in (("crc_z", z), ("crc_u", u)):
            out[key] = np.zeros(data.n_blocks)
            out[key][i] = checksum(arr)
    return out


# --------------------------------------------------------------------------- the driver


class XUpdate:
    """The x-update's eigenbasis, computed once per problem: ``H_c/n = V Λ Vᵀ`` (centred
    feature Gram with an intercept, ``ΦᵀΦ/n`` without), ``φ̄ = Φᵀ1/n``."""

    def __init__(self, prob: Problem) -> None:
        fg = prob.feature_gram()
        r = prob.r
        H = fg[:r, :r].copy()
        self.phibar = fg[:r, r].copy()
        if prob.intercept:
            H -= np.outer(self.phibar, self.phibar)
        w, V = np.linalg.eigh(0.5 * (H + H.T))
        self.lam_H = np.clip(w, 0.0, None)
        self.V = V
        self.prob = prob

    def __call__(self, lam: float, rho: float, Cv: np.ndarray, sv: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
        """``(Ξ, b₀)`` minimising ``(λ/2)‖Ξ‖² + (ρ/(2n))‖ΦΞS + 1b₀ᵀ − v‖²`` from ``Cᵀv``
        (m, d) and ``1ᵀv`` (d,)."""
        prob = self.prob
        n = prob.n
        g = prob.T.T @ Cv / n  # Φᵀv/n (r, d)
        vbar = sv / n
        if prob.intercept:
            g = g - np.outer(self.phibar, vbar)
        gR = self.V.T @ (g @ prob.U)  # in the eigenbases of H_c and M
        XiR = np.empty_like(gR)
        for j, nu in enumerate(prob.nu):
            XiR[:, j] = rho * math.sqrt(max(nu, 0.0)) * gR[:, j] / (lam + rho * nu * self.lam_H)
        Xi = self.V @ XiR @ prob.U.T
        b0 = vbar - prob.S @ (Xi.T @ self.phibar) if prob.intercept else np.zeros(prob.d)
        return Xi, b0


def _stats(s: dict, prefix: str) -> dict:
    return {k: s[prefix + k] for k in ("Ca", "sa", "aa", "an", "ya")}


def _feature_norm(prob: Problem, Cx: np.ndarray, sx: np.ndarray) -> float:
    """``‖[Tᵀ Cx S; 1ᵀx]‖`` (the second part with an intercept): ``‖Aᵀx‖`` of the splitting."""
    G = prob.T.T @ Cx @ prob.S
    total = float(np.sum(G * G))
    if prob.intercept:
        total += float(np.dot(sx, sx))
    return math.sqrt(total)


def solve_lam(prob: Problem, lam: float, sweeper: Any, *, Xi0: np.ndarray, b00: np.ndarray,
              tol: float, max_iter: int, rows: RowState, state: SolverState | None = None,
              xupdate: XUpdate | None = None, given: bool = False,
              start_rows: dict | None = None) -> Solution:
    """ADMM iterations for one λ, one sweep each (see the module's notes). ``given``:
    ``(Xi0, b00)`` is a given start near the solution (a fitted one): the first sweep takes
    ``U = ∇h(F − Y)/ρ`` instead of 0 on the rows ``start_rows`` does not give.
    ``start_rows``: ``{"Z", "U", "rho"}``, a fitted path's per-row variables of its first
    ``len(Z)`` rows (``U`` scaled at ``rho``, the penalty the start continues with),
    written to ``rows`` before the first sweep."""
    loss = prob.loss
    xup = xupdate if xupdate is not None else XUpdate(prob)
    st = state.load() if state is not None else None
    if st is not None and st.get("done"):
        logger.info("λ = %.3g: solution found in the store (%d iterations)", lam, st["n_iter"])
        return Solution.from_state(lam, st)
    v = None
    if st is not None and st.get("route") == "admm":
        v = rows.resume(st, prob.n, np.shape(Xi0)) if rows.stored else None
        if v is None:
            logger.warning("λ = %.3g: no generation of the stored ADMM rows verifies (see "
                           "above); restarting the ADMM iterations from the warm start", lam)
        else:
            logger.info("λ = %.3g: resuming the ADMM iterations at iteration %d", lam,
                        v["n_iter"])
    if v is None:
        v = {"Xi": np.array(Xi0, dtype=np.float64), "b0": np.array(b00, dtype=np.float64),
             "route": "admm", "rho": RHO0, "u_scale": 1.0, "n_iter": 0, "history": [],
             "mu": 0.0}
        if start_rows is not None:
            Z0 = np.asarray(start_rows["Z"], dtype=np.float64)
            rows.write(1, 0, len(Z0), Z0, np.asarray(start_rows["U"], dtype=np.float64))
            v["rho"] = float(start_rows["rho"])
    n_given = 0 if start_rows is None else len(start_rows["Z"])
    while True:
        if v["n_iter"] >= max_iter:
            return finish(prob, lam, v, tol, state, None, why=f"max_iter = {max_iter}")
        k = int(v["n_iter"])
        Xi, b0, rho = v["Xi"], v["b0"], float(v["rho"])
        it = AdmmIterate(loss, prob.coef(Xi), b0, rho, float(v["u_scale"]), first=k == 0,
                         read=(k - 1) % 2, write=k % 2, rows=rows,
                         relax=RELAX if loss.smoothed else 1.0,
                         expect=rows.expected((k - 1) % 2) if k > 0 else None,
                         dual_start=given, given_rows=n_given if k == 0 else 0)
        s = sweeper(it)
        v["n_iter"] = k + 1
        p = objective(prob, lam, s["loss"], Xi)
        d_u = dual_values(prob, lam, _stats(s, ""), 0.0)[1]
        d_g = dual_values(prob, lam, _stats(s, "g_"), 0.0)[1]
        gap = p - max(d_u, d_g)
        rel = gap / max(abs(p), 1e-300)
        v["history"].append([v["n_iter"], p, rel, 0.0])
        logger.info("λ = %.3g, ADMM iteration %d: objective %.10g, relative duality gap %.3g, "
                    "ρ = %.3g", lam, v["n_iter"], p, rel, rho)
        if rel <= tol:
            return finish(prob, lam, v, tol, state, (p, gap, True))
        if v["n_iter"] >= max_iter:
            warnings.warn(f"{loss.name} loss, λ = {lam:g}: ADMM stopped at max_iter = "
                          f"{max_iter} with relative duality gap {rel:.3g} > tol = {tol:g}; "
                          f"increase max_iter or tol", convergence_warning(), stacklevel=4)
            return finish(prob, lam, v, tol, state, (p, gap, False))
        # residual balancing on Boyd's residuals in the splitting's (1/n)-weighted norms:
        # primal ‖F − z‖/√n, dual ρ‖Aᵀ(z − z_old)‖/n (Aᵀx = [Φᵀx S; 1ᵀx])
        new_rho = rho
        if k < ADAPT_ITERS:
            r_pri = math.sqrt(float(s["pr"]) / prob.n)
            r_dual = rho * _feature_norm(prob, s["Cdz"], s["sdz"]) / prob.n
            if r_pri > RHO_RATIO * r_dual and rho * RHO_FACTOR <= RHO0 * RHO_MAX:
                new_rho = rho * RHO_FACTOR
            elif r_dual > RHO_RATIO * r_pri and rho / RHO_FACTOR >= RHO0 * RHO_MIN:
                new_rho = rho / RHO_FACTOR
            if new_rho != rho:
                logger.debug("ADMM: ρ %.3g → %.3g (residuals: primal %.3g, dual %.3g)",
                             rho, new_rho, r_pri, r_dual)
        scale = rho / new_rho
        Xi, b0 = xup(lam, new_rho, s["Cz"] - scale * s["Cu"], s["sz"] - scale * s["su"])
        v.update(Xi=Xi, b0=b0, rho=new_rho, u_scale=scale)
        rows.commit(k % 2, k, s, v)  # after every block's rows; before the solver state
        _save(state, v)


def _save(state, v: dict) -> None:
    """Save the driver state after an iteration
    (:func:`~distsketch.solvers.lipschitz.problem.save_state`); a module-level step so that a
    test can stop a fit between a generation's record and it."""
    save_state(state, v)


def solve_path(prob: Problem, lams: Sequence[float], sweeper: Any, *, tol: float, max_iter: int,
               rows: Callable[..., RowState],
               states: Callable[[int], SolverState | None] | None = None,
               warm: Sequence[tuple] | None = None,
               duals: Sequence[dict | None] | None = None) -> list[Solution]:
    """Every λ in decreasing order, each warm-started from the one before (the first from
    the squared-loss closed form), or with ``warm`` (one ``(Ξ, b₀)`` per λ of ``lams``) from
    its own given start; ``rows(k)``: the :class:`RowState` of λ number k. A start begins
    with ``Z = F`` on every row and ``U = 0``, or for a given start ``U = ∇h(F − Y)/ρ``
    (:func:`admm_block`'s first sweep); ``duals``: per λ, None or :func:`solve_lam`'s
    ``start_rows`` (a fitted path's ``Z, U`` of its rows and ρ)."""
    order = sorted(range(len(lams)), key=lambda k: -lams[k])
    out: list[Solution | None] = [None] * len(lams)
    prev = None
    xup = XUpdate(prob)
    for k in order:
        lam = lams[k]
        if warm is not None:
            Xi0, b00 = warm[k]
        else:
            Xi0, b00 = warm_start(prob, lam) if prev is None else (prev.Xi, prev.b0)
        state = states(k) if states is not None else None
        out[k] = prev = solve_lam(prob, lam, sweeper, Xi0=Xi0, b00=b00, tol=tol,
                                  max_iter=max_iter, rows=rows(k, state), state=state,
                                  xupdate=xup, given=warm is not None,
                                  start_rows=None if duals is None else duals[k])
    return out
