"""Decoding at scale: top-k pre-images over fixed or per-query candidate sets.

Glossary (docs/design.md, "Decoding")
-------------------------------------
g(x) = W φ_X(x)          query surrogate, shape (r_Y,) — :meth:`SISOKR.surrogate`
φ_Y(y)                   candidate output features (the model's output :class:`FeatureMap`)
score(x, y) = k_Y(y, y) − 2 φ_Y(y)ᵀ g(x)    smaller is better

Decoding is a block map-reduce (:mod:`distsketch.engine`): map tasks score (query chunk ×
candidate block) blocks into partial top-k results (:mod:`distsketch.topk`), merged by the
engine's fixed-order tree, so the full ``n_queries × n_candidates`` score matrix never exists
and the result does not depend on chunking or scheduling.

Per-query candidate sets (metabolite identification: each spectrum has its own list) are a
ragged collection: concatenated candidates plus offsets. Queries are grouped by set; a task
scores a contiguous span of candidates holding several small sets, or one piece of a large
set (pieces merged like the fixed case). Candidate features are computed once per task for
all the queries sharing the set, or read from a :class:`~distsketch.candidates.CandidateStore`.
"""

from __future__ import annotations

import numpy as np

from . import topk
from .engine import Reducer, compute, distributed_client, map_blocks, share, tree_reduce
from .features import FeatureMap
from .topk import merge_topk, score_topk

__all__ = ["candidate_features", "decode_fixed", "decode_ragged", "TopK"]


def candidate_features(fmap: FeatureMap, Y, *, parallel: bool = False,
                       rows: int | None = None) -> np.ndarray:
    """``φ_Y`` of candidate rows ``Y`` (c × r_Y) in fixed-shape tiles of ``rows`` rows (default
    ``topk.SCORE_ROWS``; :meth:`FeatureMap.tiles`), so duplicate candidates tie exactly."""
    return fmap.tiles(Y, rows=topk.SCORE_ROWS if rows is None else rows, parallel=parallel)


class TopK(Reducer):
    """Merges partial top-k results ``(indices, scores)`` of the same queries."""

    def __init__(self, k: int):
        self.k = int(k)

    def add(self, acc, part):
        return merge_topk(acc, part, k=self.k)


class RaggedTopK(TopK):
    """Merges pieces of one large set: ``(queries, indices, scores)`` with the same queries."""

    def add(self, acc, part):
        idx, scores = merge_topk(acc[1:], part[1:], k=self.k)
        return acc[0], idx, scores


# --------------------------------------------------------------------------- tasks


def _features_of(fmap: FeatureMap, cand, rows: int):
    """Candidate features: computed from raw rows, or read from a store (``("cached", …)``)."""
    if isinstance(cand, tuple) and cand and cand[0] == "cached":
        _, phi, kyy, start, stop = cand
        return np.asarray(phi[start:stop], dtype=np.float64), np.asarray(kyy[start:stop])
    if isinstance(cand, tuple) and cand and cand[0] == "zarr":
        _, arr, start, stop = cand
        cand = arr[start:stop]
    return candidate_features(fmap, cand, rows=rows), fmap.diag(cand)


def _fixed_block(shared, item, ws):
    """Top-k of all queries ``G`` against one candidate block (rows offset …)."""
    fmap, G, k, rows, backend = shared
    cand, offset = item
    F, kyy = _features_of(fmap, cand, rows)
    return score_topk(G, F, kyy, k, np.arange(offset, offset + F.shape[0], dtype=np.int64),
                      rows=rows, backend=backend)


def _ragged_block(shared, item, ws):
    """Score the query groups of one span of concatenated candidates.

    ``item`` is ``(cand, span_start, groups)``; ``groups``: list of ``(a, b, base, queries,
    whole)`` — candidate rows ``[a, b)`` (global, inside the span), ``base`` the first row of
    their set (indices are reported relative to it), ``queries`` the query rows scored against
    them, ``whole`` whether ``[a, b)`` is the entire set (else a piece of a large set, merged
    with the other pieces).
    """
    fmap, G, k, rows, backend = shared
    cand, span_start, groups = item
    F, kyy = _features_of(fmap, cand, rows)
    out_q, out_i, out_s = [], [], []
    for a, b, base, queries, whole in groups:
        lo, hi = a - span_start, b - span_start
        # a whole set of one tile is one GEMM; sets split over calls use fixed-shape tiles
        idx, vals = score_topk(G[queries], F[lo:hi], kyy[lo:hi], k,
                               np.arange(a - base, b - base, dtype=np.int64),
                               pad=not whole or (b - a) > rows, rows=rows, backend=backend)
        out_q.append(queries)
        out_i.append(idx)
        out_s.append(vals)
    return np.concatenate(out_q), np.concatenate(out_i), np.concatenate(out_s)


