"""The plan and the partial sums of the streaming pass.

A :class:`PassPlan` is everything a block task of the pass (:mod:`distsketch.engine.accumulate`)
needs, shipped to workers once. :data:`SUM_TERMS` are the partial sums a pass can compute, by
name (docs/design/engine.md, "The streaming pass"): each a :class:`SumTerm` whose function takes one
block (a :class:`BlockView`) and returns its partial: an ndarray (added), a :class:`RowSparse`
(added row-wise), a :class:`RowStack` or :class:`HeldBlocks` (placed) or a row set (unique
rows, merged). A sum name may carry a fold spec (``"G@5"``, :func:`fold_ids`) and a width
suffix (``"G~2"``, :func:`width_of`); :func:`sum_term` resolves any of them. :data:`PASS_SUMS`
adds the blocks' partial-sum dicts in the pass's tree reduction. A new sum is one entry of
:data:`SUM_TERMS` and one name in a model.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._hashing import row_hash, rows_digest
from ..backends.base import dense
from ..options import start_idle_window
from ..sketches.base import RealizedSketch
from .features import FeatureMap
from .mapreduce import Reducer

__all__ = ["PassPlan", "SumTerm", "SUM_TERMS", "FOLDABLE", "BlockView", "RowStack", "HeldBlocks",
           "RowSparse", "PassSums", "PASS_SUMS", "fold_ids", "parse_folds", "fold_spec",
           "width_of",
           "sum_term", "known_sum"]


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
        fit token, data fingerprints, checksums; see :mod:`distsketch.engine.store`); None for a
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
        Write blocks to a local store with O_DIRECT (see
        :func:`~distsketch.engine.chunkwrite.write_rows`).
    backend : str
        Compute backend of the block math (:mod:`distsketch.backends`).
    x_widths : tuple of FeatureMap
        Further input feature maps over the same landmarks and sketch (other kernel widths,
        :func:`~distsketch.engine.fitpass.fit_pass` ``x_widths``): the sums named ``"<sum>~<j>"`` are those of the
        ``j``-th (1-based) computed from its own block ``C_I^{(j)}``, recomputed from the
        block's input rows (never stored). One read of the data serves every width.
    row_offset : int
        Training-row position of the pass's first row (0; appended rows,
        :func:`~distsketch.engine.batches.batch_pass`, start after the fit's): the blocks'
        :class:`BlockView` rows are ``offset + plan.rows(i)``, where the sketch's columns and
        the unique outputs' positions are read.
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
    row_offset: int = 0

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
    x: Any = None  # the raw input rows (host)

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


def _term_digest(v: BlockView):
    """The rows' order-free digest (:func:`~distsketch._hashing.rows_digest`): a wrapping
    uint64 sum, the identity of a fit's rows that appended batches are compared with."""
    return np.atleast_1d(rows_digest(v.x, v.y))


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
#: (:mod:`distsketch.solvers.direct`'s ``*_sums``). A new sum is one entry here.
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
    "digest": SumTerm(_term_digest, reads_y=True),
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


def fold_spec(cv, *, argument: str = "cv") -> str:
    """The pass's fold spec (``"K"`` or ``"K:seed"``) of ``cv``: an int ``K ≥ 2`` (contiguous
    folds), or an object with ``n_splits``, ``shuffle`` and ``random_state`` (scikit-learn's
    ``KFold``): shuffled folds are a seeded hash of the row index (the same rows for the same
    seed, whatever the chunking; not the rows ``KFold`` itself would pick), or the spec itself
    as a string, ``"K"`` or ``"K:seed"`` (what :func:`distsketch.model_selection.select.select`
    passes: it is saved with the model as a plain value)."""
    if isinstance(cv, str):
        try:
            parse_folds(cv)
        except ValueError:
            raise ValueError(f"{argument}: expected a number of folds, a KFold-like splitter or "
                             f"a fold spec 'K' / 'K:seed' (K >= 2), got {cv!r}") from None
        k, sep, seed = cv.partition(":")
        return f"{int(k)}:{int(seed)}" if sep else str(int(k))
    if isinstance(cv, numbers.Integral) and not isinstance(cv, bool):
        if cv < 2:
            raise ValueError(f"{argument}: the number of folds must be at least 2, got {cv!r}")
        return str(int(cv))
    k = getattr(cv, "n_splits", None)
    if isinstance(k, numbers.Integral) and not isinstance(k, bool) and k >= 2 \
            and hasattr(cv, "shuffle"):
        if not cv.shuffle:
            return str(int(k))
        seed = getattr(cv, "random_state", None)
        if not isinstance(seed, numbers.Integral) or isinstance(seed, bool) or seed < 0:
            raise ValueError(f"{argument}: shuffled folds need an integer random_state "
                             f"(KFold(n_splits={k}, shuffle=True, random_state=0)), got "
                             f"{seed!r}")
        return f"{int(k)}:{int(seed)}"
    raise ValueError(f"{argument}: expected a number of folds (int >= 2) or a KFold-like "
                     f"splitter (n_splits, shuffle, random_state), got {cv!r}")


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
