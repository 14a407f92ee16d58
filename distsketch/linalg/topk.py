"""Top-k block math of decoding: partial top-k of a score block and merges, no dask.

Glossary (docs/design/decoding.md)
----------------------------------
g(x) = W φ_X(x)          query surrogate, shape (r_Y,)
φ_Y(y)                   candidate output features, shape (r_Y,)
score(x, y) = k_Y(y, y) − 2 φ_Y(y)ᵀ g(x)    smaller is better

Scores are computed in GEMM-shaped blocks ``kyy − 2 G Fᵀ`` (queries × candidates) and reduced
at once to a partial top-k; partial results merge by (score, index). Ties are broken by the
lower candidate index everywhere, so a merge tree gives the same result in any shape.

With a compute backend other than numpy (``score_topk(..., backend="cuda")``) a task's
candidate block, queries and ``kyy`` go to the device once, the score tiles, the first tile's
top-k (a stable sort) and the merges of later tiles (stable sorts of the few entries that
beat a running k-th best) run there, and only the ``k`` winners per query come back: the
same (score, index) order as the host path, on the device's GEMM scores.
"""

from __future__ import annotations

import numpy as np

from ..backends.base import NUMPY, get_backend
from .blocks import aligned_rows, pad_rows

__all__ = ["SCORE_ROWS", "smallest_k", "merge_topk", "score_topk", "tile_rows"]

#: Candidate rows per BLAS call inside a task: it bounds the score block (queries × this), and
#: every call has exactly this many rows (the last tile is zero-padded). Fixed-shape tiles of a
#: multiple of :data:`~distsketch.linalg.blocks.TILE_ALIGN` rows (no row in a BLAS edge kernel) give
#: duplicate candidates bitwise-equal scores — exact ties, resolved by the lower index —
#: whatever the task boundaries, chunking or scheduler.
SCORE_ROWS = 4096


