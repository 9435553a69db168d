#!/bin/sh
# det_resume.sh: deterministic mode across layouts and checkpoints
# (tests/mpi/ckpt_train.c over examples/mlp.dt in 8 pieces, built for one
# process, for 3 ranks at 0.5/0.25/0.25 and for 2 ranks even): 10 steps on 3
# ranks, saved, then 10 more on 2 ranks and on one process, each bit for bit
# the checkpoint of 20 steps on one process; the same for 10 steps on 2 ranks
# then 10 on 3.
# usage: det_resume.sh ONE DP3 DP2 WORKDIR (env MPIRUN, MPIFLAGS)
set -u
one=$1 dp3=$2 dp2=$3 dir=$4
fail() { echo "FAIL: $*"; exit 1; }
mpi() { n=$1; shift; timeout 120 $MPIRUN -n "$n" $MPIFLAGS "$@"; }
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir" || fail "no $dir"

timeout 120 "$one" train 20 ref.st || fail "20 steps on one process"
mpi 3 "$dp3" train 10 dp3.st || fail "10 steps on 3 ranks"
mpi 2 "$dp2" resume dp3.st 20 dp2.st || fail "resumed on 2 ranks"
timeout 120 "$one" resume dp3.st 20 one.st || fail "resumed on one process"
timeout 120 "$one" same ref.st dp2.st || fail "3 then 2 ranks differ from one process"
timeout 120 "$one" same ref.st one.st || fail "3 ranks then one process differ"
mpi 2 "$dp2" train 10 two.st || fail "10 steps on 2 ranks"
mpi 3 "$dp3" resume two.st 20 back.st || fail "resumed on 3 ranks"
timeout 120 "$one" same ref.st back.st || fail "2 then 3 ranks differ from one process"
echo "det_resume: every layout gave the bits of one process"
