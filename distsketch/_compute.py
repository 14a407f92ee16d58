"""Running graphs: the active scheduler, shipping shared objects, progress.

One place decides how distsketch computes: dask's threaded (default), processes or
synchronous scheduler, or the ``distributed.Client`` that dask would use right now. Progress
is dask's own: ``dask.diagnostics.ProgressBar`` locally, ``distributed.progress`` and the
dashboard link with a client.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import dask
import dask.local
from dask.delayed import delayed

__all__ = ["distributed_client", "share", "compute", "map_local", "parallel_slots"]

logger = logging.getLogger(__name__)


def distributed_client():
    """The ``distributed.Client`` that dask would use right now, or None."""
    try:
        from distributed import default_client
    except ImportError:  # pragma: no cover - distributed is a dependency
        return None
    try:
        client = default_client()
    except ValueError:
        return None
    return client if dask.base.get_scheduler() == client.get else None


def parallel_slots(client=None) -> int:
    """Tasks the active scheduler runs at once: the client's worker threads, dask's local
    ``num_workers`` or the machine's cores (1 for the synchronous scheduler)."""
    if client is not None:
        try:
            workers = client.scheduler_info().get("workers", {})
            return max(1, sum(int(w.get("nthreads", 1)) for w in workers.values()))
        except Exception:  # pragma: no cover - an unreachable scheduler fails later anyway
            return 1
    if dask.base.get_scheduler() is dask.local.get_sync:
        return 1
    return max(1, int(dask.config.get("num_workers", None) or os.cpu_count() or 1))


def share(obj: Any, *, name: str, client=None) -> Any:
    """Make ``obj`` one graph dependency: scattered to every worker once, or a single key."""
    if client is not None:
        return client.scatter(obj, broadcast=True, hash=False)
    return delayed(obj, name=name, traverse=False)


def compute(objs: list, *, progress: bool = False, what: str = "") -> list:
    """Compute delayed objects on the active scheduler, with dask's progress display."""
    client = distributed_client()
    if client is not None:
        if progress:
            logger.warning("%s: dask dashboard %s", what or "distsketch", client.dashboard_link)
        futures = client.compute(objs)
        if progress:
            from distributed import progress as show

            show(futures)
        return client.gather(futures)
    if progress:
        from dask.diagnostics import ProgressBar

        with ProgressBar():
            return list(dask.compute(*objs))
    return list(dask.compute(*objs))


def map_local(func, items: list) -> list:
    """``[func(item) for item in items]`` on dask's local thread pool, in order.

    For work on data already in this process's memory (numpy inputs to ``predict``):
    one task per item on all cores, whatever scheduler is active, with nothing shipped.
    NumPy releases the GIL in BLAS and in ``exp``, so the threads run in parallel; each
    item's result depends only on the item, never on the number of threads.
    """
    if len(items) <= 1:
        return [func(item) for item in items]
    tasks = [delayed(func, pure=False)(item) for item in items]
    return list(dask.compute(*tasks, scheduler="threads"))
