#!/bin/sh
# faults.sh CLUSTER PROGRAM WORK kill|cut: a fault in the middle of training
# on a cluster of two nodes of two ranks (CLUSTER: tools/netns-cluster.sh),
# PROGRAM being fault_train (tests/mpi/fault_train.c). The job trains and
# saves a checkpoint after every step; once rank 0 has reported 5 saves the
# test either kills a rank of node 1 with SIGKILL (kill) or takes the data
# link of node 1 down (cut: `ip link set data0 down` inside its namespace)
# and requires:
#  - mpirun to end with a failure status, and no process of PROGRAM to be
#    left, within 30 s of the fault (DTRT_COMM_TIMEOUT=10);
#  - a message: mpirun's naming the killed rank (kill), the watchdog's of
#    libdtrt, "has waited", from a rank (cut);
#  - the job not to have finished all its steps (so the fault hit it);
#  - on a new cluster, the newest checkpoint (one file), at least
#    the last one reported before the fault, to load and train one step.
# The cluster (its namespaces and every process in them) is removed at the
# end, also on failure. Exits 77 (skipped) when CLUSTER cannot run here (not
# root, no network namespaces).
set -u
cluster=$1 prog=$2 work=$3 fault=$4
# the namespaces' prefix: the fault's letter and this shell's pid, so that
# two suites running at once on one machine do not meet
prefix=f$(printf %.1s "$fault")$(($$ % 1000000))
fail() { echo "faults.sh: FAIL: $*" >&2; exit 1; }
c() { "$cluster" -p "$prefix" "$@"; }
# a cluster of an earlier run of these tests whose shell is gone (killed at a
# timeout, so its trap never ran) is taken down
for st in /run/dtc-netns/f[ckp][0-9]*; do
  [ -e "$st" ] || continue
  p=${st##*/}
  kill -0 "${p#f?}" 2>/dev/null || "$cluster" -p "$p" down 2>/dev/null
done

rm -rf "$work"
mkdir -p "$work/ck" || fail "cannot make $work"
c down 2>/dev/null
trap 'c down' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
c up
rc=$?
[ $rc -eq 0 ] || exit $rc

export DTRT_COMM_TIMEOUT=10
c mpirun "$prog" "$work/ck" 100000 > "$work/out" 2>&1 &
job=$!
saved() { sed -n 's/^saved \([0-9]*\)$/\1/p' "$work/out" | tail -n 1; }
n=0
while [ "$(saved)" = "" ] || [ "$(saved)" -lt 5 ]; do
  kill -0 $job 2>/dev/null || { cat "$work/out"; fail "the job ended before 5 saves"; }
  [ $n -lt 600 ] || { cat "$work/out"; fail "no 5 saves in 60 s"; }
  sleep 0.1
  n=$((n + 1))
done

# the ranks of node 1: the processes of PROGRAM in its namespace
node1=$(for p in $(ip netns pids "$prefix-n1"); do
          tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null | grep -q "^$prog " && echo "$p"
        done)
[ -n "$node1" ] || fail "no rank of $prog in $prefix-n1"
case $fault in
  kill)
    victim=$(echo "$node1" | head -n 1)
    kill -9 "$victim" || fail "cannot kill rank process $victim" ;;
  cut)
    c exec 1 ip link set data0 down || fail "cannot take data0 of node 1 down" ;;
  *)
    fail "the fault is kill or cut, not '$fault'" ;;
esac
start=$(date +%s)
last=$(saved)
echo "faults.sh: $fault after save $last"

# within 30 s: mpirun ends and no process of PROGRAM is left
n=0
while kill -0 $job 2>/dev/null || pgrep -f "^$prog $work/ck" >/dev/null; do
  [ $n -lt 300 ] || break
  sleep 0.1
  n=$((n + 1))
done
took=$(($(date +%s) - start))
cat "$work/out"
left=$(pgrep -f "^$prog $work/ck")
[ -z "$left" ] || fail "processes of $prog left $took s after the fault: $left"
kill -0 $job 2>/dev/null && fail "mpirun still runs $took s after the fault"
wait $job
status=$?
echo "faults.sh: mpirun ended with status $status, $took s after the fault"
[ $status -ne 0 ] || fail "mpirun ended with status 0"
grep -q "all .* steps done" "$work/out" && fail "the job finished: the fault did not hit it"
case $fault in
  kill)
    grep -q "exited on signal 9" "$work/out" || fail "no message of the killed rank" ;;
  cut)
    grep -q "^dtrt: rank [0-9] of 4: .* has waited [0-9]* s for the other ranks" "$work/out" ||
      fail "no rank said it waited too long" ;;
esac

# the last complete checkpoint loads, on a new cluster
c down
c up || fail "cannot make the cluster again"
c mpirun "$prog" --resume "$work/ck" "$last" > "$work/resume" 2>&1
rc=$?
cat "$work/resume"
[ $rc -eq 0 ] || fail "resuming from the checkpoints failed ($rc)"
grep -q "^fault_train: resumed from step" "$work/resume" || fail "no resumed step"
echo "faults.sh: $fault: ok"
