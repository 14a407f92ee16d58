"""One solver iteration over the training rows: a block map-reduce over the stored ``C``.

An iterative model (:mod:`distsketch.solvers.lipschitz.newton`) makes one *sweep* per iteration. For
every row block ``I`` a task reads ``C_I`` back from the store (checking its recorded CRC-32), or
recomputes it from the input rows when the fit keeps no store, and with the iterate shipped to it
(``A = T Ξ S`` of shape (m, d), intercept ``b₀``, and optionally a direction ``ΔA, Δb₀``) computes,
in float64::

    F_I  = C_I A + b₀                              predictions at the iterate
    L(t) = Σ_{i∈I} h_μ(F_i + t ΔF_i − y_i)         losses along the direction (t on a grid)
    R_I  = F_I + ΔF_I − Y_I                        residuals at the full step (or at F)
    α_I  = ∇h_μ(R_I)                               (sub)gradients, and the block sums
    C_Iᵀ α_I,  Σ α,  Σ α²,  Σ ‖α‖,  Σ y α,        loss and smoothed loss, Σ ‖R‖²
    Q   += Σ_{i∈I: Δ_i≠0} Δ_i ⊗ c̃_i c̃_iᵀ           weighted Grams, c̃ = [c_i; 1] (Newton)

Rows the driver holds for the sphere polish (``Iterate.exclude``, global indices) are left out
of the gradient and conjugate sums and of ``Q`` (their losses stay in): the driver adds them
from their gathered rows of ``C``.

The partial results are dicts of float64 arrays added by :class:`SweepSums` in the engine's
fixed tree (:func:`distsketch.engine.map_reduce`), so a sweep's result does not depend on the
scheduler or the number of workers. Losing workers mid-sweep retries it (the in-memory rows
are sent again), as the pass does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import dask
import numpy as np
from scipy.linalg.blas import dsyrk as _dsyrk

from .._hashing import checksum
from ..backends.base import dense
from ..losses.base import Curvature, Loss
from .features import FeatureMap
from .mapreduce import Reducer, Stored, map_reduce, row_blocks, share
from .rows import RowSource
from .schedulers import WorkersLost, distributed_client, workers_back
from .storeguard import StoreError

if TYPE_CHECKING:
    import distributed

    from .mapreduce import Workspace

__all__ = ["SweepData", "Segment", "Segments", "Iterate", "SweepSums", "sweep", "block_native",
           "block_C"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SweepData:
    """What a sweep reads, fixed for a fit: where the blocks ``C_I`` come from, the targets.

    Attributes
    ----------
    n, block_rows, m, d : int
    C : zarr.Array or None
        The stored ``C`` (its chunks are the row blocks); None: the ``held`` blocks, or
        recompute them from ``x``.
    crcs : tuple of int
        The recorded CRC-32 of each stored block (``pass/blocks``).
    x : FeatureMap or None
        The input side (``k_X(X_I, X_J) R_mixᵀ``) for recomputed blocks.
    dtype : numpy dtype
        The blocks' dtype (the pass's ``block_dtype``): recomputed blocks are rounded to it,
        so they equal the stored ones bitwise.
    location : str
    held : tuple of ndarray or None
        The blocks of ``C`` kept in memory from the pass, float64 (a fit without a store on
        the local scheduler, within ``EngineOptions.sweep_memory``).
    backend : str
        The compute backend of recomputed blocks (``EngineOptions.backend``): PCG's tasks
        fill and multiply them on a device backend's GPU
        (``distsketch.engine.deviceblocks``).
    """

    n: int
    block_rows: int
    m: int
    d: int
    C: Any
    crcs: tuple
    x: FeatureMap | None
    dtype: Any
    location: str = "<memory>"
    held: tuple | None = None
    backend: str = "numpy"

    def rows(self, i: int) -> tuple[int, int]:
        s = i * self.block_rows
        return s, min(s + self.block_rows, self.n)

    @property
    def n_blocks(self) -> int:
        return -(-self.n // self.block_rows)

    def locate(self, i: int) -> tuple[SweepData, int]:
        """The source of block ``i`` and its index there: this data itself."""
        return self, i


@dataclass(frozen=True)
class Segment:
    """One run of consecutive rows a sweep reads: its blocks and its rows.

    Attributes
    ----------
    data : SweepData
        Where its blocks come from (its stored ``C`` with their CRC-32, held blocks, or
        recomputed from ``X`` by ``data.x``); ``data.n``: its rows.
    Y : RowSource
        Its targets (``data.n`` rows).
    X : RowSource or None
        Its input rows, needed only when its blocks are recomputed.
    """

    data: SweepData
    Y: RowSource
    X: RowSource | None = None


@dataclass(frozen=True)
class Segments:
    """Several row segments swept as one: the rows of ``parts[0]``, then of ``parts[1]``, ….

    A :class:`SweepData` as the block functions see it: the items of every part in segment
    order, block ``i`` numbered globally (``rows(i)``: global row indices, ``offsets[k]``
    the first row of part k), the sums added in the engine's fixed tree over all of them.
    Each part keeps its own ``block_rows``, store, checksums and dtype. Built by
    :meth:`of`; a :class:`Sweeper` over it takes the parts' ``X`` and ``Y`` as tuples.
    """

    parts: tuple
    m: int
    d: int
    location: str = "<memory>"

    @classmethod
    def of(cls, segments: Sequence[Segment]) -> tuple[Segments, tuple, tuple]:
        """``(data, Xs, Ys)`` for :class:`Sweeper` from ``segments`` (in row order; at least
        one, all of the same ``m`` and ``d``)."""
        segments = tuple(segments)
        if not segments:
            raise ValueError("segments: at least one segment is needed")
        first = segments[0].data
        for seg in segments:
            if (seg.data.m, seg.data.d) != (first.m, first.d):
                raise ValueError(f"segments: every segment needs m = {first.m}, d = {first.d}; "
                                 f"got m = {seg.data.m}, d = {seg.data.d}")
        locations = sorted({seg.data.location for seg in segments})
        data = cls(tuple(seg.data for seg in segments), first.m, first.d, ", ".join(locations))
        return data, tuple(seg.X for seg in segments), tuple(seg.Y for seg in segments)

    @property
    def n(self) -> int:
        return sum(part.n for part in self.parts)

    @property
    def n_blocks(self) -> int:
        return sum(part.n_blocks for part in self.parts)

    @property
    def offsets(self) -> tuple:
        """The global index of each part's first row."""
        return tuple(int(v) for v in np.cumsum([0] + [p.n for p in self.parts])[:-1])

    @property
    def held(self) -> tuple | None:
        """Every part's held blocks in order, or None unless every part holds its blocks."""
        if any(part.held is None for part in self.parts):
            return None
        return tuple(b for part in self.parts for b in part.held)

    def locate(self, i: int) -> tuple[SweepData, int]:
        """The part holding global block ``i``, and its index there."""
        for part in self.parts:
            if i < part.n_blocks:
                return part, i
            i -= part.n_blocks
        raise IndexError(f"block {i} beyond the segments' blocks")

    def rows(self, i: int) -> tuple[int, int]:
        """Global rows ``[s, e)`` of global block ``i``."""
        for part, offset in zip(self.parts, self.offsets):
            if i < part.n_blocks:
                s, e = part.rows(i)
                return offset + s, offset + e
            i -= part.n_blocks
        raise IndexError(f"block {i} beyond the segments' blocks")


