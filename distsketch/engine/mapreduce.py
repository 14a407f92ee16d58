"""The block map-reduce: every n-sized computation of distsketch is one of these.

A *block function* ``func(shared, item, workspace)`` runs once per row block (a task). Its
``item`` holds that block's arguments: in-memory rows, a dask ``Delayed`` of lazily read rows,
or :class:`Stored` references to rows of a stored array, read inside the task. ``shared`` is
shipped to the workers once (scattered, or one graph key). A :class:`Reducer` combines the
block results in a tree whose shape depends only on the number of blocks: ``split_every``
children per node, in block order — so the result does not depend on the scheduler, the number
of workers or the order in which tasks finish. This module holds the one tree reduction of
the package.

- :func:`map_reduce` — map and reduce, computed (the streaming pass; an iterative solver's
  pass over stored blocks).
- :func:`map_blocks` / :func:`tree_reduce` — the two halves as graphs, when several reductions
  are computed together (decoding: one merge tree per query chunk).
- :func:`compute` — on the active dask scheduler, with dask's progress display.
- :func:`transform_rows` — a row function over an input's rows (dask in → dask out).

Resuming is per block and belongs to the caller: a block whose result it stored earlier is
given as ``Stored`` references instead of fresh inputs, so the same block function reduces it
(the streaming pass, :mod:`distsketch.accumulate`).

With many blocks per core, :func:`map_blocks` computes each first-level node of the tree in
one task (its ``split_every`` blocks in order, added as the node would add them): bitwise the
same result, with ``1/split_every`` of the partial results held and transferred. The blocks
of one such task share a :class:`Workspace`, so block-sized arrays are allocated once per task.
"""

from __future__ import annotations

import logging
import os
import sys
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import dask
import dask.array as da
import dask.local
import numpy as np
from dask.delayed import Delayed, delayed

from .rows import as_row_source

__all__ = [
    "Reducer", "Stored", "Workspace", "map_blocks", "tree_reduce", "map_reduce", "compute",
    "row_blocks", "transform_rows", "share", "map_local", "parallel_slots", "distributed_client",
    "WorkersLost", "workers_back",
]

logger = logging.getLogger(__name__)

#: Fuse first-level nodes only with at least this many of them per core.
GROUPS_PER_SLOT = 4


# --------------------------------------------------------------------------- schedulers


def distributed_client():
    """The ``distributed.Client`` that dask would use right now, or None."""
    if "distributed" not in sys.modules:  # no client without it (and no import on a laptop)
        return None
    try:
        from distributed import default_client
    except ImportError:  # pragma: no cover - distributed is a dependency
        return None
    try:
        client = default_client()
    except ValueError:
        return None
    return client if dask.base.get_scheduler() == client.get else None


def local_scheduler():
    """The local scheduler's ``get`` when no distributed client can exist (``distributed``
    not imported: a client needs it): dask's configured ``scheduler`` (a name or a function)
    or its threaded default for delayed objects. None where dask must decide. Handing dask
    the function keeps its own lookup from importing ``distributed`` — 0.16 s on the first
    computation of every process here (benchmarks/bench_import.py)."""
    if "distributed" in sys.modules:
        return None
    import dask.threaded

    setting = dask.config.get("scheduler", None)
    if setting is None:
        return dask.threaded.get
    if callable(setting):
        return setting
    if isinstance(setting, str):
        return dask.base.named_schedulers.get(setting.lower())
    return None


def parallel_slots(client=None) -> int:
    """Tasks the active scheduler runs at once: the client's worker threads, dask's local
    ``num_workers`` or the machine's cores (1 for the synchronous scheduler)."""
    if client is not None:
        try:
            workers = client.scheduler_info().get("workers", {})
            return max(1, sum(int(w.get("nthreads", 1)) for w in workers.values()))
        except Exception:  # pragma: no cover - an unreachable scheduler fails later anyway
            return 1
    if (local_scheduler() or dask.base.get_scheduler()) is dask.local.get_sync:
        return 1
    return max(1, int(dask.config.get("num_workers", None) or os.cpu_count() or 1))


def share(obj: Any, *, name: str, client=None) -> Any:
    """Make ``obj`` one graph dependency: scattered to every worker once, or a single key."""
    if client is not None:
        return client.scatter(obj, broadcast=True, hash=False)
    return delayed(obj, name=name, traverse=False)


