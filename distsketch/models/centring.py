"""SISOKR's centred vector outputs on appended rows: the batches' sums re-centred by the mean
over every row held.

Glossary (docs/design/growing.md, "Centred outputs"):

=======  ==========================================================================
c        the reference offset, ``ȳ₀`` of the fit's rows (d,)
ȳ        the mean of the outputs over every row held, ``c + δ`` (d,)
δ        ``ȳ − c = (1/n) Σ_i (y_i − c)`` (d,)
C        ``K_X R_Xᵀ`` (n × m_X) over every row held
L_c      the output landmarks centred by ``c``, ``Y_J − 1cᵀ`` (s'_Y × d)
R_mix    the output sketch's mixing (m_Y × s'_Y), whitening included where pre-whitened
Z        ``R_mix (L_c − 1δᵀ)`` (m_Y × d): the sketched, centred output landmarks
=======  ==========================================================================

With a :class:`~distsketch.kernels.Linear` output kernel and outputs centred by ȳ, the output
block of the pass is ``D = (Y − 1ȳᵀ) Zᵀ``, so the two output-side sums SISOKR reads are

    M = DᵀC = Z (Y − 1ȳᵀ)ᵀ C = Z (b − s δᵀ)ᵀ,        E = R_Y K_Y R_Yᵀ = Z Zᵀ,

with ``b = Cᵀ(Y − 1cᵀ)`` (``"b"``), ``s = Cᵀ1`` (``"s"``) and ``y1 = Σ_i (y_i − c)``
(``"y1"``): sums that add over row batches when every batch is offset by the same ``c``.
A growing fit computes them beside its own sums (their targets are its centred rows, offset
by ``c = ȳ₀`` already), each appended batch's pass takes its rows offset by ``c``, and every
re-solve forms ``M`` and ``E`` from the totals (:func:`recentred`). Offsetting by ``c`` rather
than 0 keeps the subtraction ``b − s δᵀ`` small: it cancels ``|δ|/|y − ȳ|`` of the terms,
not ``|ȳ|/|y − ȳ|`` (outputs with a large mean).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ..backends.base import dense
from ..engine.rows import as_row_source

__all__ = ["INTERCEPT_SUMS", "Centring", "CentredGrowth", "centring_sums", "offset_rows", "recentred",
           "start_centring", "centring_state", "centring_from_state"]

#: The sums a growing fit with centred outputs adds to its own: ``b``, ``s``, ``y1``.
INTERCEPT_SUMS = ("b", "s", "y1")


@dataclasses.dataclass(frozen=True)
class Centring:
    """The reference of a growing model's centred outputs.

    Attributes
    ----------
    offset : ndarray of shape (d,)
        ``c``: the mean of the fit's rows, by which every batch's outputs are offset.
    landmarks : ndarray of shape (s'_Y, d)
        ``L_c = Y_J − 1cᵀ``: the output landmarks offset by ``c`` (float64).
    """

    offset: np.ndarray
    landmarks: np.ndarray


def centring_sums(sums: tuple[str, ...], *, centred: bool) -> tuple[str, ...]:
    """The pass sums of a fit: ``sums``, and :data:`INTERCEPT_SUMS` before the digest where
    the outputs are ``centred`` and the fit can grow (``"digest"`` among ``sums``)."""
    if not centred or "digest" not in sums:
        return sums
    head = tuple(s for s in sums if s != "digest")
    return head + tuple(s for s in INTERCEPT_SUMS if s not in head) + ("digest",)


def start_centring(offset: np.ndarray | None, growth: Any) -> Centring | None:
    """The :class:`Centring` of a fit that can grow (``growth``: its
    :class:`~distsketch.models.growing.Growth`, or None) with outputs centred by ``offset``
    (None: not centred)."""
    if offset is None or growth is None:
        return None
    landmarks = np.array(dense(growth.y_landmarks), dtype=np.float64, copy=True)
    return Centring(np.array(offset, dtype=np.float64, copy=True), landmarks)


def offset_rows(Y: Any, centring: Centring | None) -> Any:
    """An appended batch's output rows offset by ``c``, ``Y − 1cᵀ``, as a row source (numpy
    and sparse in: dense numpy; dask and zarr: lazily); ``Y`` itself without a centring."""
    if centring is None:
        return Y
    c = centring.offset
    if Y.kind in ("numpy", "sparse"):
        data = Y.data.toarray() if Y.kind == "sparse" else Y.data
        return as_row_source(np.asarray(data, dtype=np.float64).reshape(Y.shape) - c,
                             argument="Y")
    import dask.array as da

    A = (Y.data if Y.kind == "dask" else da.from_zarr(Y.data)).astype(np.float64)
    return as_row_source(A.reshape(Y.shape) - c, argument="Y")


def recentred(result: Any, centring: Centring) -> tuple[Any, np.ndarray]:
    """The pass result of every batch held, with the outputs centred by their mean ``ȳ``.

    ``ȳ = c + δ``, ``δ = y1 / n``; the output landmarks become ``L_c − 1δᵀ`` and the sums
    ``M = Z (b − s δᵀ)ᵀ`` (m_Y × m_X) and ``E = Z Zᵀ`` (m_Y × m_Y) with
    ``Z = R_mix (L_c − 1δᵀ)`` (module docstring), in float64.

    Parameters
    ----------
    result : PassResult
        The batches' totals (:meth:`~distsketch.models.growing.Growth.result`), with the
        sums :data:`INTERCEPT_SUMS` of outputs offset by ``c``.
    centring : Centring

    Returns
    -------
    result : PassResult
        ``result`` with ``M``, ``E`` and the output landmarks of the centred outputs.
    ybar : ndarray of shape (d,)
        The intercept ``ȳ``.
    """
    sums = dict(result.sums)
    delta = np.asarray(sums["y1"], dtype=np.float64).reshape(-1) / result.n
    ybar = centring.offset + delta
    landmarks = centring.landmarks - delta
    Z = np.asarray(result.y_sketch.mixing @ landmarks, dtype=np.float64)  # (m_Y, d)
    b = np.asarray(sums["b"], dtype=np.float64).reshape(-1, delta.size)
    s = np.asarray(sums["s"], dtype=np.float64).reshape(-1)
    sums["M"] = Z @ (b - np.outer(s, delta)).T
    E = Z @ Z.T
    sums["E"] = 0.5 * (E + E.T)
    return dataclasses.replace(result, sums=sums, y_landmarks=landmarks), ybar


def centring_state(centring: Centring | None) -> dict:
    """A saved model's arrays of its centring (none without one)."""
    if centring is None:
        return {}
    return {"centring_offset": centring.offset, "centring_landmarks": centring.landmarks}