def tile_rows(n_candidates: int, *, block_rows: int | None = None) -> int:
    """Score tile of one decoding: at most :data:`SCORE_ROWS` rows, sized to the candidates.

    A candidate block of ``b = min(n_candidates, block_rows)`` rows is cut into
    ``t = ⌈b / SCORE_ROWS⌉`` equal tiles of ``⌈b / t⌉`` rows rounded up to a multiple of
    :data:`~distsketch.linalg.blocks.TILE_ALIGN` (64), so 2 058 candidates are scored in one tile of
    2 112 rows (not padded to 4 096). The tile is
    fixed once per decoding (from the candidate count, never from the task layout) and shipped
    with the graph, so every GEMM of one decoding has the same shape: exact ties stay exact.
    """
    b = max(1, int(n_candidates) if block_rows is None else min(int(n_candidates), int(block_rows)))
    t = -(-b // SCORE_ROWS)
    return min(SCORE_ROWS, aligned_rows(-(-b // t)))


def smallest_k(S: np.ndarray, k: int, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row-wise ``k`` smallest scores of ``S`` (q × c), ties broken by the lower ``index``.

    Parameters
    ----------
    S : ndarray of shape (q, c)
    k : int
    index : ndarray of int64, shape (c,)
        Candidate index of each column (increasing).

    Returns
    -------
    idx : ndarray of int64, shape (q, k)
        ``-1`` where a row has fewer than ``k`` candidates.
    scores : ndarray of float64, shape (q, k)
        ``+inf`` where ``idx`` is ``-1``.
    """
    q, c = S.shape
    if c > k:
        part = np.argpartition(S, k - 1, axis=1)[:, :k]
        vals = np.take_along_axis(S, part, axis=1)
        # a tie at the k-th value may leave a lower index outside the partition: redo those
        tied = np.flatnonzero((S <= vals.max(axis=1, keepdims=True)).sum(axis=1) > k)
        cols = index[part]
        for r in tied:
            order = np.lexsort((index, S[r]))[:k]
            cols[r], vals[r] = index[order], S[r, order]
    else:
        cols = np.broadcast_to(index, (q, c)).copy()
        vals = S.copy()
    return _sorted_padded(cols.astype(np.int64, copy=False), vals, k)


def _sorted_padded(idx: np.ndarray, vals: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Sort each row by (score, index), invalid (−1) last, and keep/pad to ``k`` columns."""
    key = np.where(idx < 0, np.iinfo(np.int64).max, idx)
    vals = np.where(idx < 0, np.inf, vals)
    order = np.lexsort((key, vals), axis=1)[:, :k]
    idx = np.take_along_axis(idx, order, axis=1)
    vals = np.take_along_axis(vals, order, axis=1)
    if idx.shape[1] < k:
        pad = k - idx.shape[1]
        idx = np.pad(idx, ((0, 0), (0, pad)), constant_values=-1)
        vals = np.pad(vals, ((0, 0), (0, pad)), constant_values=np.inf)
    return idx, vals


def merge_topk(*parts: tuple[np.ndarray, np.ndarray], k: int) -> tuple[np.ndarray, np.ndarray]:
    """Merge partial top-k results of the same queries (one node of the merge tree)."""
    idx = np.concatenate([p[0] for p in parts], axis=1)
    vals = np.concatenate([p[1] for p in parts], axis=1)
    return _sorted_padded(idx, vals, k)


def _merge_entries(best: tuple[np.ndarray, np.ndarray], rows: np.ndarray, index: np.ndarray,
                   vals: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Merge sparse new entries ``(rows, index, vals)`` into a running top-k ``best``."""
    best_i, best_v = best
    touched = np.unique(rows)
    all_r = np.concatenate([np.repeat(touched, k), rows])
    all_i = np.concatenate([best_i[touched].ravel(), index])
    all_v = np.concatenate([best_v[touched].ravel(), vals])
    key = np.where(all_i < 0, np.iinfo(np.int64).max, all_i)
    all_v = np.where(all_i < 0, np.inf, all_v)
    order = np.lexsort((key, all_v, all_r))
    counts = np.bincount(all_r[order], minlength=best_i.shape[0])[touched]
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    take = order[(starts[:, None] + np.arange(k)).ravel()]  # every touched row has >= k entries
    best_i, best_v = best_i.copy(), best_v.copy()
    best_i[touched] = all_i[take].reshape(-1, k)
    best_v[touched] = all_v[take].reshape(-1, k)
    return best_i, best_v


def score_topk(G: np.ndarray, F: np.ndarray, kyy: np.ndarray, k: int, index: np.ndarray, *,
               pad: bool = True, rows: int | None = None, backend=None):
    """Top-k of ``kyy − 2 G Fᵀ`` over tiles of ``SCORE_ROWS`` candidates (bounded score block).

    After the first tile only scores strictly below each query's running k-th best are
    merged (later tiles hold higher indices, so an equal score loses its tie): the cost per
    tile is the GEMM plus one comparison pass. ``pad``: give every GEMM the same shape, the
    tile's rows rounded up to a multiple of :data:`~distsketch.linalg.blocks.TILE_ALIGN` (needed
    when the candidates of one set are split over several calls); without it a GEMM has the
    candidates' count rounded up to that multiple (no candidate in a BLAS edge kernel). ``rows``:
    the tile (default :data:`SCORE_ROWS`, read when a decoding graph is built and shipped with it,
    so every worker tiles alike). ``backend``: a compute backend name (module docstring); ``None``
    or ``"numpy"`` scores on the host.
    """
    tile_rows = SCORE_ROWS if rows is None else rows
    be = NUMPY if backend is None else get_backend(backend)
    if be is not NUMPY:
        return _score_topk_device(be, G, F, kyy, k, index, pad=pad, tile_rows=tile_rows)
    G2 = -2.0 * G
    best = None
    for s in range(0, F.shape[0], tile_rows):
        w = min(tile_rows, F.shape[0] - s)
        tile = pad_rows(F[s : s + w], aligned_rows(tile_rows if pad else w))
        S = (G2 @ tile.T)[:, :w]
        S += kyy[s : s + w]
        if best is None:
            best = smallest_k(S, k, index[s : s + w])
            continue
        rows, cols = np.nonzero(S < best[1][:, -1:])
        if rows.size:
            best = _merge_entries(best, rows, index[s + cols], S[rows, cols], k)
    return best


# --------------------------------------------------------------------------- on a device
# The same order as the host path: entries sorted by (score, candidate position), positions
# increasing with the candidate index. Stable sorts over keys laid out in position order do
# the lexicographic sorts (CuPy's sort is always stable and has no 2-D lexsort).


def _score_topk_device(be, G, F, kyy, k: int, index: np.ndarray, *, pad: bool, tile_rows: int):
    """:func:`score_topk` with the tiles, the top-k and the merges in backend ``be``; returns
    host ``(idx, scores)``, (q, k) each, as the host path."""
    xp = be.xp
    G2 = be.asarray(-2.0 * np.asarray(G, dtype=np.float64))
    Fd = be.asarray(F, dtype=np.float64)
    kd = be.asarray(np.asarray(kyy, dtype=np.float64).ravel())
    c = F.shape[0]
    best = padded = None
    for s in range(0, c, tile_rows):
        w = min(tile_rows, c - s)
        height = aligned_rows(tile_rows if pad else w)
        if height != w:  # zero rows appended, in one reused device array
            if padded is None or padded.shape[0] != height:
                padded = xp.zeros((height, Fd.shape[1]))
            padded[:w] = Fd[s:s + w]
            padded[w:] = 0.0
            tile = padded
        else:
            tile = Fd[s:s + w]
        S = (G2 @ tile.T)[:, :w]
        S += kd[s:s + w]
        if best is None:
            best = _first_topk(be, S, k, s)
            continue
        rows_, cols = xp.nonzero(S < best[1][:, -1:])
        if int(rows_.size):
            best = _merge_device(be, best, rows_, cols + s, S[rows_, cols], k)
    pos, vals = be.to_numpy(best[0]), be.to_numpy(best[1])
    idx = np.where(pos < 0, -1, np.asarray(index)[np.maximum(pos, 0)]).astype(np.int64)
    return idx, vals


def _first_topk(be, S, k: int, offset: int):
    """Positions (``offset`` + column) and scores of each row's ``k`` smallest, by (score,
    position), padded with −1 / +inf to ``k`` columns."""
    xp = be.xp
    q, w = S.shape
    order = be.argsort_stable(S, axis=1)[:, :k]
    vals = xp.take_along_axis(S, order, axis=1)
    pos = order.astype(np.int64) + offset
    if w < k:
        pos = xp.concatenate([pos, xp.full((q, k - w), -1, dtype=np.int64)], axis=1)
        vals = xp.concatenate([vals, xp.full((q, k - w), np.inf)], axis=1)
    return pos, vals


def _merge_device(be, best, rows, pos, vals, k: int):
    """Merge entries ``(rows, pos, vals)`` into the running ``best`` (on the device), as
    :func:`_merge_entries`: sort by (row, score, position) with invalid entries last."""
    xp = be.xp
    best_i, best_v = best
    touched = xp.unique(rows)
    all_r = xp.concatenate([xp.repeat(touched, k), rows.astype(touched.dtype)])
    all_i = xp.concatenate([best_i[touched].ravel(), pos.astype(np.int64)])
    all_v = xp.concatenate([best_v[touched].ravel(), vals])
    invalid = all_i < 0
    key = xp.where(invalid, np.iinfo(np.int64).max, all_i)
    all_v = xp.where(invalid, np.inf, all_v)
    order = be.argsort_stable(key)
    order = order[be.argsort_stable(all_v[order])]
    order = order[be.argsort_stable(all_r[order])]
    counts = xp.bincount(all_r[order], minlength=best_i.shape[0])[touched]
    starts = xp.cumsum(counts) - counts
    take = order[(starts[:, None] + xp.arange(k)).ravel()]  # every touched row has >= k entries
    best_i, best_v = best_i.copy(), best_v.copy()
    best_i[touched] = all_i[take].reshape(-1, k)
    best_v[touched] = all_v[take].reshape(-1, k)
    return best_i, best_v
