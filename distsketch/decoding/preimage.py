"""Decoding at scale: top-k pre-images over fixed or per-query candidate sets.

Glossary (docs/design/decoding.md)
----------------------------------
g(x) = W φ_X(x)          query surrogate, shape (r_Y,) — :meth:`SISOKR.surrogate`
φ_Y(y)                   candidate output features (the model's output :class:`FeatureMap`)
score(x, y) = k_Y(y, y) − 2 φ_Y(y)ᵀ g(x)    smaller is better

Decoding is a block map-reduce (:mod:`distsketch.engine`): map tasks score (query chunk ×
candidate block) blocks into partial top-k results (:mod:`distsketch.linalg.topk`), merged by the
engine's fixed-order tree, so the full ``n_queries × n_candidates`` score matrix never exists
and the result does not depend on chunking or scheduling.

Per-query candidate sets (metabolite identification: each spectrum has its own list) are a
ragged collection: concatenated candidates plus offsets. Queries are grouped by set; a task
scores a contiguous span of candidates holding several small sets, or one piece of a large
set (pieces merged like the fixed case). Candidate features are computed once per task for
all the queries sharing the set, or read from a
:class:`~distsketch.decoding.candidates.CandidateStore`.

This module is the block work and the fold's cost rule; which candidates, which route and which
cached folds a fitted model uses is :mod:`distsketch.decoding`'s part.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import numpy as np

from ..engine.features import FeatureMap
from ..engine.mapreduce import Reducer, map_blocks, map_local, share, tree_reduce
from ..engine.schedulers import compute, distributed_client, parallel_slots
from ..linalg import topk
from ..linalg.blocks import aligned_rows, pad_rows
from ..linalg.topk import merge_topk, score_topk

__all__ = ["candidate_features", "decode_fixed", "decode_ragged", "TopK", "fold_costs",
           "fold_route", "fold_candidates", "local_tile", "query_tile", "FOLD_MEMORY", "QUERY_ROWS"]

#: Queries per scoring GEMM (at most; :func:`query_tile`): a decoding scores its queries in
#: zero-padded tiles of one fixed shape, and a task holds whole tiles, so a query's scores are
#: bitwise the same however the queries are split into tasks (BLAS results depend on a call's
#: shape, not on how many calls there are).
QUERY_ROWS = 256

#: Largest folded candidate matrix (bytes, ``8 · n_candidates · width``) a model keeps in
#: memory; a fixed set whose fold would be larger is decoded unfolded.
FOLD_MEMORY = 2**30


def candidate_features(fmap: FeatureMap, Y: Any, *, parallel: bool = False,
                       rows: int | None = None) -> np.ndarray:
    """``φ_Y`` of candidate rows ``Y`` (c × r_Y) in fixed-shape tiles of ``rows`` rows (default
    ``topk.SCORE_ROWS``; :meth:`FeatureMap.tiles`), so duplicate candidates tie exactly."""
    return fmap.tiles(Y, rows=topk.SCORE_ROWS if rows is None else rows, parallel=parallel)


# --------------------------------------------------------------------------- folded decoding


def fold_costs(*, n_queries: int, n_candidates: int, n_landmarks: int, r_x: int, r_y: int,
               projected: bool, cached: Collection[str] = ()) -> dict[str, float]:
    """Flops of the four ways to score ``n_queries`` queries against one fixed candidate set.

    With ``φ_X(x) = Pᵀ k_X(L, x)`` (``s = n_landmarks`` landmarks, ``P`` (s × r_X), or no ``P``
    when ``projected`` is False and then ``s = r_X``), ``W`` the (r_Y × r_X) coefficients and
    ``F = φ_Y(C)`` (n_c × r_Y) the candidate features, the score ``k_Y(c, c) − 2 φ_X(x)ᵀ Wᵀ φ_Y(c)``
    is computed as

    ``"unfolded"``  ``g = W φ_X(x)``, then ``F g``:
                    per query ``p·s·r_X + r_X·r_Y + n_c·r_Y`` (``p = 1`` when projected);
    ``"coef"``      ``M = P Wᵀ`` (s × r_Y) once, ``g = Mᵀ k_X(L, x)``, then ``F g`` (projected
                    maps only): per query ``s·r_Y + n_c·r_Y``, once ``s·r_X·r_Y``;
    ``"features"``  ``Z = F W`` (n_c × r_X) once, then ``Z φ_X(x)``:
                    per query ``p·s·r_X + n_c·r_X``, once ``n_c·r_Y·r_X``;
    ``"kernel"``    ``Z = F W Pᵀ`` (n_c × s) once, then ``Z k_X(L, x)`` (projected maps only):
                    per query ``n_c·s``, once ``s·r_X·r_Y + n_c·r_Y·s``.

    The kernel evaluation ``k_X(L, x)`` is common to all routes and left out. A route whose
    fold (``M`` or ``Z``) is already cached (``cached``: route names) pays no once-cost.

    Returns
    -------
    dict
        Route name → flops (multiply-adds); ``"coef"`` and ``"kernel"`` only when
        ``projected``.
    """
    q, c, s, rx, ry = (float(v) for v in (n_queries, n_candidates, n_landmarks, r_x, r_y))
    p = 1.0 if projected else 0.0
    costs = {"unfolded": q * (p * s * rx + rx * ry + c * ry),
             "features": q * (p * s * rx + c * rx) + (0.0 if "features" in cached else c * ry * rx)}
    if projected:
        costs["coef"] = q * (s * ry + c * ry) + (0.0 if "coef" in cached else s * rx * ry)
        costs["kernel"] = q * c * s + (0.0 if "kernel" in cached else s * rx * ry + c * ry * s)
    return costs


def fold_route(*, n_queries: int, n_candidates: int, n_landmarks: int, r_x: int, r_y: int,
               projected: bool, cached: Collection[str] = (),
               memory: int | None = None) -> str:
    """The cheapest route of :func:`fold_costs` (ties: in the order ``"unfolded"``,
    ``"coef"``, ``"features"``, ``"kernel"``); a route folding the candidates whose ``Z``
    (``8 · n_c · width`` bytes) exceeds ``memory`` (default :data:`FOLD_MEMORY`) is not
    considered.

    Rule, per query once the folds are cached: with a projection, fold it into the
    coefficients (``"coef"``) when ``s·r_Y < s·r_X + r_X·r_Y`` — nearly always, since
    ``r_Y ≤ r_X`` is usual; fold the coefficients into the candidates (``"features"``) when
    ``n_c·r_X < r_X·r_Y + n_c·r_Y``, i.e. when there are fewer candidates than
    ``r_X·r_Y / (r_X − r_Y)`` (always when ``r_X ≤ r_Y``, e.g. IOKR's ``r_X = r_Y = n``); fold the
    projection as well (``"kernel"``) when ``n_c·s`` beats the others. Before a fold is
    cached its once-cost is spread over the ``n_queries`` of the call.
    """
    costs = fold_costs(n_queries=n_queries, n_candidates=n_candidates, n_landmarks=n_landmarks,
                       r_x=r_x, r_y=r_y, projected=projected, cached=cached)
    limit = FOLD_MEMORY if memory is None else memory
    width = {"coef": 0, "features": r_x, "kernel": n_landmarks}
    best = "unfolded"
    for route in ("coef", "features", "kernel"):
        if route in costs and 8 * n_candidates * width[route] <= limit \
                and costs[route] < costs[best]:
            best = route
    return best


#: Candidate rows per GEMM of :func:`fold_candidates` and of the default candidates' features
#: (at most): small enough that a few thousand candidates are several tiles, run on all
#: local cores.
FOLD_ROWS = 512


def local_tile(n: int) -> int:
    """Rows per tile of an in-memory candidate computation on all local cores: ``n`` cut into
    ``⌈n / FOLD_ROWS⌉`` equal tiles, rounded up to a multiple of
    :data:`~distsketch.linalg.blocks.TILE_ALIGN` (a function of ``n`` only, and no row in a BLAS
    edge kernel, so equal rows get bitwise-equal results whatever the number of cores)."""
    t = -(-max(1, int(n)) // FOLD_ROWS)
    return aligned_rows(-(-max(1, int(n)) // t))


def fold_candidates(phi: Any, M: np.ndarray, *, rows: int | None = None) -> np.ndarray:
    """Folded candidate matrix ``Z = φ_Y(C) M`` (n_c × w) for ``M`` (r_Y × w).

    Computed on all local cores ``rows`` rows at a time (default :func:`local_tile` of
    ``n_c``), each tile zero-padded to ``aligned_rows(rows)``, so duplicate candidates get
    bitwise-equal rows (exact ties) whatever the number of cores. ``phi`` may be a zarr array
    (read tile by tile).
    """
    n = phi.shape[0]
    tile = local_tile(n) if rows is None else rows
    height = aligned_rows(tile)
    M = np.asarray(M, dtype=np.float64)
    out = np.empty((n, M.shape[1]))

    def one(s: int) -> None:
        w = min(tile, n - s)
        out[s:s + w] = (pad_rows(np.asarray(phi[s:s + w], dtype=np.float64), height) @ M)[:w]

    map_local(one, list(range(0, n, tile)))
    return out


class TopK(Reducer):
    """Merges partial top-k results ``(indices, scores)`` of the same queries."""

    def __init__(self, k: int) -> None:
        self.k = int(k)

    def add(self, acc: tuple, part: tuple) -> tuple:
        return merge_topk(acc, part, k=self.k)


class RaggedTopK(TopK):
    """Merges pieces of one large set: ``(queries, indices, scores)`` with the same queries."""

    def add(self, acc: tuple, part: tuple) -> tuple:
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


def query_tile(n_queries: int) -> int:
    """Queries per scoring GEMM of one decoding: ``min(QUERY_ROWS, n_queries)`` rounded up to a
    multiple of 8 (fixed per decoding, from the query count alone)."""
    return min(QUERY_ROWS, -(-max(1, int(n_queries)) // 8) * 8)


def _fixed_block(shared, item, ws):
    """Top-k of the queries ``G`` against one candidate block (rows offset …), scored in
    zero-padded query tiles of exactly ``qrows`` rows."""
    fmap, G, k, rows, backend, qrows = shared
    cand, offset = item
    F, kyy = _features_of(fmap, cand, rows)
    index = np.arange(offset, offset + F.shape[0], dtype=np.int64)
    parts = []
    for s in range(0, G.shape[0], qrows):
        w = min(qrows, G.shape[0] - s)
        idx, vals = score_topk(pad_rows(G[s:s + w], qrows), F, kyy, k, index, rows=rows,
                               backend=backend)
        parts.append((idx[:w], vals[:w]))
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


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


def decode_fixed(fmap: FeatureMap, G: np.ndarray, candidates: Any, *, n_candidates: int, k: int,
                 block_rows: int, split_every: int = 4, query_rows: int | None = None,
                 progress: bool = False, backend: str = "numpy"
                 ) -> tuple[np.ndarray, np.ndarray]:
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
    query_rows : int, optional
        Queries per task (bounds the surrogate block a task holds), rounded up to whole query
        tiles (:func:`query_tile`). Default: the queries split into as many tasks as it takes,
        with the candidate blocks, to give every parallel slot of the scheduler work (at most
        65 536 queries per task). Every GEMM has the shape of one query tile by one score tile
        (:func:`distsketch.linalg.topk.tile_rows`), so the split does not change a bit of the
        result.
    backend : str
        Compute backend of the scores and top-k (``EngineOptions.backend``; ``"cuda"``: on
        the device, only the winners come back — :mod:`distsketch.linalg.topk`).

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
    qrows = query_tile(G.shape[0])
    if query_rows is None:  # enough (query chunk × candidate block) tasks for every slot,
        chunks = -(-parallel_slots(client) // len(blocks))  # the query tiles shared evenly
        tiles = -(-G.shape[0] // qrows)
        query_rows = min(65536, -(-tiles // min(chunks, tiles)) * qrows)
    query_rows = -(-int(query_rows) // qrows) * qrows  # whole query tiles per task
    rows = topk.tile_rows(n_candidates, block_rows=block_rows)
    finals = []
    for qs in range(0, G.shape[0], query_rows):
        Gq = share(np.ascontiguousarray(G[qs : qs + query_rows]), name=f"decode-g-{qs}",
                   client=client)
        leaves = map_blocks(_fixed_block, blocks,
                            shared=(fmap_ref, Gq, k, rows, backend, qrows), name=f"decode-{qs}")
        finals.append(tree_reduce(leaves, reducer, split_every=split_every, name=f"decode-{qs}"))
    results = compute(finals, progress=progress, what="decode")
    return (np.concatenate([r[0] for r in results]), np.concatenate([r[1] for r in results]))


def decode_ragged(fmap: FeatureMap, G: np.ndarray, candidates: Any, *, offsets: np.ndarray,
                  query_sets: np.ndarray, k: int, block_rows: int, split_every: int = 4,
                  progress: bool = False, backend: str = "numpy"
                  ) -> tuple[np.ndarray, np.ndarray]:
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
