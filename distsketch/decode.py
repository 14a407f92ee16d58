"""Decoding at scale: top-k pre-images over fixed or per-query candidate sets.

Glossary (DESIGN §2, "Decoding")
--------------------------------
g(x) = W φ_X(x)          query surrogate, shape (r_Y,) — :meth:`SISOKR.surrogate`
φ_Y(y)                   candidate output features, shape (r_Y,)
score(x, y) = k_Y(y, y) − 2 φ_Y(y)ᵀ g(x)    smaller is better

Scores are computed in GEMM-shaped blocks ``kyy − 2 G Fᵀ`` (queries × candidates), reduced at
once to a partial top-k with ``argpartition`` and merged by a fixed-order tree: the full
``n_queries × n_candidates`` score matrix never exists. Ties are broken by the lower candidate
index, everywhere, so the result does not depend on chunking or scheduling.

Per-query candidate sets (metabolite identification: each spectrum has its own list) are a
ragged collection: concatenated candidates plus offsets. Queries are grouped by set; a task
scores a contiguous span of candidates holding several small sets, or one piece of a large
set (pieces merged like the fixed case). Candidate features are computed once per task for
all the queries sharing the set, or read from a :class:`~distsketch.candidates.CandidateStore`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp
from dask.delayed import delayed

from ._compute import compute, distributed_client, map_local, share
from .sketches import gram_dot

__all__ = ["Scorer", "smallest_k", "merge_topk", "decode_fixed", "decode_ragged"]

#: Candidate rows per BLAS call inside a task: it bounds the score block (queries × this), and
#: every call has exactly this many rows (the last tile is zero-padded). BLAS results depend on
#: a call's shape but not on a row's position in it, so fixed-shape tiles give duplicate
#: candidates bitwise-equal scores — exact ties, resolved by the lower index — whatever the
#: task boundaries, chunking or scheduler.
SCORE_ROWS = 4096


@dataclass(frozen=True)
class Scorer:
    """What a decoding task needs of a fitted model's output side (shipped once).

    Attributes
    ----------
    kernel : callable
        Output kernel ``k_Y``.
    landmarks : array of shape (s'_Y, d_Y)
    projection : ndarray of shape (s'_Y, r_Y) or None
        ``P_Y = R_Ymixᵀ T_Y``; ``None`` for an exact output side (features ``k_Y(Y, y)``).
    chunk : int
        Landmark columns per kernel block.
    """

    kernel: Any
    landmarks: Any
    projection: Any
    chunk: int

    @property
    def width(self) -> int:
        return self.landmarks.shape[0] if self.projection is None else self.projection.shape[1]

    def features(self, Y, *, parallel: bool = False) -> np.ndarray:
        """``φ_Y`` of candidate rows ``Y`` (c × r_Y), in padded tiles of ``SCORE_ROWS`` rows.

        ``parallel=True`` computes the tiles on all cores (:func:`map_local`); inside a
        task, keep the default.
        """
        out = np.empty((Y.shape[0], self.width))

        def tile(s: int) -> None:
            padded = _padded(_rows(Y, s, s + SCORE_ROWS), SCORE_ROWS)
            phi = gram_dot(self.kernel, padded, self.landmarks, right=self.projection, chunk=self.chunk)
            out[s : s + SCORE_ROWS] = phi[: min(SCORE_ROWS, Y.shape[0] - s)]

        starts = list(range(0, Y.shape[0], SCORE_ROWS))
        if parallel:
            map_local(tile, starts)
        else:
            for s in starts:
                tile(s)
        return out

    def diag(self, Y) -> np.ndarray:
        """``k_Y(y, y)`` of candidate rows (c,)."""
        return np.asarray(self.kernel.diag(_as_float(Y)), dtype=np.float64)


def _as_float(Y):
    if sp.issparse(Y):
        return Y
    Y = np.asarray(Y)
    return Y if Y.dtype.kind == "f" else Y.astype(np.float64)


def _rows(Y, start: int, stop: int):
    return _as_float(Y[start:stop])


def _padded(A, rows: int):
    """``A`` with zero rows appended up to ``rows`` (the fixed BLAS call shape)."""
    missing = rows - A.shape[0]
    if missing <= 0:
        return A
    if sp.issparse(A):
        return sp.vstack([A, sp.csr_array((missing, A.shape[1]), dtype=A.dtype)], format="csr")
    out = np.zeros((rows, A.shape[1]), dtype=A.dtype)
    out[: A.shape[0]] = A
    return out


# --------------------------------------------------------------------------- top-k block math


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
               pad: bool = True):
    """Top-k of ``kyy − 2 G Fᵀ`` over tiles of ``SCORE_ROWS`` candidates (bounded score block).

    After the first tile only scores strictly below each query's running k-th best are
    merged (later tiles hold higher indices, so an equal score loses its tie): the cost per
    tile is the GEMM plus one comparison pass. ``pad``: give every GEMM the same shape (needed
    when the candidates of one set are split over several calls).
    """
    G2 = -2.0 * G
    best = None
    for s in range(0, F.shape[0], SCORE_ROWS):
        w = min(SCORE_ROWS, F.shape[0] - s)
        tile = _padded(F[s : s + w], SCORE_ROWS) if pad else F[s : s + w]
        S = (G2 @ tile.T)[:, :w]
        S += kyy[s : s + w]
        if best is None:
            best = smallest_k(S, k, index[s : s + w])
            continue
        rows, cols = np.nonzero(S < best[1][:, -1:])
        if rows.size:
            best = _merge_entries(best, rows, index[s + cols], S[rows, cols], k)
    return best


# --------------------------------------------------------------------------- tasks


def _fixed_block(scorer: Scorer, G: np.ndarray, cand, offset: int, k: int):
    """Top-k of all queries ``G`` against one candidate block (rows offset …)."""
    F, kyy = _features_of(scorer, cand)
    return score_topk(G, F, kyy, k, np.arange(offset, offset + F.shape[0], dtype=np.int64))


def _features_of(scorer: Scorer, cand):
    """Candidate features: computed from raw rows, or read from a store (``("cached", …)``)."""
    if isinstance(cand, tuple) and cand and cand[0] == "cached":
        _, phi, kyy, start, stop = cand
        return np.asarray(phi[start:stop], dtype=np.float64), np.asarray(kyy[start:stop])
    if isinstance(cand, tuple) and cand and cand[0] == "zarr":
        _, arr, start, stop = cand
        cand = arr[start:stop]
    return scorer.features(cand), scorer.diag(cand)


def _ragged_block(scorer: Scorer, G: np.ndarray, cand, span_start: int, groups: list, k: int):
    """Score the query groups of one span of concatenated candidates.

    ``groups``: list of ``(a, b, base, queries, whole)`` — candidate rows ``[a, b)`` (global,
    inside the span), ``base`` the first row of their set (indices are reported relative to
    it), ``queries`` the query rows scored against them, ``whole`` whether ``[a, b)`` is the
    entire set (else a piece of a large set, merged with the other pieces).
    """
    F, kyy = _features_of(scorer, cand)
    out_q, out_i, out_s = [], [], []
    for a, b, base, queries, whole in groups:
        lo, hi = a - span_start, b - span_start
        # a whole set of one tile is one GEMM; sets split over calls use fixed-shape tiles
        idx, vals = score_topk(G[queries], F[lo:hi], kyy[lo:hi], k,
                               np.arange(a - base, b - base, dtype=np.int64),
                               pad=not whole or (b - a) > SCORE_ROWS)
        out_q.append(queries)
        out_i.append(idx)
        out_s.append(vals)
    return np.concatenate(out_q), np.concatenate(out_i), np.concatenate(out_s)


def _merge_ragged(*parts, k: int):
    """Merge pieces of one large set: identical query lists, partial top-k per piece."""
    merged = merge_topk(*[(p[1], p[2]) for p in parts], k=k)
    return parts[0][0], merged[0], merged[1]


def _tree(items: list, combine, *, split_every: int, name: str, **kw) -> Any:
    level = 0
    while len(items) > 1:
        items = [
            delayed(combine, pure=True)(*items[j : j + split_every], **kw,
                                        dask_key_name=f"{name}-{level}-{j}")
            for j in range(0, len(items), split_every)
        ]
        level += 1
    return items[0]


# --------------------------------------------------------------------------- orchestration


def decode_fixed(scorer: Scorer, G: np.ndarray, candidates, *, n_candidates: int, k: int,
                 block_rows: int, split_every: int = 4, query_rows: int = 65536,
                 progress: bool = False):
    """Top-k over one candidate set for every query.

    Parameters
    ----------
    scorer : Scorer
    G : ndarray of shape (n_queries, r_Y)
        Query surrogates.
    candidates : callable
        ``candidates(start, stop)`` → a task argument for candidate rows ``[start, stop)``
        (an array, a delayed read, or a ``("cached", phi, kyy, start, stop)`` spec).
    n_candidates : int
    k : int
    block_rows : int
        Candidates per task.
    query_rows : int
        Queries per task (bounds the surrogate block a task holds).

    Returns
    -------
    (indices, scores) : ndarrays of shape (n_queries, k)
    """
    token = uuid.uuid4().hex[:8]
    client = distributed_client()
    scorer_ref = share(scorer, name=f"decode-scorer-{token}", client=client)
    blocks = [(s, min(s + block_rows, n_candidates)) for s in range(0, n_candidates, block_rows)]
    finals = []
    for qs in range(0, G.shape[0], query_rows):
        Gq = share(np.ascontiguousarray(G[qs : qs + query_rows]), name=f"decode-g-{token}-{qs}",
                    client=client)
        parts = [delayed(_fixed_block)(scorer_ref, Gq, candidates(a, b), a, k,
                                       dask_key_name=f"decode-block-{token}-{qs}-{a}")
                 for a, b in blocks]
        finals.append(_tree(parts, merge_topk, split_every=split_every, k=k,
                            name=f"decode-merge-{token}-{qs}"))
    results = compute(finals, progress=progress, what="decode")
    return (np.concatenate([r[0] for r in results]), np.concatenate([r[1] for r in results]))


def decode_ragged(scorer: Scorer, G: np.ndarray, candidates, *, offsets: np.ndarray,
                  query_sets: np.ndarray, k: int, block_rows: int, split_every: int = 4,
                  progress: bool = False):
    """Top-k of each query over its own candidate set; indices are positions in that set.

    Parameters
    ----------
    candidates : callable
        ``candidates(start, stop)`` → a task argument for concatenated rows ``[start, stop)``.
    offsets : ndarray of int64, shape (n_sets + 1,)
        Set ``s`` is concatenated rows ``offsets[s]:offsets[s+1]``.
    query_sets : ndarray of int64, shape (n_queries,)
    block_rows : int
        Candidate rows per task: small sets are packed into one span, large sets split.
    """
    token = uuid.uuid4().hex[:8]
    client = distributed_client()
    scorer_ref = share(scorer, name=f"decode-scorer-{token}", client=client)
    G_ref = share(np.ascontiguousarray(G), name=f"decode-g-{token}", client=client)
    order = np.argsort(query_sets, kind="stable")
    used, starts = np.unique(query_sets[order], return_index=True)
    members = np.split(order, starts[1:])
    tasks, span, groups = [], None, []

    def flush():
        if groups:
            a, b = span
            tasks.append(delayed(_ragged_block)(scorer_ref, G_ref, candidates(a, b), a, list(groups),
                                                k, dask_key_name=f"decode-sets-{token}-{len(tasks)}"))
            groups.clear()

    for s, queries in zip(used, members):
        a, b = int(offsets[s]), int(offsets[s + 1])
        if b - a > block_rows:  # a large set: pieces merged by a tree
            flush()
            span = None
            pieces = [delayed(_ragged_block)(scorer_ref, G_ref, candidates(p, min(p + block_rows, b)), p,
                                             [(p, min(p + block_rows, b), a, queries, False)], k,
                                             dask_key_name=f"decode-piece-{token}-{s}-{p}")
                      for p in range(a, b, block_rows)]
            tasks.append(_tree(pieces, _merge_ragged, split_every=split_every, k=k,
                               name=f"decode-piece-merge-{token}-{s}"))
            continue
        if span is None or b - span[0] > block_rows:  # sets come in increasing offset order
            flush()
            span = (a, b)
        else:
            span = (span[0], b)
        groups.append((a, b, a, queries, True))
    flush()
    idx = np.full((len(query_sets), k), -1, dtype=np.int64)
    scores = np.full((len(query_sets), k), np.inf)
    for q, i, v in compute(tasks, progress=progress, what="decode"):
        idx[q], scores[q] = i, v
    return idx, scores

