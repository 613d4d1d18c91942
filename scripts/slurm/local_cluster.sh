#!/usr/bin/env bash
# A one-node Slurm cluster in a folder, for tests: munge with its own key, slurmctld and slurmd
# with a generated slurm.conf (one node with more virtual CPUs than cores, no accounting).
#   scripts/slurm/local_cluster.sh start DIR [CPUS]   # prints "export SLURM_CONF=..." lines on success
#   scripts/slurm/local_cluster.sh stop DIR           # stops every daemon started in DIR
# Needs root and Debian's slurm-wlm and munge (scripts/setup.sh installs them). Exits 77 with a
# reason on stderr when the cluster cannot be started here (the tests then skip).
set -uo pipefail

skip() { echo "local_cluster: $*" >&2; exit 77; }

running() {  # a daemon that exited stays a zombie until init reaps it: that is not running
  local state
  state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) && [ -n "$state" ] && [ "$state" != Z ]
}

stop() {
  local dir=$1 pidfile pid
  # Jobs first, so that no job step (slurmstepd and its tasks) outlives slurmd.
  if [ -f "$dir/slurm.conf" ] && [ -f "$dir/slurmctld.pid" ]; then
    SLURM_CONF=$dir/slurm.conf timeout 5 scancel --full --quiet --partition=test 2>/dev/null
    for _ in $(seq 50); do
      [ -z "$(SLURM_CONF=$dir/slurm.conf timeout 2 squeue -h 2>/dev/null)" ] && break
      sleep 0.1
    done
  fi
  for pidfile in "$dir"/slurmd.pid "$dir"/slurmctld.pid "$dir"/munged.pid; do
    [ -f "$pidfile" ] || continue
    pid=$(cat "$pidfile" 2>/dev/null) || continue
    [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null
  done
  # Wait (bounded) for them to go, then make sure.
  for _ in $(seq 50); do
    local alive=0
    for pidfile in "$dir"/slurmd.pid "$dir"/slurmctld.pid "$dir"/munged.pid; do
      [ -f "$pidfile" ] && pid=$(cat "$pidfile" 2>/dev/null) && [ -n "$pid" ] && running "$pid" && alive=1
    done
    [ $alive = 0 ] && break
    sleep 0.1
  done
  for pidfile in "$dir"/slurmd.pid "$dir"/slurmctld.pid "$dir"/munged.pid; do
    [ -f "$pidfile" ] && pid=$(cat "$pidfile" 2>/dev/null) && [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null
    rm -f "$pidfile"
  done
  return 0
}

free_port() {  # a port nobody listens on (the kernel's choice, released at once)
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null ||
    echo $((20000 + RANDOM % 20000))
}

start() {
  local dir=$1 cpus=${2:-8}
  [ "$(id -u)" -eq 0 ] || skip "needs root to run slurmd (uid $(id -u))"
  for b in munged slurmctld slurmd sbatch srun scancel squeue; do
    command -v "$b" >/dev/null || skip "$b not found (scripts/setup.sh installs slurm-wlm and munge)"
  done
  mkdir -p "$dir"/{state,spool,log} || skip "cannot create $dir"
  dir=$(cd "$dir" && pwd)
  local host; host=$(hostname -s)

  # munge, with a key of its own and a socket in the folder (nothing system-wide is touched).
  dd if=/dev/urandom of="$dir/munge.key" bs=1024 count=1 status=none && chmod 400 "$dir/munge.key"
  munged --force --key-file="$dir/munge.key" --socket="$dir/munge.socket" --pid-file="$dir/munged.pid" \
    --log-file="$dir/log/munged.log" --seed-file="$dir/munge.seed" --num-threads=2 ||
    skip "munged did not start: $(tail -n 3 "$dir/log/munged.log" 2>/dev/null)"

  local proctrack=${TRIREME_SLURM_PROCTRACK:-cgroup}
  cat >"$dir/cgroup.conf" <<CONF
CgroupPlugin=cgroup/v1
CgroupMountpoint=/sys/fs/cgroup
ConstrainCores=no
ConstrainRAMSpace=no
CONF
  cat >"$dir/slurm.conf" <<CONF
ClusterName=trireme-test
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge.socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/$proctrack
TaskPlugin=task/none
SlurmdParameters=config_overrides
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
# Job ids name the jobs' cgroups: clusters started side by side (ctest -j) must not share them.
FirstJobId=$(( (RANDOM * 32768 + RANDOM) % 50000000 + 1000 ))
KillWait=2
MessageTimeout=10
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
  export SLURM_CONF=$dir/slurm.conf
  slurmctld -i || { stop "$dir"; skip "slurmctld did not start: $(tail -n 3 "$dir/log/slurmctld.log" 2>/dev/null)"; }
  slurmd -N "$host" || { stop "$dir"; skip "slurmd did not start: $(tail -n 3 "$dir/log/slurmd.log" 2>/dev/null)"; }
  # Up when the node is idle (bounded: a cluster that does not come up is a skip, not a hang).
  for _ in $(seq 100); do
    if sinfo -h -o %T 2>/dev/null | grep -qx idle; then
      echo "export SLURM_CONF=$dir/slurm.conf"
      return 0
    fi
    sleep 0.1
  done
  local why; why=$(tail -n 3 "$dir/log/slurmd.log" 2>/dev/null)
  stop "$dir"
  skip "the node did not become idle within 10 s: $why"
}

case "${1:-}" in
  start) start "$2" "${3:-8}" ;;
  stop) stop "$2" ;;
  *) echo "usage: $0 start|stop DIR [CPUS]" >&2; exit 2 ;;
esac
