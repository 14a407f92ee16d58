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
- :func:`row_blocks` — the task arguments of an input's row blocks; :func:`share` — an object
  every task needs, one graph dependency; :func:`map_local` — a function over items on a
  local thread pool.

The active scheduler, its parallel slots and :func:`~distsketch.engine.schedulers.compute` are
in :mod:`distsketch.engine.schedulers`; a row function over an input's rows
(:func:`~distsketch.engine.transform.transform_rows`) in :mod:`distsketch.engine.transform`.

Resuming is per block and belongs to the caller: a block whose result it stored earlier is
given as ``Stored`` references instead of fresh inputs, so the same block function reduces it
(the streaming pass, ``distsketch.engine.accumulate``).

With many blocks per core, :func:`map_blocks` computes each first-level node of the tree in
one task (its ``split_every`` blocks in order, added as the node would add them): bitwise the
same result, with ``1/split_every`` of the partial results held and transferred. The blocks
of one such task share a :class:`Workspace`, so block-sized arrays are allocated once per task.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from dask.delayed import Delayed, delayed

from .rows import as_row_source
from .schedulers import compute, distributed_client, parallel_slots

if TYPE_CHECKING:
    import distributed

__all__ = ["Reducer", "Stored", "Workspace", "map_blocks", "tree_reduce", "map_reduce",
           "row_blocks", "share", "map_local", "GROUPS_PER_SLOT"]

#: Fuse first-level nodes only with at least this many of them per core.
GROUPS_PER_SLOT = 4


# --------------------------------------------------------------------------- shared inputs and local maps


def share(obj: Any, *, name: str, client: distributed.Client | None = None) -> Any:
    """Make ``obj`` one graph dependency: scattered to every worker once, or a single key.

    Parameters
    ----------
    obj : object
        What every task needs (landmarks, a kernel, mixing matrices).
    name : str
        The graph key (local schedulers).
    client : distributed.Client or None, default None
        The cluster to scatter to (None: a ``Delayed`` with key ``name``).

    Returns
    -------
    Delayed or distributed.Future
        The ``shared`` argument of :func:`map_blocks` and :func:`map_reduce`.

    Examples
    --------
    >>> import numpy as np
    >>> from distsketch.engine import share
    >>> share(np.ones(3), name="landmarks").key
    'landmarks'
    """
    if client is not None:
        return client.scatter(obj, broadcast=True, hash=False)
    return delayed(obj, name=name, traverse=False)


def map_local(func: Callable, items: list) -> list:
    """``[func(item) for item in items]`` on a local thread pool, in order.

    For work on data already in this process's memory (numpy inputs to ``predict``):
    one task per item on all cores (dask's ``num_workers``, else its ``CPU_COUNT``: the
    threads of its local pool), whatever scheduler is active, with nothing shipped. NumPy
    releases the GIL in BLAS and in ``exp``, so the threads run in parallel; each item's
    result depends only on the item, never on the number of threads. A persistent pool,
    not a dask graph: the graph cost ~1 ms per call (0.96 ms for two items, against
    0.03 ms), as much as a prediction of 400 rows itself. Called from one of its own
    threads, the items run in that thread (no pool waits on itself).

    Parameters
    ----------
    func : callable
        ``func(item)``.
    items : list
        The arguments, one task each.

    Returns
    -------
    list
        ``func(item)`` of each item, in order.

    Examples
    --------
    >>> from distsketch.engine import map_local
    >>> map_local(abs, [-1, 2, -3])
    [1, 2, 3]
    """
    if len(items) <= 1 or threading.current_thread().name.startswith(_LOCAL_POOL_NAME):
        return [func(item) for item in items]
    return list(_local_pool().map(func, items))


_LOCAL_POOL_NAME = "distsketch-local"
_LOCAL_POOL: list = [None, 0, -1]  # [ThreadPoolExecutor, threads, process id]
_LOCAL_POOL_LOCK = threading.Lock()


