"""Tuning knobs of the engine's routes: :class:`Tuning`, the ``tuning`` field of
:class:`~distsketch.EngineOptions`, which tests and benchmarks pass to a fit.

Each field trades speed (or driver memory) for nothing else: a fit's model is the same for any
value up to float64 rounding (the fold route and band, the density rule, the panels and the
driver routes change the order of sums, never what is computed), except ``max_fold_bytes``,
which refuses fits, the solver thresholds, which pick between routes that converge to the same
model (to the iterative solvers' ``tol``), and ``auto_decode_budget``, which picks the scores
``scoring="auto"`` ranks by. The defaults are the measured values below.

A store's recorded configuration holds the density rule's fields only, and only away from
their defaults (:func:`store_config`): other tuning never changes which store a fit resumes.

This module imports nothing beyond the standard library, so block math (kernels, solve) reads
its defaults without importing dask (tests/test_structure.py); :mod:`distsketch.options`
re-exports it.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace

__all__ = ["Tuning", "check_tuning", "tuning_from_dict", "store_config", "BLOCK_FIELDS"]


@dataclass(frozen=True)
class Tuning:
    """Tuning knobs of a fit, passed as ``EngineOptions(tuning=Tuning(...))``.

    Parameters
    ----------
    fold_route : {None, "band", "woodbury"}
        Route of each fold's algebra in :class:`~distsketch.SISOKRCV`
        (``distsketch.model_selection.fold_algebra.sisokr_fold_scores``): ``None`` picks per fold by
        the flop model of ``distsketch.model_selection.fold_algebra.fold_route`` (weighted by the
        measured rate ratio ``BAND_RATE_WEIGHT`` there); ``"band"`` (congruence ``Pᵀ G_k P``
        and one band reduction per fold) or ``"woodbury"`` (pivoted Cholesky of ``G_k`` and a
        Woodbury solve per λ) forces one. The scores are the same to rounding either way
        (docs/design/model-selection.md, "Cross-validation from one pass"); forcing only changes
        the time.
    fold_threads : int or None
        Threads for the folds' driver work in SISOKRCV: ``None`` = one per core this process
        may use (at most the number of folds). Each thread runs single-threaded BLAS; the
        folds are independent and each is computed the same way on any thread, so the scores
        are bitwise independent of it. Measured (benchmarks/ENGINE.md, ``cv``): folds on
        both cores of the 2-core machine 2.18× one plain fit, on one thread 2.78×.
    fold_band : int
        Bandwidth of the per-fold band reduction (the band route): the reduction's panels are
        matrix products of this width, each shift's banded Cholesky solve costs
        ``O(r · fold_band)`` per right-hand side; 96 balances the two at ``r_X ≈ 2000``
        (benchmarks/bench_cv.py, 32–128 tried). Scores are the same to rounding for any width.
    max_fold_bytes : int
        Largest per-fold sums a CV estimator holds on the driver (``K · m_X · (m_X + m_Y)``
        float64, ``m_Y = 0`` for SketchedKRRCV; an exact side has ``m = n``): beyond, a fit is
        refused before the pass, naming the side. 8 GiB: a budget for the driver's memory,
        not a measured crossover; raise it on a driver with more memory.
    auto_decode_budget : float
        ``scoring="auto"`` of SISOKRCV (and model selection's default SISOKR metric,
        ``distsketch.model_selection.scoring.auto_scoring``): the largest decode cost, in
        multiply-adds ``n · n_U · settings · m_Y`` (``n_U`` unique training outputs: every
        row decoded against every unique training output
        at every (γ, λ, p) grid point, each candidate score an ``r_Y ≤ m_Y`` inner product),
        at which the folds are decoded and scored by the task's metric; above it, the
        surrogate error with a warning. Measured: the decode of n = 6000 rows × n_U = 6000 ×
        6 λ × m_Y = 150 (3.2e10) added 2.4 s to a 0.2 s SISOKRCV fit (5 folds, m_X = 300) on
        two shared cores, about 1.3e10 multiply-adds/s, so 1e11 is some 8 s of decoding there
        (a few on an idle multi-core machine).
    auto_rank : int
        ``solver="auto"`` of the Lipschitz-loss machines takes ADMM from this many whitened
        features r on, Newton below (``distsketch.solvers.lipschitz.admm.choose_route``). A
        Newton iteration
        forms weighted Grams of ``n_band·(m+1)²`` flops (``d²`` of them for radial
        multi-output losses, each ``8(m+1)²`` bytes: 128 MiB at m = 4000) and factorises an
        ``r³/3`` system, while an ADMM iteration costs what the Newton gradient alone does
        (``O(n m d)`` in the blocks) plus ``O(r² d)`` on the driver. At r = 4000 one Newton
        iteration with a tenth of n = 10⁵ rows in its Gram is ~1.6e11 flops against ~8e8 for
        ADMM's: ADMM's 10–100× more iterations break even there.
    auto_pcg_passes : float
        ``solver="auto"``'s cost model (``distsketch.solvers.pcg.choose_solver``): the passes PCG
        makes. The direct route's pass forms ``G = CᵀC``, ``2nm²`` flops more than one pass
        of kernel blocks; PCG makes about ``auto_pcg_passes`` passes of ``n·m`` kernel values,
        each value costing as much as ``auto_pass_flops`` flops of the direct route. Direct
        while ``2nm² ≤ auto_pcg_passes · n·m · auto_pass_flops``, i.e. while ``m ≤ 8 100``
        whatever n. Measured (benchmarks/bench_large_m.py, n = 1e5, λ = 1e-6, tol = 1e-6,
        RESULTS.md ``large_m``, a quiet machine): direct faster up to m = 8000 (116 s against
        PCG's 154 s: 42 passes), PCG faster at m = 12 000 (277 s, 32 passes, against 311 s);
        a later quiet run found both about equal at m = 8000 (direct 106 s, PCG 103 s) and
        PCG faster at m = 10 000 (119 s against 179 s): the threshold stands.
    auto_pass_flops : float
        See ``auto_pcg_passes``: direct-route flops one kernel value of a PCG pass costs
        (exponentials, then ``K v`` and ``Kᵀ(Kv)``). Measured ≈ 490 on a quiet machine
        (3.6 s per pass of 8e8 values at m = 8000), 360 under load before float32 blocks were
        multiplied tile by tile; 360 with 45 passes puts the crossover at m = 8 100.
    sparse_max_density : float
        Density (stored entries / (rows × columns)) above which a scipy.sparse operand of a
        built-in kernel is densified before its product (:func:`distsketch.kernels.tuned`);
        at or below it stays sparse. Measured by ``python benchmarks/bench_sparse_blocks.py``
        (benchmarks/ENGINE.md, ``sparse_blocks``): Gaussian blocks of b ∈ {1000, 4000} CSR
        rows, d ∈ {1000, 2000}, against 2000 landmarks, one BLAS thread; the CSR route
        (``2·nnz·n_b`` flops at 0.9–5.5 GFLOP/s) meets the dense GEMM (``2·b·d·n_b`` flops at
        32–38 GFLOP/s) at densities 8.0 % (1000 × 1000), 12.5 % (1000 × 2000), 13.1 %
        (4000 × 1000) and 12.8 % (4000 × 2000): the smallest is the threshold. 0 densifies
        every sparse operand, 1 keeps every one sparse; kernel values agree to rounding.
    sparse_panel_bytes : int
        Bytes of one dense panel of right-operand columns that a CSR block multiplies (the
        sparse route): small enough to stay in cache while every stored entry of the CSR block
        reads a row of it (4 MiB, the kernels' tile size). One panel of the whole operand
        costs each stored entry a row of ``n_b`` values from memory: measured 1.3–2.4× slower
        at d = 2 000 from 4 % density on (benchmarks/ENGINE.md, ``sparse_blocks``). 0 turns
        densification of the right operand off (CSR × CSR products).
    device_sparse_max_density : float or None
        The same rule for a compute backend's own sparse blocks (device CSR): ``None`` takes
        each backend's threshold (``Backend.sparse_max_density``: for CuPy
        ``distsketch.backends.cuda.DEVICE_SPARSE_MAX_DENSITY``, a placeholder of 2 % until measured on
        a GPU by ``python benchmarks/bench_gpu.py --sparse-only``); a number overrides it.
    device_factor_min_m : int or None
        Landmarks (m) from which PCG, on a device backend (``EngineOptions(device="cuda")``),
        factors ``K_mm`` and applies its preconditioner on the driver's device
        (``distsketch.solvers.devicefactor``): ``None`` takes the backend's own threshold
        (``Backend.factor_min_m``: for CuPy ``distsketch.backends.cuda.DEVICE_FACTOR_MIN_M``,
        a placeholder of 4096 until measured on a GPU by ``python benchmarks/bench_gpu.py
        --factor-only``); a number overrides it. Where the driver has no device (a driver
        without CuPy or a GPU, workers with one), the host factors. The model is the same to
        the solver's ``tol`` either way (the factor differs by rounding).
    whole_problem_entries : int
        The Newton route of the losses with entry-wise kinks (scalar ε-insensitive, pinball,
        joint quantiles) gathers every entry at each of its kinks (``n·d`` entries, ``2n`` for
        ε > 0) on the driver while there are at most this many, and solves the whole problem
        there exactly from its first certified sweep (an interior-point method, then the
        active set's vertex: ``distsketch.solvers.lipschitz.restricted``): three sweeps per λ. Beyond, or with 0, the smoothing continuation, whose polishes solve the
        problem restricted to a window around the kinks. Both end at the same model (to the
        fit's ``tol``; where the minimiser is not unique, e.g. a quantile level's intercept
        over a gap in the targets, possibly another of the minimisers). 4000, the window's
        own cap (``WINDOW_ENTRIES``), keeps the gathered rows of ``C`` within 4000·m float64
        values per sweep. Measured (benchmarks/bench_small_fits.py, RESULTS.md
        ``small_fits``): the joint quantile fit of 3 levels × 4 λ on 300 rows (900 entries)
        in 12 sweeps instead of 64, the ε-insensitive fit on 400 rows (800 entries) in 3
        instead of 16.
    eigen_crossover : tuple of (int, float) pairs
        Path length (number of λ) from which one eigendecomposition beats a Cholesky
        factorisation per λ on a sketched input side, by the rank r of ``H``
        (``distsketch.solvers.direct.eigen_pays``): pairs ``(r, length)`` with increasing r,
        interpolated between them, the end values beyond. Measured on a 2-core AMD EPYC
        shared with other work, one BLAS thread, by ``python benchmarks/bench_bibtex.py
        --driver-crossover`` (docs/design/math.md, "Driver routes"), ``k* = (t_eig − t_safety) /
        t_per-λ`` with r_Y = 200 (one right-hand side, KRR, moves it up 1.2–3.5×) at load
        average 5: r = 250: 5.2, 500: 7.1, 1000: 7.2, 2000: 19.6, 3000: 18.2 (at load 9:
        11.5, 5.5, 8.9, 16.2, 22.0); the eigendecomposition's memory-bound tridiagonal
        reduction slows relative to the Cholesky factorisation as r grows. Both routes give
        the same model to rounding.

    See Also
    --------
    distsketch.EngineOptions : The engine options that carry a ``Tuning``.

    Examples
    --------
    >>> from distsketch import EngineOptions, Tuning
    >>> options = EngineOptions(tuning=Tuning(auto_rank=2000))
    >>> options.tuning.auto_rank
    2000
    """

    fold_route: str | None = None
    fold_threads: int | None = None
    fold_band: int = 96
    max_fold_bytes: int = 8 * 2**30
    auto_decode_budget: float = 1e11
    auto_rank: int = 4000
    auto_pcg_passes: float = 45
    auto_pass_flops: float = 360
    sparse_max_density: float = 0.08
    sparse_panel_bytes: int = 4 << 20
    device_sparse_max_density: float | None = None
    device_factor_min_m: int | None = None
    whole_problem_entries: int = 4000
    eigen_crossover: tuple = ((250, 5.2), (500, 7.1), (1000, 7.2), (2000, 19.6), (3000, 18.2))


def _bad(name: str, msg: str) -> ValueError:
    return ValueError(f"options.tuning.{name}: {msg}")


def _integer(v, name: str, *, low: int, allow_none: bool = False, what: str = "") -> None:
    if v is None and allow_none:
        return
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < low:
        kind = "a positive integer" if low >= 1 else "a non-negative integer"
        none = " or None" if allow_none else ""
        raise _bad(name, f"must be {kind}{what}{none}, got {v!r}")


def _real(v, name: str, *, low: float, high: float = math.inf, allow_none: bool = False,
          what: str = "") -> None:
    if v is None and allow_none:
        return
    if (isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v)
            or not low <= v <= high):
        span = f"in [{low:g}, {high:g}]" if math.isfinite(high) else f"at least {low:g}"
        none = " or None" if allow_none else ""
        raise _bad(name, f"must be a number {span}{what}{none}, got {v!r}")


def _crossover(v) -> tuple:
    """``eigen_crossover`` as a tuple of ``(int, float)`` pairs, checked."""
    msg = ("must be a non-empty sequence of (r, path length) pairs with r positive and "
           "increasing and lengths non-negative, e.g. ((250, 5.2), (500, 7.1)); got ")
    try:
        pairs = tuple((r, k) for r, k in v)
    except (TypeError, ValueError):
        raise _bad("eigen_crossover", msg + repr(v)) from None
    ok = bool(pairs) and all(
        not isinstance(r, bool) and isinstance(r, numbers.Real) and math.isfinite(r) and r > 0
        and not isinstance(k, bool) and isinstance(k, numbers.Real) and math.isfinite(k)
        and k >= 0 for r, k in pairs)
    if not ok or any(a[0] >= b[0] for a, b in zip(pairs, pairs[1:])):
        raise _bad("eigen_crossover", msg + repr(v))
    return tuple((r, k) for r, k in pairs)


def check_tuning(tuning: Tuning | None) -> Tuning:
    """Validate ``tuning``; errors name ``options.tuning.<field>`` and what it accepts.

    Parameters
    ----------
    tuning : Tuning or None
        The knobs (``None`` gives the defaults).

    Returns
    -------
    Tuning
        ``tuning``, with ``eigen_crossover`` as a tuple of pairs (a list given is
        converted).

    Raises
    ------
    ValueError
        A field out of its range, naming it.
    """
    if tuning is None:
        return Tuning()
    if not isinstance(tuning, Tuning):
        raise ValueError(f"options.tuning: expected a distsketch.Tuning, got {tuning!r}; "
                         f"write EngineOptions(tuning=distsketch.Tuning(...))")
    t = tuning
    if t.fold_route not in (None, "band", "woodbury"):
        raise _bad("fold_route", f"expected None (the flop model picks per fold), 'band' or "
                                 f"'woodbury', got {t.fold_route!r}")
    _integer(t.fold_threads, "fold_threads", low=1, allow_none=True,
             what=" (None: one per core)")
    _integer(t.fold_band, "fold_band", low=1, what=" (the band reduction's width)")
    _integer(t.max_fold_bytes, "max_fold_bytes", low=1, what=" (bytes)")
    _real(t.auto_decode_budget, "auto_decode_budget", low=0.0, what=" (multiply-adds)")
    _integer(t.auto_rank, "auto_rank", low=1, what=" (whitened features)")
    _real(t.auto_pcg_passes, "auto_pcg_passes", low=0.0)
    _real(t.auto_pass_flops, "auto_pass_flops", low=0.0)
    _real(t.sparse_max_density, "sparse_max_density", low=0.0, high=1.0,
          what=" (0: always densify, 1: always keep sparse)")
    _integer(t.sparse_panel_bytes, "sparse_panel_bytes", low=0,
             what=" (bytes; 0: CSR × CSR products)")
    _real(t.device_sparse_max_density, "device_sparse_max_density", low=0.0, high=1.0,
          allow_none=True, what=" (None: the backend's own threshold)")
    _integer(t.device_factor_min_m, "device_factor_min_m", low=1, allow_none=True,
             what=" (landmarks)")
    _integer(t.whole_problem_entries, "whole_problem_entries", low=0,
             what=" (entries; 0: never the whole problem)")
    pairs = _crossover(t.eigen_crossover)
    return t if pairs == t.eigen_crossover else replace(t, eigen_crossover=pairs)


#: The fields that change the pass's blocks (which route computes a kernel block, so its
#: rounding): a store records them, when not at their defaults, so that a resumed pass is
#: bitwise the uninterrupted one (as it records ``gram_chunk``). The other fields act on the
#: driver after the pass or choose a solver: never part of a store's identity.
BLOCK_FIELDS = ("sparse_max_density", "sparse_panel_bytes", "device_sparse_max_density")


def store_config(tuning: Tuning | None) -> dict:
    """What a store's recorded configuration holds of ``tuning``.

    Parameters
    ----------
    tuning : Tuning or None
        The knobs (``None``: the defaults).

    Returns
    -------
    dict
        ``{}`` while the ``BLOCK_FIELDS`` are at their defaults (so stores written before
        ``Tuning`` existed, and every fit at the defaults, keep their identity), else
        ``{"block_tuning": {field: value}}``.
    """
    tuning = check_tuning(tuning)
    default = Tuning()
    if all(getattr(tuning, f) == getattr(default, f) for f in BLOCK_FIELDS):
        return {}
    return {"block_tuning": {f: getattr(tuning, f) for f in BLOCK_FIELDS}}


def tuning_from_dict(values: Mapping) -> Tuning:
    """A ``Tuning`` from a mapping of its fields (a saved model's JSON, a TOML table).

    Parameters
    ----------
    values : mapping
        Field name → value; lists become tuples.

    Returns
    -------
    Tuning
        The knobs (not validated: see :func:`check_tuning`).

    Raises
    ------
    ValueError
        An unknown key, naming it.
    """
    known = {f.name for f in fields(Tuning)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"options.tuning: unknown field(s) {unknown}; the fields are "
                         f"{sorted(known)}")
    out = dict(values)
    if isinstance(out.get("eigen_crossover"), list):
        out["eigen_crossover"] = tuple(tuple(p) if isinstance(p, list) else p
                                       for p in out["eigen_crossover"])
    return Tuning(**out)
