"""The streaming pass: one map over row blocks, zarr writes, a fixed-order tree reduction.

For each row block ``I`` (DESIGN §2)::

    C_I = k_X(X_I, X_J) R_Xmixᵀ          written to pass/C[I]
    D_I = k_Y(Y_I, Y_JY) R_Ymixᵀ         written to pass/D[I]      (structured outputs)
    G += C_Iᵀ C_I     B += R_X[:, I] C_I
    M += D_Iᵀ C_I     E += R_Y[:, I] D_I
    b += C_Iᵀ Y_I                                                    (vector targets)

An exact side (identity sketch) needs less. Exact input: the solve factors
``K_X + nλI`` with ``K_X = C`` itself, so neither ``G`` nor ``B`` is needed, and it
takes ``D`` (n × m_Y) and the targets ``Y`` as they are instead of ``M`` and ``b``.
Exact output: ``k_Y(y, Y) K_Y^† K_Y = k_Y(y, Y)`` for every ``y`` (``k_Y(Y, y)`` lies in
the range of ``K_Y``), so the model needs ``C`` itself instead of ``M``, and no ``D`` or
``E``. In these cases the pass returns the row blocks of ``C`` (and ``D``, ``Y``),
placed (not summed) by the reduction.

Blocks are computed in the block dtype (float32 by default: kernel values rounded to
float32, exponentials evaluated in float32) and partial sums are float64 sums of exactly
those values, so the store holds what the sums were made of; the store write runs in an
I/O thread beside them. A block read back from the store on resume therefore contributes
exactly what it contributed the first time, for either dtype (bitwise-identical resume),
and ``store=None`` fits the same model. They are combined in a
tree whose shape depends only on the number of blocks (``split_every`` at a time, in
block order), so the sums do not depend on the scheduler or the number of workers. One
task computes the ``split_every`` blocks of a first-level node in order and sums them as
that node would when there are many blocks per core, so it ships one partial sum instead of
``split_every``.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp
from dask.delayed import Delayed, delayed

from ._compute import compute, distributed_client, parallel_slots, share
from .options import EngineOptions
from .rows import RowSource, check_finite_block, fingerprint
from .sketches import RealizedSketch, Sketch, gram_dot
from .store import open_fit_store, write_rows

__all__ = ["Side", "PassPlan", "PassResult", "fit_pass", "run_pass", "tree_reduce"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Side:
    """One kernelised side of the pass.

    Attributes
    ----------
    kernel : callable
    landmarks : ndarray or sparse of shape (s', d)
        Rows ``J`` of the data (the sketch support).
    sketch : RealizedSketch
    """

    kernel: Any
    landmarks: Any
    sketch: RealizedSketch


@dataclass(frozen=True)
class PassPlan:
    """Everything a block task needs, shipped to workers once.

    Attributes
    ----------
    n, block_rows : int
    x : Side
        Input side (``C``).
    y : Side or None
        Output side (``D``) for structured outputs.
    targets : bool
        Whether the second input is a matrix of vector targets (``b = CᵀY``).
    unique_outputs : bool
        Whether to collect the unique output rows (default decoding candidates).
    C, D, done : zarr.Array or None
        Store arrays written by the tasks; None for a temporary fit (``store=None``),
        whose blocks are not written anywhere.
    dtype : numpy dtype
        Dtype of the blocks, computed and stored (the sums are float64 of their values).
    chunk : int
        Landmark columns per kernel block.
    check_x, check_y : bool
        Check blocks for NaN/inf (lazy inputs, not checked up front).
    direct_io : bool
        Write blocks to a local store with O_DIRECT (see :func:`~distsketch.store.write_rows`).
    """

    n: int
    block_rows: int
    x: Side
    y: Side | None
    targets: bool
    unique_outputs: bool
    C: Any
    D: Any
    done: Any
    dtype: Any
    chunk: int
    check_x: bool
    check_y: bool
    direct_io: bool = True

    @property
    def x_exact(self) -> bool:
        return self.x.sketch.is_identity

    @property
    def y_exact(self) -> bool:
        return self.y is not None and self.y.sketch.is_identity

    @property
    def stores_d(self) -> bool:
        return self.y is not None and not self.y_exact

    @property
    def n_blocks(self) -> int:
        return -(-self.n // self.block_rows)

    def rows(self, i: int) -> tuple[int, int]:
        s = i * self.block_rows
        return s, min(s + self.block_rows, self.n)


# --------------------------------------------------------------------------- block tasks


def _dense(block) -> np.ndarray:
    return block.toarray() if sp.issparse(block) else np.asarray(block)


def _unique_rows(Y: np.ndarray, start: int) -> tuple[np.ndarray, np.ndarray]:
    """Unique rows of a block and the global index of their first occurrence."""
    rows, first = np.unique(Y, axis=0, return_index=True)
    return rows, first.astype(np.int64) + start


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


class RowSparse:
    """An ``m × k`` partial sum with few non-zero rows (``R[:, I] C_I`` of a sparse sketch).

    ``+=`` adds row by row over the union of rows; adding exact zeros never changes a float
    sum, so the reduced result is bitwise the dense one, with a fraction of the memory.
    """

    def __init__(self, m: int, rows: np.ndarray, values: np.ndarray):
        self.m, self.rows, self.values = m, rows, values

    def copy(self) -> "RowSparse":
        return RowSparse(self.m, self.rows.copy(), self.values.copy())

    def __iadd__(self, other: "RowSparse") -> "RowSparse":
        if np.array_equal(self.rows, other.rows):
            self.values += other.values
            return self
        rows = np.union1d(self.rows, other.rows)
        values = np.zeros((rows.size, self.values.shape[1]))
        values[np.searchsorted(rows, self.rows)] = self.values
        values[np.searchsorted(rows, other.rows)] += other.values
        self.rows, self.values = rows, values
        return self

    def toarray(self) -> np.ndarray:
        out = np.zeros((self.m, self.values.shape[1]))
        out[self.rows] = self.values
        return out


def _left(sketch: RealizedSketch, block: np.ndarray, start: int, stop: int) -> RowSparse:
    return RowSparse(sketch.m, *sketch.left_rows(block, start, stop))


class _Buffers:
    """Block-sized work arrays reused by the blocks of one task.

    A fresh array of a block's size is an mmap whose pages fault in on first touch (about
    4 ms per 37 MB here), on every block; the blocks of a fused task reuse one set.
    """

    def __init__(self):
        self._arrays: dict[str, np.ndarray] = {}

    def get(self, name: str, shape: tuple[int, int], dtype) -> np.ndarray:
        a = self._arrays.get(name)
        if a is None or a.shape != shape or a.dtype != dtype:
            a = self._arrays[name] = np.empty(shape, dtype=dtype)
        return a


def _float64(block, buffers: _Buffers | None, name: str) -> np.ndarray:
    """``block`` as float64: itself, or converted into a reused work array."""
    if buffers is None or getattr(block, "dtype", None) == np.float64:
        return np.asarray(block, dtype=np.float64)
    out = buffers.get(name, block.shape, np.float64)
    np.copyto(out, block)
    return out


def _block_sums(plan: PassPlan, i: int, C, D, yb, buffers: _Buffers | None = None) -> dict:
    """Partial sums of block ``i`` from its blocks ``C`` (and ``D``), in float64.

    ``buffers``: work arrays for the float64 copies (see :func:`_pass_group`).
    """
    s, e = plan.rows(i)
    C = _float64(C, buffers, "C64")
    out = {}
    if plan.x_exact or plan.y_exact:
        out["C"] = RowStack([(s, C)])
    if not plan.x_exact:
        out["G"] = C.T @ C
        out["B"] = _left(plan.x.sketch, C, s, e)
    if D is not None:
        D = _float64(D, buffers, "D64")
        if plan.x_exact:  # the exact input solve needs D itself (n × m_Y), not M = DᵀK_X
            out["D"] = RowStack([(s, D)])
        else:
            out["M"] = D.T @ C
        out["E"] = _left(plan.y.sketch, D, s, e)
    if plan.targets:
        Yb = _dense(yb).astype(np.float64, copy=False)
        if plan.x_exact:  # β = (K_X + nλI)^{-1} Y needs Y itself, not b = K_X Y
            out["Y"] = RowStack([(s, Yb.reshape(len(Yb), -1))])
        else:
            out["b"] = C.T @ Yb
    if plan.unique_outputs:
        out["U"] = _unique_rows(_dense(yb), s)
    return out


def _pass_block(plan: PassPlan, i: int, xb, yb, buffers: _Buffers | None = None) -> dict:
    """Compute, store and reduce one row block (the map task of the pass).

    With ``buffers``, the blocks ``C``, ``D`` are computed into reused work arrays, which
    are free again when this returns (the store write has finished)."""
    s, e = plan.rows(i)

    def block(name: str, m: int):
        return None if buffers is None else buffers.get(name, (e - s, m), plan.dtype)

    if plan.check_x:
        check_finite_block(xb, argument="X", start=s)
    if plan.check_y and yb is not None:
        check_finite_block(yb, argument="Y", start=s)
    x = plan.x
    C = gram_dot(x.kernel, xb, x.landmarks, x.sketch, chunk=plan.chunk, dtype=plan.dtype,
                 out=block("C", x.sketch.m))
    D = None
    if plan.stores_d:
        y = plan.y
        D = gram_dot(y.kernel, yb, y.landmarks, y.sketch, chunk=plan.chunk, dtype=plan.dtype,
                     out=block("D", y.sketch.m))
    # the store writes run in an I/O thread beside the partial sums (both only read the
    # blocks); the task ends when its blocks and its done flag are written
    written = None if plan.done is None else _io_pool().submit(_write_block, plan, i, C, D)
    sums = _block_sums(plan, i, C, D, yb, buffers)
    if written is not None:
        written.result()  # re-raises a failed write
    return sums


def _write_block(plan: PassPlan, i: int, C: np.ndarray, D: np.ndarray | None) -> None:
    """Write block ``i`` of ``C`` (and ``D``), then its done flag (I/O thread)."""
    s, _ = plan.rows(i)
    write_rows(plan.C, s, C, direct=plan.direct_io)
    if plan.D is not None and D is not None:
        write_rows(plan.D, s, D, direct=plan.direct_io)
    plan.done[i] = True  # only after both blocks are fully written


_IO_POOL: ThreadPoolExecutor | None = None
_IO_POOL_LOCK = threading.Lock()


def _io_pool() -> ThreadPoolExecutor:
    """This process's threads for store writes (created on first use, in any worker)."""
    global _IO_POOL
    with _IO_POOL_LOCK:
        if _IO_POOL is None:
            _IO_POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="distsketch-io")
        return _IO_POOL


