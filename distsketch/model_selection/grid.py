"""The grid a CV estimator searches: candidate input kernels and widths, and the grid's edges.

:func:`candidate_kernels` builds the input-kernel candidates (``kernels`` × ``gammas``:
:func:`check_gammas`, :func:`with_width`) and their ``cv_results_`` columns
(:func:`prefixes_of`); :func:`json_kernels` refuses, with a store, candidates that cannot be
saved as JSON. A selected value at the smallest or largest value of its grid is named in a
:class:`GridEdgeWarning` (:func:`grid_edges`, :func:`warn_edges`): the best value may lie beyond
the grid.
"""

from __future__ import annotations

import numbers
import warnings

import numpy as np

__all__ = ["GridEdgeWarning", "grid_edges", "warn_edges", "prefixes_of", "kernel_descriptions",
           "candidate_kernels", "json_kernels", "check_gammas", "with_width"]


class GridEdgeWarning(UserWarning):
    """A selected value (λ, a kernel width γ, a rank) is the smallest or largest of its grid:
    the best value may lie beyond the grid (``distsketch.model_selection.grid.grid_edges``)."""


def _fmt(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def grid_edges(best: dict, grids: dict, *, full_rank: int | None = None,
               prefix: str = "cv") -> list[str]:
    """Messages for the selected values that lie at an edge of their grid.

    Parameters
    ----------
    best : dict
        The selected point, ``{"lam": …, "gamma": …, "rank": …}`` (absent or None: not
        searched).
    grids : dict
        ``{key: (argument name, values)}``: each searched parameter's grid (as given: only its
        distinct values count; a grid of one value is no search and never at an edge).
    full_rank : int, optional
        ``r_Y``: a rank at least this is the full model, the largest a rank can be (no edge).
    prefix : str
        Start of each message.

    Returns
    -------
    list of str
        One message per parameter at an edge: the parameter, its edge value, the grid's range
        and the fix (extend the grid beyond the edge, with two suggested values: λ and γ by
        factors of 10, a rank by halving or doubling).

    Notes
    -----
    An edge is the smallest or the largest value of a numeric grid. The kernel itself (a
    category) has no edge. Where the selected value is at an edge the score was still
    improving towards it (or flat): a value beyond the grid may be better, and a search that
    cannot see past its grid cannot say so otherwise.
    """
    out = []
    for key, (name, values) in grids.items():
        v = best.get(key)
        vals = sorted({float(x) if key != "rank" else int(x) for x in values
                       if x is not None}) if values is not None else []
        if v is None or len(vals) < 2:
            continue
        lo, hi = vals[0], vals[-1]
        if v != lo and v != hi:
            continue
        symbol = {"lam": "λ", "gamma": "γ"}.get(key, key)
        if key == "rank":
            if v == hi and full_rank is not None and v >= full_rank:
                continue
            nxt = [max(1, v // 2), max(1, v // 4)] if v == lo else [v * 2, v * 4]
            if v == lo and v == 1:
                continue  # the smallest rank there is
        else:
            nxt = [v / 10, v / 100] if v == lo else [v * 10, v * 100]
        side = "smallest" if v == lo else "largest"
        where = "below" if v == lo else "above"
        out.append(f"{prefix}: the selected {symbol} = {_fmt(v)} is the {side} value of {name} "
                   f"({_fmt(lo)} … {_fmt(hi)}); the best {symbol} may lie {where} the grid: "
                   f"extend {name} {where} {_fmt(v)} (e.g. add "
                   f"{', '.join(_fmt(x) for x in nxt)}) and select again")
    return out


def warn_edges(messages, stacklevel: int = 3) -> None:
    """One :class:`GridEdgeWarning` per message of :func:`grid_edges`."""
    for msg in messages:
        warnings.warn(msg, GridEdgeWarning, stacklevel=stacklevel + 1)


def prefixes_of(prefixes, gammas):
    """The per-kernel columns: ``prefixes``, else (a model saved with a width grid only) one
    ``{"gamma": γ}`` per width, else None."""
    if prefixes is not None:
        return [dict(p) for p in prefixes]
    return None if gammas is None else [{"gamma": g} for g in gammas]


def kernel_descriptions(prefixes) -> list | None:
    """The ``kernels_`` of a fitted grid: each candidate's kernel description from its
    ``cv_results_`` columns ``prefixes``, or None where the grid has no ``kernels`` (a width
    grid, or none)."""
    if prefixes is None or "kernel" not in prefixes[0]:
        return None
    return [p["kernel"] for p in prefixes]


def candidate_kernels(kernel, kernels, gammas, *, kernel_name: str):
    """The input-kernel candidates of a CV estimator: ``(kernels, prefixes)``, one kernel per
    candidate (in ``cv_results_`` order) and its ``cv_results_`` columns, or ``(None, None)``
    for the kernel as given.

    Without ``kernels``: the kernel at each width of ``gammas`` (prefix ``{"gamma": γ}``).
    With ``kernels`` (:func:`distsketch.model_selection.kernel_grid.check_kernels`: names, config
    mappings, kernels; each inside the estimator kernel's standardisation when it has one): each
    entry, crossed with ``gammas`` when it has a ``gamma`` (prefix ``{"kernel": description,
    "gamma": γ or None}``, ``gamma`` only with ``gammas``)."""
    from ..kernels.base import check_kernel
    from .kernel_grid import check_kernels, describe_kernel, has_gamma, inside_standardization

    if kernels is None:
        if gammas is None:
            return None, None
        return ([with_width(kernel, g, kernel_name=kernel_name) for g in gammas],
                [{"gamma": float(g)} for g in gammas])
    base = check_kernel(kernel, name=kernel_name)
    try:
        entries = check_kernels(kernels, gammas=gammas, argument="@")
    except ValueError as exc:
        raise ValueError(str(exc).replace("@.", "")) from None
    out, prefixes = [], []
    for k in entries:
        k = inside_standardization(base, k)
        for g in (gammas if gammas is not None and has_gamma(k) else [None]):
            cand = k if g is None else with_width(k, g, kernel_name="kernels")
            prefix = {"kernel": describe_kernel(cand, gammas is not None)}
            if gammas is not None:
                prefix["gamma"] = None if g is None else float(g)
            out.append(cand)
            prefixes.append(prefix)
    return out, prefixes


def json_kernels(kernels, store) -> None:
    """With a ``store``, ``kernels`` is saved with the model's parameters: names and config
    mappings only."""
    if store is None or kernels is None:
        return
    for i, k in enumerate(kernels):
        if not isinstance(k, (str, dict)):
            raise ValueError(f"kernels[{i}]: with a store, give each kernel as a name or a "
                             f"config table ({{'name': 'gaussian', 'gamma': 0.1}}), not "
                             f"{type(k).__name__} (the parameters are saved as JSON)")


def check_gammas(gammas, *, argument: str = "gammas") -> list[float] | None:
    """A width grid: None, or a non-empty sequence of distinct positive finite numbers."""
    if gammas is None:
        return None
    if (isinstance(gammas, (str, bytes)) or not hasattr(gammas, "__len__") or not len(gammas)
            or not all(isinstance(g, numbers.Real) and not isinstance(g, bool)
                       and np.isfinite(g) and g > 0 for g in gammas)):
        raise ValueError(f"{argument}: expected a non-empty list of positive kernel widths, "
                         f"got {gammas!r}")
    if len({float(g) for g in gammas}) != len(gammas):
        raise ValueError(f"{argument}: the widths must be distinct, got {list(gammas)!r}")
    return [float(g) for g in gammas]


def with_width(kernel, gamma: float, *, argument: str = "gammas", kernel_name: str = "kernel"):
    """A copy of ``kernel`` (a kernel with a ``gamma``, possibly :class:`Standardized`) with
    width ``gamma``."""
    from ..kernels.base import check_kernel
    from ..kernels.standardized import Standardized

    kernel = check_kernel(kernel, name=kernel_name)
    if isinstance(kernel, Standardized):
        return Standardized(with_width(kernel.kernel, gamma, argument=argument), kernel.mean,
                            kernel.scale)
    params = kernel.get_params(deep=False)
    if "gamma" not in params:
        raise ValueError(f"{argument}: the kernel {kernel!r} has no width gamma to vary; drop "
                         f"{argument} or use a kernel with one (Gaussian, Laplacian, Matern, "
                         f"…)")
    return type(kernel)(**{**params, "gamma": float(gamma)})
