#!/usr/bin/env bash
# A throwaway single-node Slurm on 127.0.0.1 for tests: slurmctld and slurmd in the foreground
# under this shell, auth/none, no cgroups, all state in one temporary directory.
#   source scripts/local-slurm.sh; slurm_start DIR; srun ...; slurm_stop
# slurm_start exports SLURM_CONF and waits until the node is idle; slurm_stop cancels what is
# still queued or running, then kills the two daemons by the PIDs it started them with. Needs
# root (auth/none runs jobs as the caller).

# N distinct free ports on 127.0.0.1 (held together while chosen, so they differ).
slurm_free_ports() {
  python3 - "${1:-1}" <<'PY'
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
}

# What both test Slurms share: no authentication, no cgroups, no accounting, root everywhere.
# sched/backfill: Slurm schedules heterogeneous jobs (#SBATCH hetjob) only through it.
slurm_conf_policy() {
  printf '%s\n' AuthType=auth/none CredType=cred/none SlurmUser=root SlurmdUser=root \
    ProctrackType=proctrack/linuxproc TaskPlugin=task/none JobAcctGatherType=jobacct_gather/none \
    AccountingStorageType=accounting_storage/none SchedulerType=sched/backfill SelectType=select/cons_tres \
    SelectTypeParameters=CR_Core MpiDefault=none ReturnToService=2 SlurmdParameters=config_overrides KillWait=5
}

slurm_start() {
  local dir=$1
  mkdir -p "$dir/state" "$dir/spool"
  local cpus ports
  cpus=$(nproc)
  read -r -a ports <<< "$(slurm_free_ports 2)"
  cat > "$dir/slurm.conf" <<CONF
ClusterName=loomtest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=${ports[0]}
SlurmdPort=${ports[1]}
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
$(slurm_conf_policy)
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=test Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
CONF
  export SLURM_CONF=$dir/slurm.conf
  slurmctld -D -i -f "$SLURM_CONF" > "$dir/slurmctld.out" 2>&1 &
  SLURMCTLD_PID=$!
  slurmd -D -N localhost -f "$SLURM_CONF" > "$dir/slurmd.out" 2>&1 &
  SLURMD_PID=$!
  local i
  for i in $(seq 1 60); do
    if sinfo -h -n localhost -o %t 2>/dev/null | grep -qE '^(idle|mix|alloc)'; then return 0; fi
    if ! kill -0 "$SLURMCTLD_PID" 2>/dev/null || ! kill -0 "$SLURMD_PID" 2>/dev/null; then break; fi
    sleep 0.5
  done
  echo "local slurm did not come up; logs:" >&2
  tail -n 20 "$dir"/slurmctld.log "$dir"/slurmd.log "$dir"/*.out >&2 2>/dev/null
  slurm_stop
  return 1
}

slurm_stop() {
  local pid
  # Jobs first: their slurmstepd processes detach from slurmd and would outlive it.
  local in=""  # the multi-node one answers in the hub namespace
  [ -n "${SLURMD_PIDS:-}" ] && in="bash $(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/local-cluster.sh exec hub"
  if [ -n "${SLURMCTLD_PID:-}" ] && kill -0 "$SLURMCTLD_PID" 2>/dev/null; then
    $in scancel --full $($in squeue -h -o %i 2>/dev/null) 2>/dev/null || true
    for _ in $(seq 1 40); do [ -z "$($in squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.25; done
  fi
  for pid in ${SLURMD_PID:-} ${SLURMD_PIDS:-} ${SLURMCTLD_PID:-}; do
    kill "$pid" 2>/dev/null || true
  done
  for pid in ${SLURMD_PID:-} ${SLURMD_PIDS:-} ${SLURMCTLD_PID:-}; do
    for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  SLURMD_PID= SLURMD_PIDS= SLURMCTLD_PID=
}

# A multi-node Slurm on a scripts/local-cluster.sh cluster (LOOM_CLUSTER, already up): slurmctld
# in the hub namespace, one slurmd per namespace node, each under its node's hostname, so
# `srun -N 2` places ranks on two hosts with their own addresses. Run srun, sbatch and squeue
# through `local-cluster.sh exec hub`. slurm_stop stops it as it stops the single-node one.
#   slurm_start_cluster DIR NODES
slurm_start_cluster() {
  local dir=$1 n=$2 k cluster last
  cluster="bash $(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/local-cluster.sh"
  last=$((n - 1))
  mkdir -p "$dir/state"
  for k in $(seq 0 "$last"); do mkdir -p "$dir/spool/node$k"; done
  cat > "$dir/slurm.conf" <<CONF
ClusterName=loomcluster
SlurmctldHost=hub(10.213.0.254)
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.%n.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.%n.log
$(slurm_conf_policy)
NodeName=node[0-$last] NodeAddr=10.213.0.[1-$n] CPUs=$(nproc) State=UNKNOWN
PartitionName=test Nodes=node[0-$last] Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
CONF
  export SLURM_CONF=$dir/slurm.conf
  $cluster exec hub slurmctld -D -i -f "$SLURM_CONF" > "$dir/slurmctld.out" 2>&1 &
  SLURMCTLD_PID=$!
  SLURMD_PIDS=
  for k in $(seq 0 "$last"); do
    $cluster exec "node$k" slurmd -D -N "node$k" -f "$SLURM_CONF" > "$dir/slurmd.node$k.out" 2>&1 &
    SLURMD_PIDS="$SLURMD_PIDS $!"
  done
  local i
  for i in $(seq 1 60); do
    if [ "$($cluster exec hub sinfo -h -o %t 2>/dev/null | grep -cE '^(idle|mix|alloc)')" -ge 1 ] &&
       [ "$($cluster exec hub sinfo -h -N -o %t 2>/dev/null | grep -cE '^(idle|mix|alloc)')" -eq "$n" ]; then return 0; fi
    sleep 0.5
  done
  echo "local slurm cluster did not come up; logs:" >&2
  tail -n 20 "$dir"/*.log "$dir"/*.out >&2 2>/dev/null
  slurm_stop
  return 1
}
