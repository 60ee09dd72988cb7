#!/usr/bin/env bash
# A cluster of N "nodes" inside this machine, for tests of multi-node behaviour. Each node is a
# network namespace with its own hostname (a persistent UTS namespace), its own loopback and one
# interface, eth0, on a private subnet: a veth whose other end sits on a bridge in a "hub"
# namespace. Nothing is routed to or from the machine's own interfaces: the subnet exists only
# between these namespaces.
#
#   scripts/local-cluster.sh up N          make node0..node{N-1} (after removing any leftovers)
#   scripts/local-cluster.sh down          remove everything this cluster made, by name
#   scripts/local-cluster.sh exec NODE CMD run CMD on NODE (node0, node1, ... or hub)
#   scripts/local-cluster.sh addr NODE     NODE's address (node k is 10.213.0.(k+1), hub .254)
#   scripts/local-cluster.sh hostfile [S]  one "nodeK slots=S" line per node (Open MPI's format)
#   scripts/local-cluster.sh rsh HOST CMD  ssh's calling convention, for mpirun's launcher:
#                                          mpirun --mca plm_rsh_agent "scripts/local-cluster.sh rsh"
#   scripts/local-cluster.sh rate NODE R   limit NODE's link to R each way (tc tbf, e.g. 100mbit)
#   scripts/local-cluster.sh delay NODE MS JITTER_MS [LOSS_PCT]
#                                          splice loom-netfault into NODE's cable: every frame
#                                          MS ± JITTER_MS late, LOSS_PCT% dropped (no netem here)
#   scripts/local-cluster.sh cut NODE      take NODE's link down (its cable pulled)
#   scripts/local-cluster.sh freeze NODE   SIGSTOP every process on NODE; thaw NODE resumes them
#   scripts/local-cluster.sh kill NODE     SIGKILL every process on NODE (the node dies)
#   scripts/local-cluster.sh slow NODE C   cap NODE's processes, now and later, at C cores together
#                                          (a CPU cgroup's quota, e.g. 0.5): a slower node kind
#   scripts/local-cluster.sh heal NODE     undo rate, delay, cut and slow on NODE
#   scripts/local-cluster.sh pids NODE     the processes running on NODE
#
# LOOM_CLUSTER names the cluster (default "loomc"): namespaces are "$LOOM_CLUSTER-node0", ...,
# so clusters with different names coexist. On a node, /etc/hosts (/etc/netns/NAME/hosts
# mounted over it) names every node. Needs root.
set -euo pipefail
name=${LOOM_CLUSTER:-loomc}
state=/run/loom-cluster/$name
here=$(cd "$(dirname "$0")" && pwd)
subnet=10.213.0

die() { echo "local-cluster: $*" >&2; exit 2; }
nodes() { cat "$state/nodes" 2>/dev/null || true; }
node_index() {
  [[ $1 =~ ^node([0-9]+)$ ]] || die "no node '$1' (nodes are node0..node$(( $(nodes | wc -w) - 1 )), or hub)"
  echo "${BASH_REMATCH[1]}"
}
check_node() {
  [ "$1" = hub ] || { node_index "$1" > /dev/null; ip netns list | grep -qw "^$name-$1" || die "no node '$1' in cluster '$name' (is it up?)"; }
}
addr_of() { [ "$1" = hub ] && echo "$subnet.254" || echo "$subnet.$(( $(node_index "$1") + 1 ))"; }
in_ns() { local ns=$1; shift; ip netns exec "$name-$ns" "$@"; }
# Not `ip netns exec`: that mounts a fresh /sys, without the cgroup tree slurmd needs. A private
# mount namespace bind-mounts the node's hosts file instead.
run_on() {  # NODE CMD...: the node's network, hosts file, hostname and CPU cgroup (when slowed)
  local node=$1 cg=; shift
  [ -e "$state/$node.cgroup" ] && cg=$(cat "$state/$node.cgroup")
  LOOM_NODE_CGROUP=$cg nsenter --net="/run/netns/$name-$node" --uts="$state/$node.uts" -- unshare --mount --propagation private -- \
    /bin/sh -c 'cg=$LOOM_NODE_CGROUP; unset LOOM_NODE_CGROUP; [ -z "$cg" ] || echo $$ > "$cg/cgroup.procs"
                mount --bind "$0" /etc/hosts && exec "$@"' "/etc/netns/$name-$node/hosts" "$@"
}

# A node's CPU cgroup: under cgroup v2's unified tree, or v1's cpu controller.
cgroup_v2() { [ -e /sys/fs/cgroup/cgroup.controllers ]; }
cgroup_dir() { if cgroup_v2; then echo "/sys/fs/cgroup/loom-$name-$1"; else echo "/sys/fs/cgroup/cpu/loom-$name-$1"; fi; }

