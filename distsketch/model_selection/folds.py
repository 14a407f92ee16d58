"""The folds of a cross-validation from one pass: the fold spec, exact sides, summed folds.

:func:`fold_spec` turns ``cv`` (a number of folds or a KFold-like splitter) into the pass's fold
spec ``"K"`` / ``"K:seed"`` (:func:`distsketch.engine.sums.fold_ids`);
:func:`all_rows_for_exact_sides` cross-validates an exact side as the all-rows sub-sampling
``SubSampling(n)``, within the driver's budget for the per-fold sums; :func:`ordered_sum` adds
per-fold sums in a fixed order (the same bits on every machine); :func:`appending_refusal` says
why a cross-validation cannot take appended rows and :func:`fitted_widths` gives a re-solve
the input kernels of its grid (docs/design/growing.md, "Cross-validation").
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..engine.sums import fold_spec
from ..models.base import FitSpec

__all__ = ["fold_spec", "appending_refusal", "fitted_widths", "all_rows_for_exact_sides",
           "ordered_sum"]


def appending_refusal(cv, *, sketches: dict) -> str | None:
    """Why a cross-validation with folds ``cv`` (the ``cv`` argument or its fold spec) cannot
    take appended rows, or None.

    Appended rows keep their fold, ``splitmix64(seed, i) mod K`` of their position ``i`` among
    the rows held (:func:`~distsketch.engine.sums.fold_ids`), which is the fold a fresh fit on
    all the rows gives them: only seeded folds (``"K:seed"``) are a function of the row alone;
    contiguous folds (``"K"``, row ``i`` in fold ``⌊iK/n⌋``) move with the total ``n``. An
    exact side would need an ``n × n`` system that grows with the rows. A grid of input
    kernels (``gammas``, ``kernels``) takes rows: the pass over a batch computes every width's
    blocks and per-fold sums, with each width's realised sketch as the fit drew it.

    Parameters
    ----------
    cv : int, str or KFold-like
        As :func:`fold_spec` takes it (an invalid one: None, the fit reports it).
    sketches : dict
        The sketch arguments by parameter name (an exact side: None or ``Identity()``).
    """
    exact = next((name for name, sk in sketches.items()
                  if sk is None or getattr(sk, "exact", False) is True
                  or getattr(sk, "is_identity", False) is True), None)
    if exact is not None:
        return (f"an exact side ({exact}=None or Identity()) is cross-validated as the "
                f"all-rows SubSampling(n), which new rows enlarge; give {exact} a sketch")
    try:
        spec = fold_spec(cv)
    except ValueError:
        return None
    if ":" not in spec:
        return (f"cv: contiguous folds (cv={cv!r}) depend on the number of rows, which "
                f"appended rows change; shuffled folds keep each row's fold (a seeded hash of "
                f"its position): cv=KFold(n_splits={spec}, shuffle=True, random_state=0) or "
                f"cv='{spec}:0'")
    return None


def fitted_widths(growth, kernel: str) -> list | None:
    """The input kernels a re-solve over the batches ``growth`` holds scores: the fitted grid,
    width 0 (``growth.kernels[kernel]``) first, then the further widths the batches' sums
    ``"<sum>~<j>"`` are of; None without a grid.

    Parameters
    ----------
    growth : Growth
        The batches held (``distsketch.models.growing.Growth``).
    kernel : str
        The input kernel's parameter name (``"kernel"``, ``"input_kernel"``).

    Returns
    -------
    list of Kernel or None
    """
    if not growth.x_widths:
        return None
    return [growth.kernels[kernel], *(k for k, _ in growth.x_widths)]


def all_rows_for_exact_sides(spec: FitSpec, K: int) -> FitSpec:
    """``spec`` with each exact side (``Identity``) as the all-rows sub-sampling ``SubSampling(n)``
    (``R = I_n``: every training row a landmark, in order, scale 1), after checking that the
    per-fold sums fit ``spec.options.tuning.max_fold_bytes`` (:class:`~distsketch.Tuning`).

    The fold scores of an exact side are those of the exact per-fold models: the model trained
    without fold ``k`` minimises its objective over the span of the training rows' features,
    a subspace of the span of all rows' features that ``SubSampling(n)`` gives (representer
    theorem), and the validation error of ``ψ(y)`` in H_Y is measured in the span of all
    rows' outputs, which holds both ``ĥ(x)`` and ``ψ(y)``. The refit is the exact model in the
    whitened basis of ``K`` (directions of ``K`` below ``eig_rtol`` dropped, as for every
    sketched side).
    """
    from ..sketches.sampling import Identity, SubSampling

    n = spec.X.n
    sketches = {name: SubSampling(n) if isinstance(sk, Identity) else sk
                for name, sk in spec.sketches.items()}
    names = list(sketches)  # ["sketch"] (SketchedKRRCV) or ["input_sketch", "output_sketch"]
    m_x = int(getattr(sketches[names[0]], "m", n))
    m_y = int(getattr(sketches[names[1]], "m", n)) if len(names) > 1 else 0
    need = 8 * K * m_x * (m_x + m_y)
    budget = spec.options.tuning.max_fold_bytes
    if need > budget:
        exact = [name for name, sk in spec.sketches.items() if isinstance(sk, Identity)]
        name = (exact or names)[0]
        fit = int((budget / (8 * K * len(names))) ** 0.5)  # m_X = m_Y = fit
        raise ValueError(f"{name}: the per-fold sums {'G_k' if m_y == 0 else 'G_k, M_k'} "
                         f"({K} folds × {m_x} × {m_x + m_y} float64) take "
                         f"{need / 2**20:,.0f} MiB on the driver, more than "
                         f"options.tuning.max_fold_bytes = {budget / 2**20:,.0f} MiB; "
                         f"give a smaller sketch (e.g. SubSampling({max(1, min(n - 1, fit))})), "
                         f"fewer folds, or a larger budget on a driver with the memory "
                         f"(EngineOptions(tuning=Tuning(max_fold_bytes=…)))")
    return dataclasses.replace(spec, sketches=sketches)


def ordered_sum(parts: np.ndarray) -> np.ndarray:
    """``Σ_k parts[k]`` added in fold order (a fixed order: the same bits on every machine)."""
    out = parts[0].copy()
    for p in parts[1:]:
        out += p
    return out
