"""A dask scheduler and workers as separate processes (`dask scheduler`, `dask worker`), as a
user starts them: shared by the tests that need real daemons (importable by name)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest


def dask_command() -> str:
    cli = shutil.which("dask", path=str(Path(sys.executable).parent)) or shutil.which("dask")
    if cli is None:
        pytest.skip("the `dask` command (distributed) is not on PATH")
    return cli


@contextmanager
def dask_processes(workdir: Path, n_workers: int, *, nanny: bool = True, env: dict | None = None,
                   exit_timeout: float = 30):
    """Start a scheduler (scheduler file ``workdir/scheduler.json``) and ``n_workers`` one-thread
    workers; yields ``(scheduler_file, address, worker_processes)``; on exit terminates them all,
    kills those still running after ``exit_timeout`` seconds and waits for every one."""
    cli = dask_command()
    sched_file = Path(workdir) / "scheduler.json"
    procs = [subprocess.Popen([cli, "scheduler", "--host", "127.0.0.1", "--port", "0",
                               "--no-dashboard", "--scheduler-file", str(sched_file)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        for _ in range(n_workers):
            procs.append(subprocess.Popen(
                [cli, "worker", "--scheduler-file", str(sched_file), "--nthreads", "1",
                 "--no-dashboard", "--host", "127.0.0.1", *([] if nanny else ["--no-nanny"])],
                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        yield sched_file, wait_for_workers(sched_file, n_workers), procs[1:]
    finally:
        for p in procs[::-1]:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            reap(p, exit_timeout)


def reap(proc: subprocess.Popen, timeout: float = 30) -> None:
    """Wait for ``proc`` to exit; kill it if it has not within ``timeout`` seconds and wait for
    that too, so no ``Popen`` is left unreaped (its ResourceWarning fails a test under
    ``filterwarnings = error``)."""
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def wait_for_workers(scheduler_file, n: int, timeout: float = 60) -> str:
    """The scheduler's address once it has ``n`` workers."""
    from distributed import Client

    deadline = time.monotonic() + timeout
    while not os.path.exists(scheduler_file):
        assert time.monotonic() < deadline, "scheduler did not start"
        time.sleep(0.2)
    with Client(scheduler_file=str(scheduler_file), timeout=30) as client:
        client.wait_for_workers(n, timeout=timeout)
        return client.scheduler.address
