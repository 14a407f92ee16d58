"""The schedulers of the map-reduce: which one is active, how many tasks it runs, computing on it.

The block map-reduce (:mod:`distsketch.engine.mapreduce`) runs on whatever dask scheduler is
active: dask's local schedulers or a ``distributed`` client.

- :func:`distributed_client` — the ``distributed.Client`` dask would use right now, if any;
  :func:`local_scheduler` — the local scheduler's ``get`` (without importing ``distributed``).
- :func:`parallel_slots` — tasks the active scheduler runs at once (how the map fuses blocks).
- :func:`compute` — on the active dask scheduler, with dask's progress display; on a cluster
  that lost the workers holding a computation's data it raises :class:`WorkersLost`, and
  :func:`workers_back` waits for the cluster to have a worker again (a fit with a kept store
  then resumes).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

import dask
import dask.local
import numpy as np

if TYPE_CHECKING:
    import distributed

__all__ = ["compute", "parallel_slots", "distributed_client", "local_scheduler", "WorkersLost",
           "workers_back"]

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------- schedulers


def distributed_client() -> distributed.Client | None:
    """The ``distributed.Client`` that dask would use right now.

    Returns
    -------
    distributed.Client or None
        The default client when it is dask's active scheduler; None otherwise (and without
        importing ``distributed`` when nothing has).

    Examples
    --------
    >>> from distsketch.engine import distributed_client
    >>> distributed_client() is None  # no client started
    True
    """
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


def local_scheduler() -> Callable | None:
    """The local scheduler's ``get`` when no distributed client can exist.

    A client needs ``distributed``, so while it is not imported the scheduler is dask's
    configured ``scheduler`` (a name or a function) or its threaded default for delayed
    objects. Handing dask the function keeps its own lookup from importing ``distributed``
    — 0.16 s on the first computation of every process here (benchmarks/bench_import.py).

    Returns
    -------
    callable or None
        The scheduler's ``get``; None where dask must decide (``distributed`` imported).

    Examples
    --------
    >>> import dask
    >>> from distsketch.engine import local_scheduler
    >>> with dask.config.set(scheduler="synchronous"):
    ...     local_scheduler() in (dask.local.get_sync, None)
    True
    """
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


def parallel_slots(client: distributed.Client | None = None) -> int:
    """Tasks the active scheduler runs at once.

    Parameters
    ----------
    client : distributed.Client or None, default None
        The cluster's client (None: the local scheduler).

    Returns
    -------
    int
        The client's worker threads, dask's local ``num_workers`` or the machine's cores
        (1 for the synchronous scheduler).

    Examples
    --------
    >>> import dask
    >>> from distsketch.engine import parallel_slots
    >>> with dask.config.set(scheduler="synchronous"):
    ...     parallel_slots()
    1
    """
    if client is not None:
        try:
            workers = client.scheduler_info().get("workers", {})
            return max(1, sum(int(w.get("nthreads", 1)) for w in workers.values()))
        except Exception:  # pragma: no cover - an unreachable scheduler fails later anyway
            return 1
    if (local_scheduler() or dask.base.get_scheduler()) is dask.local.get_sync:
        return 1
    return max(1, int(dask.config.get("num_workers", None) or os.cpu_count() or 1))


def compute(objs: list, *, progress: bool | float = False, what: str = "") -> list:
    """Compute delayed objects on the active scheduler, with dask's progress display.

    Parameters
    ----------
    objs : list
        Dask collections or ``Delayed`` objects, computed together.
    progress : bool or float, default False
        ``True`` shows dask's progress bar (local schedulers) or distributed's progress and
        the dashboard's address; a number of seconds shows the local bar only once the
        computation has run that long (``ProgressBar(minimum=…)``) and nothing on a cluster
        — for the many short computations of an iterative solver, whose iterations are
        logged.
    what : str, default ""
        What is computed, for messages.

    Returns
    -------
    list
        The computed values, in the order of ``objs``.

    Raises
    ------
    WorkersLost
        On a distributed cluster, the workers that held this computation's only copy of
        some data (all of them, or a single worker when data was not replicated) were lost;
        fitting again on a kept store resumes.

    Examples
    --------
    >>> from dask import delayed
    >>> from distsketch.engine import compute
    >>> compute([delayed(sum)([1, 2]), delayed(max)(3, 4)])
    [3, 4]
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
    """A distributed computation lost workers holding data it needed (scattered inputs).

    Raised by :func:`compute`; a fit with a kept store resumes when run again.
    """


def workers_back(client: distributed.Client, timeout: float | None = None) -> bool:
    """Wait until the cluster has a worker again.

    Parameters
    ----------
    client : distributed.Client
        The cluster's client.
    timeout : float or None, default None
        Seconds to wait (None: the dask config key ``distsketch.worker-wait``, 60).

    Returns
    -------
    bool
        Whether a worker is there (False after ``timeout``, or for a closed scheduler).

    Examples
    --------
    After a :class:`WorkersLost` on a cluster (``client``: its ``distributed.Client``), a fit
    with a kept store resumes once workers are back::

        if workers_back(client, timeout=120):
            model.fit(X, y)
    """
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
