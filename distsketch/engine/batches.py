"""Rows appended to a fit: the pass over a new batch, and the batches' sums added in order.

With the realised sketches fixed (:meth:`~distsketch.sketches.base.RealizedSketch.grown`: the
columns of new rows are zero), every pass sum a direct solve reads (``G = CᵀC``, ``b = CᵀY``,
``M = DᵀC``, the intercept's column sums, the unique outputs) is a sum over row blocks, and
the new rows' blocks ``C_I = k(X_I, X_J) R_mixᵀ`` need only the landmarks. So a batch of new
rows costs one pass over those rows (:func:`batch_pass`), and the model's sums are the
batches' own sums added in batch order (:func:`add_batches`): never a subtraction, so
forgetting a batch re-adds the others and loses nothing to cancellation
(docs/design/growing.md).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..options import EngineOptions
from ..sketches.base import RealizedSketch
from .accumulate import run_pass
from .features import FeatureMap
from .fitpass import pass_block_rows
from .rows import RowSource
from .sums import PASS_SUMS, PassPlan, width_of

__all__ = ["APPENDABLE", "not_appendable", "batch_plan", "batch_pass", "add_batches",
           "local_sums"]

#: Pass sums that add over row batches (the others hold rows themselves: an exact side's
#: ``C``, ``D``, ``Y``; contiguous folds, which depend on the total n, have no ``@K`` form
#: here, seeded ones ``@K:seed`` do).
APPENDABLE = ("G", "B", "M", "E", "b", "s", "y1", "U", "yy", "count", "kyy", "digest")

def not_appendable(sums: tuple) -> list[str]:
    """The sums of ``sums`` that do not add over appended rows (none: a fit can grow)."""
    bad = []
    for name in sums:
        base, sep, folds = width_of(name)[0].partition("@")
        if base not in APPENDABLE or (sep and ":" not in folds):
            bad.append(name)
    return bad


def _check_appendable(sums: tuple) -> None:
    bad = not_appendable(sums)
    if bad:
        raise ValueError(f"partial_fit: the sums {bad} do not add over appended rows (an exact "
                         f"side, or contiguous folds); this model cannot take appended rows")


def batch_plan(X: RowSource, Y: RowSource | None, *, x_kernel, x_sketch: RealizedSketch,
               x_landmarks: Any, y_kernel=None, y_sketch: RealizedSketch | None = None,
               y_landmarks: Any = None, sums: tuple, offset: int,
               options: EngineOptions, x_widths: tuple = ()) -> PassPlan:
    """The pass plan of appended rows: training rows ``offset .. offset + X.n − 1``.

    ``x_sketch`` (and ``y_sketch``) are the fit's realised sketches grown over the new rows
    (``sketch.grown(offset + X.n)``): their columns there are zero, so the rows add their own
    blocks ``C_I = k(X_I, X_J) R_mixᵀ`` from the fit's landmarks and nothing to ``B`` or
    ``E``. The plan writes no blocks (``C = D = records = None``); a kept store's batch
    (:mod:`distsketch.engine.batchstore`) gives it its arrays.

    Parameters
    ----------
    X, Y : RowSource
        The new rows (``Y``: their targets or outputs, or None).
    x_kernel, y_kernel : Kernel
        The fitted kernels (a standardised kernel keeps the statistics of its fit).
    x_sketch, y_sketch : RealizedSketch
        Realised sketches over ``offset + X.n`` rows.
    x_landmarks, y_landmarks : array
        The rows of their supports (from the fit).
    sums : tuple of str
        The sums (:data:`APPENDABLE`, with width and seeded-fold suffixes).
    offset : int
        Training rows before these (the position of the batch's first row).
    options : EngineOptions
    x_widths : tuple of (Kernel, RealizedSketch)
        A kernel grid's further input kernels, each with its fitted realised sketch grown
        as ``x_sketch`` (over the same landmarks): the sums ``"<sum>~<j>"`` are the
        ``j``-th's, from its own blocks (:attr:`~distsketch.engine.sums.PassPlan.x_widths`,
        as the fit's pass computes them).

    Returns
    -------
    PassPlan
        Blocks of ``pass_block_rows`` rows, ``row_offset = offset``.
    """
    _check_appendable(tuple(sums))
    n = X.n
    for sketch in (x_sketch, y_sketch, *(sk for _, sk in x_widths)):
        if sketch is not None and sketch.n != offset + n:
            raise ValueError(f"batch_pass: a sketch over {sketch.n} rows for rows "
                             f"{offset}..{offset + n - 1}")
    dtype = np.dtype(options.block_dtype)
    b = pass_block_rows(options, X, Y, x_sketch, y_sketch, dtype,
                        extra=max((sk.m for _, sk in x_widths), default=0))
    return PassPlan(
        n=n, block_rows=b,
        x=FeatureMap(x_kernel, x_landmarks, x_sketch, options.gram_chunk, options.tuning),
        y=(FeatureMap(y_kernel, y_landmarks, y_sketch, options.gram_chunk, options.tuning)
           if y_sketch is not None else None),
        sums=tuple(sums), C=None, D=None, records=None, dtype=dtype,
        check_x=X.lazy, check_y=Y is not None and Y.lazy, direct_io=options.direct_io,
        backend=options.backend, row_offset=int(offset),
        x_widths=tuple(FeatureMap(k, x_landmarks, sk, options.gram_chunk, options.tuning)
                       for k, sk in x_widths))


def batch_pass(X: RowSource, Y: RowSource | None, *, options: EngineOptions, **kw) -> dict:
    """The pass sums of appended rows, blocks not stored: :func:`run_pass` of
    :func:`batch_plan` (same arguments).

    Returns
    -------
    dict
        The batch's sums, as :func:`~distsketch.engine.accumulate.run_pass` returns them
        (``U``'s first-occurrence indices are training-row positions, offset included).
    """
    plan = batch_plan(X, Y, options=options, **kw)
    return run_pass(plan, X, Y, split_every=options.split_every, progress=options.progress)


def _shifted(sums: dict, by: int) -> dict:
    """``sums`` with ``U``'s first-occurrence indices moved by ``by`` rows."""
    if "U" not in sums or by == 0:
        return sums
    rows, first = sums["U"]
    return {**sums, "U": (rows, np.asarray(first, dtype=np.int64) + int(by))}


def add_batches(parts: list[dict], rows: list[int]) -> dict:
    """The sums of consecutive batches, added in batch order (a left fold, float64).

    Parameters
    ----------
    parts : list of dict
        Each batch's own sums, ``U``'s indices counted from the batch's first row.
    rows : list of int
        The batches' row counts: batch ``k`` starts at ``sum(rows[:k])``.

    Returns
    -------
    dict
        The totals: arrays added, ``U`` merged (first occurrences, positions over the
        batches as given).
    """
    total: dict | None = None
    start = 0
    for part, count in zip(parts, rows):
        part = _shifted(part, start)
        if total is None:
            total = {k: (v if k == "U" else np.array(v, dtype=np.float64, copy=True))
                     for k, v in part.items()}
        else:
            total = PASS_SUMS.add(total, part)
        start += int(count)
    if total is None:
        raise ValueError("add_batches: no batch")
    return total


def local_sums(sums: dict, offset: int) -> dict:
    """A batch's sums with ``U``'s indices counted from its own first row (what
    :func:`add_batches` takes)."""
    return _shifted(sums, -int(offset))

