"""The HPC deployment paths of cluster/ against live daemons: a real SLURM (dask-jobqueue's
SLURMCluster; sbatch with a scheduler file), dask-mpi under mpirun, and the PBS script and the
launchers of cluster/start-dask.sh run outside a batch system.

Every fit must give the model of the default threaded fit (rtol = atol = 1e-12: results do
not depend on the scheduler or the worker count) in a store marked "solved". `.ci/hpc-setup.sh`
(root) stands up a single-node SLURM on loopback, Open MPI and the `hpc` extras; each test skips
with its reason where its tool is missing or SLURM is not up. Stores live under tmp_path on local
disk: shared by every worker by construction on one node.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
import zarr

import distsketch as ds
from clusterhelpers import reap
from confighelpers import toy_data

pytestmark = pytest.mark.hpc

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = ROOT / "cluster"
SETUP = "run `bash .ci/hpc-setup.sh` as root to set it up"


#: SLURM job states after which a job will not run again.
FINAL_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
                "BOOT_FAIL", "DEADLINE", "PREEMPTED"}


# --------------------------------------------------------------------------- availability


def _run(cmd, timeout=30, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(list(map(str, cmd)), check=False, capture_output=True, text=True, timeout=timeout, **kw)


@functools.cache
def slurm_unavailable() -> str | None:
    """Why the live SLURM tests cannot run here, or None."""
    for cmd in ("sinfo", "squeue", "sbatch", "scancel", "scontrol"):
        if shutil.which(cmd) is None:
            return f"`{cmd}` not found: SLURM is not installed ({SETUP})"
    try:
        ping = _run(["scontrol", "ping"])
    except subprocess.TimeoutExpired:
        return f"`scontrol ping` timed out: the SLURM controller is not up ({SETUP})"
    if "UP" not in ping.stdout:
        msg = (ping.stdout + ping.stderr).strip().splitlines()
        return f"the SLURM controller is not up (scontrol ping: {msg[0] if msg else ping.returncode}; {SETUP})"
    states = _run(["sinfo", "-h", "-o", "%t"]).stdout.split()
    if not any(s.rstrip("*~#!%$@^-") in ("idle", "mix", "alloc", "comp") for s in states):
        return f"no SLURM node is up (sinfo states: {states or 'none'}; {SETUP})"
    return None


def _missing_module(name: str) -> str | None:
    if importlib.util.find_spec(name) is None:
        return f"{name} is not installed (the `hpc` extra; {SETUP})"
    return None


@functools.cache
def mpi_unavailable() -> str | None:
    """Why the dask-mpi tests cannot run here, or None."""
    if shutil.which("mpirun") is None:
        return f"`mpirun` not found: no MPI installed ({SETUP})"
    for name in ("mpi4py", "dask_mpi"):
        if reason := _missing_module(name):
            return reason
    out = _run([sys.executable, "-c", "from mpi4py import MPI; print(MPI.Get_library_version())"], timeout=60)
    if out.returncode != 0:
        return f"mpi4py cannot load an MPI library: {(out.stderr.strip().splitlines() or ['?'])[-1]}"
    return None


@pytest.fixture
def slurm():
    if reason := slurm_unavailable():
        pytest.skip(reason)


@pytest.fixture
def jobqueue():
    if reason := _missing_module("dask_jobqueue"):
        pytest.skip(reason)


@pytest.fixture
def mpi():
    if reason := mpi_unavailable():
        pytest.skip(reason)


# --------------------------------------------------------------------------- problem and reference


@pytest.fixture(scope="module")
def problem(tmp_path_factory):
    """Data, config and the reference model of the default (threaded) fit."""
    d = tmp_path_factory.mktemp("hpc-problem")
    toy_data(d)
    out = _run([sys.executable, "-m", "distsketch", "-q", "fit", d / "fit.toml", "--store", d / "ref.zarr"],
               timeout=300, cwd=d)
    assert out.returncode == 0, out.stderr
    with np.load(d / "test.npz") as test:
        X_test = test["X"]
    return {"dir": d, "config": d / "fit.toml", "ref": ds.load(d / "ref.zarr"), "X_test": X_test}


def assert_same_model(store: Path, problem) -> None:
    assert zarr.open_group(str(store), mode="r").attrs["distsketch"]["status"] == "solved"
    got, ref, X = ds.load(store), problem["ref"], problem["X_test"]
    np.testing.assert_allclose(got.coef_, ref.coef_, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(got.predict(X), ref.predict(X))
    np.testing.assert_allclose(got.predict_topk(X, k=5)[1], ref.predict_topk(X, k=5)[1], rtol=1e-12, atol=1e-12)


def env(**extra) -> dict:
    """Environment of the launched processes: this interpreter, the shared dask config."""
    base = dict(os.environ, PYTHON=sys.executable, DASK_CONFIG=str(CLUSTER),
                PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    base.update({k: str(v) for k, v in extra.items()})
    return base


def pbs_env(**extra) -> dict:
    """env() in a fake PBS job: no PBS variable of the calling shell leaks in."""
    base = {k: v for k, v in env(**extra).items()
            if k in extra or k not in ("NCPUS", "PBS_NUM_PPN", "PBS_NODEFILE", "MPIRUN_ARGS", "WORKERS")}
    return base


def job_state(job_id: str) -> tuple[str, str]:
    """(JobState, ExitCode) of a SLURM job ("GONE" once slurmctld forgot it)."""
    out = _run(["scontrol", "show", "job", "-o", job_id])
    state = re.search(r"\bJobState=(\S+)", out.stdout)
    code = re.search(r"\bExitCode=(\S+)", out.stdout)
    return (state.group(1) if state else "GONE"), (code.group(1) if code else "?")


def wait_for_job(job_id: str, timeout: float) -> tuple[str, str]:
    # Polled here rather than with `sbatch --wait`, which sleeps 2 s, 8 s then 32 s between
    # checks: a 20 s job returned after 42 s.
    deadline = time.monotonic() + timeout
    while True:
        state, code = job_state(job_id)
        if state in FINAL_STATES or state == "GONE":
            return state, code
        if time.monotonic() > deadline:
            pytest.fail(f"SLURM job {job_id} still {state} after {timeout:.0f} s")
        time.sleep(0.5)


def scancel_finalizer(request, *args: str) -> None:
    def cancel():
        subprocess.run(["scancel", *args], check=False, capture_output=True, timeout=30)

    request.addfinalizer(cancel)


# --------------------------------------------------------------------------- SLURM


def test_fit_on_slurmcluster_worker_jobs_equals_threaded(slurm, jobqueue, problem, tmp_path, request):
    """cluster/slurmcluster.py: two worker jobs in squeue, the fit, the jobs cancelled."""
    name = f"dstest-{uuid.uuid4().hex[:8]}"
    scancel_finalizer(request, "--name", name)
    store, logs = tmp_path / "jobqueue.zarr", tmp_path / "launcher.log"
    cmd = [sys.executable, CLUSTER / "slurmcluster.py", problem["config"], "--store", store,
           "--workers", "2", "--interface", "lo", "--memory", "1GiB", "--walltime", "00:10:00",
           "--job-name", name, "--log-directory", tmp_path / "job-logs", "--timeout", "90"]
    with open(logs, "w") as log:
        proc = subprocess.Popen(list(map(str, cmd)), cwd=tmp_path, env=env(), stdout=log, stderr=subprocess.STDOUT)
    request.addfinalizer(lambda: (proc.poll() is None and proc.kill(), reap(proc)))
    running: set[str] = set()
    deadline = time.monotonic() + 180
    while proc.poll() is None:
        assert time.monotonic() < deadline, "slurmcluster.py did not finish in 180 s"
        out = _run(["squeue", "-h", "--name", name, "-o", "%i %t"]).stdout.split("\n")
        running |= {line.split()[0] for line in out if line.strip().endswith(" R")}
        time.sleep(0.2)
    text = logs.read_text()
    assert proc.returncode == 0, text
    assert len(running) == 2, f"expected two running worker jobs in squeue, saw {sorted(running)}\n{text}"
    reported = re.search(r"SLURM jobs ([\d ]+);", text)
    assert reported and set(reported.group(1).split()) == running, text
    assert "dask: 2 workers at tcp://127.0.0.1:" in text
    for job in running:  # cancelled when the launcher closed its cluster
        state, _ = wait_for_job(job, timeout=60)
        assert state in ("CANCELLED", "COMPLETED", "GONE"), (job, state)
    assert len(list((tmp_path / "job-logs").glob("*.err"))) == 2  # both jobs ran a worker
    assert_same_model(store, problem)


def test_fit_in_sbatch_with_scheduler_file_equals_threaded(slurm, problem, tmp_path, request):
    """cluster/slurm-fit.sbatch: srun --overlap scheduler + 2 workers, fit, shutdown."""
    store = tmp_path / "sbatch.zarr"
    out = _run(["sbatch", "--parsable", "--job-name", f"dstest-{uuid.uuid4().hex[:8]}", "--ntasks=2",
                "--cpus-per-task=1", "--mem-per-cpu=1G", "--time=00:10:00",
                f"--output={tmp_path}/fit-%j.out", CLUSTER / "slurm-fit.sbatch", problem["config"]],
               cwd=tmp_path, env=env(INTERFACE="lo", CLUSTER_DIR=CLUSTER, STORE=store, START_TIMEOUT=120))
    assert out.returncode == 0, out.stderr
    job = out.stdout.strip().split(";")[0]
    scancel_finalizer(request, job)
    state, code = wait_for_job(job, timeout=240)
    log = (tmp_path / f"fit-{job}.out").read_text()
    assert (state, code) == ("COMPLETED", "0:0"), log
    assert "start-dask: srun: scheduler and 2 worker(s)" in log
    assert "start-dask: 2 worker(s) registered" in log
    assert "dask: 2 workers at tcp://127.0.0.1:" in log
    assert re.search(r"^status:\s+solved", log, re.MULTILINE), log
    assert "start-dask: stopped" in log
    assert not list(tmp_path.glob("dask-scheduler-*.json")), "scheduler file left behind"
    assert_same_model(store, problem)


def test_hpc_setup_reuses_a_busy_node(slurm, tmp_path, request):
    """`.ci/hpc-setup.sh` run again while a job runs reuses the setup: the node is `mix` or
    `alloc`, which is healthy (it does not wait for `idle`), and the job
    keeps running."""
    if os.geteuid() != 0:
        pytest.skip("needs root: .ci/hpc-setup.sh installs packages and starts daemons")
    name = f"dstest-busy-{uuid.uuid4().hex[:8]}"
    scancel_finalizer(request, "--name", name)
    out = _run(["sbatch", "--parsable", "--job-name", name, "--ntasks=1", "--cpus-per-task=1", "--mem=100M",
                "--time=00:05:00", f"--output={tmp_path}/busy-%j.out", "--wrap", "sleep 300"], cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    job = out.stdout.strip().split(";")[0]
    deadline = time.monotonic() + 60
    while (state := job_state(job))[0] != "RUNNING":
        assert state[0] == "PENDING", state
        assert time.monotonic() < deadline, f"job {job} did not start within 60 s"
        time.sleep(0.2)
    busy = _run(["sinfo", "-h", "-o", "%t"]).stdout.strip()
    assert busy in ("mix", "alloc"), busy
    # the job outlives the old wait for `idle` (60 s, then 30 s after a RESUME, then exit 1);
    # 150 s leaves a loaded machine room for the setup's own checks (a few seconds idle)
    try:
        # OMP_NUM_THREADS=1, as a test process may have it: the node still advertises the
        # machine's cores (nproc honours the variable), so the configuration is the same
        setup = _run(["bash", ROOT / ".ci" / "hpc-setup.sh"], timeout=150, cwd=ROOT,
                     env=dict(os.environ, OMP_NUM_THREADS="1"))
    except subprocess.TimeoutExpired:
        pytest.fail(f"hpc-setup.sh did not finish within 150 s while the node is '{busy}'")
    assert setup.returncode == 0, setup.stdout + setup.stderr
    assert "already running with this configuration" in setup.stdout, setup.stdout
    assert job_state(job)[0] == "RUNNING", "the running job did not survive hpc-setup.sh"


# --------------------------------------------------------------------------- MPI


def _mpi_fit_cmd(problem, store: Path) -> list:
    return ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "4", sys.executable,
            CLUSTER / "mpi-fit.py", problem["config"], "--store", store, "--interface", "lo",
            "--memory-limit", "1GiB"]


def test_fit_with_dask_mpi_equals_threaded(mpi, problem, tmp_path):
    """cluster/mpi-fit.py under mpirun -np 4: scheduler, client and 2 worker ranks."""
    store = tmp_path / "mpi.zarr"
    out = _run(_mpi_fit_cmd(problem, store), timeout=180, cwd=tmp_path, env=env())
    assert out.returncode == 0, out.stdout + out.stderr
    assert "dask: 2 workers at tcp://127.0.0.1:" in out.stderr
    assert_same_model(store, problem)


def test_fit_with_dask_mpi_inside_sbatch_equals_threaded(slurm, mpi, problem, tmp_path, request):
    """The same launcher as the body of a batch job (mpirun inside a SLURM allocation)."""
    store = tmp_path / "mpi-sbatch.zarr"
    wrap = " ".join(f"'{a}'" for a in map(str, _mpi_fit_cmd(problem, store)))
    out = _run(["sbatch", "--parsable", "--job-name", f"dstest-{uuid.uuid4().hex[:8]}", "--ntasks=1",
                "--cpus-per-task=2", "--mem=2G", "--time=00:10:00", f"--output={tmp_path}/mpi-%j.out",
                "--wrap", wrap], cwd=tmp_path, env=env())
    assert out.returncode == 0, out.stderr
    job = out.stdout.strip().split(";")[0]
    scancel_finalizer(request, job)
    state, code = wait_for_job(job, timeout=240)
    log = (tmp_path / f"mpi-{job}.out").read_text()
    assert (state, code) == ("COMPLETED", "0:0"), log
    assert "dask: 2 workers at tcp://127.0.0.1:" in log
    assert_same_model(store, problem)


# --------------------------------------------------------------------------- outside a batch system


def test_pbs_script_outside_pbs_with_local_launcher_equals_threaded(problem, tmp_path):
    """cluster/pbs-fit.pbs run by bash with a one-node PBS environment (no PBS server here):
    the script's own logic, start-dask.sh's local launcher and its stop mode."""
    (tmp_path / "nodefile").write_text("localhost\nlocalhost\n")
    store = tmp_path / "pbs.zarr"
    out = _run(["bash", CLUSTER / "pbs-fit.pbs"], timeout=240, cwd=tmp_path,
               env=pbs_env(PBS_O_WORKDIR=tmp_path, PBS_NODEFILE=tmp_path / "nodefile", PBS_JOBID="1.test",
                       CONFIG=problem["config"], STORE=store, INTERFACE="lo", CLUSTER_DIR=CLUSTER,
                       START_TIMEOUT=120))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "start-dask: local: scheduler and 2 worker(s)" in out.stderr
    assert re.search(r"^status:\s+solved", out.stdout, re.MULTILINE), out.stdout
    assert "start-dask: stopped" in out.stderr
    sched = tmp_path / "dask-scheduler-1.test.json"
    assert not sched.exists() and not Path(f"{sched}.pids").exists(), "scheduler file or pid list left behind"
    assert Path(f"{sched}.workers.log").is_file()
    assert_same_model(store, problem)


#: Stand-in for mpirun in a fake two-node PBS job (no PBS server, one machine): records its
#: arguments and host file, then starts the -n worker processes here.
STUB_MPIRUN = r"""#!/usr/bin/env bash
if [[ ${1:-} == --version ]]; then echo "mpirun (Open MPI) 4.1.4"; exit 0; fi
printf '%s\n' "$@" >"$STUB_MPIRUN_LOG"
n=1
while (($#)); do
    case $1 in
        -n) n=$2; shift 2 ;;
        --hostfile) cp "$2" "$STUB_MPIRUN_LOG.hosts"; shift 2 ;;
        --map-by | --bind-to) shift 2 ;;
        --report-bindings) shift ;;
        *) break ;;
    esac