def _local_pool():
    """:func:`map_local`'s pool, made again for another thread count or in a forked child
    (whose copy of the pool has no threads)."""
    import dask.config
    import dask.system

    workers = max(1, int(dask.config.get("num_workers", None) or dask.system.CPU_COUNT))
    with _LOCAL_POOL_LOCK:
        pool, size, pid = _LOCAL_POOL
        if pool is None or size != workers or pid != os.getpid():
            if pool is not None and pid == os.getpid():
                pool.shutdown(wait=False)
            pool = ThreadPoolExecutor(workers, thread_name_prefix=_LOCAL_POOL_NAME)
            _LOCAL_POOL[:] = [pool, workers, os.getpid()]
        return pool


# --------------------------------------------------------------------------- blocks


@dataclass(frozen=True)
class Stored:
    """Rows ``[start, stop)`` of a stored array (zarr), read inside the task that needs them.

    Parameters
    ----------
    array : zarr.Array or array-like
        The stored array.
    start : int
        First row.
    stop : int
        One past the last row.
    """

    array: Any
    start: int
    stop: int

    def read(self) -> Any:
        """The rows, read from the array.

        Returns
        -------
        ndarray
            ``array[start:stop]``.
        """
        return self.array[self.start:self.stop]


def _resolve(item):
    """An item with its :class:`Stored` references read (top level of a tuple or list)."""
    if isinstance(item, Stored):
        return item.read()
    if isinstance(item, tuple):
        return tuple(x.read() if isinstance(x, Stored) else x for x in item)
    return item