@dataclass(frozen=True)
class Iterate:
    """What changes from sweep to sweep (small, shipped with each sweep).

    ``A`` (m, d) and ``b0`` (d,): the model ``F = C A + b₀``; ``dA``, ``db0``: a direction
    (None: evaluate at the iterate); ``grid``: step sizes whose losses are wanted (smoothed
    with ``grid_mu`` when given, else ``mu``); ``mu``:
    smoothing of the loss; ``gram``: whether the weighted Grams are formed; ``exact``: exact
    Hessians (full d × d per row) or scalar majorants for radial multi-output losses;
    ``collect``: also return the entries in the loss's smoothing band (rows of ``C``, targets,
    kinks) and the gradient sums without them, for the KKT polish; ``base``: the curvature
    level subtracted from the Grams (None: the loss's default); ``levels``: count the rows at
    each of these curvature levels (``at_level``); ``exclude``: sorted global row indices
    (at most a polish's active set) left out of the gradient and conjugate sums and of the
    Grams — the rows the driver holds on the sphere ``‖r‖ = ε`` and adds itself (their
    losses stay in ``loss``, ``loss_mu`` and ``grid``; only with ``base = 0``); ``window``:
    when > 0, ``collect`` gathers the entries within ``window·μ`` of their kink
    (:meth:`~distsketch.losses.Loss.band` with ``width``; ``math.inf``: every entry at each
    of its kinks) instead of the smoothing band, and every sweep counts them (``nwin``);
    ``level_mus``: also count the rows at each
    curvature level for each of these μ (:meth:`~distsketch.losses.Loss.level_counts`,
    ``level_counts``; the first sweep of a smoothed loss, before μ is known); ``delta``
    (with a direction, scalar curvature, no ``exclude``): ``Q`` is the change of the Grams
    from the iterate to the full step, ``Σ_i (Δ_i(F + ΔF) − Δ_i(F)) c̃_i c̃_iᵀ`` over the rows
    whose curvature differs — the driver holds the Grams at the iterate (the last sweep's
    full step) and adds it.
    """

    loss: Loss
    A: np.ndarray
    b0: np.ndarray
    dA: np.ndarray | None
    db0: np.ndarray | None
    mu: float
    grid: tuple
    gram: bool = True
    exact: bool = True
    collect: bool = False
    grid_mu: float | None = None
    base: float | None = None
    levels: tuple = ()
    exclude: np.ndarray | None = None
    window: float = 0.0
    level_mus: np.ndarray | None = None
    delta: bool = False


