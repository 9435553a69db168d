#!/bin/sh
# netns_probe.sh CLUSTER PROBE DTC TESTS WORK TEST_COMM: dtc-probe (PROBE) on
# a cluster of two nodes of two ranks whose nodes send at most 1 Gbit/s to
# each other (CLUSTER: tools/netns-cluster.sh). The cluster file must hold 4
# ranks on 2 nodes, r0 and r1 on the first node's host, r2 and r3 on the
# second's; the inter link at most 0.16 GB/s (1 Gbit/s is 0.125) and the
# intra link more than twice as fast; the 13 collectives for 4 ranks; and
# no warning of dtc-probe but on a figure's spread (so the host names and
# MPI_COMM_TYPE_SHARED make the same two nodes, and ranks come node by
# node; a spread is the network's noise). DTC must accept the file
# for TESTS/mpi/probe_dp4.dt. Then TEST_COMM (tests/mpi/test_comm.c: every
# collective and method, the hierarchical one over the two nodes, against
# its reference) must pass on the cluster. Exits 77 (skipped) when CLUSTER
# cannot run here.
set -u
cluster=$1 probe=$2 dtc=$3 tests=$4 work=$5 test_comm=$6
prefix=fp$(($$ % 1000000))   # this shell's pid: two suites at once do not meet
fail() { echo "netns_probe.sh: FAIL: $*" >&2; exit 1; }
# a cluster of an earlier run of these tests whose shell is gone (killed at a
# timeout, so its trap never ran) is taken down
for st in /run/dtc-netns/f[ckp][0-9]*; do
  [ -e "$st" ] || continue
  p=${st##*/}
  kill -0 "${p#f?}" 2>/dev/null || "$cluster" -p "$p" down 2>/dev/null
done
rm -rf "$work"
mkdir -p "$work" || fail "cannot make $work"
"$cluster" -p $prefix down 2>/dev/null
"$cluster" -p $prefix run "$probe" --reps 3 --name netns -o "$work/probe.dt" 2> "$work/err"
rc=$?
cat "$work/err" >&2
[ $rc -eq 77 ] && exit 77
[ $rc -eq 0 ] || fail "dtc-probe on the cluster failed ($rc)"
f=$work/probe.dt
cat "$f"
grep -q "^# dtc-probe: 4 ranks on 2 nodes;" "$f" || fail "not 4 ranks on 2 nodes"
nodes=$(sed -n 's/^  node \(n[0-9]\) {    # host \(.*\)$/\1=\2/p' "$f" | tr '\n' ' ')
[ "$nodes" = "n0=$prefix-n0 n1=$prefix-n1 " ] || fail "nodes and hosts: $nodes"
devs=$(awk '/^  node /{n=$2} /^    device /{sub(":", "", $2); printf "%s:%s ", n, $2}' "$f")
[ "$devs" = "n0:r0 n0:r1 n1:r2 n1:r3 " ] || fail "devices by node: $devs"
bw() { sed -n "s/^  link $1(bw = \([0-9.]*\)GB\/s.*/\1/p" "$f"; }
intra=$(bw intra) inter=$(bw inter)
[ -n "$intra" ] && [ -n "$inter" ] || fail "no intra or no inter link"
awk -v a="$intra" -v e="$inter" 'BEGIN { exit !(e <= 0.16 && a > 2 * e) }' ||
  fail "inter link $inter GB/s (at most 0.16), intra $intra GB/s (more than twice that)"
n=$(grep -c "^  collective [a-z_]*(method = [a-z]*, ranks = 4, " "$f")
[ "$n" -eq 13 ] || fail "$n collective lines for 4 ranks, not 13"
grep "^dtc-probe: warning" "$work/err" | grep -qv " spread by " && fail "dtc-probe warned"
"$dtc" --cluster="$f" "$tests/mpi/probe_dp4.dt" --emit=plan > "$work/plan" ||
  fail "dtc refused the probed cluster"
"$cluster" -p $prefix run "$test_comm" || fail "test_comm on the cluster failed"
echo "netns_probe.sh: ok"