def compute(objs: list, *, progress: bool | float = False, what: str = "") -> list:
    """Compute delayed objects on the active scheduler, with dask's progress display.

    ``progress``: ``True`` shows dask's progress bar (local schedulers) or distributed's
    progress and the dashboard's address; a number of seconds shows the local bar only once
    the computation has run that long (``ProgressBar(minimum=…)``) and nothing on a cluster —
    for the many short computations of an iterative solver, whose iterations are logged.

    On a distributed cluster, losing the workers that held this computation's only copy of
    some data (all of them, or a single worker when data was not replicated) fails with one
    message saying so and that fitting again on a kept store resumes.
    """
    if isinstance(progress, (bool, np.bool_)):
        bar, minimum = bool(progress), 0.0
    else:
        bar, minimum = True, float(progress)
    on_cluster = bar and isinstance(progress, (bool, np.bool_))  # no threshold there
    client = distributed_client()
    if client is not None:
        if on_cluster:
            logger.warning("%s: dask dashboard %s", what or "distsketch", client.dashboard_link)
        futures = client.compute(objs)
        if on_cluster:
            from distributed import progress as show

            show(futures)
        try:
            return client.gather(futures)
        except Exception as exc:
            if _lost_workers(exc):
                raise WorkersLost(
                    f"{what or 'distsketch'}: the dask cluster lost the workers holding this "
                    f"computation's data ({type(exc).__name__}: {str(exc)[:200]}); run it again "
                    f"once workers are back: a fit with a kept store resumes from the blocks "
                    f"already written") from exc
            raise
    local = {} if (get := local_scheduler()) is None else {"scheduler": get}
    if bar:
        from dask.diagnostics import ProgressBar

        with ProgressBar(minimum=minimum):
            return list(dask.compute(*objs, **local))
    return list(dask.compute(*objs, **local))


class WorkersLost(RuntimeError):
    """A distributed computation lost workers holding data it needed (scattered inputs)."""


def workers_back(client, timeout: float | None = None) -> bool:
    """Wait (``distsketch.worker-wait`` seconds of dask config by default) until the cluster has
    a worker again; whether it has."""
    if timeout is None:
        timeout = float(dask.config.get("distsketch.worker-wait", 60))
    try:
        client.wait_for_workers(1, timeout=timeout)
        return True
    except Exception:  # TimeoutError, or a closed scheduler
        return False


def _lost_workers(exc: BaseException) -> bool:
    """Whether a distributed failure means workers (and the data only they held) were lost."""
    from concurrent.futures import CancelledError

    try:
        from distributed.scheduler import KilledWorker
    except ImportError:  # pragma: no cover
        KilledWorker = ()
    return isinstance(exc, (CancelledError, KilledWorker)) or "lost dependencies" in str(exc)


def map_local(func, items: list) -> list:
    """``[func(item) for item in items]`` on dask's local thread pool, in order.

    For work on data already in this process's memory (numpy inputs to ``predict``):
    one task per item on all cores, whatever scheduler is active, with nothing shipped.
    NumPy releases the GIL in BLAS and in ``exp``, so the threads run in parallel; each
    item's result depends only on the item, never on the number of threads.
    """
    if len(items) <= 1:
        return [func(item) for item in items]
    import dask.threaded

    tasks = [delayed(func, pure=False)(item) for item in items]
    return list(dask.compute(*tasks, scheduler=dask.threaded.get))  # not "threads": no
    # import of distributed by dask's lookup (local_scheduler)


# --------------------------------------------------------------------------- blocks


@dataclass(frozen=True)
class Stored:
    """Rows ``[start, stop)`` of a stored array (zarr), read inside the task that needs them."""

    array: Any
    start: int
    stop: int

    def read(self):
        return self.array[self.start:self.stop]


def _resolve(item):
    """An item with its :class:`Stored` references read (top level of a tuple or list)."""
    if isinstance(item, Stored):
        return item.read()
    if isinstance(item, tuple):
        return tuple(x.read() if isinstance(x, Stored) else x for x in item)
    return item


