#!/usr/bin/env bash
# A Slurm cluster on this one machine, for loom's Slurm executor and its tests (docs/slurm.md):
# a private munged, slurmctld and one slurmd per node (MULTIPLE_SLURMD: `slurmd -N NAME`, a port
# each), a `rollout` and a `train` partition, 8 GPUs per node as GRES on character devices, and
# power saving wired to scripts that stop and start a node's slurmd (standing in for a cloud's
# start/stop instance calls).
#
#   slurm-cluster.sh up   DIR [BASE_PORT [ROLLOUT_NODES [TRAIN_NODES]]] [--boot-s N]
#   slurm-cluster.sh down DIR
#   slurm-cluster.sh env  DIR          prints `export SLURM_CONF=...`
#
# --boot-s N: a powered-down node takes N seconds to come up (the ResumeProgram waits N s before
# it starts the node's slurmd, like a cloud instance booting; default 2, at least 2), and
# ResumeTimeout is N + 20 s. Every ResumeProgram and SuspendProgram call slurmctld makes is
# logged in DIR/log/power.log (`EPOCH resume|suspend NODES`), as a cloud would bill them.
# `down` first cancels every job of the cluster and waits for them to end (at most 15 s), then stops the daemons, then ends any step daemon (slurmstepd) or srun of
# this cluster still running (found by this cluster's SLURM_CONF in their environment).
#
# `up` is idempotent: a cluster already up in DIR is left as it is (its boot time is updated). Every daemon is stopped by the
# pid it wrote, never by name. Ports BASE_PORT (slurmctld), BASE_PORT+1.. (one per node); default
# 17000. Node names are r1..rN, t1..tM prefixed with `l<BASE_PORT>` so that two clusters on one
# machine never share a name (slurmd's spool and pid files are per name).
# Exit status: 0 up/down, 1 when Slurm could not start (the reason on stderr), 2 bad usage.
set -euo pipefail

usage() { echo "usage: slurm-cluster.sh up|down|env DIR [BASE_PORT [ROLLOUT_NODES [TRAIN_NODES]]] [--boot-s N]" >&2; exit 2; }
boot=2
args=()
while [ $# -gt 0 ]; do
  case $1 in
    --boot-s) [ $# -ge 2 ] && [[ $2 =~ ^[0-9]+$ ]] || { echo "slurm-cluster: --boot-s needs a whole number of seconds" >&2; exit 2; }
      boot=$2; shift 2 ;;
    --boot-s=*) boot=${1#--boot-s=}; [[ $boot =~ ^[0-9]+$ ]] || { echo "slurm-cluster: --boot-s needs a whole number of seconds" >&2; exit 2; }
      shift ;;
    *) args+=("$1"); shift ;;
  esac