def _stored_block(plan: PassPlan, i: int, yb, buffers: _Buffers | None = None) -> dict:
    """Partial sums of a block completed by an earlier run, read back from the store."""
    s, e = plan.rows(i)
    C = plan.C[s:e]
    D = plan.D[s:e] if plan.stores_d else None
    return _block_sums(plan, i, C, D, yb, buffers)


def _pass_group(plan: PassPlan, items: list) -> dict:
    """Blocks ``(i, stored, x_block, y_block)`` of one first-level node of the reduction
    tree, computed (or, when ``stored``, read back) in order and summed as :func:`_combine`
    sums them: bitwise the sums of one task per block followed by that node, with one
    partial sum held instead of ``split_every`` and 1/``split_every`` of the transfers."""
    acc: dict | None = None
    uniques = []
    # reused block arrays, except with an exact side, whose blocks are kept in the result
    buffers = None if plan.x_exact or plan.y_exact else _Buffers()
    for i, stored, xb, yb in items:
        part = (_stored_block(plan, i, yb, buffers) if stored
                else _pass_block(plan, i, xb, yb, buffers))
        if "U" in part:
            uniques.append(part.pop("U"))
        if acc is None:
            acc = part  # fresh arrays, owned here (what _combine copies)
        else:
            for key, value in part.items():
                acc[key] += value
    if uniques:
        acc["U"] = _merge_unique(uniques)
    return acc