done
pids=()
for ((i = 0; i < n; i++)); do OMPI_COMM_WORLD_LOCAL_RANK=$i "$@" & pids+=($!); done
trap 'kill "${pids[@]}" 2>/dev/null' TERM
wait
"""


def test_pbs_script_across_two_nodes_places_workers_per_node(problem, tmp_path):
    """pbs-fit.pbs in a fake PBS Pro job `select=2:ncpus=2` (one node-file line per chunk,
    NCPUS=2) with THREADS=2: one worker per node, 2 in all (the old count, lines / THREADS, gave
    1), launched by mpirun with a host file of both nodes and one worker mapped to each (without
    it, an mpirun lacking PBS support packs them on the first node), MPIRUN_ARGS kept. A stand-in
    mpirun records that and runs the workers here; the fit is the threaded one."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "mpirun").write_text(STUB_MPIRUN)
    (bin_dir / "mpirun").chmod(0o755)
    (tmp_path / "nodefile").write_text("nodeA\nnodeB\n")
    store, record = tmp_path / "pbs2.zarr", tmp_path / "mpirun.args"
    e = pbs_env(PBS_O_WORKDIR=tmp_path, PBS_NODEFILE=tmp_path / "nodefile", PBS_JOBID="2.test", NCPUS=2,
                THREADS=2, CONFIG=problem["config"], STORE=store, INTERFACE="lo", CLUSTER_DIR=CLUSTER,
                START_TIMEOUT=120, MPIRUN_ARGS="--report-bindings", STUB_MPIRUN_LOG=record)
    e["PATH"] = f"{bin_dir}{os.pathsep}{e['PATH']}"
    out = _run(["bash", CLUSTER / "pbs-fit.pbs"], timeout=240, cwd=tmp_path, env=e)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "start-dask: mpirun: scheduler and 2 worker(s) x 2 thread(s)" in out.stderr, out.stderr
    assert "start-dask: 2 worker(s) registered" in out.stderr
    sched = tmp_path / "dask-scheduler-2.test.json"
    args = record.read_text().splitlines()
    assert args[:9] == ["-n", "2", "--hostfile", f"{sched}.hosts", "--map-by", "ppr:1:node", "--bind-to", "none",
                        "--report-bindings"], args
    assert args[9:12] == [sys.executable, "-m", "distributed.cli.dask_worker"], args
    assert Path(f"{record}.hosts").read_text() == "nodeA slots=1\nnodeB slots=1\n"
    assert re.search(r"^status:\s+solved", out.stdout, re.MULTILINE), out.stdout
    assert not sched.exists() and not Path(f"{sched}.hosts").exists(), "scheduler or host file left behind"
    assert_same_model(store, problem)


