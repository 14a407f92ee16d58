"""The streaming pass: one block map-reduce over the training rows.

For each row block ``I`` (docs/design.md, "The streaming pass") a task computes::

    C_I = k_X(X_I, X_J) R_Xmixᵀ          written to pass/C[I]
    D_I = k_Y(Y_I, Y_JY) R_Ymixᵀ         written to pass/D[I]      (structured outputs)

and the partial sums the model asked for, each a *sum term* of :data:`SUM_TERMS`::

    G += C_Iᵀ C_I     B += R_X[:, I] C_I     b += C_Iᵀ Y_I
    s += C_Iᵀ 1       y1 += Y_Iᵀ 1           (intercepts)
    M += D_Iᵀ C_I     E += R_Y[:, I] D_I
    C, D, Y           the row blocks themselves, placed (an exact side: n × m)
    U                 unique output rows and their first training row

A model declares the names it needs (``SISOKR`` with two sketched sides: ``G, B, M, E, U``;
``SketchedFeatures``: ``B``); a new sum is one function here and one name in a model.

Blocks are computed in the block dtype (float32 by default: kernel values rounded to
float32, exponentials evaluated in float32) and partial sums are float64 sums of exactly
those values, so the store holds what the sums were made of; the store write runs in an
I/O thread beside them. A block read back from the store on resume therefore contributes
exactly what it contributed the first time, for either dtype (bitwise-identical resume),
and ``store=None`` fits the same model. The reduction is :func:`distsketch.engine.map_reduce`:
a tree whose shape depends only on the number of blocks, in block order, so the sums do not
depend on the scheduler or the number of workers. Block math runs in the fit's compute
backend (``EngineOptions.backend``); partial sums come back to the host.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

import dask
import numpy as np

from .._hashing import checksum, data_fingerprint, fingerprint, row_hash
from ..backends.base import dense, get_backend
from .mapreduce import (Reducer, WorkersLost, compute, distributed_client, map_blocks, map_reduce,
    row_blocks, share, workers_back)
from .features import FeatureMap
from ..kernels.base import kernel_description
from ..options import EngineOptions, start_idle_window
from .rows import RowSource, check_finite_block
from ..sketches.base import RealizedSketch, Sketch
from .store import (CSUM, DSUM, RECORD, TOKEN, XFP, YFP, DataChanged, FitStore, StoreDirectory,
    StoreError, open_fit_store, read_records, write_rows)
from ..tuning import store_config

__all__ = ["SUM_TERMS", "SumTerm", "PassPlan", "PassResult", "fit_pass", "run_pass",
           "choose_block_rows", "jsonable"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PassPlan:
    """Everything a block task needs, shipped to workers once.

    Attributes
    ----------
    n, block_rows : int
    x : FeatureMap
        Input side: ``FeatureMap(k_X, X_J, R_X)``, whose block is ``C_I``.
    y : FeatureMap or None
        Output side (``D_I``) for structured outputs.
    sums : tuple of str
        Names of :data:`SUM_TERMS` to compute.
    C, D, records : zarr.Array or None
        Store arrays written by the tasks (``records``: ``pass/blocks``, one row per block:
        fit token, data fingerprints, checksums; see :mod:`distsketch.store`); None for a
        temporary fit (``store=None``), whose blocks are not written anywhere.
    token : int
        The fit token written with each block (0 for a temporary fit).
    location : str
        The store's location, for messages.
    dtype : numpy dtype
        Dtype of the blocks, computed and stored (the sums are float64 of their values).
    check_x, check_y : bool
        Check blocks for NaN/inf (lazy inputs, not checked up front).
    direct_io : bool
        Write blocks to a local store with O_DIRECT (see :func:`~distsketch.store.write_rows`).
    backend : str
        Compute backend of the block math (:mod:`distsketch.backends`).
    x_widths : tuple of FeatureMap
        Further input feature maps over the same landmarks and sketch (other kernel widths,
        :func:`fit_pass` ``x_widths``): the sums named ``"<sum>~<j>"`` are those of the
        ``j``-th (1-based) computed from its own block ``C_I^{(j)}``, recomputed from the
        block's input rows (never stored). One read of the data serves every width.
    """

    n: int
    block_rows: int
    x: FeatureMap
    y: FeatureMap | None
    sums: tuple
    C: Any
    D: Any
    records: Any
    dtype: Any
    check_x: bool
    check_y: bool
    direct_io: bool = True
    backend: str = "numpy"
    token: int = 0
    location: str = "<memory>"
    x_widths: tuple = ()

    @property
    def x_sketch(self) -> RealizedSketch:
        return self.x.projection

    @property
    def y_sketch(self) -> RealizedSketch | None:
        return None if self.y is None else self.y.projection

    @property
    def needs_d(self) -> bool:
        """Whether a sum needs ``D_I`` (computed, and stored)."""
        return any(sum_term(s).reads_d for s in self.sums)

    @property
    def needs_y(self) -> bool:
        """Whether a sum reads the output / target rows (also of blocks read back)."""
        return any(sum_term(s).reads_y for s in self.sums)

    @property
    def keeps_blocks(self) -> bool:
        """Whether the result holds the blocks themselves (an exact side): no buffer reuse."""
        return any(sum_term(s).keeps_blocks for s in self.sums)

    @property
    def n_blocks(self) -> int:
        return -(-self.n // self.block_rows)

    def rows(self, i: int) -> tuple[int, int]:
        s = i * self.block_rows
        return s, min(s + self.block_rows, self.n)


# --------------------------------------------------------------------------- partial sums


class RowStack:
    """Disjoint row blocks of an ``n × k`` matrix; ``+=`` places blocks, never adds them."""

    def __init__(self, blocks: list[tuple[int, np.ndarray]]):
        self.blocks = blocks

    def copy(self) -> "RowStack":
        return RowStack(list(self.blocks))

    def __iadd__(self, other: "RowStack") -> "RowStack":
        self.blocks.extend(other.blocks)
        return self

    def assemble(self, n: int) -> np.ndarray:
        k = self.blocks[0][1].shape[1]
        out = np.empty((n, k))
        for start, block in self.blocks:
            out[start : start + len(block)] = block
        return out


class HeldBlocks:
    """The blocks ``C_I`` themselves (float64 copies of the values at the block dtype), by
    first row (``+=`` merges): kept in memory by an iterative model that has no store to read
    them back from."""

    def __init__(self, blocks: dict):
        self.blocks = blocks

    def copy(self) -> "HeldBlocks":
        return HeldBlocks(dict(self.blocks))

    def __iadd__(self, other: "HeldBlocks") -> "HeldBlocks":
        self.blocks.update(other.blocks)
        return self

    def ordered(self) -> tuple:
        return tuple(self.blocks[k] for k in sorted(self.blocks))


class RowSparse:
    """An ``m × k`` partial sum with few non-zero rows (``R[:, I] C_I`` of a sparse sketch).

    ``+=`` adds row by row over the union of rows; adding exact zeros never changes a float
    sum, so the reduced result is bitwise the dense one, with a fraction of the memory. Parts
    whose rows all lie above (or below) every row so far — sub-sampling's landmarks of
    successive row blocks — are kept as they are and placed once by :meth:`toarray` (the
    union's zero-filled copy per addition cost Bibtex's 4-block pass 0.1–0.2 s at its end);
    parts with the same rows are added in place; others are merged into the union.
    """

    def __init__(self, m: int, rows: np.ndarray, values: np.ndarray):
        self.m = m
        self.parts = [(rows, values)]  # disjoint row sets, each sorted

    def copy(self) -> "RowSparse":
        out = RowSparse(self.m, *self.parts[0])
        out.parts = [(r.copy(), v.copy()) for r, v in self.parts]
        return out

    def _span(self) -> tuple[int, int]:
        lo = min((int(r[0]) for r, _ in self.parts if r.size), default=self.m)
        hi = max((int(r[-1]) for r, _ in self.parts if r.size), default=-1)
        return lo, hi

    def __iadd__(self, other: "RowSparse") -> "RowSparse":
        for rows, values in other.parts:
            lo, hi = self._span()
            if not rows.size or rows[0] > hi or rows[-1] < lo:  # disjoint: kept as it is
                self.parts.append((rows, values))
            elif len(self.parts) == 1 and np.array_equal(self.parts[0][0], rows):
                self.parts[0][1][...] += values
            else:
                self._merge(rows, values)
        return self

    def _merge(self, rows: np.ndarray, values: np.ndarray) -> None:
        """Every part and ``(rows, values)`` into one part over the union of rows."""
        union = np.unique(np.concatenate([r for r, _ in self.parts] + [rows]))
        out = np.zeros((union.size, values.shape[1]))
        for r, v in self.parts:  # disjoint: placed
            out[np.searchsorted(union, r)] = v
        out[np.searchsorted(union, rows)] += values
        self.parts = [(union, out)]

    def toarray(self) -> np.ndarray:
        out = np.zeros((self.m, self.parts[0][1].shape[1]))
        for rows, values in self.parts:
            out[rows] = values
        return out


def _first_of_unique(Y: np.ndarray) -> np.ndarray:
    """Positions of the first occurrence of each distinct row of ``Y`` (ascending).

    Rows are compared as bytes (one ``np.unique`` over a void view: a ``memcmp`` sort, 15–25×
    faster than ``np.unique(axis=0)``'s per-column comparisons on Bibtex's 4880 × 159 labels);
    ``-0.0`` is made ``+0.0`` first, so for finite values byte equality is value equality."""
    Y = np.ascontiguousarray(Y)
    if Y.dtype.kind == "f":
        Y = Y + 0.0  # -0.0 → +0.0 (a new contiguous array)
    if Y.shape[0] == 0 or Y.shape[1] == 0:
        return np.arange(min(Y.shape[0], 1), dtype=np.int64)
    keys = Y.view(np.dtype((np.void, Y.dtype.itemsize * Y.shape[1]))).ravel()
    _, first = np.unique(keys, return_index=True)
    return np.sort(first).astype(np.int64)


def _unique_rows(Y: np.ndarray, start: int) -> tuple[np.ndarray, np.ndarray]:
    """Unique rows of a block (in order of first occurrence) and the global index of their
    first occurrence."""
    first = _first_of_unique(Y)
    return Y[first], first + start


def _merge_unique(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    rows = np.concatenate([p[0] for p in parts])
    first = np.concatenate([p[1] for p in parts])
    # parts arrive in block order, so the first occurrence in ``rows`` is the earliest row
    pos = _first_of_unique(rows)
    return rows[pos], first[pos]


@dataclass
class BlockView:
    """One block as the sum terms see it: float64 ``C`` (and ``D``) in the fit's backend."""

    plan: PassPlan
    start: int
    stop: int
    C: Any
    D: Any
    y: Any  # the raw output / target rows (host), or None
    backend: Any

    def host(self, a) -> np.ndarray:
        return self.backend.to_numpy(a)

    def targets(self) -> np.ndarray:
        return dense(self.y).astype(np.float64, copy=False)


