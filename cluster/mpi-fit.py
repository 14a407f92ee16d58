#!/usr/bin/env python
"""Fit a distsketch TOML config on a dask cluster made of MPI ranks (dask-mpi).

::

    mpirun -np 4 python cluster/mpi-fit.py CONFIG.toml [--store PATH] [--interface ib0]
        [--nthreads 1] [--memory-limit 4GiB] [--local-directory /scratch/$USER]
    srun --mpi=pmix -n 4 python cluster/mpi-fit.py CONFIG.toml      # inside a SLURM job

Rank 0 runs the scheduler, rank 1 this script's client (the fit), every other rank a worker:
``-np N`` gives N - 2 workers (at least 3 ranks). The fit waits for all of them, runs
``distsketch fit CONFIG --scheduler ADDR``, closes its client, and every rank exits (status
of the fit on rank 1, 0 elsewhere). The store must be on storage every rank reaches.

Flags fall back to the environment: DISTSKETCH_MPI_INTERFACE, DISTSKETCH_MPI_NTHREADS,
DISTSKETCH_MPI_MEMORY_LIMIT, DISTSKETCH_MPI_LOCAL_DIRECTORY. dask-mpi workers have no nanny,
so ``distributed.nanny.pre-spawn-environ`` (cluster/distsketch.yaml: OMP/OPENBLAS/MKL threads,
MALLOC_TRIM_THRESHOLD_) is applied to this process's environment before NumPy loads, unless
the variable is already set (``mpirun -x OMP_NUM_THREADS=2`` wins).
"""

from __future__ import annotations

import argparse
import os
import sys


def build_parser() -> argparse.ArgumentParser:
    env = os.environ.get
    p = argparse.ArgumentParser(prog="mpi-fit.py", description=__doc__.splitlines()[0])
    p.add_argument("config", help="distsketch TOML configuration")
    p.add_argument("--store", help="override the config's [store] path (shared storage)")
    p.add_argument("--interface", default=env("DISTSKETCH_MPI_INTERFACE") or None,
                   help="network interface of scheduler and workers, e.g. ib0 or lo")
    p.add_argument("--nthreads", type=int, default=int(env("DISTSKETCH_MPI_NTHREADS", "1")),
                   help="threads per worker rank (default 1)")
    p.add_argument("--memory-limit", default=env("DISTSKETCH_MPI_MEMORY_LIMIT", "auto"),
                   help="per worker rank, e.g. 4GiB (default auto: a share of the node's memory)")
    p.add_argument("--local-directory", default=env("DISTSKETCH_MPI_LOCAL_DIRECTORY") or None,
                   help="node-local spill directory")
    p.add_argument("--timeout", type=float, default=300, help="seconds to wait for the workers")
    p.add_argument("-v", "--verbose", action="count", default=0, help="passed to distsketch fit")
    return p


def apply_worker_environment() -> None:
    """``distributed.nanny.pre-spawn-environ`` into ``os.environ`` (without overriding).

    Read from the config files / DASK_* variables before ``distributed`` (which imports NumPy)
    is imported; only when they do not set it, from distributed's defaults.
    """
    import dask.config

    environ = dask.config.get("distributed.nanny.pre-spawn-environ", None)
    if environ is None:
        import distributed  # noqa: F401  registers distributed's defaults (loads NumPy: too late
        #                     for its BLAS, but the library bounds BLAS threads itself)

        environ = dask.config.get("distributed.nanny.pre-spawn-environ", None) or {}
    for key, value in environ.items():
        os.environ.setdefault(str(key), str(value))


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    apply_worker_environment()

    from dask_mpi import initialize
    from distributed import Client
    from mpi4py import MPI

    # Ranks 0 (scheduler) and >= 2 (workers) block here and exit when rank 1 is done.
    initialize(interface=args.interface, nthreads=args.nthreads, memory_limit=args.memory_limit,
               local_directory=args.local_directory, dashboard=False)

    from distsketch.cli.commands import main as distsketch_main

    workers = MPI.COMM_WORLD.Get_size() - 2
    with Client() as client:  # closed before exit: no dangling connection at shutdown
        client.wait_for_workers(workers, timeout=args.timeout)
        fit_args = ["-q"] + ["-v"] * args.verbose + ["fit", args.config,
                                                     "--scheduler", client.scheduler.address]
        if args.store:
            fit_args += ["--store", args.store]
        code = distsketch_main(fit_args)
    return code


if __name__ == "__main__":
    sys.exit(main())
