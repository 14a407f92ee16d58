#!/usr/bin/env bash
# Stand up a real single-node SLURM (munge + slurmctld + slurmd on loopback) and Open MPI on
# this machine, and install the `hpc` extras into the project's virtualenv, so that
# tests/test_hpc.py runs against live daemons instead of skipping. Recipe: shared/HPC.md.
#
#   bash .ci/hpc-setup.sh          # set up (idempotent: a healthy running setup is reused, also
#                                  # while jobs run on the node: idle, mix and alloc are healthy)
#   bash .ci/hpc-setup.sh --stop   # scancel every job, stop the daemons by their pid files
#
# Run as root (CI runs it before `make test`). Exits non-zero only when it cannot set up; the
# HPC tests then skip with the reason. Environment:
#   DISTSKETCH_SLURM_DIR   state dir (slurm.conf, pid/spool/state/log files); /tmp/distsketch-slurm
#   DISTSKETCH_SLURM_CPUS  CPUs the node advertises (default: nproc, whatever OMP_NUM_THREADS says)
#   VENV                   the project's virtualenv (default: .venv; created with `make install`
#                          when missing)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
STATE=${DISTSKETCH_SLURM_DIR:-/tmp/distsketch-slurm}
VENV=${VENV:-.venv}
[[ $VENV = /* ]] || VENV="$ROOT/$VENV"
CONF="$STATE/slurm.conf"
export SLURM_CONF="$CONF"
START=$SECONDS

log() { printf 'hpc-setup: %s\n' "$*"; }
die() { printf 'hpc-setup: cannot set up: %s\n' "$*" >&2; exit 1; }

# Wait up to $1 seconds for the command "${@:2}" to succeed.
wait_for() {
    local timeout=$1 deadline
    shift
    deadline=$((SECONDS + timeout))
    until "$@" >/dev/null 2>&1; do
        ((SECONDS < deadline)) || return 1
        sleep 0.5
    done
}

# PID recorded in the pid file $1, if that process is alive and is the daemon the file names
# (slurmd.pid -> slurmd): a stale file never leads to signalling an unrelated process.
live_pid() {
    local pid name
    [[ -s $1 ]] || return 1
    pid=$(<"$1")
    name=$(basename "$1" .pid)
    [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null \
        && [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$name" ]] && printf '%s\n' "$pid"
}

# Stop the daemon whose pid file is $1 (TERM, then KILL after 15 s). Never by name.
stop_pidfile() {
    local pid
    pid=$(live_pid "$1") || { rm -f "$1"; return 0; }
    kill -TERM "$pid" 2>/dev/null || true
    if ! wait_for 15 eval "! kill -0 $pid"; then
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$1"
    log "stopped pid $pid ($1)"
}

slurm_up() { scontrol ping 2>/dev/null | grep -q 'is UP'; }
# The node is up: idle, or running jobs (mix: some CPUs, alloc: all; comp: a job completing).
# sinfo marks trouble with a suffix (idle* not responding, idle~ powered off, ...): not ready.
node_ready() {
    local state
    state=$(sinfo -h -o %t 2>/dev/null) || return 1
    [[ $state =~ ^(idle|mix|alloc|comp)$ ]]
}

stop_slurm() {
    if [[ -f $CONF ]] && command -v squeue >/dev/null && slurm_up; then
        local jobs
        jobs=$(squeue -h -o %i 2>/dev/null | tr '\n' ' ')
        if [[ -n ${jobs// /} ]]; then
            log "scancel $jobs"
            # shellcheck disable=SC2086  # one word per job id
            scancel $jobs || true
            wait_for 30 test -z "$(squeue -h -o %i 2>/dev/null)" || log "jobs still listed after 30 s"
        fi
    fi
    stop_pidfile "$STATE/slurmd.pid"
    stop_pidfile "$STATE/slurmctld.pid"
}

stop_all() {
    stop_slurm
    if [[ -f $STATE/munged.ours ]]; then  # only a munged this script started
        stop_pidfile /run/munge/munged.pid
        rm -f "$STATE/munged.ours"
    fi
}

if [[ ${1:-} == --stop ]]; then
    stop_all
    log "SLURM stopped (state kept in $STATE)"
    exit 0
elif [[ $# -gt 0 ]]; then
    echo "usage: $0 [--stop]" >&2
    exit 2
fi

[[ $(id -u) -eq 0 ]] || die "must run as root (installs packages, starts munged/slurmctld/slurmd)"

# ----------------------------------------------------------------------------- packages
PKGS=(slurmctld slurmd slurm-client munge openmpi-bin libopenmpi-dev)
missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
    command -v apt-get >/dev/null || die "apt-get not found; install ${missing[*]} by hand"
    log "apt-get install ${missing[*]}"
    # Packages must not start daemons themselves (no systemd here; we start them below).
    policy=/usr/sbin/policy-rc.d
    own_policy=0
    if [[ ! -e $policy ]]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && own_policy=1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt_ok=1
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}"; } \
        >"/tmp/distsketch-hpc-apt.log" 2>&1 || apt_ok=0
    ((own_policy)) && rm -f "$policy"
    ((apt_ok)) || { tail -n 20 /tmp/distsketch-hpc-apt.log >&2; die "apt-get install failed (log: /tmp/distsketch-hpc-apt.log)"; }
fi
for c in munged munge unmunge slurmctld slurmd sinfo sbatch scontrol mpirun; do
    command -v "$c" >/dev/null || die "$c not found after installing ${PKGS[*]}"
done

# ----------------------------------------------------------------------------- munge
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    if [[ ! -s /etc/munge/munge.key ]]; then
        mungekey --create --keyfile=/etc/munge/munge.key 2>/dev/null \
            || dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
        chown munge:munge /etc/munge/munge.key
        chmod 0400 /etc/munge/munge.key
    fi
    mkdir -p /run/munge  # no systemd: nothing creates it
    chown munge:munge /run/munge
    chmod 0755 /run/munge
    stale=$(live_pid /run/munge/munged.pid) || true
    [[ -z $stale ]] || die "munged (pid $stale) runs but 'munge -n | unmunge' fails"
    rm -f /run/munge/munged.pid
    runuser -u munge -- /usr/sbin/munged || die "munged did not start"
    mkdir -p "$STATE" && touch "$STATE/munged.ours"
    wait_for 10 sh -c 'munge -n | unmunge' || die "munge -n | unmunge fails after starting munged"
    log "munged started"
fi

# ----------------------------------------------------------------------------- host name
HOST=$(hostname -s)
if ! getent hosts "$HOST" >/dev/null; then
    printf '127.0.0.1 %s\n' "$HOST" >>/etc/hosts
    log "added '127.0.0.1 $HOST' to /etc/hosts"
fi

# ----------------------------------------------------------------------------- slurm.conf
# the machine's cores, not OMP_NUM_THREADS (GNU nproc honours it, and a test process may have it
# set to 1: the node would advertise 1 CPU and the configuration would differ, restarting SLURM)
CPUS=${DISTSKETCH_SLURM_CPUS:-$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)}
MEM_MB=$(awk '/^MemTotal:/ {printf "%d", $2 / 1024 * 0.8}' /proc/meminfo)
mkdir -p "$STATE"/{state,slurmd}
new_conf=$(cat <<EOF
# Written by .ci/hpc-setup.sh: a single-node SLURM on loopback for tests (shared/HPC.md).
ClusterName=distsketch
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# Lets the node advertise more CPUs than it has (DISTSKETCH_SLURM_CPUS).
SlurmdParameters=config_overrides
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmdSpoolDir=$STATE/slurmd
StateSaveLocation=$STATE/state
SlurmctldLogFile=$STATE/slurmctld.log
SlurmdLogFile=$STATE/slurmd.log
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$MEM_MB State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
EOF
)

running=0
if live_pid "$STATE/slurmctld.pid" >/dev/null && live_pid "$STATE/slurmd.pid" >/dev/null \
    && [[ -f $CONF && $(<"$CONF") == "$new_conf" ]] && slurm_up; then
    running=1
fi

# Client commands (sinfo, sbatch, dask-jobqueue's sbatch calls) read /etc/slurm/slurm.conf unless
# SLURM_CONF is set: point it at ours, but never replace a site's own configuration.
mkdir -p /etc/slurm
if [[ ! -e /etc/slurm/slurm.conf || $(readlink /etc/slurm/slurm.conf) == "$CONF" ]]; then
    ln -sfn "$CONF" /etc/slurm/slurm.conf
    conf_note="/etc/slurm/slurm.conf -> $CONF"
else
    conf_note="/etc/slurm/slurm.conf is the site's own: export SLURM_CONF=$CONF to use this one"
    log "$conf_note"
fi

# ----------------------------------------------------------------------------- daemons
if ((running)); then
    log "slurmctld and slurmd already running with this configuration"
else
    stop_slurm
    printf '%s\n' "$new_conf" >"$CONF"
    slurmctld -c -f "$CONF" || die "slurmctld did not start (log: $STATE/slurmctld.log)"
    wait_for 30 slurm_up || die "scontrol ping: controller not UP after 30 s (log: $STATE/slurmctld.log)"
    slurmd -f "$CONF" || die "slurmd did not start (log: $STATE/slurmd.log)"
fi
# A reused setup may be running jobs (a test's, a user's): mix / alloc is healthy too.
if ! wait_for 60 node_ready; then
    state=$(sinfo -h -o %t 2>/dev/null || true)
    if [[ $state =~ ^(down|drain|drng|unk) ]]; then
        scontrol update NodeName="$HOST" State=RESUME || true
    fi
    wait_for 30 node_ready || die "node $HOST is '$state', not idle, mix or alloc (logs: $STATE/slurm*.log)"
fi

# ----------------------------------------------------------------------------- python extras
if [[ ! -x $VENV/bin/python ]]; then
    log "no virtualenv at $VENV: make install"
    make -C "$ROOT" install >/dev/null || die "make install failed"
fi
# The `hpc` extra of pyproject.toml (same version bounds), without reinstalling the package.
mapfile -t HPC_REQS < <("$VENV/bin/python" - "$ROOT/pyproject.toml" <<'PY' || true
import sys, tomllib
with open(sys.argv[1], "rb") as f:
    print("\n".join(tomllib.load(f)["project"]["optional-dependencies"]["hpc"]))
PY
)
((${#HPC_REQS[@]})) || HPC_REQS=(dask-jobqueue dask-mpi mpi4py)
if ! "$VENV/bin/python" -c 'import dask_jobqueue, dask_mpi, mpi4py' 2>/dev/null; then
    log "pip install ${HPC_REQS[*]}"
    "$VENV/bin/python" -m pip install --quiet "${HPC_REQS[@]}" || die "pip install ${HPC_REQS[*]} failed"
fi
"$VENV/bin/python" -c 'from mpi4py import MPI; MPI.Get_library_version()' >/dev/null 2>&1 \
    || die "mpi4py cannot load the MPI library"

# ----------------------------------------------------------------------------- summary
log "ready in $((SECONDS - START)) s"
printf '  %-10s %s\n' \
    munge "$(munge -n | unmunge | awk '/^STATUS/ {print $2}')" \
    slurm "$(sinfo -V) on $HOST: partition $(sinfo -h -o '%P %t, %c CPUs, %m MB')" \
    config "$conf_note" \
    state "$STATE (logs slurmctld.log, slurmd.log)" \
    mpi "$(mpirun --version 2>/dev/null | head -n 1)" \
    python "$("$VENV/bin/python" -c 'import dask_jobqueue, dask_mpi, mpi4py; print(f"dask-jobqueue {dask_jobqueue.__version__}, dask-mpi {dask_mpi.__version__}, mpi4py {mpi4py.__version__}")')" \
    stop "bash .ci/hpc-setup.sh --stop"