def centring_from_state(arrays: dict) -> Centring | None:
    """Inverse of :func:`centring_state`."""
    if arrays.get("centring_offset") is None:
        return None
    return Centring(np.asarray(arrays["centring_offset"], dtype=np.float64),
                    np.asarray(arrays["centring_landmarks"], dtype=np.float64))


class CentredGrowth:
    """Mixin (before :class:`~distsketch.models.growing.Growing`) of a model whose outputs
    are centred by the mean of its rows when ``_offset`` (``ȳ``, set by its ``_validate``) is
    not None: its growing fit adds :data:`INTERCEPT_SUMS`, keeps its :class:`Centring`
    (``_centring``), offsets appended rows by ``c`` and re-centres every re-solve, setting
    ``_offset`` to the mean of every row held (the model's ``intercept_``)."""

    def _pass_sums(self, spec: Any) -> tuple[str, ...]:
        return centring_sums(super()._pass_sums(spec),
                             centred=getattr(self, "_offset", None) is not None)

    def _first_pass_sums(self, sums: tuple[str, ...]) -> tuple[str, ...]:
        sums = super()._first_pass_sums(sums)
        if getattr(self, "_offset", None) is None or not type(self)._appends:
            return sums
        return tuple(sums) + tuple(s for s in INTERCEPT_SUMS if s not in sums)

    def _after_fit(self, spec: Any, route: Any, fitted: Any) -> None:
        super()._after_fit(spec, route, fitted)
        self._centring = start_centring(getattr(self, "_offset", None),
                                        getattr(self, "_growth", None))

    def _growth_targets(self, Y: Any) -> Any:
        return offset_rows(Y, getattr(self, "_centring", None))

    def _growth_result(self, growth: Any) -> Any:
        res = super()._growth_result(growth)
        if getattr(self, "_centring", None) is not None:  # ȳ over every row held
            res, self._offset = recentred(res, self._centring)
        return res