class SweepSums(Reducer):
    """Adds sweep partials key by key (new arrays: the parts are never modified); the band
    entries (keys ``E_*``) are concatenated in block order."""

    def add(self, acc: dict, part: dict) -> dict:
        return {k: np.concatenate([acc[k], part[k]]) if k.startswith("E_") else acc[k] + part[k]
                for k in acc}

    def node(self, parts: Sequence[dict]) -> dict:
        """:meth:`add` folded over ``parts`` left to right (the sums in the same order, bitwise
        the same), the band entries concatenated once instead of once per part."""
        if len(parts) == 1:
            return parts[0]
        out = {}
        for key, first in parts[0].items():
            if key.startswith("E_"):
                out[key] = np.concatenate([part[key] for part in parts])
            else:
                acc = first
                for part in parts[1:]:
                    acc = acc + part[key]
                out[key] = acc
        return out


SWEEP_SUMS = SweepSums()

#: With ``EngineOptions(progress=True)``, a sweep's progress bar appears only once the sweep
#: has run this many seconds (dask's ``ProgressBar(minimum=…)``; on a cluster sweeps show
#: none): an iterative fit runs one sweep per iteration, and its iterations are logged.
SWEEP_PROGRESS_MINIMUM = 1.0


def block_native(data: SweepData | Segments, i: int, ref: Any, crc: int | None,
                 ws: Workspace) -> np.ndarray:
    """``C_I`` in its own dtype (the block dtype, float32 or float64): the stored block (read
    by the engine from its :class:`Stored` reference; ``crc`` its recorded checksum), the held
    block, or recomputed from the input rows into this thread's work array (of the segment
    holding block ``i``; rows named globally)."""
    s, e = data.rows(i)
    data, i = data.locate(i)
    if data.held is not None:
        return ref  # float64 already (read only)
    if crc is not None:
        if checksum(ref) != crc:
            raise StoreError(
                f"store {data.location!r}: block {i} (rows {s}–{e - 1}) of C fails its checksum "
                f"(damaged since the pass); fit again to recompute it")
        return ref
    return data.x.block(ref, dtype=data.dtype, out=ws.get("C", (e - s, data.m), data.dtype))