def row_blocks(source, block_rows: int, *, argument: str = "X", client=None) -> list:
    """Task arguments for the row blocks ``[i·b, (i+1)·b)`` of an input.

    In-memory rows are sliced (and scattered once each on a distributed ``client``, never put
    inside the graph: a worker lost with them loses them, and the caller sends them again, see
    :class:`WorkersLost`); dask and zarr inputs give one ``Delayed`` per block, read by the task
    (the cluster reads them again if a worker is lost). A stored array whose chunks are the
    blocks can instead be read with :class:`Stored`.
    """
    src = as_row_source(source, argument=argument)
    blocks = src.blocks(block_rows)
    if client is None:
        return blocks
    local = [j for j, b in enumerate(blocks) if b is not None and not isinstance(b, Delayed)]
    if not local:
        return blocks
    futures = client.scatter([blocks[j] for j in local], hash=False)
    out = list(blocks)
    for j, f in zip(local, futures):
        out[j] = f
    return out


class Workspace:
    """Work arrays reused by the blocks of one task (one per task, never shared).

    A fresh block-sized array is an mmap whose pages fault in on first touch, on every
    block; the blocks of a fused task reuse one set. :meth:`get` hands back the same array
    for the same name, shape and dtype.
    """

    def __init__(self):
        self._arrays: dict[str, Any] = {}

    def get(self, name: str, shape: tuple, dtype, xp=np):
        """An array of ``shape`` and ``dtype`` from namespace ``xp``, contents undefined."""
        key = (name, getattr(xp, "__name__", repr(xp)))
        a = self._arrays.get(key)
        if a is None or a.shape != tuple(shape) or a.dtype != dtype:
            a = self._arrays[key] = xp.empty(shape, dtype=dtype)
        return a


class Reducer:
    """How block results combine: ``acc ⊕ part``, applied left to right.

    :meth:`add` may update ``acc`` in place and returns the result; ``acc`` is always owned by
    the caller (a fresh block result, or what :meth:`own` returned). The default ``own``
    returns the part itself, for reducers whose ``add`` builds a new result.
    """

    def own(self, part):
        """A copy of ``part`` that :meth:`add` may update in place."""
        return part

    def add(self, acc, part):
        raise NotImplementedError

    def node(self, parts):
        """One node of the reduction tree: ``parts`` added left to right (a reducer may do it
        at once, with the same result)."""
        acc = self.own(parts[0])
        for p in parts[1:]:
            acc = self.add(acc, p)
        return acc


def _run_block(func, shared, item):
    return func(shared, _resolve(item), Workspace())


def _run_group(func, reducer: Reducer, shared, items: list):
    """The blocks of one first-level node, computed in order and added as the node adds them."""
    ws = Workspace()
    acc = func(shared, _resolve(items[0]), ws)
    for item in items[1:]:
        acc = reducer.add(acc, func(shared, _resolve(item), ws))
    return acc


def _node(reducer: Reducer, *parts):
    """One node of the reduction tree: its children added in order."""
    return reducer.node(parts)


def _token() -> str:
    return uuid.uuid4().hex[:8]


def map_blocks(func: Callable, items: Sequence, *, shared: Any = None, name: str = "map",
               reducer: Reducer | None = None, split_every: int = 4, fuse: bool = False,
               slots: int | None = None, token: str | None = None) -> list:
    """The map half: one graph leaf per block, or per first-level node when fused.

    Parameters
    ----------
    func : callable
        ``func(shared, item, workspace)``: module-level (picklable, a readable task name).
    items : sequence
        One per block: the block's task argument (tuples are resolved element-wise:
        ``Delayed``, futures and :class:`Stored` references become their values).
    shared : object, optional
        Passed to every call; give it through :func:`share` for large objects.
    reducer : Reducer, optional
        Needed with ``fuse``: how a fused task adds its blocks.
    split_every : int
        Fan-in of the tree that will reduce the leaves (the fused node size).
    fuse : bool
        Fuse first-level nodes when there are at least ``GROUPS_PER_SLOT · split_every · slots``
        blocks: a multiple of ``slots`` nodes run as one task each, so every core gets as many;
        the remaining blocks (at least the last, often partial, node) run one task each under
        a tree node, filling in wherever a core is free. Bitwise the same reduction.
    slots : int, optional
        Tasks the scheduler runs at once (default :func:`parallel_slots`).

    Returns
    -------
    list of Delayed
        Leaves for :func:`tree_reduce`, in block order.
    """
    token = token or _token()
    items = list(items)

    def block(j, item):
        return delayed(_run_block)(func, shared, item, dask_key_name=f"{name}-block-{token}-{j}")

    if not fuse:
        return [block(j, item) for j, item in enumerate(items)]
    if reducer is None:
        raise ValueError("map_blocks: fuse=True needs the reducer that adds the blocks")
    if slots is None:
        slots = parallel_slots(distributed_client())
    if len(items) < GROUPS_PER_SLOT * split_every * slots:
        return [block(j, item) for j, item in enumerate(items)]
    groups = [list(range(j, min(j + split_every, len(items))))
              for j in range(0, len(items), split_every)]
    fused = (len(groups) - 1) // slots * slots
    return [delayed(_run_group)(func, reducer, shared, [items[j] for j in group],
                                dask_key_name=f"{name}-group-{token}-{g}")
            if g < fused else
            delayed(_node, pure=True)(reducer, *(block(j, items[j]) for j in group),
                                      dask_key_name=f"{name}-node-{token}-{g}")
            for g, group in enumerate(groups)]