def _term_G(v: BlockView):
    return v.host(v.C.T @ v.C)


def _term_B(v: BlockView):
    rows, values = v.plan.x_sketch.left_rows(v.C, v.start, v.stop)
    return RowSparse(v.plan.x_sketch.m, rows, v.host(values))


def _term_M(v: BlockView):
    return v.host(v.D.T @ v.C)


def _term_E(v: BlockView):
    rows, values = v.plan.y_sketch.left_rows(v.D, v.start, v.stop)
    return RowSparse(v.plan.y_sketch.m, rows, v.host(values))


def _term_b(v: BlockView):
    return v.host(v.C.T @ v.backend.asarray(v.targets()))


def _term_s(v: BlockView):
    return v.host(v.C.sum(axis=0))


def _term_y1(v: BlockView):
    Yb = v.targets()
    return Yb.reshape(len(Yb), -1).sum(axis=0)


def _term_C(v: BlockView):
    return RowStack([(v.start, v.host(v.C))])


def _term_held(v: BlockView):
    return HeldBlocks({v.start: np.array(v.host(v.C), dtype=np.float64)})  # a copy: C is reused


def _term_D(v: BlockView):
    return RowStack([(v.start, v.host(v.D))])


def _term_Y(v: BlockView):
    Yb = v.targets()
    return RowStack([(v.start, Yb.reshape(len(Yb), -1))])