def _merge_unique(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    rows = np.concatenate([p[0] for p in parts])
    first = np.concatenate([p[1] for p in parts])
    # parts arrive in block order, so np.unique's first occurrence is the earliest row
    uniq, pos = np.unique(rows, axis=0, return_index=True)
    return uniq, first[pos]


def _combine(*parts: dict) -> dict:
    """Sum partial-sum dicts in the given order (one node of the reduction tree)."""
    out = {}
    for key in parts[0]:
        if key == "U":
            out[key] = _merge_unique([p[key] for p in parts])
            continue
        acc = parts[0][key].copy()
        for p in parts[1:]:
            acc += p[key]
        out[key] = acc
    return out


_GROUPS_PER_SLOT = 4  # fuse first-level nodes only with at least this many per core


def _pass_leaves(plan_ref, items: list, *, split_every: int, token: str, slots: int) -> list:
    """The pass's tasks, as the leaves handed to :func:`tree_reduce`.

    With many blocks per core (at least ``_GROUPS_PER_SLOT·split_every·slots``), one task
    computes each first-level node of the tree (its ``split_every`` blocks, summed in
    order), for a multiple of ``slots`` nodes, so that every core gets as many; the blocks
    of the remaining nodes (at least the last, often partial one) run as one task each
    under a :func:`_combine` node, and fill in wherever a core is free. With fewer blocks,
    one task per block keeps every core busy. Either way the sums are bitwise the same
    (tests/test_pass.py).
    """
    def block(item):
        return delayed(_pass_group)(plan_ref, [item], dask_key_name=f"pass-block-{token}-{item[0]}")

    if len(items) < _GROUPS_PER_SLOT * split_every * slots:
        return [block(item) for item in items]
    groups = [items[j:j + split_every] for j in range(0, len(items), split_every)]
    fused = (len(groups) - 1) // slots * slots
    return [delayed(_pass_group)(plan_ref, group, dask_key_name=f"pass-group-{token}-{g}")
            if g < fused else
            delayed(_combine, pure=True)(*map(block, group), dask_key_name=f"pass-node-{token}-{g}")
            for g, group in enumerate(groups)]


def tree_reduce(items: list, *, split_every: int, token: str) -> Delayed:
    """Reduce delayed items with :func:`_combine`, ``split_every`` at a time, in order."""
    if split_every < 2:
        raise ValueError(f"split_every must be >= 2, got {split_every}")
    level = 0
    while len(items) > 1:
        items = [
            delayed(_combine, pure=True)(
                *items[j : j + split_every], dask_key_name=f"pass-combine-{token}-{level}-{j}"
            )
            for j in range(0, len(items), split_every)
        ]
        level += 1
    if not isinstance(items[0], Delayed):  # a single block: still run it as a task
        return delayed(_combine)(items[0], dask_key_name=f"pass-combine-{token}")
    return items[0]


# --------------------------------------------------------------------------- orchestration


def run_pass(plan: PassPlan, x: RowSource, y: RowSource | None, *, split_every: int,
             progress: bool = False) -> dict:
    """Run (or resume) the pass over all row blocks and return the reduced sums.

    Blocks flagged done in the store are read back instead of recomputed; their input
    rows are not read (only the output / target rows when a sum needs them).

    Returns
    -------
    dict
        As configured: ``G, B`` (sketched input), ``M, E`` (sketched output), ``b``
        (vector targets), ``C`` (n × m_X, when a side is exact), ``D`` (n × m_Y) and ``Y``
        (n × t) with an exact input side, all float64, and ``U`` (unique output rows,
        first-occurrence indices).
    """
    token = uuid.uuid4().hex[:8]
    client = distributed_client()
    done = (np.zeros(plan.n_blocks, dtype=bool) if plan.done is None
            else np.asarray(plan.done[:], dtype=bool))
    need_y_for_stored = plan.targets or plan.unique_outputs
    x_blocks = x.blocks(plan.block_rows)
    y_blocks = y.blocks(plan.block_rows) if y is not None else [None] * plan.n_blocks
    if client is not None:
        # in-memory blocks reach workers by scatter, not inside the graph
        x_blocks = _scatter_blocks(client, x_blocks)
        y_blocks = _scatter_blocks(client, y_blocks)
    plan_ref = share(plan, name=f"pass-plan-{token}", client=client)
    items = [(i, True, None, y_blocks[i] if need_y_for_stored else None) if done[i]
             else (i, False, x_blocks[i], y_blocks[i]) for i in range(plan.n_blocks)]
    total = tree_reduce(_pass_leaves(plan_ref, items, split_every=split_every, token=token,
                                     slots=parallel_slots(client)),
                        split_every=split_every, token=token)
    logger.info("pass: %d blocks (%d already in the store), %d rows per block",
                plan.n_blocks, int(done.sum()), plan.block_rows)
    start = time.perf_counter()
    (result,) = compute([total], progress=progress, what="pass")
    seconds = time.perf_counter() - start
    logger.info("pass: %d rows in %.3f s (%.0f rows/s)", plan.n, seconds, plan.n / seconds,
                extra={"pass_seconds": seconds, "pass_rows": plan.n})
    for key in ("C", "D", "Y"):
        if key in result:
            result[key] = result[key].assemble(plan.n)
    for key in ("B", "E"):
        if key in result:
            result[key] = result[key].toarray()
    return result


def _scatter_blocks(client, blocks: list) -> list:
    local = [j for j, b in enumerate(blocks) if b is not None and not isinstance(b, Delayed)]
    if not local:
        return blocks
    futures = client.scatter([blocks[j] for j in local], hash=False)
    out = list(blocks)
    for j, f in zip(local, futures):
        out[j] = f
    return out


# --------------------------------------------------------------------------- a whole fit


def _kernel_config(kernel) -> dict:
    try:
        return kernel.to_config()
    except TypeError:
        f = getattr(kernel, "func", kernel)
        return {"callable": f"{getattr(f, '__module__', '?')}.{getattr(f, '__qualname__', repr(f))}"}


def _jsonable(obj: Any) -> Any:
    import json
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


def _choose_block_rows(options: EngineOptions, n: int, width: int, native: int | None,
                       dtype: np.dtype) -> int:
    if options.block_rows is not None:
        return min(int(options.block_rows), n)
    itemsize = dtype.itemsize
    per_row = 8 * (options.gram_chunk + width) + itemsize * width
    b = max(64, options.block_memory // per_row)
    if native and b >= native:  # whole stored chunks per block; smaller blocks split chunks
        b = (b // native) * native
    return int(min(b, n))


def fit_pass(
    X: RowSource,
    Y: RowSource,
    *,
    x_kernel,
    x_sketch: Sketch,
    y_kernel=None,
    y_sketch: Sketch | None = None,
    unique_outputs: bool = False,
    rng: np.random.Generator,
    store: Any,
    options: EngineOptions,
    model: str,
) -> PassResult:
    """Draw the sketches, gather landmarks and run (or resume) the streaming pass.

    ``y_kernel=None`` treats ``Y`` as vector targets (sketched KRR, sum ``b``);
    otherwise ``Y`` goes through the output kernel (sums ``M, E``).
    """
    n = X.n
    seeds = [int(s) for s in rng.integers(0, 2**63 - 1, size=2)]
    xs = x_sketch.realize(n, seed=seeds[0])
    ys = y_sketch.realize(n, seed=seeds[1]) if y_kernel is not None else None
    x_land = X.take(xs.support)
    y_land = Y.take(ys.support) if ys is not None else None
    width = xs.m + (ys.m if ys is not None else Y.shape[1]) + X.shape[1] + Y.shape[1]
    # An exact side's blocks are used as they are (the n × n Gram matrix K_X + nλI is
    # factored, or C itself enters the model), where float32 rounding would be amplified by
    # up to 1/(nλ): they stay float64 (small n, where the pass is cheap anyway).
    exact = xs.is_identity or (ys is not None and ys.is_identity)
    dtype = "float64" if exact else options.block_dtype
    b = _choose_block_rows(options, n, width, X.native_rows or Y.native_rows, np.dtype(dtype))
    config = _jsonable({
        "model": model,
        "n": n,
        "block_rows": b,
        "block_dtype": dtype,
        "gram_chunk": options.gram_chunk,
        "m_x": xs.m,
        "m_y": ys.m if ys is not None and not ys.is_identity else None,  # D is stored
        "input": {"kernel": _kernel_config(x_kernel), "sketch": xs.to_config(),
                  "shape": X.shape, "landmarks": fingerprint(x_land)},
        "output": ({"kernel": _kernel_config(y_kernel), "sketch": ys.to_config(),
                    "shape": Y.shape, "landmarks": fingerprint(y_land)}
                   if ys is not None else {"targets": Y.shape}),
        "unique_outputs": bool(unique_outputs),
    })
    fs = open_fit_store(store)
    try:
        fs.prepare_pass(config, overwrite=options.overwrite)
        if fs.status in ("pass-complete", "solved"):
            logger.info("store %s: pass already complete, reusing its sums", fs.location)
            sums = fs.read_sums()
        else:
            C, D, done = fs.pass_arrays()
            plan = PassPlan(
                n=n, block_rows=b,
                x=Side(x_kernel, x_land, xs),
                y=Side(y_kernel, y_land, ys) if ys is not None else None,
                targets=ys is None, unique_outputs=unique_outputs,
                C=C, D=D, done=done, dtype=np.dtype(dtype), chunk=options.gram_chunk,
                check_x=X.lazy, check_y=Y.lazy, direct_io=options.direct_io,
            )
            sums = run_pass(plan, X, Y, split_every=options.split_every, progress=options.progress)
            fs.write_sums(sums)
        return PassResult(n=n, x_sketch=xs, x_landmarks=x_land, y_sketch=ys, y_landmarks=y_land,
                          sums=sums, store=None if fs.temporary else fs.location)
    finally:
        fs.discard()
