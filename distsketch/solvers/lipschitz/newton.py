"""Newton route of the Lipschitz-loss machines: Newton iterations, one sweep over the blocks each.

The problem, its Fenchel dual and the certificate (the relative duality gap ``(P − D)/P`` at
a feasible dual point from every iterate) are :mod:`distsketch.solvers.lipschitz.problem`'s
(docs/design/lipschitz.md); the fit stops when the gap is ≤ ``tol``.

Each iteration is one sweep (:mod:`distsketch.engine.sweep`) that returns, at the iterate, the
loss, the gradient ``Cᵀα`` and the weighted Grams of the (generalised) Hessian, and the losses
along the previous Newton direction on a grid of step sizes (a backtracking line search with no
extra pass when the full step is taken, as near the solution). The driver forms the Newton
system and solves it (:mod:`distsketch.solvers.lipschitz.direction`). Non-smooth losses
(ε-insensitive, pinball) are replaced by their Moreau envelopes ``h_μ`` with μ decreased by 10
whenever the smoothed problem's gap falls below a tenth of the true gap (continuation), so
Newton converges on each and the true gap certifies the end. At each μ change a *KKT polish*
tries the non-smooth problem's solution (:mod:`distsketch.solvers.lipschitz.polish`), which
ends at rounding level once the active set is right. The first iterate is the closed-form
squared-loss solution from the pass's sums (exact for ``loss="squared"``, which is
:class:`~distsketch.SketchedKRR` with an intercept and ``M``).

The driver is a sequence of phases over a typed state (:class:`NewtonState`; its ``mode``
says what the next sweep evaluates): :func:`solve_lam` runs a sweep (:func:`sweep_request`,
:func:`record_sweep`), then the phase of what it evaluated — :func:`after_newton_step` (the
line search), :func:`after_polish`, :func:`after_sphere_polish`, or, at the iterate itself,
:func:`after_probe` (the first sweep of a smoothed loss: μ) — then, at an accepted point,
:func:`certify` (the gap and the stopping rules) and :func:`next_step` (a smaller μ and a
polish, or the next Newton direction). The state after every sweep is written to the store
(``solver/<key>``, with its checksums, in the solver state's keys): a fit killed
mid-iterations resumes from the last one and ends with the identical model.

Glossary: ``Ξ`` (``Xi``, r × d) and ``b₀`` (``b0``): the iterate; ``ΔΞ``, ``Δb₀`` (``dXi``,
``db0``): a direction; ``μ`` (``mu``): the smoothing; ``s``: a sweep's sums; ``P``
(``p_true``), ``P_μ`` (``p_mu``): the true and smoothed objectives.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from ...engine.sweep import Iterate
from ...tuning import Tuning
from .direction import gradient, newton_direction, warm_start
from .polish import polish, sphere_dual_stats, sphere_step, with_fix
from .problem import (
    Problem,
    Solution,
    SolverState,
    convergence_warning,
    dual_values,
    finish,
    objective,
    save_state,
)
from .restricted import RESTRICTED_SIZE, WINDOW, WINDOW_ENTRIES, restricted_polish

__all__ = ["NewtonState", "NewtonSetup", "solve_lam", "solve_path"]

logger = logging.getLogger(__name__)


def __getattr__(name: str):
    if name == "ConvergenceWarning":
        return convergence_warning()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: Step sizes of the line search: 1, 1/2, …, 2^-12 (losses of all of them in one sweep). The
#: full step when it meets Armijo's condition; otherwise the grid's lowest objective (not the
#: longest step meeting Armijo's: on a piecewise-quadratic smoothed loss that cut the sweeps of
#: ε-insensitive SVR on CASP-20 000 from 46 to 38 and of pinball τ = 0.9 from 126 to 91).
GRID = tuple(2.0 ** -k for k in range(13))
#: Steps along a KKT polish whose true objective a polish sweep reports.
POLISH_GRID = tuple(2.0 ** -k for k in range(1, 9))
#: Levenberg–Marquardt damping of smoothed losses: ``damp/μ · [C 1]ᵀ[C 1]/n`` is added to
#: the Hessian (a band of weight ``damp/μ`` over every row), ×DAMP_UP after a step shorter
#: than 1 (at least DAMP_MIN), ×DAMP_DOWN after a full one.
DAMP_UP, DAMP_DOWN, DAMP_MIN = 10.0, 0.1, 1e-4
#: Armijo's sufficient-decrease constant.
ARMIJO = 1e-4
#: Smoothing continuation: μ ← μ·MU_FACTOR once the smoothed gap is below GAP_RATIO × true gap.
MU_FACTOR = 0.1
GAP_RATIO = 0.1
#: Smoothings at which the first sweep of a smoothed loss counts the rows at each curvature
#: level (quarter octaves, 2^-100 … 2^100): μ is its residuals' RMS, known only after it, and
#: the next sweep's Gram skips the rows at the commonest level at the nearest of these μ
#: (CASP-20 000, ε = 0.5: 7142 rows instead of the 12 858 in the band at 1/μ).
LEVEL_MUS = 2.0 ** (np.arange(-400, 401) / 4.0)
#: Largest ``(m+1)²`` Gram (bytes) the driver keeps from sweep to sweep, so that a Newton sweep
#: from the last Grams' point forms only their change over the rows whose curvature moved
#: (``Iterate.delta``; CASP-20 000, ε = 0.5: 3036 rows instead of 7142, 519 instead of 2155,
#: 114 instead of 2167 at successive sweeps). Beyond, every sweep forms its Grams whole.
DELTA_GRAM_BYTES = 32 << 20


# --------------------------------------------------------------------------- the iterations

_FIX = ("fix_C", "fix_col", "fix_y", "fix_beta")

#: Most entries (each at each of its kinks) the sweeps gather as the whole problem, solved
#: on the driver from the first certified sweep (``Tuning.whole_problem_entries``' default).
WHOLE_ENTRIES = Tuning().whole_problem_entries

#: Most band entries the KKT polish gathers on the driver (rows of C): beyond, no polish.
POLISH_ENTRIES = 20000

#: Sweeps without a better certified point (a lower relative duality gap) after which the
#: iterations stop and return the best one with a ConvergenceWarning, once that best is
#: within STALL_NEAR × tol: past it the continuation has shrunk μ below what float64
#: certifies (a smoothed dual point at μ ≈ 1e-9 is worse than the polish's). Farther from
#: tol a μ stage can wander above its best gap for longer (slow stages of pinball), so only
#: max_iter stops it.
STALL_SWEEPS, STALL_NEAR = 60, 100.0

#: Most Newton steps of one sphere polish, and the factor by which each must cut the gap.
SPHERE_STEPS, SPHERE_SHRINK = 8, 0.5

#: What the next sweep evaluates besides the iterate: the losses along a Newton direction
#: (``"newton"``, its line search), the polished point and steps towards it (``"polish"``), a
#: step of the sphere polish (``"sphere"``); None: the iterate alone.
Mode = Literal["newton", "polish", "sphere"]

#: NewtonState's fields and their keys in the persisted solver state (STATE_VERSION 3, the
#: format a store killed by an earlier release holds): in every state ...
_KEYS = (("Xi", "Xi"), ("b0", "b0"), ("dXi", "dXi"), ("db0", "db0"), ("mode", "mode"),
         ("n_iter", "n_iter"), ("start_objective", "p_at"), ("slope", "slope"),
         ("ref_objective", "p_ref"), ("band_entries", "nband"), ("window_entries", "nwin"),
         ("damping", "damp"), ("history", "history"), ("mu", "mu"))
#: ... and once set (absent before; None here).
_KEYS_ONCE_SET = (("level", "level"), ("grams", "Q"), ("grams_mu", "Q_mu"),
                  ("grams_base", "Q_base"), ("grams_Xi", "Q_Xi"), ("grams_b0", "Q_b0"),
                  ("best_rel", "best_rel"), ("best_objective", "best_p"), ("best_at", "best_at"),
                  ("best_Xi", "best_Xi"), ("best_b0", "best_b0"), ("ref_gap", "gap_ref"),
                  ("sphere_steps", "sqp"))


@dataclass
class NewtonState:
    """The Newton iterations' state for one λ between two sweeps (persisted after each).

    :meth:`as_dict` and :meth:`from_dict` convert it to and from the solver state's dict (its
    keys, in parentheses where they differ from the fields' names, are those of
    ``STATE_VERSION`` 3: a store killed mid-iterations by an earlier release resumes).

    Attributes
    ----------
    Xi, b0 : ndarray (r, d), (d,)
        The iterate.
    mu : float
        The loss's smoothing μ (0: none; -1: not known yet: the next sweep is the probe).
    n_iter : int
        Sweeps done; ``history``: ``[n_iter, objective, relative gap, μ]`` per certified point.
    mode : Mode or None
        What the next sweep evaluates along the direction ``dXi``, ``db0`` (:data:`Mode`).
    start_objective (p_at), slope : float
        The smoothed objective at a Newton step's origin and its slope along the step
        (Armijo's condition of the line search).
    ref_objective (p_ref) : float
        The true objective a polish's point must not exceed; ``ref_gap`` (gap_ref): the
        relative gap a sphere-polish step must cut by SPHERE_SHRINK; ``sphere_steps`` (sqp):
        the sphere polish's steps so far.
    band_entries (nband), window_entries (nwin) : float
        Entries in the last sweep's smoothing band and kink window (-1: not counted): the next
        sweep gathers them for the polish when few enough.
    damping (damp) : float
        Levenberg–Marquardt factor of smoothed losses (DAMP_UP, DAMP_DOWN).
    level : int or None
        The curvature level most rows sat at in the last sweep: the next Grams' base.
    held : dict or None
        The polish's held entries or rows (``fix_C``, ``fix_col``, ``fix_y``, ``fix_beta``),
        for the next sweep only.
    grams (Q), grams_mu, grams_base, grams_Xi, grams_b0 (Q_mu, Q_base, Q_Xi, Q_b0)
        The last sweep's Grams, kept while small (DELTA_GRAM_BYTES), and the μ, the base
        and the point they were formed at.
    best_rel, best_objective (best_p), best_at, best_Xi, best_b0
        The best certified point so far: relative gap, objective, sweep, iterate.
    """

    Xi: np.ndarray
    b0: np.ndarray
    mu: float
    n_iter: int = 0
    history: list = field(default_factory=list)
    mode: Mode | None = None
    dXi: np.ndarray | None = None
    db0: np.ndarray | None = None
    start_objective: float = 0.0
    slope: float = 0.0
    ref_objective: float = 0.0
    band_entries: float = -1.0
    window_entries: float = -1.0
    damping: float = 0.0
    level: int | None = None
    held: dict | None = None
    grams: np.ndarray | None = None
    grams_mu: float | None = None
    grams_base: float | None = None
    grams_Xi: np.ndarray | None = None
    grams_b0: np.ndarray | None = None
    best_rel: float | None = None
    best_objective: float | None = None
    best_at: float | None = None
    best_Xi: np.ndarray | None = None
    best_b0: np.ndarray | None = None
    ref_gap: float | None = None
    sphere_steps: int | None = None

    @classmethod
    def start(cls, Xi0: np.ndarray, b00: np.ndarray, *, smoothed: bool) -> "NewtonState":
        """The state before the first sweep (μ from the first sweep's residuals when smoothed)."""
        return cls(np.array(Xi0, dtype=np.float64), np.array(b00, dtype=np.float64),
                   -1.0 if smoothed else 0.0)

    def as_dict(self) -> dict:
        """The persisted solver state (see the class)."""
        out = {key: getattr(self, name) for name, key in _KEYS}
        out.update((key, getattr(self, name)) for name, key in _KEYS_ONCE_SET
                   if getattr(self, name) is not None)
        if self.held is not None:
            out.update(self.held)
        return out

    @classmethod
    def from_dict(cls, st: dict) -> "NewtonState":
        """The state a persisted solver state holds (its other entries, such as ``slot``,
        ``checksums`` and ``done``, are the store's)."""
        kw = {name: st[key] for name, key in _KEYS}
        kw.update((name, st[key]) for name, key in _KEYS_ONCE_SET if st.get(key) is not None)
        if st.get("fix_C") is not None:
            kw["held"] = {key: st[key] for key in _FIX}
        return cls(**kw)


@dataclass(frozen=True)
class NewtonSetup:
    """What stays fixed over one λ's iterations: the stopping rule, the curvature (``exact``:
    exact Hessian weights, else secant ones outside the smoothing band; ``kind``: their kind,
    :meth:`~distsketch.losses.Loss.curvature_kind`), the most band entries the band polish
    gathers (``cap``), the kink window of the restricted polish in units of μ (``window``;
    0: none; ``math.inf``: every entry at each of its kinks, the whole problem, while at most
    ``whole_entries``), the squared Lipschitz constant of the loss, and whether the last sweep's
    Grams are small enough to keep (``keep_grams``)."""

    tol: float
    max_iter: int
    exact: bool
    kind: str
    cap: int
    window: float
    lipschitz_sq: float
    keep_grams: bool

    @classmethod
    def of(cls, prob: Problem, tol: float, max_iter: int, *,
           whole_entries: int = WHOLE_ENTRIES) -> "NewtonSetup":
        loss, d = prob.loss, prob.d
        exact = prob.exact_curvature
        # a vertex holds at most r·d + d entries on their kinks: more cannot be a KKT point's
        # active set (and the polish's system would be over-determined)
        cap = min(POLISH_ENTRIES, (prob.r + 1) * d)
        # entry-wise kinks (scalar ε, pinball): the sweeps gather a window of entries around
        # their kinks, whose restricted problem the driver solves exactly (restricted_polish)
        window = (WINDOW if loss.smoothed and loss.band(np.zeros((1, d)), 1.0) is not None
                  and (prob.r + 1) * d <= RESTRICTED_SIZE else 0.0)
        if window and prob.n * len(loss.band(np.zeros((1, d)), 1.0, math.inf)[0]) \
                <= whole_entries:
            # every entry at each of its kinks fits the window: the restricted problem is
            # the whole problem, solved exactly from the first certified point
            window = math.inf
        # the last sweep's Grams kept (and in the solver state) while small: the next Newton
        # sweep from their point asks for their change only (Iterate.delta)
        m1 = prob.Gt.shape[0]
        return cls(tol, max_iter, exact, loss.curvature_kind(d, exact=exact), cap, window,
                   loss.lipschitz_sq(d), m1 * m1 * 8 <= DELTA_GRAM_BYTES)


@dataclass(frozen=True)
class Sweep:
    """One sweep as it was asked for (the state's iterate, direction, mode and μ before it;
    ``base``: its Grams' base curvature; ``held``: the polish's held entries it evaluated)
    and what it returned (``sums``)."""

    Xi: np.ndarray
    b0: np.ndarray
    dXi: np.ndarray | None
    db0: np.ndarray | None
    mode: Mode | None
    mu: float
    base: float
    held: dict | None
    sums: dict

    @property
    def probe(self) -> bool:
        """The first sweep of a smoothed loss, at μ = 0: its residuals give μ."""
        return self.mu < 0


@dataclass(frozen=True)
class Certificate:
    """The certified point after a sweep: objectives (smoothed, true), duality gaps
    (smoothed, true) and the true relative gap."""

    smoothed_objective: float
    objective: float
    smoothed_gap: float
    gap: float
    rel_gap: float


@dataclass(frozen=True)
class Stop:
    """The end of one λ: :func:`~distsketch.solvers.lipschitz.problem.finish`'s ``result`` (None:
    the best certified point) and ``why`` (the reason of a stop short of ``tol``)."""

    result: tuple | None
    why: str | None = None


#: What a phase asks for next: save the state and sweep again, or certify the accepted point.
Next = Literal["sweep", "certify"]


def sweep_request(prob: Problem, setup: NewtonSetup, state: NewtonState
                  ) -> tuple[Iterate, float]:
    """The next sweep's :class:`~distsketch.engine.sweep.Iterate` from the state, and its Grams'
    base curvature: the level most rows sat at in the last sweep or, for a Newton sweep
    from the kept Grams' point at the same μ, theirs (the sweep then forms their change)."""
    loss = prob.loss
    Xi, b0, dXi, db0, mode, mu = state.Xi, state.b0, state.dXi, state.db0, state.mode, state.mu
    probe = mu < 0
    grid = (GRID if mode == "newton" else POLISH_GRID if mode == "polish"
            or (mode == "sphere" and dXi is not None) else ())
    levels = loss.curvature_levels(prob.d, 0.0 if probe else mu, exact=setup.exact)
    base = float(levels[min(int(state.level or 0), len(levels) - 1)])
    sphere = mode == "sphere"
    delta = (setup.kind == "scalar" and setup.keep_grams and mode == "newton"
             and state.grams is not None and state.grams_mu == mu
             and np.array_equal(Xi, state.grams_Xi) and np.array_equal(b0, state.grams_b0))
    if delta:
        base = float(state.grams_base)
    win = setup.window
    it = Iterate(loss, prob.coef(Xi), b0, None if dXi is None else prob.coef(dXi), db0,
                 0.0 if probe else mu, grid,
                 grid_mu=0.0 if mode in ("polish", "sphere") else None,
                 gram=not probe, exact=setup.exact,
                 collect=(win == math.inf or 0 <= state.window_entries <= WINDOW_ENTRIES
                          if win else 0 <= state.band_entries <= setup.cap and not sphere),
                 window=win,
                 base=base, levels=levels if len(levels) > 1 else (),
                 exclude=state.held["fix_col"].astype(np.int64) if sphere else None,
                 level_mus=LEVEL_MUS if probe else None, delta=delta)
    return it, base


def record_sweep(prob: Problem, setup: NewtonSetup, state: NewtonState, it: Iterate,
                 base: float, s: dict) -> Sweep:
    """Count the sweep ``s`` of ``it`` in the state and keep its by-products (its Grams
    while small, the band's and the window's sizes, the commonest curvature level); clear
    the direction, the mode and the held entries it evaluated. Returns the :class:`Sweep`."""
    sweep = Sweep(state.Xi, state.b0, state.dXi, state.db0, state.mode, state.mu, base,
                  state.held, s)
    state.n_iter += 1
    if it.delta:
        s["Q"] = state.grams + s["Q"]
    if (it.gram and setup.keep_grams and setup.kind == "scalar"
            and sweep.mode in ("newton", None)):
        # the Grams (at base) of this sweep's point: the iterate, or its full step. Not a
        # polish's: its point holds entries on their kinks, the band's edge, where the
        # next sweep's rounding of the same point classes them at random
        m1 = prob.Gt.shape[0]
        state.grams = np.broadcast_to(s["Q"], (m1, m1)).copy()
        state.grams_mu, state.grams_base = sweep.mu, base
        state.grams_Xi = np.array(sweep.Xi if sweep.dXi is None else sweep.Xi + sweep.dXi,
                                  dtype=np.float64)
        state.grams_b0 = np.array(sweep.b0 if sweep.db0 is None else sweep.b0 + sweep.db0,
                                  dtype=np.float64)
    else:
        state.grams = state.grams_Xi = state.grams_b0 = None
    state.dXi = state.db0 = state.mode = state.held = None
    if "nband" in s:
        state.band_entries = float(s["nband"])
        logger.debug("smoothing band: %d entries", int(state.band_entries))
    if "nwin" in s:
        state.window_entries = float(s["nwin"])
    if "at_level" in s:
        state.level = int(np.argmax(s["at_level"]))
    return sweep


def after_probe(prob: Problem, state: NewtonState, sweep: Sweep) -> Next:
    """After the first sweep of a smoothed loss: μ from the residuals' scale, and the
    commonest curvature level at (about) that μ."""
    s = sweep.sums
    state.mu = max(math.sqrt(float(s["rr"]) / prob.n), 1e-300)
    if "level_counts" in s:
        near = int(np.argmin(np.abs(np.log(LEVEL_MUS) - math.log(state.mu))))
        state.level = int(np.argmax(s["level_counts"][near]))
    return "sweep"


def after_newton_step(prob: Problem, lam: float, state: NewtonState, sweep: Sweep
                      ) -> Next | Stop:
    """After a sweep along a Newton direction: the full step when it meets Armijo's
    condition (certify it), else the grid's lowest point (sweep again), else — no decrease —
    a smaller μ, or the end (the limit of float64). Adapts the damping of smoothed losses."""
    loss, s = prob.loss, sweep.sums
    Xi, b0, dXi, db0, mu = sweep.Xi, sweep.b0, sweep.dXi, sweep.db0, sweep.mu
    vals = np.array([objective(prob, lam, s["grid"][k], Xi + t * dXi)
                     for k, t in enumerate(GRID)])
    ok = np.flatnonzero(vals <= state.start_objective + ARMIJO * np.asarray(GRID) * state.slope)
    logger.debug("line search: step %s, decrease %.3g (slope %.3g)",
                 GRID[ok[0]] if ok.size else None, state.start_objective - vals.min(), state.slope)
    if loss.smoothed:  # Levenberg–Marquardt: damp more after a short step
        state.damping = (state.damping * DAMP_DOWN if ok.size and ok[0] == 0
                         else max(state.damping, DAMP_MIN) * DAMP_UP)
    if not (ok.size and ok[0] == 0):  # not the full step: the grid's lowest point
        k = int(ok[np.argmin(vals[ok])]) if ok.size else int(np.argmin(vals))
        if ok.size or vals[k] < state.start_objective:
            state.Xi, state.b0 = Xi + GRID[k] * dXi, b0 + GRID[k] * db0
        elif loss.smoothed and mu > 0:
            state.mu, state.level = mu * MU_FACTOR, 0  # no decrease: on to a smaller μ
        else:  # no decrease along the Newton direction: the limit of float64
            return Stop(None)
        return "sweep"
    state.Xi, state.b0 = Xi + dXi, b0 + db0
    return "certify"


def after_polish(prob: Problem, lam: float, state: NewtonState, sweep: Sweep) -> Next:
    """After a sweep at a KKT polish's point: the point when its true objective is not
    worse than where the polish started (certify it), else the best true decrease along
    the step, if any (sweep again)."""
    s = sweep.sums
    Xi, b0, dXi, db0 = sweep.Xi, sweep.b0, sweep.dXi, sweep.db0
    p_true = objective(prob, lam, s["loss"], Xi + dXi)
    if p_true > state.ref_objective:  # worse than where it started: the best true decrease
        vals = np.array([objective(prob, lam, s["grid"][k], Xi + t * dXi)
                         for k, t in enumerate(POLISH_GRID)])
        k = int(np.argmin(vals))
        logger.debug("polish: full step rejected (objective %.10g > %.10g), step %s",
                     p_true, state.ref_objective,
                     POLISH_GRID[k] if vals[k] < state.ref_objective else 0)
        if vals[k] < state.ref_objective:
            state.Xi, state.b0 = Xi + POLISH_GRID[k] * dXi, b0 + POLISH_GRID[k] * db0
        return "sweep"
    state.Xi, state.b0 = Xi + dXi, b0 + db0
    return "certify"


def after_sphere_polish(prob: Problem, lam: float, setup: NewtonSetup, state: NewtonState,
                        sweep: Sweep) -> Next | Stop:
    """After a sweep of the sphere polish: certify the step's point with the held rows'
    multipliers as their dual, then take the next step (:func:`sphere_step`), or give up
    (back to the smoothed continuation at μ) when a step does not cut the gap by
    ``SPHERE_SHRINK`` or after ``SPHERE_STEPS``. Stops when the gap is within ``tol``."""
    s, fix, mu = sweep.sums, sweep.held, sweep.mu
    Xi, b0, dXi, db0 = sweep.Xi, sweep.b0, sweep.dXi, sweep.db0
    if dXi is not None:
        Xn, bn = Xi + dXi, b0 + db0
        p_true = objective(prob, lam, s["loss"], Xn)
        _, d_true = dual_values(prob, lam, sphere_dual_stats(prob, s, fix, Xn, bn), 0.0)
        gap = p_true - d_true
        rel = gap / max(abs(p_true), 1e-300)
        state.history.append([state.n_iter, p_true, rel, mu])
        logger.info("λ = %.3g, iteration %d: objective %.10g, relative duality gap %.3g "
                    "(sphere polish, %d rows held, step %d)", lam, state.n_iter, p_true, rel,
                    len(fix["fix_beta"]), state.sphere_steps)
        if rel <= setup.tol:
            state.Xi, state.b0 = Xn, bn
            return Stop((p_true, gap, True))
        if not rel < SPHERE_SHRINK * state.ref_gap or state.sphere_steps >= SPHERE_STEPS:
            # wrong active set (or stalled): the best true objective along the step
            vals = np.array([objective(prob, lam, s["grid"][k], Xi + t * dXi)
                             for k, t in enumerate(POLISH_GRID)])
            best = int(np.argmin(vals))
            if p_true <= state.ref_objective:
                state.Xi, state.b0 = Xn, bn
            elif vals[best] < state.ref_objective:
                state.Xi, state.b0 = Xi + POLISH_GRID[best] * dXi, b0 + POLISH_GRID[best] * db0
            logger.debug("sphere polish stopped at step %d (gap %.3g, before %.3g)",
                         state.sphere_steps, rel, state.ref_gap)
            return "sweep"
        state.Xi, state.b0, state.ref_objective, state.ref_gap = Xn, bn, p_true, rel
    step = sphere_step(prob, lam, s, fix, state.Xi, state.b0, mu, setup.kind)
    if step is not None:
        state.dXi, state.db0, state.mode = step[0], step[1], "sphere"
        state.sphere_steps, state.held = state.sphere_steps + 1, step[2]
    return "sweep"


def certify(prob: Problem, lam: float, setup: NewtonSetup, state: NewtonState, sweep: Sweep
            ) -> Certificate | Stop:
    """The duality gaps at the accepted point (after a polish, with its multipliers as the
    held entries' dual), recorded in the history; keeps the best certified point. Stops at
    ``tol``, at ``max_iter``, or after ``STALL_SWEEPS`` without a better point once the best
    is within ``STALL_NEAR × tol``."""
    s, mu = sweep.sums, sweep.mu
    Xi, b0 = state.Xi, state.b0
    p_mu = objective(prob, lam, s["loss_mu"], Xi)
    p_true = objective(prob, lam, s["loss"], Xi)
    if sweep.mode == "polish":  # the polish's own dual point (its multipliers)
        fixed = with_fix(prob, Xi, b0, s, sweep.held, mu)
        d_mu, d_true = dual_values(prob, lam, fixed, mu)
    else:
        d_mu, d_true = dual_values(prob, lam, s, mu)
    gap_mu, gap = p_mu - d_mu, p_true - d_true
    rel = gap / max(abs(p_true), 1e-300)
    state.history.append([state.n_iter, p_true, rel, mu])
    logger.info("λ = %.3g, iteration %d: objective %.10g, relative duality gap %.3g%s",
                lam, state.n_iter, p_true, rel, f", μ = {mu:.3g}" if prob.loss.smoothed else "")
    if rel <= setup.tol:
        return Stop((p_true, gap, True))
    best_rel = math.inf if state.best_rel is None else state.best_rel
    if not rel >= best_rel:  # the best certified point so far
        state.best_rel, state.best_objective = float(rel), float(p_true)
        state.best_at = float(state.n_iter)
        state.best_Xi, state.best_b0 = Xi.copy(), np.array(b0, dtype=np.float64)
    if state.n_iter >= setup.max_iter:
        return Stop(None, f"max_iter = {setup.max_iter}")
    if (state.n_iter - (0.0 if state.best_at is None else state.best_at) > STALL_SWEEPS
            and state.best_rel <= STALL_NEAR * setup.tol):
        return Stop(None, f"no better certified point in {STALL_SWEEPS} sweeps")
    return Certificate(p_mu, p_true, gap_mu, gap, rel)


def next_step(prob: Problem, lam: float, setup: NewtonSetup, state: NewtonState,
              sweep: Sweep, cert: Certificate) -> Next | Stop:
    """From a certified point that did not reach ``tol``: a smaller μ (with a polish, see
    :func:`start_polish`) once the smoothed gap is below ``GAP_RATIO`` × the true one, else
    the next (damped) Newton direction — or the end, when none descends (rounding)."""
    s, mu = sweep.sums, sweep.mu
    lsq = setup.lipschitz_sq
    mu_floor = 0.02 * setup.tol * abs(cert.objective) / lsq if lsq else 0.0
    if prob.loss.smoothed and cert.smoothed_gap <= GAP_RATIO * cert.gap and mu > mu_floor:
        state.mu, state.level = max(mu * MU_FACTOR, mu_floor), 0  # a narrower band
        start_polish(prob, lam, setup, state, sweep, cert)
        return "sweep"
    if setup.window == math.inf and len(state.history) == 1 and "E_row" in s:
        # the whole problem gathered: its exact solution from the first certified point
        start_polish(prob, lam, setup, state, sweep, cert)
        if state.mode == "polish":
            return "sweep"
    gXi, gb = gradient(prob, lam, s, state.Xi)
    damp = state.damping / mu if mu > 0 else 0.0
    dXi, db0 = newton_direction(prob, lam, s, setup.kind, sweep.base + damp, gXi, gb)
    slope = float(np.sum(gXi * dXi) + np.dot(gb, db0))
    if not slope < 0:  # no descent direction left (rounding): the limit of float64
        return Stop((cert.objective, cert.gap, cert.rel_gap <= setup.tol))
    state.dXi, state.db0, state.mode = dXi, db0, "newton"
    state.start_objective, state.slope = cert.smoothed_objective, slope
    return "sweep"


def start_polish(prob: Problem, lam: float, setup: NewtonSetup, state: NewtonState,
                 sweep: Sweep, cert: Certificate) -> None:
    """At a change of μ, the KKT polish of the sweep's gathered entries (if any) as the next
    sweep's mode: for the radial ε with d > 1 the sphere polish (the band's rows held on
    ``‖r‖ = ε``), else the restricted polish's point (:func:`restricted_polish`, with a
    window) or the band polish's (:func:`polish`), tried with the next μ's sums."""
    s = sweep.sums
    if "E_Y" in s:  # radial, d > 1: hold the band's rows on the sphere ‖r‖ = ε
        if len(s["E_row"]) and float(prob.loss.epsilon) > 0:
            state.mode, state.ref_objective = "sphere", cert.objective
            state.ref_gap, state.sphere_steps = cert.rel_gap, 0
            state.held = {"fix_C": s["E_C"], "fix_col": s["E_row"].astype(np.float64),
                          "fix_y": s["E_Y"], "fix_beta": np.minimum(
                              np.sqrt(np.einsum("ij,ij->i", s["E_a"], s["E_a"])), 1.0)}
        return
    if "E_row" not in s:
        pol = None
    elif setup.window:
        pol = restricted_polish(prob, lam, s, state.Xi, state.b0)
    else:
        pol = polish(prob, lam, s)
    if pol is not None:  # try the active set's KKT point, with the next μ's stats
        state.dXi, state.db0 = pol[0] - state.Xi, pol[1] - state.b0
        state.mode, state.ref_objective = "polish", cert.objective
        state.held = pol[2]


def solve_lam(prob: Problem, lam: float, sweeper, *, Xi0, b00, tol: float, max_iter: int,
              state: SolverState | None = None, whole_entries: int = WHOLE_ENTRIES
              ) -> Solution:
    """Newton iterations (with smoothing continuation and KKT polish) for one λ, from
    ``(Xi0, b00)`` or from the solver state in the store: one sweep per loop, then the
    phase of what it evaluated, then, at an accepted point, its certificate and the next
    step (see the module); the state is saved after each. ``whole_entries``: the most
    entries (at each of their kinks) gathered as the whole problem
    (``Tuning.whole_problem_entries``, :class:`NewtonSetup`)."""
    setup = NewtonSetup.of(prob, tol, max_iter, whole_entries=whole_entries)
    st = state.load() if state is not None else None
    if st is not None and st.get("done"):
        logger.info("λ = %.3g: solution found in the store (%d iterations)", lam, st["n_iter"])
        return Solution.from_state(lam, st)
    if st is not None:
        logger.info("λ = %.3g: resuming the iterations at iteration %d", lam, st["n_iter"])
        current = NewtonState.from_dict(st)
    else:
        current = NewtonState.start(Xi0, b00, smoothed=prob.loss.smoothed)
    while True:
        if current.n_iter >= max_iter:  # stopped between evaluations: report the last gap
            return finish(prob, lam, current.as_dict(), tol, state, None,
                          why=f"max_iter = {max_iter}")
        it, base = sweep_request(prob, setup, current)
        sweep = record_sweep(prob, setup, current, it, base, sweeper(it))
        if sweep.mode == "sphere":
            nxt = after_sphere_polish(prob, lam, setup, current, sweep)
        elif sweep.mode == "newton":
            nxt = after_newton_step(prob, lam, current, sweep)
        elif sweep.mode == "polish":
            nxt = after_polish(prob, lam, current, sweep)
        else:  # the iterate alone
            nxt = "certify"
        if nxt == "certify" and sweep.probe:
            nxt = after_probe(prob, current, sweep)
        elif nxt == "certify":
            nxt = certify(prob, lam, setup, current, sweep)
            if isinstance(nxt, Certificate):
                nxt = next_step(prob, lam, setup, current, sweep, nxt)
        if isinstance(nxt, Stop):
            return finish(prob, lam, current.as_dict(), tol, state, nxt.result, why=nxt.why)
        save_state(state, current.as_dict())


def solve_path(prob: Problem, lams, sweeper, *, tol: float, max_iter: int,
               states=None, whole_entries: int = WHOLE_ENTRIES, warm=None) -> list[Solution]:
    """Solve every λ in decreasing order, each warm-started from the one before (the first
    from the squared-loss closed form), or with ``warm`` (a sequence of ``(Ξ, b₀)``, one per
    λ of ``lams``) each from its own given start (μ from its residuals, as any start's: the
    continuation and polishes run again); returns the solutions in the order of ``lams``
    (``whole_entries``: :func:`solve_lam`'s)."""
    order = sorted(range(len(lams)), key=lambda k: -lams[k])
    out: list[Solution | None] = [None] * len(lams)
    prev = None
    for k in order:
        lam = lams[k]
        if warm is not None:
            Xi0, b00 = warm[k]
        else:
            Xi0, b00 = warm_start(prob, lam) if prev is None else (prev.Xi, prev.b0)
        state = states(k) if states is not None else None
        sol = solve_lam(prob, lam, sweeper, Xi0=Xi0, b00=b00, tol=tol, max_iter=max_iter,
                        state=state, whole_entries=whole_entries)
        out[k] = prev = sol
    return out