done
set -- "${args[@]}"
[ $# -ge 2 ] || usage
[ "$boot" -ge 2 ] || boot=2
cmd=$1
dir=$(mkdir -p "$2" && cd "$2" && pwd)
base=${3:-17000}
nroll=${4:-2}
ntrain=${5:-2}
conf=$dir/slurm.conf
for v in "$base" "$nroll" "$ntrain"; do [[ $v =~ ^[0-9]+$ ]] || usage; done
resume_timeout=$((boot + 20))

node_names() { # all node names, one a line
  local i
  for ((i = 1; i <= nroll; i++)); do echo "n${base}r$i"; done
  for ((i = 1; i <= ntrain; i++)); do echo "n${base}t$i"; done
}

alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

stop_pid() { # pidfile: TERM, wait up to 10 s, then KILL
  local f=$1 p
  [ -s "$f" ] || return 0
  p=$(cat "$f")
  if kill -0 "$p" 2>/dev/null; then
    kill -TERM "$p" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
  fi
  rm -f "$f"
}

write_conf() {
  mkdir -p "$dir"/{spool,state,run,log,gpu,munge}
  chmod 0755 "$dir/munge"
  for i in 0 1 2 3 4 5 6 7; do
    [ -c "$dir/gpu/nvidia$i" ] || mknod -m 666 "$dir/gpu/nvidia$i" c 1 3
  done
  local names rn tn
  names=$(node_names | paste -sd,)
  rn=$(node_names | grep r | paste -sd,)
  tn=$(node_names | grep t | paste -sd,)
  # power: the node's slurmd is this cluster's "instance"; resume starts it, suspend stops it
  cat >"$dir/resume.sh" <<RES
#!/bin/bash
# ResumeProgram: start each node's slurmd as a freshly booted host (see docs/slurm.md).
export SLURM_CONF=$conf PATH=/usr/sbin:/usr/bin:/sbin:/bin
echo "\$(date +%s.%N) resume \$1" >>$dir/log/power.log   # slurmctld's power-up call, as a cloud bills it
sleep "\$(cat $dir/boot-s 2>/dev/null || echo 2)"   # the instance boots (slurm-cluster.sh --boot-s)
for n in \$(scontrol show hostnames "\$1"); do
  # a slurmd still stopping from the last power down holds the node's port and pid file
  f=$dir/run/slurmd-\$n.pid
  for i in \$(seq 100); do [ -s "\$f" ] && kill -0 "\$(cat "\$f")" 2>/dev/null || break; sleep 0.1; done
  perl -MPOSIX -e 'sigprocmask(SIG_SETMASK, POSIX::SigSet->new); exec @ARGV' -- \\
    unshare --time --fork --boottime=-\$(cut -d. -f1 /proc/uptime) \\
    slurmd -f $conf -N "\$n" </dev/null >>$dir/log/resume.log 2>&1 &
done
RES
  cat >"$dir/suspend.sh" <<SUS
#!/bin/bash
# SuspendProgram: stop each node's slurmd (by its pid file).
export SLURM_CONF=$conf PATH=/usr/sbin:/usr/bin:/sbin:/bin
echo "\$(date +%s.%N) suspend \$1" >>$dir/log/power.log
for n in \$(scontrol show hostnames "\$1"); do
  f=$dir/run/slurmd-\$n.pid
  [ -s "\$f" ] && kill -TERM "\$(cat "\$f")" 2>/dev/null
done
exit 0
SUS
  chmod +x "$dir/resume.sh" "$dir/suspend.sh"
  cat >"$conf" <<CONF
ClusterName=loom$base
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$base
CommunicationParameters=NoCtldInAddrAny,NoInAddrAny
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu,shard
SlurmdParameters=config_overrides
ReturnToService=2
MinJobAge=600
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0
JobCompType=jobcomp/filetxt
JobCompLoc=$dir/log/jobcomp.txt
AccountingStorageType=accounting_storage/none
MailProg=/bin/true
StateSaveLocation=$dir/state
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdSpoolDir=$dir/spool/%n
SlurmdPidFile=$dir/run/slurmd-%n.pid
SlurmdLogFile=$dir/log/slurmd-%n.log
PrivateData=cloud
SuspendTime=86400
SuspendProgram=$dir/suspend.sh
ResumeProgram=$dir/resume.sh
SuspendTimeout=2
ResumeTimeout=$resume_timeout
ResumeRate=0
SuspendRate=0
SlurmctldParameters=power_save_interval=1,power_save_min_interval=0
NodeName=DEFAULT CPUs=8 RealMemory=4000 Gres=gpu:8,shard:64 State=UNKNOWN
CONF
  local i=0 n
  for n in $(node_names); do
    i=$((i + 1))
    echo "NodeName=$n NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((base + i))" >>"$conf"
  done
  cat >>"$conf" <<CONF
PartitionName=rollout Nodes=$rn Default=YES State=UP OverSubscribe=FORCE:8
PartitionName=train Nodes=$tn State=UP OverSubscribe=FORCE:8
CONF
  {
    echo "AutoDetect=off"
    echo "NodeName=$names Name=gpu File=$dir/gpu/nvidia[0-7]"
    echo "NodeName=$names Name=shard Count=64"
  } >"$dir/gres.conf"
}

up() {
  command -v slurmctld >/dev/null && command -v munged >/dev/null ||
    { echo "slurm-cluster: slurmctld or munged not installed (scripts/deps.sh)" >&2; exit 1; }
  export SLURM_CONF=$conf
  echo "$boot" >"$dir/boot-s"
  if alive "$dir/run/slurmctld.pid" && timeout 2 scontrol ping >/dev/null 2>&1; then
    if ! grep -qx "ResumeTimeout=$resume_timeout" "$conf"; then
      sed -i "s/^ResumeTimeout=.*/ResumeTimeout=$resume_timeout/" "$conf"
      timeout 10 scontrol reconfigure >/dev/null 2>&1 || true
    fi
    start_nodes
    return 0
  fi
  write_conf
  if ! alive "$dir/run/munged.pid"; then
    [ -s "$dir/munge/munge.key" ] || { head -c 1024 /dev/urandom >"$dir/munge/munge.key"; chmod 0400 "$dir/munge/munge.key"; }
    munged --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
      --pid-file="$dir/run/munged.pid" --log-file="$dir/log/munged.log" \
      --seed-file="$dir/munge/munge.seed" -f 2>>"$dir/log/munged.err" ||
      { echo "slurm-cluster: munged did not start: $(tail -1 "$dir/log/munged.err")" >&2; exit 1; }
  fi
  rm -f "$dir/run/slurmctld.pid"
  slurmctld -f "$conf" -c 2>>"$dir/log/slurmctld.err" ||
    { echo "slurm-cluster: slurmctld failed: $(tail -3 "$dir/log/slurmctld.log" 2>/dev/null)" >&2; exit 1; }
  for _ in $(seq 100); do timeout 2 scontrol ping >/dev/null 2>&1 && break; sleep 0.1; done
  timeout 2 scontrol ping >/dev/null 2>&1 ||
    { echo "slurm-cluster: slurmctld not answering: $(tail -3 "$dir/log/slurmctld.log" 2>/dev/null)" >&2; exit 1; }
  start_nodes
}

start_nodes() {
  local n
  for n in $(node_names); do
    alive "$dir/run/slurmd-$n.pid" || slurmd -f "$conf" -N "$n" 2>>"$dir/log/slurmd.err" ||
      { echo "slurm-cluster: slurmd $n failed" >&2; exit 1; }
  done
  local want
  want=$(node_names | wc -l)
  for _ in $(seq 150); do
    [ "$(timeout 2 sinfo -h -N -t idle,mixed,alloc -o %N 2>/dev/null | sort -u | wc -l)" -ge "$want" ] && return 0
    sleep 0.1
  done
  echo "slurm-cluster: nodes not idle: $(timeout 2 sinfo -h -N -o '%N %T' 2>&1 | paste -sd' ')" >&2
  exit 1
}

stop_slurmds() { # all at once: each takes about 2 s to stop
  local f
  for f in "$dir"/run/slurmd-*.pid; do [ -e "$f" ] && stop_pid "$f" & done
  wait
}

cancel_jobs() { # every job of the cluster cancelled; wait until none is left (at most 15 s)
  export SLURM_CONF=$conf
  timeout 2 scontrol ping >/dev/null 2>&1 || return 0
  local ids
  ids=$(timeout 5 squeue -h -a -o %i 2>/dev/null | paste -sd' ')
  [ -n "$ids" ] || return 0
  # shellcheck disable=SC2086
  timeout 10 scancel $ids 2>/dev/null || true
  for _ in $(seq 150); do
    [ -z "$(timeout 5 squeue -h -a -t running,completing,pending,configuring -o %i 2>/dev/null)" ] && return 0
    sleep 0.1
  done
}

ours() { # pids of processes named $1 whose environment carries this cluster's SLURM_CONF
  local p
  for p in $(pgrep -x "$1" 2>/dev/null); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "SLURM_CONF=$conf" && echo "$p"
  done
  return 0
}

sweep() { # step daemons and sruns of this cluster that outlived it: TERM, then KILL after 3 s
  local pids
  pids=$( { ours slurmstepd; ours srun; } | paste -sd' ')
  [ -n "$pids" ] || return 0
  # shellcheck disable=SC2086
  kill -TERM $pids 2>/dev/null || true
  for _ in $(seq 30); do
    # shellcheck disable=SC2086
    kill -0 $pids 2>/dev/null || return 0
    sleep 0.1
  done
  # shellcheck disable=SC2086
  kill -KILL $pids 2>/dev/null || true
}

down() {
  cancel_jobs
  stop_slurmds
  stop_pid "$dir/run/slurmctld.pid"
  stop_slurmds # any a ResumeProgram started after the first pass listed the pid files
  sweep
  stop_pid "$dir/run/munged.pid"
  return 0
}

case $cmd in
  up) up ;;
  down) down ;;
  env) echo "export SLURM_CONF=$conf" ;;
  *) usage ;;
esac