def _term_yy(v: BlockView):
    Yb = v.targets()
    Yb = Yb.reshape(len(Yb), -1)
    return np.einsum("ij,ij->j", Yb, Yb)


def _term_kyy(v: BlockView):
    """``Σ_i k_Y(y_i, y_i)`` of the block's outputs (the output kernel's diagonal)."""
    return np.array(float(np.sum(v.plan.y.kernel.diag(v.y))))


def _term_count(v: BlockView):
    return np.array(float(v.stop - v.start))


def _term_U(v: BlockView):
    return _unique_rows(dense(v.y), v.start)


@dataclass(frozen=True)
class SumTerm:
    """One partial sum of the pass.

    Attributes
    ----------
    func : callable
        ``func(block: BlockView) -> partial``: an ndarray (added), a :class:`RowSparse`
        (added row-wise, densified at the end), a :class:`RowStack` (placed, assembled into
        n rows at the end) or a ``(rows, first index)`` row set (merged).
    reads_y : bool
        Reads the block's output / target rows (read again for blocks resumed from the store).
    reads_d : bool
        Needs the output block ``D_I`` (computed and stored).
    keeps_blocks : bool
        Holds the block itself, so the task may not reuse its block arrays.
    """

    func: Any
    reads_y: bool = False
    reads_d: bool = False
    keeps_blocks: bool = False


#: The partial sums a pass can compute, by name; a model asks for some of them
#: (:mod:`distsketch.solve`'s ``*_sums``). A new sum is one entry here.
SUM_TERMS = {
    "G": SumTerm(_term_G),
    "B": SumTerm(_term_B),
    "M": SumTerm(_term_M, reads_d=True),
    "E": SumTerm(_term_E, reads_d=True),
    "b": SumTerm(_term_b, reads_y=True),
    "s": SumTerm(_term_s),
    "y1": SumTerm(_term_y1, reads_y=True),
    "C": SumTerm(_term_C, keeps_blocks=True),
    "held": SumTerm(_term_held),
    "D": SumTerm(_term_D, reads_d=True, keeps_blocks=True),
    "Y": SumTerm(_term_Y, reads_y=True),
    "U": SumTerm(_term_U, reads_y=True),
    "yy": SumTerm(_term_yy, reads_y=True),
    "count": SumTerm(_term_count),
    "kyy": SumTerm(_term_kyy, reads_y=True),
}

#: Sums that have a per-fold form ``"<name>@<folds>"`` (cross-validation from one pass).
FOLDABLE = ("G", "M", "b", "s", "y1", "yy", "kyy", "count")


