#!/bin/sh
# netns-cluster.sh: a cluster of several nodes on this machine, one network
# namespace per node, with a real (shaped) network between them, and Open MPI
# over TCP across it.
#
#     tools/netns-cluster.sh [options] up           make the cluster
#     tools/netns-cluster.sh [options] mpirun PROG [ARGS...]   PROG on every rank
#     tools/netns-cluster.sh [options] exec NODE CMD [ARGS...] CMD inside node NODE
#     tools/netns-cluster.sh [options] down         end its processes, remove it
#     tools/netns-cluster.sh [options] run PROG [ARGS...]      up, mpirun, down
#
# Options (the same for every command of one cluster):
#   -p PREFIX    names of the namespaces, PREFIX-n0 .. and PREFIX-sw (default dtc)
#   -n NODES     nodes (default 2)
#   -r RANKS     ranks per node (default 2)
#   --rate RATE  what each node may send on the data network, a tc rate (default 1gbit)
#   --delay D    one-way latency added to that, a tc time (default 100us); 0: none
#
# Each node PREFIX-nK is a network namespace with its own host name (a UTS
# namespace, `unshare --uts`) and two interfaces on two bridges that live in
# the namespace PREFIX-sw: `data0` (10.77.0.K+1/24), the shaped network MPI
# uses (btl tcp), and `ctl0` (10.78.0.K+1/24), unshaped, which Open MPI's
# launcher uses (oob tcp), as a cluster's management network would be. On
# data0's egress, tc puts an htb class of RATE and, under it, netem with
# DELAY, so a message between two nodes takes DELAY plus its bytes at RATE;
# ranks of one node talk over the namespace's own loopback, unshaped. A
# kernel without netem (sch_netem) gets the rate only, with a warning.
#
# mpirun starts Open MPI's mpirun in node 0 with a hostfile of the nodes
# (RANKS slots each) and an rsh agent that starts orted in a node's namespace
# through `ip netns exec` (no sshd), so Open MPI sees NODES hosts: ranks are
# placed node by node, MPI_Get_processor_name is the node's name and
# MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) groups the ranks of each node.
# The MCA parameters: btl tcp,self (no shared memory, which would join ranks
# of different nodes), btl_tcp_if_include data0, oob_tcp_if_include ctl0,
# mpi_yield_when_idle 1. Every variable of the environment named DTRT_*,
# OPENBLAS_*, OMP_*, ASAN_*, LSAN_* or UBSAN_* goes to the ranks (-x);
# DTRT_COMM_TIMEOUT is 20 unless set (docs/RUNTIME.md), so a rank that
# waits on a dead peer or a cut link
# ends within 20 s. The exit status is mpirun's.
#
# run makes the cluster, runs mpirun and removes the cluster, also when it
# fails or is interrupted (trap). down kills every process left in the
# cluster's namespaces, deletes them, and removes the state directory
# /run/dtc-netns/PREFIX (the hostfile and the agent). Nothing is written
# outside the namespaces and that directory. Needs root, ip and tc
# (iproute2), unshare (util-linux) and Open MPI's mpirun (MPIRUN, default
# mpirun: its orted must be on the PATH); exits 77 with a
# message when not root or when namespaces cannot be made, 2 on a usage error.
set -u
me=netns-cluster.sh
prefix=dtc nodes=2 ranks=2 rate=1gbit delay=100us
mpirun=${MPIRUN:-mpirun}

usage() {
  sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
  exit 2
}
die() { echo "$me: error: $*" >&2; exit 1; }
cannot() { echo "$me: cannot run here: $*" >&2; exit 77; }

while [ $# -gt 0 ]; do
  case $1 in
    -p) prefix=${2:?}; shift 2 ;;
    -n) nodes=${2:?}; shift 2 ;;
    -r) ranks=${2:?}; shift 2 ;;
    --rate) rate=${2:?}; shift 2 ;;
    --delay) delay=${2:?}; shift 2 ;;
    -h|--help) usage ;;
    -*) echo "$me: unknown option '$1'" >&2; usage ;;
    *) break ;;
  esac
done
[ $# -ge 1 ] || usage
cmd=$1
shift
case $prefix in
  *[!a-z0-9]*|'') die "the prefix must be lower-case letters and digits, not '$prefix'" ;;
