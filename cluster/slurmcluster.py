#!/usr/bin/env python
"""Fit a distsketch TOML config on dask workers submitted as SLURM jobs (dask-jobqueue).

::

    python cluster/slurmcluster.py CONFIG.toml [--store PATH] [--workers N] [--cores C]
        [--memory 8GiB] [--walltime 02:00:00] [--queue PART] [--interface ib0] [--dry-run] ...

Run it where ``sbatch`` works (a login node, or inside a small job). The scheduler runs in
this process, each worker is one SLURM job submitted by ``dask_jobqueue.SLURMCluster``; the
fit is ``distsketch fit CONFIG --scheduler ADDR``; the jobs are cancelled on exit.

The worker job profile is the dask config section ``jobqueue.slurm`` (cluster/distsketch.yaml;
``export DASK_CONFIG=cluster`` or copy it to ~/.config/dask/). Precedence, highest first: a flag
of this script > ``DASK_JOBQUEUE__SLURM__*`` environment variables > config files > the
defaults of dask-jobqueue. ``--dry-run`` prints the job script that would be submitted.
The store must be on storage every worker job can reach.
"""

from __future__ import annotations

import argparse
import sys
import time

# Flags that map onto SLURMCluster arguments (and keys of `jobqueue.slurm`); None: not given.
PROFILE_FLAGS = {
    "cores": int, "processes": int, "memory": str, "walltime": str, "queue": str,
    "account": str, "interface": str, "local_directory": str, "log_directory": str,
    "job_name": str,  # the config key is `name`
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="slurmcluster.py", description=__doc__.splitlines()[0])
    p.add_argument("config", help="distsketch TOML configuration")
    p.add_argument("--store", help="override the config's [store] path (shared storage)")
    p.add_argument("--workers", type=int, default=2, help="dask workers to start (default 2)")
    p.add_argument("--timeout", type=float, default=3600,
                   help="seconds to wait for the workers (queue time included; default 3600)")
    for flag, typ in PROFILE_FLAGS.items():
        key = "name" if flag == "job_name" else flag.replace("_", "-")
        p.add_argument("--" + flag.replace("_", "-"), type=typ, default=None,
                       help=f"override jobqueue.slurm.{key}")
    p.add_argument("--job-extra-directive", action="append", default=None, metavar="DIRECTIVE",
                   help="extra #SBATCH line, e.g. --job-extra-directive=--qos=long (repeatable); "
                        "replaces the config's list")
    p.add_argument("--worker-extra-arg", action="append", default=None, metavar="ARG",
                   help="extra `dask worker` argument, e.g. --worker-extra-arg=--lifetime=55m "
                        "(repeatable); replaces the config's list")
    p.add_argument("--dry-run", action="store_true", help="print the job script and exit")
    p.add_argument("-v", "--verbose", action="count", default=0, help="passed to distsketch fit")
    return p


def cluster_kwargs(args: argparse.Namespace) -> dict:
    """SLURMCluster keyword arguments given on the command line (the rest come from config)."""
    kwargs = {k: getattr(args, k) for k in PROFILE_FLAGS if getattr(args, k) is not None}
    if args.job_extra_directive is not None:
        kwargs["job_extra_directives"] = args.job_extra_directive
    if args.worker_extra_arg is not None:
        kwargs["worker_extra_args"] = args.worker_extra_arg
    return kwargs


def make_cluster(**kwargs):
    """``SLURMCluster(**kwargs)``; missing arguments come from ``jobqueue.slurm``."""
    from dask_jobqueue import SLURMCluster

    return SLURMCluster(**kwargs)


def _say(msg: str) -> None:
    print(f"slurmcluster: {msg}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.workers < 1:
        _say(f"--workers: must be a positive integer, got {args.workers}")
        return 2
    from distributed import Client

    from distsketch.cli.commands import main as distsketch_main

    with make_cluster(**cluster_kwargs(args)) as cluster:
        if args.dry_run:
            print(cluster.job_script())
            return 0
        t = time.perf_counter()
        cluster.scale(n=args.workers)
        with Client(cluster) as client:
            client.wait_for_workers(args.workers, timeout=args.timeout)
            jobs = sorted({getattr(job, "job_id", None) or name for name, job in cluster.workers.items()})
            _say(f"{args.workers} worker(s) up in {time.perf_counter() - t:.1f} s; SLURM jobs "
                 f"{' '.join(map(str, jobs))}; scheduler {cluster.scheduler_address}; "
                 f"dashboard {client.dashboard_link}")
            fit_args = ["-q"] + ["-v"] * args.verbose + ["fit", args.config,
                                                         "--scheduler", cluster.scheduler_address]
            if args.store:
                fit_args += ["--store", args.store]
            code = distsketch_main(fit_args)
        cluster.scale(0)
    _say("worker jobs cancelled")
    return code


if __name__ == "__main__":
    sys.exit(main())