def test_start_dask_mpirun_with_pbs_node_file_uses_host_file(mpi, tmp_path):
    """The real Open MPI reads the host file and mapping start-dask.sh writes: a PBS Pro node
    file naming this machine once with NCPUS=2 gives 2 workers (the old count: 1), started
    without --oversubscribe (the host file's slots allow them); stop removes the host file."""
    host = socket.gethostname().split(".")[0]
    (tmp_path / "nodefile").write_text(f"{host}\n")
    sched = tmp_path / "sched.json"
    e = pbs_env(PBS_NODEFILE=tmp_path / "nodefile", NCPUS=2, MPIRUN_ARGS="--allow-run-as-root")
    start = _run(["bash", CLUSTER / "start-dask.sh", "start", "--scheduler-file", sched, "--launcher", "mpirun",
                  "--interface", "lo", "--memory-limit", "1GiB", "--timeout", "120"], timeout=180, cwd=tmp_path, env=e)
    pids = [int(p) for p in (tmp_path / "sched.json.pids").read_text().split()] if start.returncode == 0 else []
    try:
        assert start.returncode == 0, start.stderr + Path(f"{sched}.workers.log").read_text()
        assert "start-dask: 2 worker(s) registered" in start.stderr, start.stderr
        assert Path(f"{sched}.hosts").read_text() == f"{host} slots=2\n"
        assert f"workers per node: {host}:2" in start.stderr
    finally:
        stop = _run(["bash", CLUSTER / "start-dask.sh", "stop", "--scheduler-file", sched], timeout=120, env=e)
    assert stop.returncode == 0, stop.stderr
    assert not Path(f"{sched}.hosts").exists() and not sched.exists()
    deadline = time.monotonic() + 30
    while any(_alive(p) for p in pids):
        assert time.monotonic() < deadline, f"processes {pids} still alive after stop"
        time.sleep(0.5)