def block_C(data: SweepData | Segments, i: int, ref: Any, crc: int | None, ws: Workspace
            ) -> np.ndarray:
    """``C_I`` as float64 (:func:`block_native`, converted into a work array unless it is
    float64 already)."""
    C = block_native(data, i, ref, crc, ws)
    if C.dtype == np.float64:
        return C
    out = ws.get("C64", C.shape, np.float64)
    np.copyto(out, C)
    return out


#: Bytes of a float64 tile of :func:`gram_product` (its rows: this over ``8m``, within
#: [8, 512]; also the fused kernel product's tiles, ``distsketch.engine.fused``): the tile
#: is read twice (``C_t V``, then ``C_tᵀ(·)``), so it must stay in cache. Measured (one thread, b = 1191 rows, one column): 0.58–0.65 ns per value with
#: tiles of 1–2.5 MB at m = 1000 … 20 000, against 2.46 ns at m = 20 000 and 1.01 ns at
#: m = 8000 with the former fixed 256 rows (41 and 16 MB tiles).
PRODUCT_TILE_BYTES = 2 << 20


def product_tile_rows(m: int) -> int:
    """Rows per tile of :func:`gram_product` for blocks of ``m`` columns (a function of m
    alone, so a block's sum never depends on the machine)."""
    return int(min(512, max(8, PRODUCT_TILE_BYTES // (8 * max(m, 1)))))


def gram_product(C: np.ndarray, V: np.ndarray, ws: Workspace) -> np.ndarray:
    """``Cᵀ (C V)`` in float64 for a block ``C`` (b × m) of either dtype, ``V`` (m × k) float64.

    A float32 block is converted tile by tile (:func:`product_tile_rows`, in cache) and
    each tile's ``C_tᵀ (C_t V)`` added in tile order: one read of the block instead of a
    float64 copy written and read twice. A float64 block is multiplied as it is. PCG's
    iterations over recomputed Gaussian blocks do not form ``C`` at all: the kernel is
    computed just ahead of these same tiles and added in the same order, bitwise the same
    sum (``distsketch.engine.fused.fused_gram_product``, which shares the ``tile64`` work
    array)."""
    if C.dtype == np.float64:
        return C.T @ (C @ V)
    b, m = C.shape
    acc = np.zeros((m, V.shape[1]))
    rows = product_tile_rows(m)
    buf = ws.get("tile64", (min(rows, b), m), np.float64)
    for r in range(0, b, rows):
        e = min(r + rows, b)
        T = buf[: e - r]
        np.copyto(T, C[r:e])
        acc += T.T @ (T @ V)
    return acc


def _scaled_rows(C: np.ndarray, rows: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """``diag(scale) [C_rows 1]`` (k, m+1) in C order: its transpose is the Fortran-order
    (m+1, k) operand ``dsyrk`` reads in place (a Fortran-order copy of the gathered rows is
    a transposing write; in whole CASP fits 0.84 against 1.0 µs per row, within noise)."""
    A = np.empty((len(rows), C.shape[1] + 1))
    np.multiply(C[rows], scale[:, None], out=A[:, :-1])
    A[:, -1] = scale
    return A


def _weighted_gram(C: np.ndarray, rows: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``Σ_k w_k c̃_k c̃_kᵀ`` over ``rows`` (c̃ = [c; 1], weights of either sign) as symmetric
    rank-k updates: half the flops of a product of two matrices."""
    m1 = C.shape[1] + 1
    out = np.zeros((m1, m1), order="F")
    for sign in (1.0, -1.0):
        sel = np.flatnonzero(sign * w > 0)
        if len(sel):
            A = _scaled_rows(C, rows[sel], np.sqrt(sign * w[sel]))
            # (Aᵀ)(Aᵀ)ᵀ = AᵀA with Aᵀ Fortran-ordered: no copy
            out = _dsyrk(sign, A.T, beta=1.0, c=out, trans=0, lower=0, overwrite_c=1)
    out += np.triu(out, 1).T  # dsyrk filled the upper triangle; the lower one is still 0
    return out


def _grams(C: np.ndarray, curv, d: int) -> np.ndarray:
    """``Σ_k Δ_k ⊗ c̃_k c̃_kᵀ`` over the curvature's rows, c̃ = [c; 1]: shape (m+1, m+1) for
    ``scalar``, (d, m+1, m+1) for ``diag``, (d, d, m+1, m+1) for ``full``."""
    m = C.shape[1]
    rows = curv.rows
    if len(rows) == 0:  # every row at the base curvature: nothing to add (broadcasts)
        return np.zeros(())
    if curv.kind == "scalar":
        return _weighted_gram(C, rows, curv.values)
    if curv.kind == "diag":
        return np.stack([_weighted_gram(C, rows, curv.values[:, j]) for j in range(d)])
    Ct = np.empty((len(rows), m + 1))
    Ct[:, :m] = C[rows]
    Ct[:, m] = 1.0
    out = np.empty((d, d, m + 1, m + 1))
    for j in range(d):
        out[j, j] = _weighted_gram(C, rows, curv.values[:, j, j])
        for k in range(j + 1, d):
            out[j, k] = Ct.T @ (curv.values[:, j, k, None] * Ct)
            out[k, j] = out[j, k].T
    return out


def _at_level(loss: Loss, R: np.ndarray, mu: float, exact: bool, curv, level: float) -> int:
    """Rows of the block whose curvature is ``level·I`` (``curv``: the block's curvature at
    its base). The base's rows are those ``curv`` leaves out; for an exact scalar curvature
    another level's are those of ``curv`` at ``level − base`` (the levels are exact
    constants, 0, 1 or 1/μ, and so are the differences); otherwise the loss is asked again."""
    if level == curv.base:
        return len(R) - len(curv.rows)
    if exact and curv.kind == "scalar" and R.shape[1] == 1:
        return int(np.count_nonzero(curv.values == level - curv.base))
    return len(R) - len(loss.curvature(R, mu, exact=exact, base=level).rows)


def _sweep_block(shared, item, ws) -> dict:
    data, it = shared
    i, ref, crc, yb = item
    C = block_C(data, i, ref, crc, ws)
    Y = dense(yb).astype(np.float64, copy=False).reshape(C.shape[0], -1)
    loss, mu = it.loss, it.mu
    out: dict[str, Any] = {}
    if it.dA is not None:  # the iterate's and the direction's predictions
        d = it.A.shape[1]
        if d == 1:
            # two matrix–vector products: a product with two columns packs the block first
            # (5000 × 200, 4 blocks, one thread: 5.0–5.6 ms against 3.7–4.9 ms)
            F = (C @ it.A[:, 0])[:, None] + it.b0
            dF = (C @ it.dA[:, 0])[:, None] + it.db0
        else:  # one read of C for both
            FdF = C @ np.concatenate([it.A, it.dA], axis=1)
            F, dF = FdF[:, :d] + it.b0, FdF[:, d:] + it.db0
        F -= Y
        gmu = mu if it.grid_mu is None else it.grid_mu
        if d == 1 and len(it.grid):  # every step at once: (b, steps) residuals, one call
            steps = np.asarray(it.grid, dtype=np.float64)
            V = loss.value((F + dF * steps).reshape(-1, 1), gmu).reshape(len(F), len(steps))
            out["grid"] = V.sum(axis=0)
        else:
            out["grid"] = np.array([loss.value(F + t * dF, gmu).sum() for t in it.grid])
        R = F + dF
    else:
        R = (C @ it.A[:, 0])[:, None] if it.A.shape[1] == 1 else C @ it.A
        R = R + it.b0 - Y
        out["grid"] = np.zeros(len(it.grid))
    vals = loss.value(R, mu)
    out["loss_mu"] = np.array(vals.sum())
    out["loss"] = np.array(loss.value(R, 0.0).sum()) if mu > 0 else out["loss_mu"].copy()
    alpha = loss.gradient(R, mu)
    ex = None
    if it.exclude is not None and len(it.exclude):  # the rows the driver holds (block-local)
        lo, hi = np.searchsorted(it.exclude, data.rows(i))
        ex = it.exclude[lo:hi] - data.rows(i)[0]
        alpha[ex] = 0.0
    out["Ca"] = C.T @ alpha
    out["sa"] = alpha.sum(axis=0)
    out["aa"] = np.einsum("ij,ij->j", alpha, alpha)
    out["an"] = np.array(np.sqrt(np.einsum("ij,ij->i", alpha, alpha)).sum())
    out["ya"] = np.einsum("ij,ij->j", Y, alpha)
    out["rr"] = np.array(np.einsum("ij,ij->", R, R))
    if it.level_mus is not None:
        counts = loss.level_counts(R, it.level_mus)
        if counts is not None:
            out["level_counts"] = counts
    if it.gram:
        curv = loss.curvature(R, mu, exact=it.exact, base=it.base)
        if ex is not None and len(ex):
            keep = ~np.isin(curv.rows, ex)
            curv = Curvature(curv.base, curv.kind, curv.rows[keep], curv.values[keep])
        if it.delta and it.dA is not None and curv.kind == "scalar":
            # the change from the iterate F: the rows whose curvature moved, weighted by it
            was = loss.curvature(F, mu, exact=it.exact, base=it.base)
            w = np.zeros(len(R))
            w[curv.rows] = curv.values
            w[was.rows] -= was.values
            rows = np.flatnonzero(w)
            out["Q"] = (_weighted_gram(C, rows, w[rows]) if len(rows) else np.zeros(()))
        else:
            out["Q"] = _grams(C, curv, R.shape[1])
        if len(it.levels) > 1:  # rows at each level: the driver subtracts the commonest
            out["at_level"] = np.array([float(_at_level(loss, R, mu, it.exact, curv, lv))
                                        for lv in it.levels])
    band = loss.band(R, mu)
    if band is not None:
        rows, cols, kink = band
        out["nband"] = np.array(float(len(rows)))
        if it.window > 0:  # the entries near their kink (the driver's restricted problem)
            rows, cols, kink = loss.band(R, mu, width=it.window * mu)
            out["nwin"] = np.array(float(len(rows)))
        if it.collect:
            E_C = C[rows]  # (a new array: integer indexing copies)
            a_in = np.zeros((len(rows), alpha.shape[1]))
            # each entry's part of its row's gradient: the gradient itself, or for a row at
            # two kinks (the whole window of ε) its parts in [0, 1] and [−1, 0]
            lo_e, hi_e = loss.kink_bounds(cols, kink, R.shape[1])
            a_in[np.arange(len(rows)), cols] = np.clip(alpha[rows, cols], lo_e, hi_e)
            # Cᵀα less the gathered entries' part: no second read of the block
            out["Ca_out"] = out["Ca"] - E_C.T @ a_in
            out["sa_out"] = out["sa"] - a_in.sum(axis=0)
            out["E_row"] = rows.astype(np.int64) + data.rows(i)[0]
            out["E_col"] = cols.astype(np.int64)
            out["E_y"] = Y[rows, cols if Y.shape[1] > 1 else 0]
            out["E_target"] = out["E_y"] + kink
            out["E_C"] = E_C
    else:
        rows = loss.sphere_band(R, mu)
        if rows is not None:  # radial loss, d > 1: whole rows near the sphere ‖r‖ = ε
            out["nband"] = np.array(float(len(rows)))
            if it.collect:
                out["E_row"] = rows.astype(np.int64) + data.rows(i)[0]
                out["E_C"] = C[rows].copy()
                out["E_Y"] = np.broadcast_to(Y[rows], (len(rows), R.shape[1])).copy()
                out["E_a"] = alpha[rows].copy()
    return out


def sweep_items(data: SweepData | Segments, X: Any, Y: Any, *,
                client: distributed.Client | None = None) -> list:
    """One item per block: ``(i, Stored C rows or input rows, crc, target rows)``; over
    :class:`Segments` (``X``, ``Y``: one per part) the parts' items in order, numbered on."""
    if isinstance(data, Segments):
        items: list = []
        for part, x, y in zip(data.parts, X, Y):
            start = len(items)
            items += [(start + i, *rest)
                      for i, *rest in sweep_items(part, x, y, client=client)]
        return items
    y_blocks = row_blocks(Y, data.block_rows, argument="y", client=client)
    if data.held is not None:
        refs = list(data.held)
    elif data.C is not None:
        refs = [Stored(data.C, *data.rows(i)) for i in range(data.n_blocks)]
    else:
        refs = row_blocks(X, data.block_rows, client=client)
    crcs = data.crcs or (None,) * data.n_blocks
    return [(i, refs[i], crcs[i], y_blocks[i]) for i in range(data.n_blocks)]


class Sweeper:
    """Runs sweeps over a fit's blocks; the items (and scattered rows) are built once.

    ``data``: a :class:`SweepData` with its ``X``, ``Y`` (row sources), or :class:`Segments`
    with a tuple of each (:meth:`Segments.of`)."""

    def __init__(self, data: SweepData | Segments, X: Any, Y: Any, *, split_every: int,
                 progress: bool = False, block: Callable | None = None,
                 name: str = "sweep") -> None:
        self.data, self.X, self.Y = data, X, Y
        self.split_every, self.progress = split_every, progress
        # the block function (default: the Lipschitz machines'); another solver's sweep
        # (distsketch.solvers.pcg) passes its own, with the same items, retries and fixed-order sums
        self.block = _sweep_block if block is None else block
        self.name = name
        self._items = None
        self.count = 0

    def __call__(self, it: Iterate) -> dict:
        client = distributed_client()
        attempt, lost = 0, None
        while True:
            try:
                if self._items is None:
                    self._items = sweep_items(self.data, self.X, self.Y, client=client)
                shared = share((self.data, it), name=f"{self.name}-iterate", client=client)
            except Exception as exc:
                if lost is not None:
                    raise lost from exc
                raise
            try:
                result = map_reduce(self.block, self._items, reducer=SWEEP_SUMS, shared=shared,
                                    split_every=self.split_every, fuse=True, name=self.name,
                                    progress=SWEEP_PROGRESS_MINIMUM if self.progress else False)
                self.count += 1
                return result
            except WorkersLost as exc:
                lost, attempt = exc, attempt + 1
                self._items = None  # the scattered rows went with the workers: send them again
                retries = int(dask.config.get("distsketch.pass-retries", 3))
                if client is None or attempt > retries or not workers_back(client):
                    raise
                logger.warning("%s; resending the rows and repeating the sweep (attempt %d of %d)",
                               exc, attempt, retries)


def sweep(data: SweepData, X: RowSource, Y: RowSource, it: Iterate, *, split_every: int = 4,
          progress: bool = False) -> dict:
    """One sweep (see the module's notes); returns the reduced sums."""
    return Sweeper(data, X, Y, split_every=split_every, progress=progress)(it)