def tree_reduce(parts: Sequence, reducer: Reducer, *, split_every: int = 4, name: str = "reduce",
                token: str | None = None) -> Delayed:
    """Reduce ``parts`` with ``reducer``, ``split_every`` at a time, in order (the one tree).

    The tree's shape depends only on ``len(parts)`` and ``split_every``.
    """
    if split_every < 2:
        raise ValueError(f"split_every must be >= 2, got {split_every}")
    if not parts:
        raise ValueError("tree_reduce: nothing to reduce")
    token = token or _token()
    items = list(parts)
    level = 0
    while len(items) > 1:
        items = [delayed(_node, pure=True)(reducer, *items[j:j + split_every],
                                           dask_key_name=f"{name}-combine-{token}-{level}-{j}")
                 for j in range(0, len(items), split_every)]
        level += 1
    if not isinstance(items[0], Delayed):  # a single block: still run it as a task
        return delayed(_node)(reducer, items[0], dask_key_name=f"{name}-combine-{token}")
    return items[0]


def map_reduce(func: Callable, items: Sequence, *, reducer: Reducer, shared: Any = None,
               split_every: int = 4, fuse: bool = True, name: str = "map",
               progress: bool | float = False,
               slots: int | None = None) -> Any:
    """``reduce(reducer.add, (func(shared, item) for item in items))`` as a fixed-order tree of
    dask tasks on the active scheduler; see :func:`map_blocks` and :func:`tree_reduce`."""
    token = _token()
    leaves = map_blocks(func, items, shared=shared, name=name, reducer=reducer,
                        split_every=split_every, fuse=fuse, slots=slots, token=token)
    total = tree_reduce(leaves, reducer, split_every=split_every, name=name, token=token)
    (result,) = compute([total], progress=progress, what=name)
    return result


# --------------------------------------------------------------------------- row maps

#: Rows per block of :func:`transform_rows` on in-memory input (BLAS-efficient, many blocks).
TRANSFORM_ROWS = 256


def transform_rows(func: Callable, X, *, width: int, post=None, row_bytes: int,
                   block_memory: int, argument: str = "X", n_features: int | None = None,
                   model: str = "the model"):
    """``func(block, post)`` over the rows of ``X``, stacked: shape (n, width).

    Dask input gives a lazy dask array (``map_blocks`` over its row chunks); zarr input is
    read through dask and computed; numpy and scipy.sparse input is computed in fixed blocks
    of at most :data:`TRANSFORM_ROWS` rows on the local thread pool (:func:`map_local`), so the
    result never depends on the number of threads. ``row_bytes``: bytes a block holds per row
    (with ``block_memory``, bounds the block). Errors name ``argument``.
    """
    src = as_row_source(X, argument=argument)
    if n_features is not None and src.shape[1] != n_features:
        raise ValueError(f"{argument} has {src.shape[1]} features, but {model} is expecting "
                         f"{n_features} features as input")
    data = src.data
    if isinstance(data, da.Array):
        data = data.rechunk({1: -1})
        return data.map_blocks(func, post, dtype=np.float64, chunks=(data.chunks[0], (width,)))
    if src.lazy:
        return np.asarray(transform_rows(func, da.from_zarr(data), width=width, post=post,
                                         row_bytes=row_bytes, block_memory=block_memory,
                                         argument=argument))
    src.check_finite()
    b = max(1, block_memory // max(row_bytes, 1))
    b = min(b, TRANSFORM_ROWS)  # several blocks for the cores; fixed, so results never depend on them
    out = np.empty((src.n, width))

    def block(s: int) -> None:
        out[s:s + b] = func(src.data[s:s + b], post)

    map_local(block, list(range(0, src.n, b)))
    return out
