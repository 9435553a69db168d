#!/bin/sh
# elastic.sh: a rank lost and the job resumed on the ranks that remain.
# tools/dtc-elastic runs PROGRAM (tests/mpi/elastic_train.c over a model
# compiled with --devices) on 3 ranks for 20 steps, saving a checkpoint
# every 5; its last rank kills itself (SIGKILL) at the start of step 12.
# Requires:
#  - the other two ranks of that job to be gone within 10 s of the kill,
#    the job to fail, with a message of the failure (the launcher's, or the
#    watchdog's of libdtrt);
#  - dtc-elastic to restart on 2 ranks, which resume from step 10 and train
#    to step 20; no process of PROGRAM left at the end;
#  - the checkpoint to verify (dtc-ckpt verify) and to equal, by MODE, the
#    one of 20 steps on one process without interruption (REF: ckpt_train):
#    compare (within its tolerance, 1e-4) or same (bit for bit: a
#    deterministic build).
# usage: elastic.sh DTC_ELASTIC PROGRAM REF DTC_CKPT WORKDIR MODE (env
# MPIRUN, MPIFLAGS)
set -u
tool=$1 prog=$2 ref=$3 ckpt=$4 dir=$5 mode=$6
fail() { echo "elastic.sh: FAIL: $*" >&2; exit 1; }
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir" || fail "no $dir"

timeout 120 "$ref" train 20 ref.st || fail "20 steps on one process"

# gone: no such process, or a zombie its parent has not reaped yet
gone() { s=$(ps -o stat= -p "$1" 2>/dev/null); [ -z "$s" ] || [ "${s#Z}" != "$s" ]; }

export DTRT_COMM_TIMEOUT=5
timeout 300 "$tool" -n 3 --min 2 "$prog" ck.st 20 5 12 > out 2> err &
job=$!
n=0
until [ -s ck.st.killed ]; do
  kill -0 $job 2>/dev/null || { cat out err; fail "the job ended before the kill"; }
  [ $n -lt 1200 ] || { cat out err; fail "no kill in 120 s"; }
  sleep 0.1
  n=$((n + 1))
done
[ "$(wc -l < ck.st.pids.3)" -eq 3 ] || fail "not 3 ranks in the first job: $(cat ck.st.pids.3)"
n=0
while :; do
  left=
  for p in $(awk '{print $2}' ck.st.pids.3); do gone "$p" || left="$left $p"; done
  [ -z "$left" ] && break
  [ $n -lt 300 ] || { cat out err; fail "ranks$left of the first job still run 30 s after the kill"; }
  sleep 0.1
  n=$((n + 1))
done
took=$(awk -v a="$(cat ck.st.killed)" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
echo "elastic.sh: the ranks of the first job were gone $took s after the kill"
awk -v t="$took" 'BEGIN { exit !(t < 10) }' || fail "the survivors took $took s to stop (10 s allowed)"

wait $job
status=$?
cat out err
[ $status -eq 0 ] || fail "dtc-elastic ended with status $status"
grep -q "^dtc-elastic: the job on 3 ranks failed (status [1-9][0-9]*); restarting on 2$" err ||
  fail "dtc-elastic did not restart on 2 ranks"
grep -Eqi "signal 9|killed|has waited" err out || fail "no message of the failure"
grep -q "^elastic_train: resumed at step 10 on 2 ranks$" out || fail "the restart did not resume at step 10"
grep -q "^elastic_train: 2 ranks trained to step 20$" out || fail "the restart did not finish 20 steps"
[ "$(wc -l < ck.st.pids.2)" -eq 2 ] || fail "not 2 ranks in the restart"
[ ! -e ck.st.pids.1 ] || fail "a third run on 1 rank"
left=$(pgrep -f "^$prog ck.st")
[ -z "$left" ] || fail "processes of $prog left: $left"

"$ckpt" verify ck.st || fail "the checkpoint does not verify"
timeout 120 "$ref" "$mode" ref.st ck.st || fail "3 ranks then 2 differ ($mode) from one process"
echo "elastic.sh: ok ($mode, the survivors stopped $took s after the kill)"