def test_start_dask_mpirun_launcher_equals_threaded(mpi, problem, tmp_path):
    """start-dask.sh --launcher mpirun (its multi-node PBS path), then stop: no process left."""
    sched = tmp_path / "sched.json"
    e = env(MPIRUN_ARGS="--allow-run-as-root --oversubscribe")
    start = _run(["bash", CLUSTER / "start-dask.sh", "start", "--scheduler-file", sched, "--launcher", "mpirun",
                  "--workers", "2", "--interface", "lo", "--memory-limit", "1GiB", "--timeout", "120"],
                 timeout=180, cwd=tmp_path, env=e)
    pids = [int(p) for p in (tmp_path / "sched.json.pids").read_text().split()] if start.returncode == 0 else []
    try:
        assert start.returncode == 0, start.stderr
        assert start.stdout.strip().startswith("tcp://127.0.0.1:")
        fit = _run([sys.executable, "-m", "distsketch", "-q", "fit", problem["config"], "--store",
                    tmp_path / "launcher.zarr", "--scheduler-file", sched], timeout=180, env=e)
        assert fit.returncode == 0, fit.stderr
        assert "dask: 2 workers at" in fit.stderr
    finally:
        stop = _run(["bash", CLUSTER / "start-dask.sh", "stop", "--scheduler-file", sched], timeout=120, env=e)
    assert stop.returncode == 0, stop.stderr
    assert not sched.exists() and not (tmp_path / "sched.json.pids").exists()
    deadline = time.monotonic() + 30
    while any(_alive(p) for p in pids):
        assert time.monotonic() < deadline, f"processes {pids} still alive after stop"
        time.sleep(0.5)
    assert_same_model(tmp_path / "launcher.zarr", problem)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


