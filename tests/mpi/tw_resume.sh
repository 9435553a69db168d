#!/bin/sh
# tw_resume.sh: checkpoints of table-wise tables are whole tensors, the
# layout's own business (tests/mpi/ckpt_dlrm.c over tests/mpi/dlrm_sparse.dt,
# built for one process and table-wise on 3 ranks, dlrm_sparse_tw3.dt):
# 3 steps on 3 ranks, saved, then 3 more on one process, and 3 steps on one
# process then 3 more on 3 ranks, each within 1e-4 of 6 steps on one
# process (tables, their Adagrad sums and the dense params).
# usage: tw_resume.sh ONE TW3 WORKDIR (env MPIRUN, MPIFLAGS)
set -u
one=$1 tw3=$2 dir=$3
fail() { echo "FAIL: $*"; exit 1; }
mpi() { n=$1; shift; timeout 120 $MPIRUN -n "$n" $MPIFLAGS "$@"; }
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir" || fail "no $dir"

timeout 120 "$one" train 6 ref.st || fail "6 steps on one process"
mpi 3 "$tw3" train 3 tw3.st || fail "3 steps on 3 ranks"
timeout 120 "$one" resume tw3.st 6 one.st || fail "resumed on one process"
timeout 120 "$one" compare ref.st one.st || fail "3 ranks then one process differ"
timeout 120 "$one" train 3 half.st || fail "3 steps on one process"
mpi 3 "$tw3" resume half.st 6 back.st || fail "resumed on 3 ranks"
timeout 120 "$one" compare ref.st back.st || fail "one process then 3 ranks differ"
echo "tw_resume: table-wise checkpoints resume on one process and back"