esac
[ ${#prefix} -le 8 ] || die "the prefix '$prefix' is longer than 8 characters"
case $nodes$ranks in
  *[!0-9]*) die "-n and -r take whole numbers" ;;
esac
[ "$nodes" -ge 1 ] && [ "$nodes" -le 200 ] && [ "$ranks" -ge 1 ] ||
  die "-n takes 1 to 200 nodes, -r at least 1 rank"
state=/run/dtc-netns/$prefix
sw=$prefix-sw

need_root() {
  [ "$(id -u)" = 0 ] || cannot "network namespaces, veth pairs and tc need root (run as root)"
  for tool in ip tc unshare; do
    command -v $tool >/dev/null || cannot "no '$tool' (Debian: apt-get install iproute2 util-linux)"
  done
}

in_ns() {   # in_ns NS CMD...: CMD inside namespace NS
  ns=$1
  shift
  ip netns exec "$ns" "$@"
}

up() {
  need_root
  command -v "$mpirun" >/dev/null || cannot "no $mpirun (Debian: apt-get install openmpi-bin)"
  "$mpirun" --version 2>&1 | grep -q -e 'Open MPI' -e OpenRTE ||
    cannot "$mpirun is not Open MPI's (its rsh agent and MCA parameters are Open MPI's)"
  ip netns list | grep -q "^$sw\b" && die "a cluster '$prefix' is up already ($me -p $prefix down)"
  ip netns add "$sw" 2>/dev/null || cannot "cannot make a network namespace (ip netns add $sw failed)"
  trap 'down' EXIT   # a cluster made in part is removed
  in_ns "$sw" ip link set lo up &&
    in_ns "$sw" ip link add bdata type bridge && in_ns "$sw" ip link set bdata up &&
    in_ns "$sw" ip link add bctl type bridge && in_ns "$sw" ip link set bctl up ||
    die "cannot make the bridges in $sw"
  netem=yes
  k=0
  while [ $k -lt "$nodes" ]; do
    ns=$prefix-n$k
    ip netns add "$ns" || die "cannot make the namespace $ns"
    in_ns "$ns" ip link set lo up &&
      ip -n "$sw" link add d$k type veth peer name data0 netns "$ns" &&
      ip -n "$sw" link add c$k type veth peer name ctl0 netns "$ns" &&
      ip -n "$sw" link set d$k master bdata up && ip -n "$sw" link set c$k master bctl up &&
      ip -n "$ns" addr add 10.77.$((k / 250)).$((k % 250 + 1))/16 dev data0 &&
      ip -n "$ns" addr add 10.78.$((k / 250)).$((k % 250 + 1))/16 dev ctl0 &&
      ip -n "$ns" link set data0 up && ip -n "$ns" link set ctl0 up ||
      die "cannot make the links of $ns"
    # htb's class of RATE; netem under it for the delay
    tc -n "$ns" qdisc add dev data0 root handle 1: htb default 1 r2q 1000 &&
      tc -n "$ns" class add dev data0 parent 1: classid 1:1 htb rate "$rate" ||
      die "tc refused the rate '$rate' on $ns"
    if [ "$delay" != 0 ] && [ $netem = yes ] &&
       ! err=$(tc -n "$ns" qdisc add dev data0 parent 1:1 handle 10: netem delay "$delay" \
               limit 100000 2>&1); then
      case $err in
        *"kind is unknown"*)
          echo "$me: warning: this kernel has no netem (sch_netem): the data network has" \
               "the rate $rate but no added delay" >&2
          netem=no ;;
        *) die "tc refused the delay '$delay' on $ns: $err" ;;
      esac
    fi
    k=$((k + 1))
  done
  mkdir -p "$state" || die "cannot make $state"
  k=0
  : > "$state/hosts"
  while [ $k -lt "$nodes" ]; do
    echo "$prefix-n$k slots=$ranks" >> "$state/hosts"
    k=$((k + 1))
  done
  # Open MPI's rsh agent: `agent HOST COMMAND...` as ssh would run it, in
  # HOST's namespace under HOST's name.
  cat > "$state/agent" <<'AGENT'
#!/bin/sh
host=$1
shift
exec ip netns exec "$host" unshare --uts sh -c 'hostname "$0" && eval "$1"' "$host" "$*"
AGENT
  chmod +x "$state/agent"
  [ $netem = yes ] && [ "$delay" != 0 ] && shaped="$rate, $delay" || shaped="$rate"
  trap - EXIT
  echo "$me: cluster '$prefix' up: $nodes node(s) of $ranks rank(s), $prefix-n0 .." \
       "$prefix-n$((nodes - 1)), data network $shaped per node" >&2
}

down() {
  need_root
  for ns in $(ip netns list | sed -n "s/^\($prefix-\(n[0-9]*\|sw\)\)\b.*/\1/p"); do
    pids=$(ip netns pids "$ns" 2>/dev/null)
    # shellcheck disable=SC2086
    [ -z "$pids" ] || kill -9 $pids 2>/dev/null
    ip netns del "$ns" 2>/dev/null || echo "$me: warning: cannot delete namespace $ns" >&2
  done
  rm -rf "$state"
  rmdir /run/dtc-netns 2>/dev/null
  return 0
}

run_mpi() {
  need_root
  [ -f "$state/hosts" ] || die "no cluster '$prefix' is up ($me -p $prefix up)"
  [ $# -ge 1 ] || usage
  : "${DTRT_COMM_TIMEOUT:=20}"
  export DTRT_COMM_TIMEOUT
  env_flags=
  for v in $(env | sed -n 's/^\(\(DTRT\|OPENBLAS\|OMP\|ASAN\|LSAN\|UBSAN\)_[A-Za-z0-9_]*\)=.*/\1/p'); do
    env_flags="$env_flags -x $v"
  done
  # shellcheck disable=SC2086
  in_ns "$prefix-n0" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$prefix-n0" \
    "$mpirun" --allow-run-as-root --hostfile "$state/hosts" -np $((nodes * ranks)) \
      --bind-to none $env_flags \
      --mca plm_rsh_agent "$state/agent" --mca plm_rsh_no_tree_spawn 1 \
      --mca btl tcp,self --mca btl_tcp_if_include data0 --mca oob_tcp_if_include ctl0 \
      --mca mpi_yield_when_idle 1 "$@"
}

case $cmd in
  up) up ;;
  down) down ;;
  mpirun) run_mpi "$@" ;;
  exec)
    need_root
    [ $# -ge 2 ] || usage
    node=$1
    shift
    ip netns list | grep -q "^$prefix-n$node\b" || die "no node $node in cluster '$prefix'"
    in_ns "$prefix-n$node" "$@" ;;
  run)
    need_root
    [ $# -ge 1 ] || usage
    trap 'exit 130' INT
    trap 'exit 143' TERM
    up
    trap 'down' EXIT
    run_mpi "$@" ;;
  *) echo "$me: unknown command '$cmd'" >&2; usage ;;
esac