def fold_ids(start: int, stop: int, n: int, folds: str) -> np.ndarray:
    """Fold of each row ``start..stop-1`` for a fold spec ``"K"`` (contiguous folds: row ``i``
    in fold ``⌊iK/n⌋``, scikit-learn's ``KFold`` without shuffling up to the boundaries) or
    ``"K:seed"`` (a seeded hash of the row index, ``splitmix64(seed, i) mod K``: shuffled
    folds that depend on the row alone, never on chunking)."""
    k, _, seed = folds.partition(":")
    K = int(k)
    i = np.arange(start, stop, dtype=np.uint64)
    if not seed:
        return ((i * np.uint64(K)) // np.uint64(n)).astype(np.int64)
    return (row_hash(int(seed), i) % np.uint64(K)).astype(np.int64)


def parse_folds(folds: str) -> int:
    """The number of folds of a fold spec (``ValueError`` if it is not one)."""
    k, sep, seed = folds.partition(":")
    if not k.isdigit() or int(k) < 2 or (sep and not seed.isdigit()):
        raise ValueError(f"fold spec {folds!r}: expected 'K' or 'K:seed' with K >= 2")
    return int(k)


def _folded(base: SumTerm, folds: str) -> SumTerm:
    K = parse_folds(folds)

    def func(v: BlockView):
        f = fold_ids(v.start, v.stop, v.plan.n, folds)
        parts = {}
        for k in np.unique(f):
            rows = np.flatnonzero(f == k)
            sl = slice(int(rows[0]), int(rows[-1]) + 1) if rows[-1] - rows[0] + 1 == len(rows) \
                else rows
            sub = BlockView(v.plan, v.start, v.start + len(rows), v.C[sl],
                            None if v.D is None else v.D[sl],
                            None if v.y is None else v.y[sl], v.backend)
            parts[int(k)] = np.asarray(base.func(sub), dtype=np.float64)
        first = next(iter(parts.values()))
        out = np.zeros((K, *first.shape))
        for k, part in parts.items():
            out[k] = part
        return out

    return SumTerm(func, reads_y=base.reads_y, reads_d=base.reads_d)


def width_of(name: str) -> tuple[str, int]:
    """``(sum name, width index)`` of a pass sum name: ``"G@5~2"`` is ``("G@5", 2)``, the sum
    ``G@5`` of the second further input width (:attr:`PassPlan.x_widths`); 0 for the fit's
    own input kernel."""
    base, sep, j = name.rpartition("~")
    if not sep:
        return name, 0
    if not (j.isdigit() and int(j) >= 1 and base):
        raise KeyError(name)
    return base, int(j)


def sum_term(name: str) -> SumTerm:
    """The :class:`SumTerm` of a sum name: one of :data:`SUM_TERMS`, or ``"<name>@<folds>"``
    (a :data:`FOLDABLE` sum per fold, shape (K, ...), see :func:`fold_ids`), either of them
    with a width suffix ``"~<j>"`` (:func:`width_of`; not for sums that keep the blocks)."""
    name, j = width_of(name)
    if j:
        term = sum_term(name)
        if term.keeps_blocks:
            raise KeyError(f"{name}~{j}")
        return term
    base, sep, folds = name.partition("@")
    if not sep:
        return SUM_TERMS[name]
    if base not in FOLDABLE:
        raise KeyError(name)
    try:
        return _folded(SUM_TERMS[base], folds)
    except ValueError:
        raise KeyError(name) from None


def known_sum(name: str) -> bool:
    try:
        sum_term(name)
    except KeyError:
        return False
    return True


class PassSums(Reducer):
    """Adds partial-sum dicts key by key (``U``: unique rows merged, first index kept)."""

    def own(self, part: dict) -> dict:
        # A node starts once its children are done; the root, last, once every block is: the
        # driver's idle-core sample (options.start_idle_window) runs from the latest start,
        # so the root's own additions, not a sleep, fill most of it (local schedulers).
        start_idle_window()
        return {k: (v if k == "U" else v.copy()) for k, v in part.items()}

    def add(self, acc: dict, part: dict) -> dict:
        for key, value in part.items():
            if key == "U":
                acc[key] = _merge_unique([acc[key], value])
            else:
                acc[key] += value
        return acc


PASS_SUMS = PassSums()


def _float64(block, ws, name: str, xp):
    """``block`` as float64: itself, or converted into a reused work array."""
    if ws is None or getattr(block, "dtype", None) == np.float64:
        return xp.asarray(block, dtype=np.float64)
    out = ws.get(name, block.shape, np.float64, xp)
    xp.copyto(out, block)
    return out


def _block_sums(plan: PassPlan, i: int, C, D, yb, ws, width: int = 0) -> dict:
    """Partial sums of block ``i`` from its blocks ``C`` (and ``D``), in float64: the sums of
    the input width ``width`` (0: the fit's own kernel; ``j``: ``plan.x_widths[j − 1]``, the
    sums named ``"…~j"``)."""
    be = get_backend(plan.backend)
    s, e = plan.rows(i)
    C = _float64(C, ws, "C64", be.xp)
    if D is not None:
        D = _float64(D, ws, "D64", be.xp)
    view = BlockView(plan, s, e, C, D, yb, be)
    return {name: sum_term(name).func(view) for name in plan.sums if width_of(name)[1] == width}


def _width_sums(plan: PassPlan, i: int, xb, yb, D, block, ws) -> dict:
    """The sums of every further input width (:attr:`PassPlan.x_widths`) of block ``i``, each
    from its own block ``C_I^{(j)}`` computed from the input rows ``xb`` into one reused
    buffer (the sums are taken before the next width overwrites it) and the block's output
    side ``D`` (the same for every width)."""
    out: dict = {}
    for j, fmap in enumerate(plan.x_widths, start=1):
        Cj = fmap.block(xb, dtype=plan.dtype, out=block("C~", fmap.width))
        out.update(_block_sums(plan, i, Cj, D, yb, ws, width=j))
    return out


class BlockRecords:
    """The records of the blocks a pass used, ``{i: (token, x, y, c, d)}``: ``+=`` merges."""

    def __init__(self, records: dict):
        self.records = records

    def copy(self) -> "BlockRecords":
        return BlockRecords(dict(self.records))

    def __iadd__(self, other: "BlockRecords") -> "BlockRecords":
        self.records.update(other.records)
        return self


def _fingerprints(plan: PassPlan, xb, yb) -> tuple[int, int]:
    return data_fingerprint(xb), (0 if yb is None else data_fingerprint(yb))


def _stored_block(plan: PassPlan, i: int, record: tuple, xfp: int, yfp: int):
    """Blocks ``C`` (and ``D``) of block ``i`` read back from the store, or None when they fail
    their checksums (damaged, deleted or truncated chunks)."""
    s, e = plan.rows(i)
    _stored_block_identity(plan, i, record, xfp, yfp)
    try:
        C = plan.C[s:e]
        D = plan.D[s:e] if plan.needs_d else None
        if checksum(C) == record[CSUM] and (D is None or checksum(D) == record[DSUM]):
            return C, D
    except Exception as exc:  # a truncated or unreadable chunk
        logger.debug("store %s: block %d unreadable: %s", plan.location, i, exc)
    logger.warning("store %s: block %d (rows %d–%d) fails its checksum (damaged or deleted); "
                   "recomputing it", plan.location, i, s, e - 1)
    return None


def _pass_block(plan: PassPlan, item: tuple, ws) -> dict:
    """The block function of the pass: compute (or read back), store and sum one row block.

    ``item`` is ``(i, record, x, y)``: the block's input rows and, for a block an earlier run
    stored, its record (fit token, data fingerprints, checksums). A stored block is used when
    its inputs have the recorded fingerprints (else the data changed: refused) and its ``C``,
    ``D`` the recorded checksums (else it is recomputed). Block arrays come from the task's
    workspace (reused by the blocks of a fused task) unless the sums keep the blocks.
    """
    i, record, xb, yb = item
    if plan.keeps_blocks:
        ws = None
    be = get_backend(plan.backend)
    s, e = plan.rows(i)

    def block(name: str, m: int):
        shape = (e - s, m)
        return be.xp.empty(shape, dtype=plan.dtype) if ws is None else ws.get(
            name, shape, plan.dtype, be.xp)

    xfp, yfp = _fingerprints(plan, xb, yb) if plan.records is not None else (0, 0)
    if record is not None:
        stored = _stored_block(plan, i, record, xfp, yfp)
        if stored is not None:
            C, D = stored
            sums = _block_sums(plan, i, be.asarray(C), None if D is None else be.asarray(D),
                               yb, ws)
            if plan.x_widths:
                sums.update(_width_sums(plan, i, xb, yb, None if D is None else be.asarray(D),
                                        block, ws))
            sums["_records"] = BlockRecords({i: tuple(int(v) for v in record)})
            return sums

    if plan.check_x:
        check_finite_block(xb, argument="X", start=s)
    if plan.check_y and yb is not None:
        check_finite_block(yb, argument="Y", start=s)
    C = plan.x.block(xb, dtype=plan.dtype, out=block("C", plan.x_sketch.m))
    D = None
    if plan.needs_d:
        D = plan.y.block(yb, dtype=plan.dtype, out=block("D", plan.y_sketch.m))
    # the store writes (and their checksums) run in an I/O thread beside the partial sums
    # (both only read the blocks); the task ends when its blocks and record are written
    written = None
    if plan.records is not None:
        written = _io_pool().submit(_write_block, plan, i, be.to_numpy(C),
                                    None if D is None else be.to_numpy(D), xfp, yfp)
    sums = _block_sums(plan, i, C, D, yb, ws)
    if plan.x_widths:
        sums.update(_width_sums(plan, i, xb, yb, D, block, ws))
    if written is not None:
        sums["_records"] = BlockRecords({i: written.result()})  # re-raises a failed write
    return sums


def _write_block(plan: PassPlan, i: int, C: np.ndarray, D: np.ndarray | None, xfp: int,
                 yfp: int) -> tuple:
    """Write block ``i`` of ``C`` (and ``D``), then its record (I/O thread); returns it."""
    s, e = plan.rows(i)
    try:
        write_rows(plan.C, s, C, direct=plan.direct_io)
        if plan.D is not None and D is not None:
            write_rows(plan.D, s, D, direct=plan.direct_io)
        stored_dtype = np.dtype(plan.C.dtype)
        record = (plan.token, xfp, yfp, checksum(C.astype(stored_dtype, copy=False)),
                  0 if D is None else checksum(D.astype(stored_dtype, copy=False)))
        # only after both blocks are fully written: the record is what marks the block done
        plan.records[i] = np.asarray(record, dtype=np.uint64)
    except OSError as exc:
        raise OSError(exc.errno, f"store {plan.location!r}: writing block {i} (rows {s}–{e - 1}) "
                                 f"failed: {exc.strerror or exc}") from exc
    return record


_IO_POOL: ThreadPoolExecutor | None = None
_IO_POOL_LOCK = threading.Lock()


def _io_pool() -> ThreadPoolExecutor:
    """This process's threads for store writes (created on first use, in any worker)."""
    global _IO_POOL
    with _IO_POOL_LOCK:
        if _IO_POOL is None:
            _IO_POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="distsketch-io")
        return _IO_POOL