# Every process on NODE, and every one run_on starts there later, shares CORES cores: a quota of
# CORES x P of CPU time per period P, however many threads ask for more. The period is as short
# as the kernel's 1 ms least quota allows (2 ms for half a core), so the node runs slower
# throughout rather than in bursts and stalls: with the default 100 ms, a throttled rank's
# communication thread stops for up to 50 ms at a time and the pipeline stages after it wait.
slow() {
  local node=$1 cores=$2 dir quota period pid
  [[ $cores =~ ^[0-9]*\.?[0-9]+$ ]] && awk -v c="$cores" 'BEGIN { exit !(c > 0) }' || die "slow needs a core count above 0, such as 0.5, not '$cores'"
  read -r period quota <<< "$(awk -v c="$cores" 'BEGIN { p = 2000; if (c * p < 1000) p = int(1000 / c + 0.999); printf "%d %d", p, c * p }')"
  [ "$period" -le 1000000 ] && [ "$quota" -ge 1000 ] || die "slow: $cores cores is below the 0.001 a CPU quota allows"
  dir=$(cgroup_dir "$node")
  if cgroup_v2; then
    grep -qw cpu /sys/fs/cgroup/cgroup.subtree_control || echo +cpu > /sys/fs/cgroup/cgroup.subtree_control ||
      die "slow: cannot enable the cpu controller in /sys/fs/cgroup"
    mkdir -p "$dir" && echo "$quota $period" > "$dir/cpu.max" || die "slow: cannot write $dir/cpu.max"
  else
    [ -d /sys/fs/cgroup/cpu ] || die "slow needs the cpu cgroup controller (cgroup v2, or v1's /sys/fs/cgroup/cpu)"
    mkdir -p "$dir" && echo "$period" > "$dir/cpu.cfs_period_us" && echo "$quota" > "$dir/cpu.cfs_quota_us" ||
      die "slow: cannot set the quota in $dir"
  fi
  echo "$dir" > "$state/$node.cgroup"
  for pid in $(ip netns pids "$name-$node"); do echo "$pid" > "$dir/cgroup.procs" 2>/dev/null || true; done
}

# The node's processes back in the root cgroup, and its cgroup gone.
unslow() {
  local node=$1 dir pid
  [ -e "$state/$node.cgroup" ] || return 0
  dir=$(cat "$state/$node.cgroup")
  for pid in $(cat "$dir/cgroup.procs" 2>/dev/null); do echo "$pid" > "$(dirname "$dir")/cgroup.procs" 2>/dev/null || true; done
  for _ in $(seq 1 20); do rmdir "$dir" 2>/dev/null && break; [ -d "$dir" ] || break; sleep 0.1; done
  rm -f "$state/$node.cgroup"
}