# --------------------------------------------------------------------------- configuration


def test_shared_config_profiles_and_precedence(jobqueue, tmp_path):
    """cluster/distsketch.yaml: identical slurm/pbs keys; argument > environment > file > default."""
    import yaml

    cfg = yaml.safe_load((CLUSTER / "distsketch.yaml").read_text())
    assert cfg["distsketch"]["blas-threads"] == 1
    assert set(cfg["jobqueue"]["slurm"]) == set(cfg["jobqueue"]["pbs"])
    environ = cfg["distributed"]["nanny"]["pre-spawn-environ"]
    assert {environ[k] for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")} == {1}
    memory = cfg["distributed"]["worker"]["memory"]
    assert 0 < memory["target"] < memory["spill"] < memory["pause"] < memory["terminate"] < 1

    def job_script(*flags, **environ):
        out = _run([sys.executable, CLUSTER / "slurmcluster.py", "unused.toml", "--dry-run", "--interface", "lo",
                    *flags], timeout=120, cwd=tmp_path, env=env(**environ))
        assert out.returncode == 0, out.stderr
        return out.stdout

    from_file = job_script()
    assert "#SBATCH -J distsketch-worker" in from_file          # config file
    assert "#SBATCH --mem=4G" in from_file and "#SBATCH -t 01:00:00" in from_file
    assert "--death-timeout 60" in from_file                   # dask-jobqueue's default
    overridden = job_script("--memory", "3GiB", DASK_JOBQUEUE__SLURM__MEMORY="5GiB",
                            DASK_JOBQUEUE__SLURM__WALLTIME="00:07:00")
    assert "#SBATCH --mem=3G" in overridden                    # argument beats environment
    assert "#SBATCH -t 00:07:00" in overridden                 # environment beats the file
    assert "#SBATCH -J distsketch-worker" in overridden