# --------------------------------------------------------------------------- orchestration


def run_pass(plan: PassPlan, x: RowSource, y: RowSource | None, *, split_every: int,
             progress: bool = False) -> dict:
    """Run (or resume) the pass over all row blocks and return the reduced sums.

    Blocks recorded in the store are read back instead of recomputed, after checking that
    their input rows are the recorded ones (one read of the data) and that the blocks pass
    their checksums (damaged ones are recomputed). At the end, every block's record in the
    store must be the one this fit wrote or verified: a block rewritten meanwhile by another
    writer (orphaned workers of an earlier fit) is refused.

    Returns
    -------
    dict
        The sums of ``plan.sums``, float64: ``C``, ``D``, ``Y`` assembled (n × ·), ``B``,
        ``E`` dense (m × m), ``U`` as (unique rows, first-occurrence indices), ``held``
        the blocks of ``C`` in row order (float64 copies of the block-dtype values).
    """
    client = distributed_client()
    retries = int(dask.config.get("distsketch.pass-retries", 3))
    attempt, lost = 0, None

    def retry(exc: BaseException) -> bool:
        """Count one more attempt; whether to make it (the cluster has workers again)."""
        nonlocal attempt
        attempt += 1
        if client is None or attempt > retries or not workers_back(client):
            return False
        logger.warning("%s; resending the in-memory blocks and resuming from the blocks "
                       "stored so far (attempt %d of %d)", exc, attempt, retries)
        return True

    while True:
        try:
            items = _pass_items(plan, x, y, client)
            plan_ref = share(plan, name="pass-plan", client=client)
        except Exception as exc:
            if lost is None:
                raise
            # workers lost while the blocks are sent again (a second worker killed after the
            # first loss was seen): the same recovery, within the same retry budget
            if not retry(lost):
                raise lost from exc
            continue
        start = time.perf_counter()  # the pass proper: the inputs are on the workers by now
        try:
            result = map_reduce(_pass_block, items, reducer=PASS_SUMS, shared=plan_ref,
                                split_every=split_every, fuse=True, name="pass",
                                progress=progress)
            break
        except WorkersLost as exc:
            lost = exc
            if not retry(exc):
                raise
    seconds = time.perf_counter() - start
    if client is not None:  # the reduction ran on the workers (else PassSums.own started it)
        start_idle_window()  # the driver's BLAS-thread sample runs from here (options.py)
    logger.info("pass: %d rows in %.3f s (%.0f rows/s)", plan.n, seconds, plan.n / seconds,
                extra={"pass_seconds": seconds, "pass_rows": plan.n})
    used = result.pop("_records", None)
    if plan.records is not None:
        _check_records(plan, used.records)
    for key, value in result.items():
        if isinstance(value, RowStack):
            result[key] = value.assemble(plan.n)
        elif isinstance(value, RowSparse):
            result[key] = value.toarray()
        elif isinstance(value, HeldBlocks):
            result[key] = value.ordered()
    return result