def row_blocks(source: Any, block_rows: int, *, argument: str = "X",
               client: distributed.Client | None = None) -> list:
    """Task arguments for the row blocks ``[i·b, (i+1)·b)`` of an input.

    In-memory rows are sliced (and scattered once each on a distributed ``client``, never put
    inside the graph: a worker lost with them loses them, and the caller sends them again, see
    :class:`WorkersLost`); dask and zarr inputs give one ``Delayed`` per block, read by the task
    (the cluster reads them again if a worker is lost). A stored array whose chunks are the
    blocks can instead be read with :class:`Stored`.

    Parameters
    ----------
    source : array-like
        The rows: a numpy, scipy.sparse, dask or zarr array.
    block_rows : int
        Rows per block ``b`` (the last block may be shorter).
    argument : str, default "X"
        The argument's name in error messages.
    client : distributed.Client or None, default None
        Scatter in-memory blocks to this cluster.

    Returns
    -------
    list
        One item per block, for :func:`map_blocks` and :func:`map_reduce`.

    Examples
    --------
    >>> import numpy as np
    >>> from distsketch.engine import row_blocks
    >>> [b.shape for b in row_blocks(np.zeros((5, 2)), 2)]
    [(2, 2), (2, 2), (1, 2)]
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

    def __init__(self) -> None:
        self._arrays: dict[str, Any] = {}

    def get(self, name: str, shape: tuple, dtype: Any, xp: Any = np) -> Any:
        """A work array, the same one for the same name, shape and dtype.

        Parameters
        ----------
        name : str
            The array's role in the task.
        shape : tuple of int
            Its shape.
        dtype : dtype
            Its dtype.
        xp : module, default numpy
            The array namespace (numpy, or CuPy on a GPU backend).

        Returns
        -------
        ndarray
            An array of ``shape`` and ``dtype`` from ``xp``, contents undefined.
        """
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

    Examples
    --------
    >>> from distsketch.engine import Reducer
    >>> class Sum(Reducer):
    ...     def add(self, acc, part):
    ...         return acc + part
    >>> Sum().node([1, 2, 3])
    6
    """

    def own(self, part: Any) -> Any:
        """A copy of ``part`` that :meth:`add` may update in place.

        Parameters
        ----------
        part : object
            A block result.

        Returns
        -------
        object
            The part itself by default.
        """
        return part

    def add(self, acc: Any, part: Any) -> Any:
        """``acc ⊕ part``, possibly updating ``acc`` in place.

        Parameters
        ----------
        acc : object
            The running result, owned by the caller.
        part : object
            The next block's (or subtree's) result.

        Returns
        -------
        object
            The combined result.
        """
        raise NotImplementedError

    def node(self, parts: Sequence) -> Any:
        """One node of the reduction tree: ``parts`` added left to right.

        A reducer may do it at once, with the same result.

        Parameters
        ----------
        parts : sequence
            The node's children, in block order.

        Returns
        -------
        object
            Their combination.
        """
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
    name : str, default "map"
        Prefix of the task names (the dashboard's).
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
    token : str, optional
        Unique part of the task names (default: a fresh one); :func:`map_reduce` gives the
        map and the reduction the same.

    Returns
    -------
    list of Delayed
        Leaves for :func:`tree_reduce`, in block order.

    Examples
    --------
    >>> import dask
    >>> import numpy as np
    >>> from distsketch.engine import map_blocks, row_blocks
    >>> def column_sums(shared, block, workspace):
    ...     return block.sum(axis=0)
    >>> leaves = map_blocks(column_sums, row_blocks(np.ones((5, 2)), 2))
    >>> [leaf.compute().tolist() for leaf in leaves]
    [[2.0, 2.0], [2.0, 2.0], [1.0, 1.0]]
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

    Parameters
    ----------
    parts : sequence
        The leaves (from :func:`map_blocks`), in block order.
    reducer : Reducer
        How the parts combine.
    split_every : int, default 4
        Fan-in of each node (at least 2).
    name : str, default "reduce"
        Prefix of the task names.
    token : str, optional
        Unique part of the task names (default: a fresh one).

    Returns
    -------
    Delayed
        The root of the tree.

    Examples
    --------
    >>> from dask import delayed
    >>> from distsketch.engine import Reducer, tree_reduce
    >>> class Sum(Reducer):
    ...     def add(self, acc, part):
    ...         return acc + part
    >>> tree_reduce([delayed(v) for v in range(10)], Sum(), split_every=3).compute()
    45
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
    """``reduce(reducer.add, (func(shared, item) for item in items))``, computed.

    A fixed-order tree of dask tasks on the active scheduler: :func:`map_blocks`, then
    :func:`tree_reduce`, then :func:`compute`. The result does not depend on the scheduler,
    the number of workers or the order in which tasks finish.

    Parameters
    ----------
    func : callable
        ``func(shared, item, workspace)``: module-level (picklable, a readable task name).
    items : sequence
        One per block: the block's task argument (:func:`row_blocks`).
    reducer : Reducer
        How the block results combine.
    shared : object, optional
        Passed to every call; give it through :func:`share` for large objects.
    split_every : int, default 4
        Fan-in of the reduction tree.
    fuse : bool, default True
        Compute first-level nodes in one task each when there are many blocks per core
        (:func:`map_blocks`; bitwise the same result).
    name : str, default "map"
        Prefix of the task names.
    progress : bool or float, default False
        As for :func:`compute`.
    slots : int, optional
        Tasks the scheduler runs at once (default :func:`parallel_slots`).

    Returns
    -------
    object
        The reduction of every block's result.

    Examples
    --------
    Column sums of a matrix, two rows per task:

    >>> import numpy as np
    >>> from distsketch.engine import Reducer, map_reduce, row_blocks
    >>> class Sum(Reducer):
    ...     def add(self, acc, part):
    ...         return acc + part
    >>> def column_sums(shared, block, workspace):
    ...     return block.sum(axis=0)
    >>> X = np.arange(12.0).reshape(6, 2)
    >>> map_reduce(column_sums, row_blocks(X, 2), reducer=Sum())
    array([30., 36.])
    """
    token = _token()
    leaves = map_blocks(func, items, shared=shared, name=name, reducer=reducer,
                        split_every=split_every, fuse=fuse, slots=slots, token=token)
    total = tree_reduce(leaves, reducer, split_every=split_every, name=name, token=token)
    (result,) = compute([total], progress=progress, what=name)
    return result
