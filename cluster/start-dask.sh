#!/usr/bin/env bash
# Start a dask scheduler and N workers that meet through a scheduler file, or stop them.
#
#   cluster/start-dask.sh [start] --scheduler-file FILE [--workers N] [--threads T]
#                         [--memory-limit M] [--interface IF] [--local-directory DIR]
#                         [--launcher auto|srun|mpirun|local] [--timeout S] [--gpus]
#   cluster/start-dask.sh stop --scheduler-file FILE
#
# `start` returns once all N workers have registered and prints the scheduler address; then run
# `distsketch fit CONFIG --scheduler-file FILE`. Launchers (auto picks the first that applies):
#   srun    inside a SLURM allocation (SLURM_JOB_ID set): `srun --overlap` steps, the scheduler
#           on the first node, the workers spread over the allocation's tasks;
#   mpirun  inside a PBS job spanning several nodes: workers started by `mpirun -n N`, placed
#           per node through a host file (the workers themselves do not use MPI);
#   local   anywhere else: background processes on this machine.
# Workers inside a PBS job (no --workers): per node, its CPUs / T, at least 1, where a node's
# CPUs are NCPUS (PBS Pro / OpenPBS: the chunk's ncpus), else PBS_NUM_PPN (Torque), else its
# lines in $PBS_NODEFILE (Torque lists a node once per CPU; PBS Pro once per MPI process, which
# is why NCPUS comes first); in all, that times the distinct nodes of $PBS_NODEFILE. mpirun gets
# a host file, FILE.hosts, with each node and its worker slots (Open MPI `NODE slots=K`,
# MPICH / Intel MPI `NODE:K`, told apart by `mpirun --version`) and K workers per node
# (Open MPI `--hostfile F --map-by ppr:K:node --bind-to none`, Hydra `-f F -ppn K`): an mpirun
# built without PBS (TM) support, like Debian's Open MPI, would otherwise start every worker on
# the first node. With --workers N the N workers are spread evenly over the nodes.
# --gpus: one GPU per worker for EngineOptions(device="cuda") (pip install "distsketch[gpu]"):
# srun gives each worker task its own GPU (SRUN_GPU_ARGS, default --gpus-per-task=1: SLURM sets
# CUDA_VISIBLE_DEVICES; a site whose srun wants --gres=gpu:1 per step sets SRUN_GPU_ARGS);
# mpirun and local set CUDA_VISIBLE_DEVICES to the worker's node-local rank (local: 0…N−1, so
# N must not exceed the GPUs of this machine); workers get DASK_DISTSKETCH__DEVICE=cuda.
# The processes outlive this script; `stop` shuts them down through the scheduler, then ends the
# recorded process ids (FILE.pids). Logs: FILE.scheduler.log, FILE.workers.log. Sourced
# (`source cluster/start-dask.sh`), the script only defines its functions (pbs_slots, …).
#
# Environment: PYTHON (interpreter with distsketch and distributed; default python3),
# MPIRUN_ARGS (extra mpirun flags, e.g. "--allow-run-as-root --oversubscribe"; a host file,
# --host or mapping flag there replaces the host file and mapping above, --bind-to the binding),
# SRUN_ARGS (extra srun flags for the worker step). Workers read the dask configuration
# (DASK_CONFIG / ~/.config/dask, see cluster/distsketch.yaml) for memory fractions and BLAS threads.

usage() { sed -n '2,8p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }
die() { printf 'start-dask: %s\n' "$*" >&2; exit 1; }
log() { printf 'start-dask: %s\n' "$*" >&2; }

# ------------------------------------------------------------------------ PBS: workers per node

# The job's nodes: the distinct names in $PBS_NODEFILE, in their order.
pbs_nodes() { awk 'NF && !seen[$1]++ { print $1 }' "$PBS_NODEFILE"; }

# CPUs the job holds on node $1: NCPUS (PBS Pro / OpenPBS), else PBS_NUM_PPN (Torque), else the
# node's lines in $PBS_NODEFILE (one per CPU on Torque).
pbs_cpus() {
    if [[ ${NCPUS:-} =~ ^[1-9][0-9]*$ ]]; then
        echo "$NCPUS"
    elif [[ ${PBS_NUM_PPN:-} =~ ^[1-9][0-9]*$ ]]; then
        echo "$PBS_NUM_PPN"
    else
        awk -v node="$1" '$1 == node { n++ } END { print n + 0 }' "$PBS_NODEFILE"
    fi
}

# "NODE K" for each node of the job: K workers of $1 threads, K = the node's CPUs / $1 (at
# least 1); or, given a total $2, $2 workers spread evenly (the first nodes take the remainder,
# nodes left without a worker are not listed).
pbs_slots() {
    local threads=$1 total=${2:-} nodes node n i=0 k
    mapfile -t nodes < <(pbs_nodes)
    n=${#nodes[@]}
    ((n)) || die "$PBS_NODEFILE lists no node"
    for node in "${nodes[@]}"; do
        if [[ -n $total ]]; then
            k=$((total / n + (i < total % n ? 1 : 0)))
        else
            k=$(($(pbs_cpus "$node") / threads))
            ((k >= 1)) || k=1
        fi
        i=$((i + 1))
        if ((k > 0)); then echo "$node $k"; fi
    done
}

# The MPI behind `mpirun`: openmpi, hydra (MPICH, Intel MPI, MVAPICH) or unknown.
mpi_flavour() {
    local version
    version=$(mpirun --version 2>&1 </dev/null || true)
    case $version in
        *"Open MPI"* | *OpenRTE*) echo openmpi ;;
        *HYDRA* | *Hydra* | *MPICH* | *"Intel(R) MPI"* | *MVAPICH*) echo hydra ;;
        *) echo unknown ;;
    esac
}