def _pass_items(plan: PassPlan, x: RowSource, y: RowSource | None, client) -> list:
    """One item per block: ``(i, record or None, x rows, y rows)`` (records read now: a
    retried pass resumes from the blocks stored by the attempt before)."""
    records = (np.zeros((plan.n_blocks, len(RECORD)), dtype=np.uint64) if plan.records is None
               else read_records(plan.records, location=plan.location))
    done = records[:, TOKEN] != 0
    x_blocks = row_blocks(x, plan.block_rows, client=client)
    y_blocks = (row_blocks(y, plan.block_rows, client=client) if y is not None
                else [None] * plan.n_blocks)
    logger.info("pass: %d blocks (%d already in the store), %d rows per block",
                plan.n_blocks, int(done.sum()), plan.block_rows)
    return [(i, tuple(int(v) for v in records[i]) if done[i] else None, x_blocks[i], y_blocks[i])
            for i in range(plan.n_blocks)]


def _check_records(plan: PassPlan, used: dict) -> None:
    """Every block's record in the store is the one this pass wrote or verified."""
    now = read_records(plan.records, location=plan.location)
    for i in range(plan.n_blocks):
        if tuple(int(v) for v in now[i]) != used.get(i):
            s, e = plan.rows(i)
            raise StoreError(
                f"store {plan.location!r}: block {i} (rows {s}–{e - 1}) was rewritten by another "
                f"writer during this fit (orphaned workers of an earlier fit?); fit again to "
                f"recompute it")


def verify_data(plan: PassPlan, x: RowSource, y: RowSource | None, *,
                progress: bool = False) -> list[int]:
    """Check that the data are those a complete pass was computed from: every block's input
    rows have their recorded fingerprints (one read of the data, no kernel evaluation).

    Returns the blocks that have no record (lost or unreadable: a damaged store), whose data
    cannot be checked: the caller computes them again."""
    records = read_records(plan.records, location=plan.location)
    client = distributed_client()
    x_blocks = row_blocks(x, plan.block_rows, client=client)
    y_blocks = (row_blocks(y, plan.block_rows, client=client) if y is not None
                else [None] * plan.n_blocks)
    items = [(i, x_blocks[i], y_blocks[i]) for i in range(plan.n_blocks)]
    found = compute(map_blocks(_fingerprint_block, items, name="verify-data"),
                    progress=progress, what="verify data")
    missing = []
    for i, (xfp, yfp) in enumerate(found):
        if records[i, TOKEN] == 0:
            missing.append(i)
        else:
            _stored_block_identity(plan, i, tuple(int(v) for v in records[i]), xfp, yfp)
    return missing


def _fingerprint_block(shared, item, ws) -> tuple[int, int]:
    i, xb, yb = item
    return data_fingerprint(xb), (0 if yb is None else data_fingerprint(yb))


def _stored_block_identity(plan: PassPlan, i: int, record: tuple, xfp: int, yfp: int) -> None:
    """Refuse (:class:`DataChanged`) block ``i`` of a stored pass (``record``: written) when its
    input rows do not have the recorded fingerprints."""
    if (xfp, yfp) != (record[XFP], record[YFP]):
        s, e = plan.rows(i)
        which = "X" if xfp != record[XFP] else "Y"
        raise DataChanged(
            f"store {plan.location!r}: the training data differ from those the stored pass was "
            f"computed from ({which}, rows {s}–{e - 1}, block {i}); fit on the same data, or "
            f"use EngineOptions(overwrite=True) or a new store path")


# --------------------------------------------------------------------------- a whole fit


def jsonable(obj: Any) -> Any:
    """``obj`` as plain JSON values (numpy scalars as Python numbers, anything else as its
    string): the form a store's recorded configuration is compared in."""
    return json.loads(json.dumps(obj, default=lambda o: o.item() if hasattr(o, "item") else str(o)))


@dataclass
class PassResult:
    """What a pass returns to an estimator: realised sketches, landmarks and the sums."""

    n: int
    x_sketch: RealizedSketch
    x_landmarks: Any
    y_sketch: RealizedSketch | None
    y_landmarks: Any
    sums: dict
    store: str | None
    fs: FitStore | None = None  # open (and locked) until the caller closes it