# --------------------------------------------------------------------------- orchestration


def decode_fixed(fmap: FeatureMap, G: np.ndarray, candidates, *, n_candidates: int, k: int,
                 block_rows: int, split_every: int = 4, query_rows: int = 65536,
                 progress: bool = False, backend: str = "numpy"):
    """Top-k over one candidate set for every query.

    Parameters
    ----------
    fmap : FeatureMap
        The model's output features ``φ_Y``.
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
    backend : str
        Compute backend of the scores and top-k (``EngineOptions.backend``; ``"cuda"``: on
        the device, only the winners come back — :mod:`distsketch.topk`).

    Returns
    -------
    (indices, scores) : ndarrays of shape (n_queries, k)
    """
    client = distributed_client()
    fmap_ref = share(fmap, name="decode-features", client=client)
    reducer = TopK(k)
    blocks = [(candidates(a, b), a)
              for a, b in ((s, min(s + block_rows, n_candidates))
                           for s in range(0, n_candidates, block_rows))]
    finals = []
    for qs in range(0, G.shape[0], query_rows):
        Gq = share(np.ascontiguousarray(G[qs : qs + query_rows]), name=f"decode-g-{qs}",
                   client=client)
        leaves = map_blocks(_fixed_block, blocks,
                            shared=(fmap_ref, Gq, k, topk.SCORE_ROWS, backend), name=f"decode-{qs}")
        finals.append(tree_reduce(leaves, reducer, split_every=split_every, name=f"decode-{qs}"))
    results = compute(finals, progress=progress, what="decode")
    return (np.concatenate([r[0] for r in results]), np.concatenate([r[1] for r in results]))


def decode_ragged(fmap: FeatureMap, G: np.ndarray, candidates, *, offsets: np.ndarray,
                  query_sets: np.ndarray, k: int, block_rows: int, split_every: int = 4,
                  progress: bool = False, backend: str = "numpy"):
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
    backend : str
        As for :func:`decode_fixed`.
    """
    client = distributed_client()
    shared = (share(fmap, name="decode-features", client=client),
              share(np.ascontiguousarray(G), name="decode-g", client=client), k, topk.SCORE_ROWS,
              backend)
    order = np.argsort(query_sets, kind="stable")
    used, starts = np.unique(query_sets[order], return_index=True)
    members = np.split(order, starts[1:])
    spans, large, span, groups = [], [], None, []

    def flush():
        if groups:
            a, b = span
            spans.append((candidates(a, b), a, list(groups)))
            groups.clear()

    for s, queries in zip(used, members):
        a, b = int(offsets[s]), int(offsets[s + 1])
        if b - a > block_rows:  # a large set: pieces merged by a tree
            flush()
            span = None
            large.append([(candidates(p, min(p + block_rows, b)), p,
                           [(p, min(p + block_rows, b), a, queries, False)])
                          for p in range(a, b, block_rows)])
            continue
        if span is None or b - span[0] > block_rows:  # sets come in increasing offset order
            flush()
            span = (a, b)
        else:
            span = (span[0], b)
        groups.append((a, b, a, queries, True))
    flush()
    tasks = map_blocks(_ragged_block, spans, shared=shared, name="decode-sets")
    reducer = RaggedTopK(k)
    for j, pieces in enumerate(large):
        leaves = map_blocks(_ragged_block, pieces, shared=shared, name=f"decode-piece-{j}")
        tasks.append(tree_reduce(leaves, reducer, split_every=split_every,
                                 name=f"decode-piece-{j}"))
    idx = np.full((len(query_sets), k), -1, dtype=np.int64)
    scores = np.full((len(query_sets), k), np.inf)
    for q, i, v in compute(tasks, progress=progress, what="decode"):
        idx[q], scores[q] = i, v
    return idx, scores