down() {
  local ns pid
  for ns in $(ip netns list | awk '{print $1}' | grep -E "^$name-(hub|node[0-9]+)$" || true); do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -CONT "$pid" 2>/dev/null || true; kill -KILL "$pid" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
    rm -rf "/etc/netns/$ns"
  done
  if [ -d "$state" ]; then
    for f in "$state"/*.cgroup; do [ -e "$f" ] && unslow "$(basename "$f" .cgroup)"; done
    for f in "$state"/*.uts; do [ -e "$f" ] && { umount "$f" 2>/dev/null || true; }; done
    for f in "$state"/*.relay.pid; do [ -e "$f" ] && { kill "$(cat "$f")" 2>/dev/null || true; }; done
    rm -rf "$state"
  fi
}

up() {
  local n=$1 k node hosts
  [[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 200 ] || die "up needs a node count in 1..200, not '$n'"
  down
  mkdir -p "$state"
  hosts=$'127.0.0.1 localhost\n'"$subnet.254 hub"$'\n'
  for k in $(seq 0 $((n - 1))); do hosts+="$subnet.$((k + 1)) node$k"$'\n'; done
  ip netns add "$name-hub"
  in_ns hub ip link set lo up
  in_ns hub ip link add br0 type bridge
  in_ns hub ip addr add "$subnet.254/24" dev br0
  in_ns hub ip link set br0 up
  for node in hub $(for k in $(seq 0 $((n - 1))); do echo "node$k"; done); do
    mkdir -p "/etc/netns/$name-$node"
    printf '%s' "$hosts" > "/etc/netns/$name-$node/hosts"
    touch "$state/$node.uts"
    unshare --uts="$state/$node.uts" hostname "$node"
  done
  for k in $(seq 0 $((n - 1))); do
    node=node$k
    ip netns add "$name-$node"
    in_ns "$node" ip link set lo up
    # Both ends are made inside the hub and one is moved: no veth ever appears on the host.
    in_ns hub ip link add "n$k" type veth peer name eth0
    in_ns hub ip link set eth0 netns "$name-$node"
    in_ns hub ip link set "n$k" master br0 up
    in_ns "$node" ip addr add "$subnet.$((k + 1))/24" dev eth0
    in_ns "$node" ip link set eth0 up
  done
  for k in $(seq 0 $((n - 1))); do echo "node$k"; done > "$state/nodes"
  # Ready when every link is up (the bridge runs no STP, so its ports forward at once).
  for k in $(seq 0 $((n - 1))); do
    for _ in $(seq 1 50); do in_ns "node$k" ip -br link show eth0 | grep -q ' UP ' && break; sleep 0.1; done
  done
  echo "cluster '$name': $n nodes on $subnet.0/24 ($(nodes | xargs)); hub $subnet.254"
}

heal() {
  local k; k=$(node_index "$1")
  if [ -e "$state/$1.relay.pid" ]; then
    kill "$(cat "$state/$1.relay.pid")" 2>/dev/null || true
    rm -f "$state/$1.relay.pid"
    in_ns hub ip link del "r$k" 2>/dev/null || true
    in_ns hub ip link set "n$k" master br0
  fi
  in_ns hub tc qdisc del dev "n$k" root 2>/dev/null || true
  in_ns "$1" tc qdisc del dev eth0 root 2>/dev/null || true
  in_ns hub ip link set "n$k" up
  unslow "$1"
}

# tbf on both ends: the hub's egress is the node's ingress.
rate() {
  local k; k=$(node_index "$1")
  in_ns hub tc qdisc replace dev "n$k" root tbf rate "$2" burst 64kb latency 400ms
  in_ns "$1" tc qdisc replace dev eth0 root tbf rate "$2" burst 64kb latency 400ms
}

# The node's cable leaves the bridge; loom-netfault forwards frames between it and a new veth
# whose other end takes its place on the bridge.
delay() {
  local node=$1 k relay; k=$(node_index "$node")
  relay=${LOOM_NETFAULT:-$(command -v loom-netfault || echo "$here/../build/bin/loom-netfault")}
  [ -x "$relay" ] || die "no loom-netfault at '$relay' (build it, or set LOOM_NETFAULT)"
  heal "$node"
  in_ns hub ip link set "n$k" nomaster
  in_ns hub ip link add "r$k" type veth peer name "b$k"
  in_ns hub ip link set "b$k" master br0 up
  in_ns hub ip link set "r$k" up
  in_ns hub ip link set "n$k" promisc on
  in_ns hub ip link set "r$k" promisc on
  # A frame read off a veth may be a 64 KiB segmentation-offload super-frame whose checksum the
  # stack left for the hardware to fill in: forwarded raw, it would be dropped. Every node sends
  # finished, MTU-sized frames instead.
  local other
  for other in $(nodes); do
    in_ns "$other" ethtool -K eth0 tx off tso off gso off > /dev/null 2>&1 || die "ethtool -K on $other failed (install ethtool)"
  done
  in_ns hub "$relay" --a "n$k" --b "r$k" --delay-ms "$2" --jitter-ms "$3" --loss "${4:-0}" > "$state/$node.relay.log" 2>&1 &
  echo $! > "$state/$node.relay.pid"
  for _ in $(seq 1 50); do grep -q forwarding "$state/$node.relay.log" 2>/dev/null && return 0; sleep 0.1; done
  cat "$state/$node.relay.log" >&2
  die "loom-netfault did not start on $node"
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
  up) up "${1:-2}" ;;
  down) down ;;
  exec) [ $# -ge 2 ] || die "exec NODE CMD..."; check_node "$1"; run_on "$@" ;;
  addr) [ $# -eq 1 ] || die "addr NODE"; addr_of "$1" ;;
  hostfile) for node in $(nodes); do echo "$node slots=${1:-2}"; done ;;
  rate) [ $# -eq 2 ] || die "rate NODE RATE (e.g. 100mbit)"; check_node "$1"; rate "$1" "$2" ;;
  delay) [ $# -ge 3 ] && [ $# -le 4 ] || die "delay NODE MS JITTER_MS [LOSS_PCT]"; check_node "$1"; delay "$@" ;;
  cut) [ $# -eq 1 ] || die "cut NODE"; check_node "$1"; in_ns hub ip link set "n$(node_index "$1")" down ;;
  slow) [ $# -eq 2 ] || die "slow NODE CORES (e.g. 0.5)"; check_node "$1"; slow "$1" "$2" ;;
  heal) [ $# -eq 1 ] || die "heal NODE"; check_node "$1"; heal "$1" ;;
  freeze | thaw | kill)
    [ $# -eq 1 ] || die "$cmd NODE"; check_node "$1"
    sig=$(case "$cmd" in freeze) echo STOP ;; thaw) echo CONT ;; kill) echo KILL ;; esac)
    for pid in $(ip netns pids "$name-$1"); do kill "-$sig" "$pid" 2>/dev/null || true; done ;;
  rsh)  # [ssh options] HOST COMMAND-STRING...
    while [ $# -gt 0 ] && [[ $1 == -* ]]; do shift; done
    [ $# -ge 2 ] || die "rsh HOST CMD..."; check_node "$1"; host=$1; shift
    run_on "$host" /bin/sh -c "$*" ;;
  pids) [ $# -eq 1 ] || die "pids NODE"; check_node "$1"; ip netns pids "$name-$1" ;;
  *) sed -n '2,29p' "$0" >&2; exit 2 ;;
esac