# Write the host file $2 for the MPI flavour $1 from "NODE K" lines on stdin and print, one a
# line, the mpirun flags that use it and start K workers on each node.
mpi_placement() {
    local flavour=$1 file=$2 node k per_node=() uniform=1
    : >"$file"
    while read -r node k; do
        case $flavour in
            openmpi) echo "$node slots=$k" ;;
            hydra) echo "$node:$k" ;;
            *) die "no host file syntax known for mpirun '$flavour'" ;;
        esac >>"$file"
        per_node+=("$k")
    done
    ((${#per_node[@]})) || die "no node to place workers on"
    for k in "${per_node[@]}"; do [[ $k == "${per_node[0]}" ]] || uniform=0; done
    k=${per_node[0]}
    case $flavour in
        # uneven slots: mapping by slot (the default) fills each node to its slots
        openmpi) printf '%s\n' --hostfile "$file"; ((uniform)) && printf '%s\n' --map-by "ppr:$k:node" ;;
        hydra) printf '%s\n' -f "$file"; ((uniform)) && printf '%s\n' -ppn "$k" ;;
    esac
    return 0
}

# The mpirun flags, one a line, placing the workers: mpi_placement's host file $2 and mapping
# for the "NODE K" lines on stdin (none outside PBS: no lines), unless MPIRUN_ARGS has its own
# host file, host list or mapping, or the MPI flavour $1 is unknown; for Open MPI also
# `--bind-to none` unless MPIRUN_ARGS binds (it binds each process to one core when np <= 2,
# and a worker runs several threads).
mpirun_flags() {
    local flavour=$1 file=$2 lines own args=" ${MPIRUN_ARGS:-} "
    own='[[:space:]](-?-(hostfile|machinefile|host|map-by|npernode)|-H|-f|-ppn|-perhost)([[:space:]=]|$)'
    mapfile -t lines < <(grep -v '^[[:space:]]*$' || true)
    rm -f "$file"
    if ((${#lines[@]})) && [[ $flavour != unknown ]] && ! [[ $args =~ $own ]]; then
        printf '%s\n' "${lines[@]}" | mpi_placement "$flavour" "$file"
    fi
    if [[ $flavour == openmpi && ! $args =~ [[:space:]]-?-bind-to[[:space:]=] ]]; then
        printf '%s\n' --bind-to none
    fi
    return 0
}

# --------------------------------------------------------------------------------- stop
stop_cluster() {
    if [[ -f $SCHED_FILE ]]; then
        # Scheduler and workers leave cleanly; workers log CommClosedError meanwhile (harmless).
        "$PYTHON" - "$SCHED_FILE" <<'PY' 2>/dev/null || log "the scheduler did not answer; ending the processes"
import sys
from distributed import Client
with Client(scheduler_file=sys.argv[1], timeout=10) as client:
    client.shutdown()
PY
    fi
    if [[ -f $PIDS ]]; then
        local pids pid alive
        mapfile -t pids <"$PIDS"
        for _ in $(seq 40); do  # up to 20 s for a clean exit
            alive=()
            for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive+=("$pid"); done
            ((${#alive[@]})) || break
            sleep 0.5
        done
        for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    fi
    rm -f "$SCHED_FILE" "$PIDS" "$HOSTS"
    log "stopped"
}


in_pbs() { [[ -n ${PBS_NODEFILE:-} && -r ${PBS_NODEFILE:-} ]]; }

main() {
MODE=start
if [[ ${1:-} == start || ${1:-} == stop ]]; then MODE=$1; shift; fi
SCHED_FILE=""
WORKERS=""
THREADS=1
MEMORY_LIMIT=auto
INTERFACE=""
LOCAL_DIR=""
LAUNCHER=auto
TIMEOUT=300
GPUS=0
PYTHON=${PYTHON:-python3}
while (($#)); do
    case $1 in
        --scheduler-file) SCHED_FILE=${2:?}; shift 2 ;;
        --workers) WORKERS=${2:?}; shift 2 ;;
        --threads) THREADS=${2:?}; shift 2 ;;
        --memory-limit) MEMORY_LIMIT=${2:?}; shift 2 ;;
        --interface) INTERFACE=${2:?}; shift 2 ;;
        --local-directory) LOCAL_DIR=${2:?}; shift 2 ;;
        --launcher) LAUNCHER=${2:?}; shift 2 ;;
        --timeout) TIMEOUT=${2:?}; shift 2 ;;
        --gpus) GPUS=1; shift ;;
        -h | --help) usage ;;
        *) printf 'start-dask: unknown argument %q\n' "$1" >&2; usage ;;
    esac