#: A pass's derived block count (``EngineOptions.block_rows=None``) is rounded up to a
#: multiple of this, in equal blocks: with few blocks, a short last block otherwise runs alone
#: while the other cores idle (Bibtex, n = 4880: 3 blocks of 1924 rows took two rounds of
#: 1924-row blocks on 2 cores; 4 blocks of 1220 take two rounds of 1220). A fixed number, not
#: the machine's core count, so that the blocks, hence the sums' rounding, never depend on the
#: machine (docs/design.md, "The streaming pass").
BLOCK_MULTIPLE = 4
#: The rounding up above stops short of blocks smaller than this (halving the multiple).
MIN_BLOCK_ROWS = 256


def choose_block_rows(options: EngineOptions, n: int, width: int, native: int | None,
                       dtype: np.dtype) -> int:
    """Rows per block: ``options.block_rows``, else the most rows ``options.block_memory``
    allows, split into equal blocks whose count is a multiple of :data:`BLOCK_MULTIPLE`
    (halved while the blocks would fall below :data:`MIN_BLOCK_ROWS`), and aligned with the
    input's stored row chunks (``native``) when blocks span whole chunks."""
    if options.block_rows is not None:
        return min(int(options.block_rows), n)
    itemsize = dtype.itemsize
    per_row = 8 * (options.gram_chunk + width) + itemsize * width
    b = max(64, options.block_memory // per_row)
    k_mem = -(-n // b)  # fewest blocks within the memory bound
    k = -(-k_mem // BLOCK_MULTIPLE) * BLOCK_MULTIPLE
    while k > max(k_mem, n // MIN_BLOCK_ROWS) and k % 2 == 0:
        k //= 2
    b = -(-n // max(k, k_mem))
    if b >= n:  # one block: the same whatever the input's chunks
        return int(n)
    if native and b >= native:  # whole stored chunks per block; smaller blocks split chunks
        b = (b // native) * native
    return int(min(b, n))


def fit_pass(
    X: RowSource,
    Y: RowSource | None,
    *,
    x_kernel,
    x_sketch: Sketch,
    sums: tuple,
    y_kernel=None,
    y_sketch: Sketch | None = None,
    rng: np.random.Generator,
    store: Any,
    options: EngineOptions,
    model: str,
    reuse_seeds: bool = False,
    x_widths: tuple = (),
    seeds: tuple[int, int] | None = None,
) -> PassResult:
    """Draw the sketches, gather landmarks and run (or resume, or reuse) the streaming pass.

    ``y_kernel=None``: ``Y`` holds vector targets (sums ``b``, ``Y``) or is None (input side
    only); otherwise ``Y`` goes through the output kernel (sums ``M, E, D``). ``sums`` names
    the :data:`SUM_TERMS` the model needs. ``store`` is the estimator's ``store`` argument
    (None, a path, a zarr group or a :class:`~distsketch.store.StoreDirectory`): it is opened
    and locked here and returned open in ``PassResult.fs``; the caller saves its model there
    and closes it. ``reuse_seeds`` (a fit without a ``random_state``): take the sketch seeds a
    pass recorded in the store, so that fitting again resumes it. ``x_widths``: further input
    kernels (other widths of ``x_kernel``) over the same sketch and landmarks, whose sums are
    named ``"<sum>~<j>"`` (:attr:`PassPlan.x_widths`): one read of the rows for all of them.
    ``seeds``: the two sketch seeds (input, output) already drawn by the caller, in place of
    the two this call would draw from ``rng`` (a route that draws them itself to find its
    own store's state, :func:`distsketch.pcg.fit_pcg_sisokr`).
    """
    unknown = {s for s in sums if not known_sum(s) or width_of(s)[1] > len(x_widths)}
    if unknown:
        raise ValueError(f"fit_pass: unknown sums {sorted(unknown)}; known: {sorted(SUM_TERMS)}")
    directory = store if isinstance(store, StoreDirectory) else None
    fs = None if directory is not None else open_fit_store(store, lock=True)
    try:
        return _fit_pass(X, Y, x_kernel=x_kernel, x_sketch=x_sketch, sums=sums,
                         y_kernel=y_kernel, y_sketch=y_sketch, rng=rng, fs=fs,
                         directory=directory, options=options, model=model,
                         reuse_seeds=reuse_seeds, x_widths=tuple(x_widths), seeds=seeds)
    except BaseException:
        if fs is not None:
            fs.close()
        raise


def _pass_seeds(rng, seeds, *, fs, reuse_seeds) -> list[int]:
    """The two sketch seeds (input, output) of a pass: ``seeds`` if given, else two drawn from
    ``rng``; with ``reuse_seeds``, those the store recorded take their place."""
    seeds = ([int(s) for s in rng.integers(0, 2**63 - 1, size=2)] if seeds is None
             else [int(s) for s in seeds])
    if reuse_seeds and fs is not None:
        found = [fs.recorded_seed(side) for side in ("input", "output")]
        if any(f is not None for f in found):
            seeds = [s if f is None else f for f, s in zip(found, seeds)]
            logger.info("store %s: random_state=None, resuming with the sketch seeds it "
                        "recorded", fs.location)
    return seeds


def _pass_config(X, Y, xs, ys, x_land, y_land, *, x_kernel, y_kernel, sums, model, block_rows,
                 dtype, options, x_widths) -> dict:
    """The pass's configuration as the store records it (:func:`jsonable`): a stored pass is
    reused only under the same one."""
    needs_d = any(sum_term(s).reads_d for s in sums)
    if Y is None:
        output = None
    elif ys is None:
        output = {"targets": Y.shape}
    else:
        output = {"kernel": kernel_description(y_kernel), "sketch": ys.to_config(),
                  "shape": Y.shape, "landmarks": fingerprint(y_land)}
    return jsonable({
        "model": model,
        "n": X.n,
        "block_rows": block_rows,
        "block_dtype": dtype,
        "gram_chunk": options.gram_chunk,
        "m_x": xs.m,
        "m_y": ys.m if needs_d else None,  # D is stored
        "input": {"kernel": kernel_description(x_kernel), "sketch": xs.to_config(),
                  "shape": X.shape, "landmarks": fingerprint(x_land)},
        "output": output,
        "unique_outputs": "U" in sums,
        # further input widths only where there are some: earlier stores keep their config
        **({"input_widths": [kernel_description(k) for k in x_widths]} if x_widths else {}),
        # the density rule's knobs only where they are not the defaults (the same reason)
        **store_config(options.tuning),
    })


def _fit_pass(X, Y, *, x_kernel, x_sketch, sums, y_kernel, y_sketch, rng, fs, directory,
              options, model, reuse_seeds, x_widths=(), seeds=None) -> PassResult:
    n = X.n
    seeds = _pass_seeds(rng, seeds, fs=fs, reuse_seeds=reuse_seeds)

    def draw(sketch, seed, data, kernel):
        if getattr(sketch, "needs_kernel", False):  # data-dependent: scores from the rows
            return sketch.realize(n, seed=seed, data=data, kernel=kernel)
        return sketch.realize(n, seed=seed, data=data)

    xs = draw(x_sketch, seeds[0], X, x_kernel)
    ys = draw(y_sketch, seeds[1], Y, y_kernel) if y_kernel is not None else None
    x_land = X.take(xs.support)
    y_land = Y.take(ys.support) if ys is not None else None
    width = xs.m + X.shape[1]
    if Y is not None:
        width += (ys.m if ys is not None else Y.shape[1]) + Y.shape[1]
    if x_widths:  # one more block buffer, reused by every further width
        width += xs.m
    # An exact side's blocks are used as they are (the n × n Gram matrix K_X + nλI is
    # factored, or C itself enters the model), where float32 rounding would be amplified by
    # up to 1/(nλ): they stay float64 (small n, where the pass is cheap anyway).
    exact = xs.is_identity or (ys is not None and ys.is_identity)
    dtype = "float64" if exact else options.block_dtype
    native = X.native_rows or (Y.native_rows if Y is not None else None)
    b = choose_block_rows(options, n, width, native, np.dtype(dtype))
    config = _pass_config(X, Y, xs, ys, x_land, y_land, x_kernel=x_kernel, y_kernel=y_kernel,
                          sums=sums, model=model, block_rows=b, dtype=dtype, options=options,
                          x_widths=x_widths)
    if directory is not None:
        fs = directory.open(config)
    fs.prepare_pass(config, overwrite=options.overwrite)

    def plan_of():
        C, D, records = fs.pass_arrays()
        return PassPlan(
            n=n, block_rows=b,
            x=FeatureMap(x_kernel, x_land, xs, options.gram_chunk, options.tuning),
            y=(FeatureMap(y_kernel, y_land, ys, options.gram_chunk, options.tuning)
               if ys is not None else None),
            sums=tuple(sums), C=C, D=D, records=records, dtype=np.dtype(dtype),
            check_x=X.lazy, check_y=Y is not None and Y.lazy, direct_io=options.direct_io,
            backend=options.backend, token=0 if fs.temporary else fs.token,
            location=fs.location,
            x_widths=tuple(FeatureMap(k, x_land, xs, options.gram_chunk, options.tuning)
                           for k in x_widths))

    def complete(plan):
        unrecorded = (verify_data(plan, X, Y, progress=options.progress) if fs.pass_complete
                      else [])
        if unrecorded:  # lost records: those blocks are computed again, the others verified
            logger.warning("store %s: blocks %s have no record although the pass is marked "
                           "complete (damaged); computing them again, and the sums",
                           fs.location, unrecorded)
            fs.mark("pass")
        elif fs.pass_complete:
            try:
                result = fs.read_sums()
                missing = [s for s in sums if s not in result]
                if not missing:
                    logger.info("store %s: pass already complete, reusing its sums",
                                fs.location)
                    return result
                # written by a model that needed other sums: add them from the stored blocks,
                # keeping those it stored (the other model reuses them)
                logger.info("store %s: computing the sums %s from the stored blocks",
                            fs.location, missing)
                union = tuple(sums) + tuple(k for k in sorted(result) if k not in sums
                                            and known_sum(k))
                plan = replace(plan, sums=union)
                fs.mark("pass")
            except StoreError as exc:  # damaged sums: recompute them from the verified blocks
                logger.warning("%s; recomputing the sums from the stored blocks", exc)
                fs.mark("pass")
        result = run_pass(plan, X, Y, split_every=options.split_every, progress=options.progress)
        fs.write_sums(result)
        return result

    try:
        result = complete(plan_of())
    except DataChanged as exc:
        if not options.overwrite:
            raise
        logger.warning("%s; overwrite=True: computing the pass afresh", exc)
        fs.reset(config)
        result = complete(plan_of())
    return PassResult(n=n, x_sketch=xs, x_landmarks=x_land, y_sketch=ys, y_landmarks=y_land,
                      sums=result, store=None if fs.temporary else fs.location, fs=fs)
