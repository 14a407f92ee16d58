"""Sweeps over blocks held in memory, and a solved λ path as a table: what the sweeps' routes
(:mod:`distsketch.solvers.lipschitz.routes`) and their re-solve over appended rows
(:mod:`distsketch.solvers.lipschitz.resolve`) share.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ...engine.schedulers import distributed_client
from ...engine.sweep import SWEEP_SUMS, SweepData, Sweeper, sweep_items
from ..routes import CoefTable

if TYPE_CHECKING:
    from .problem import Problem

__all__ = ["HeldSweeps", "held_sweeps", "local_memory_ok", "path_table"]

def local_memory_ok() -> bool:
    """Whether tasks run in this process (so ADMM's rows can be held in memory)."""
    import dask

    if distributed_client() is not None:
        return False
    sched = dask.config.get("scheduler", None)
    return sched in (None, "threads", "threading", "sync", "synchronous", "single-threaded")


class HeldSweeps:
    """Sweeps over the blocks a fit without a store holds in memory, on the local scheduler.

    The :class:`~distsketch.engine.sweep.Sweeper`'s block function over its items, added in the same
    fixed tree as :func:`distsketch.engine.map_reduce` (``split_every`` consecutive parts
    at a time, left to right, level by level), so the sums are bitwise the dask sweep's; the
    blocks run on a thread pool of ``slots`` threads (NumPy releases the GIL in BLAS), in
    this thread for one slot. What it saves is the dask graph of every sweep (building,
    optimising and scheduling it: ~5 ms per sweep of 4 blocks measured, against ~2–4 ms of
    block work at m = 200). ``count`` is the sweeper's (``n_passes_``).
    """

    def __init__(self, sweeper: Sweeper, slots: int) -> None:
        self.sweeper = sweeper
        self.slots = int(slots)
        self._pool = None

    @property
    def count(self) -> int:
        return self.sweeper.count

    def __call__(self, it):
        from ...engine.mapreduce import Workspace

        sw = self.sweeper
        if sw._items is None:
            sw._items = sweep_items(sw.data, sw.X, sw.Y)
        shared = (sw.data, it)
        block = sw.block

        def one(item):
            return block(shared, item, Workspace())

        items = sw._items
        if self.slots > 1 and len(items) > 1:
            if self._pool is None:
                from concurrent.futures import ThreadPoolExecutor

                self._pool = ThreadPoolExecutor(self.slots, thread_name_prefix="distsketch-sweep")
            parts = list(self._pool.map(one, items))
        else:
            parts = [one(item) for item in items]
        step = sw.split_every
        while len(parts) > 1:  # engine.tree_reduce's tree (fused first level: the same sums)
            parts = [SWEEP_SUMS.node(parts[j:j + step]) for j in range(0, len(parts), step)]
        sw.count += 1
        return parts[0]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


def held_sweeps(sweeper: Sweeper, data: SweepData, spec: Any = None) -> HeldSweeps | None:
    """A :class:`HeldSweeps` over ``sweeper`` when its blocks are held in memory, no cluster
    runs the fit and the targets are in memory (the sweeper's ``X``, ``Y``; ``spec`` is not
    read); else None. Held sweeps show no progress bar
    (a dask sweep would show one only past
    :data:`~distsketch.engine.sweep.SWEEP_PROGRESS_MINIMUM`)."""
    import dask

    from ...engine.schedulers import parallel_slots

    if data.held is None or distributed_client() is not None:
        return None
    items = sweep_items(data, sweeper.X, sweeper.Y)
    if any(dask.is_dask_collection(part) or hasattr(part, "key")
           for item in items for part in item[1:]):
        return None  # lazy targets: the dask sweep reads them
    sweeper._items = items
    return HeldSweeps(sweeper, parallel_slots(None))


def path_table(prob: Problem, lams, sols) -> CoefTable:
    """The :class:`~distsketch.solvers.routes.CoefTable` of the solutions ``sols`` of
    ``lams`` (``Ξ`` in ``prob``'s whitened features, intercepts, objectives and gaps)."""
    return CoefTable(lams, np.stack([sol.Xi for sol in sols]),
                     np.array([sol.n_iter for sol in sols]),
                     intercepts=np.stack([sol.b0 for sol in sols]),
                     objectives=np.array([sol.objective for sol in sols]),
                     duality_gaps=np.array([sol.gap for sol in sols]),
                     basis=prob.T, output_sqrt=prob.S)