done
[[ -n $SCHED_FILE ]] || die "--scheduler-file FILE is required"
PIDS="$SCHED_FILE.pids"
HOSTS="$SCHED_FILE.hosts"

if [[ $MODE == stop ]]; then
    stop_cluster
    exit 0
fi

# --------------------------------------------------------------------------------- start
if [[ $LAUNCHER == auto ]]; then
    if [[ -n ${SLURM_JOB_ID:-} ]] && command -v srun >/dev/null; then
        LAUNCHER=srun
    elif in_pbs && (($(pbs_nodes | wc -l) > 1)); then
        LAUNCHER=mpirun
    else
        LAUNCHER=local
    fi
fi
[[ -z $WORKERS || $WORKERS =~ ^[1-9][0-9]*$ ]] || die "--workers: expected a positive integer, got '$WORKERS'"
[[ $THREADS =~ ^[1-9][0-9]*$ ]] || die "--threads: expected a positive integer, got '$THREADS'"
slots=()  # "NODE K" per node (PBS)
if in_pbs && [[ $LAUNCHER == mpirun || $LAUNCHER == local ]]; then
    mapfile -t slots < <(pbs_slots "$THREADS" "$WORKERS")
    ((${#slots[@]})) || die "no worker slots from $PBS_NODEFILE"
    # local: the workers of this (the first) node only
    [[ $LAUNCHER == local ]] && slots=("${slots[0]}")
fi
if [[ -z $WORKERS ]]; then
    case $LAUNCHER in
        srun) WORKERS=${SLURM_NTASKS:-1} ;;
        *)
            WORKERS=0
            for s in "${slots[@]}"; do WORKERS=$((WORKERS + ${s##* })); done
            ((WORKERS)) || WORKERS=1
            ;;
    esac
fi
"$PYTHON" -c 'import distributed' 2>/dev/null || die "$PYTHON cannot import distributed (set PYTHON)"

if [[ -f $PIDS ]]; then
    while read -r pid; do
        kill -0 "$pid" 2>/dev/null && die "$PIDS lists running process $pid: stop that cluster first"
    done <"$PIDS"
fi
mkdir -p "$(dirname "$SCHED_FILE")"
rm -f "$SCHED_FILE" "$PIDS" "$HOSTS"  # a stale file would point the workers at a dead scheduler

net=()
[[ -z $INTERFACE ]] || net=(--interface "$INTERFACE")
worker_args=(-m distributed.cli.dask_worker --scheduler-file "$SCHED_FILE" --nworkers 1
             --nthreads "$THREADS" --memory-limit "$MEMORY_LIMIT" "${net[@]}")
[[ -z $LOCAL_DIR ]] || worker_args+=(--local-directory "$LOCAL_DIR")
sched_args=(-m distributed.cli.dask_scheduler --scheduler-file "$SCHED_FILE" --port 0 "${net[@]}")
# one GPU per worker: the worker command runs through a wrapper that picks the GPU of its
# node-local rank (srun sets CUDA_VISIBLE_DEVICES itself with --gpus-per-task)
gpu_wrap=()
if ((GPUS)); then
    export DASK_DISTSKETCH__DEVICE=cuda
    gpu_wrap=(env DASK_DISTSKETCH__DEVICE=cuda bash -c
              'r=${OMPI_COMM_WORLD_LOCAL_RANK:-${MPI_LOCALRANKID:-${PMI_LOCAL_RANK:-}}}
               [[ -z $r ]] || export CUDA_VISIBLE_DEVICES=$r; exec "$@"' gpu-worker)
fi
SLOG="$SCHED_FILE.scheduler.log"
WLOG="$SCHED_FILE.workers.log"

case $LAUNCHER in
    srun)
        # --overlap: the steps share the allocation's CPUs (and the batch script's), otherwise
        # the worker step waits forever for CPUs held by the scheduler step.
        srun --overlap --nodes=1 --ntasks=1 --input=none "$PYTHON" "${sched_args[@]}" >"$SLOG" 2>&1 &
        echo $! >>"$PIDS"
        gpu_srun=""
        ((GPUS)) && gpu_srun=${SRUN_GPU_ARGS:---gpus-per-task=1}
        # shellcheck disable=SC2086  # SRUN_ARGS, SRUN_GPU_ARGS: several flags
        srun --overlap --ntasks="$WORKERS" --cpus-per-task="$THREADS" $gpu_srun \
            --input=none ${SRUN_ARGS:-} "$PYTHON" "${worker_args[@]}" >"$WLOG" 2>&1 &
        echo $! >>"$PIDS"
        ;;
    mpirun)
        command -v mpirun >/dev/null || die "mpirun not found"
        flavour=$(mpi_flavour)
        mapfile -t placement < <(printf '%s\n' "${slots[@]}" | mpirun_flags "$flavour" "$HOSTS")
        if [[ -s $HOSTS ]]; then
            log "mpirun ($flavour): workers per node: ${slots[*]/ /:} (host file $HOSTS)"
        elif ((${#slots[@]})); then
            log "mpirun ($flavour): no host file (placement from MPIRUN_ARGS, or an unknown MPI)"
        fi
        "$PYTHON" "${sched_args[@]}" </dev/null >"$SLOG" 2>&1 &
        echo $! >>"$PIDS"
        # shellcheck disable=SC2086  # MPIRUN_ARGS: several flags
        mpirun -n "$WORKERS" "${placement[@]}" ${MPIRUN_ARGS:-} "${gpu_wrap[@]}" "$PYTHON" "${worker_args[@]}" \
            </dev/null >"$WLOG" 2>&1 &
        echo $! >>"$PIDS"
        ;;
    local)
        "$PYTHON" "${sched_args[@]}" </dev/null >"$SLOG" 2>&1 &
        echo $! >>"$PIDS"
        : >"$WLOG"
        for i in $(seq 0 $((WORKERS - 1))); do
            if ((GPUS)); then
                CUDA_VISIBLE_DEVICES=$i DASK_DISTSKETCH__DEVICE=cuda \
                    "$PYTHON" "${worker_args[@]}" </dev/null >>"$WLOG" 2>&1 &
            else
                "$PYTHON" "${worker_args[@]}" </dev/null >>"$WLOG" 2>&1 &
            fi
            echo $! >>"$PIDS"
        done
        ;;
    *) die "--launcher: expected auto, srun, mpirun or local, got '$LAUNCHER'" ;;
esac
log "$LAUNCHER: scheduler and $WORKERS worker(s) x $THREADS thread(s), memory limit $MEMORY_LIMIT$( ((GPUS)) && echo ', one GPU each')"

# Wait for the scheduler file, then for every worker; fail early if a launcher process died.
deadline=$((SECONDS + TIMEOUT))
until [[ -s $SCHED_FILE ]]; do
    if ! kill -0 "$(head -n 1 "$PIDS")" 2>/dev/null; then
        tail -n 20 "$SLOG" >&2
        die "the scheduler exited (log: $SLOG)"
    fi
    ((SECONDS < deadline)) || die "no scheduler file after ${TIMEOUT} s (log: $SLOG)"
    sleep 0.2
done
if ! "$PYTHON" - "$SCHED_FILE" "$WORKERS" "$((deadline - SECONDS))" <<'PY'
import sys
from distributed import Client
path, n, timeout = sys.argv[1], int(sys.argv[2]), max(int(sys.argv[3]), 5)
with Client(scheduler_file=path, timeout=timeout) as client:
    client.wait_for_workers(n, timeout=timeout)
    print(client.scheduler.address)
    print(f"start-dask: {n} worker(s) registered; dashboard {client.dashboard_link}", file=sys.stderr)
PY
then
    tail -n 20 "$WLOG" >&2
    stop_cluster
    die "the workers did not register within ${TIMEOUT} s (log: $WLOG)"
fi
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
    set -euo pipefail
    main "$@"
fi
