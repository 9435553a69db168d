#!/bin/sh
# ckpt.sh: one checkpoint for any layout (tests/mpi/ckpt_train.c over
# examples/mlp.dt, built for one process, for 3 ranks data parallel at
# 0.5/0.25/0.25 and for 2 ranks tensor parallel, and its inference build):
#  - 10 steps on 3 ranks, saved, then 10 more on 2 ranks and on one process,
#    each within 1e-4 of 20 steps on one process; the 2-rank file back on 3;
#  - dtc-ckpt list and verify; a corrupt and a truncated file refused on load
#    (every rank; the model untouched) and by verify;
#  - a save whose writes fail on one rank fails on every rank, leaves the
#    last checkpoint and no temporary file; one whose rank dies mid-save
#    ends the job and leaves the last checkpoint;
#  - the inference build loads the training checkpoint and the export;
#    PyTorch reads the export and computes dtc's logits (skipped without
#    torch);
#  - per-rank files of the earlier format: refused with a pointer to
#    dtc-ckpt convert, converted into the same checkpoint bit for bit;
#  - the export as weights (NAME_load_params) over a trained model on 2
#    and 3 ranks: the same params, zero optimizer state and step 0 as one
#    process's, bit for bit; 5 steps from there the same as 5 steps from a
#    model just created (Adam's first steps amplify rounding without bound,
#    so layouts are compared before them); a checkpoint as weights refused
#    on every rank (its optimizer state is extra); dtc-ckpt import of the
#    export resumes as NAME_load_params starts, bit for bit.
# usage: ckpt.sh ONE DP3 TP2 INFER DTC_CKPT SRCDIR WORKDIR (env MPIRUN,
# MPIFLAGS)
set -u
one=$1 dp3=$2 tp2=$3 infer=$4 tool=$5 here=$6 dir=$7
fail() { echo "FAIL: $*"; exit 1; }
mpi() { n=$1; shift; timeout 120 $MPIRUN -n "$n" $MPIFLAGS "$@"; }
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir" || fail "no $dir"

timeout 120 "$one" train 20 ref.st || fail "20 steps on one process"
mpi 3 "$dp3" train 10 dp3.st || fail "10 steps on 3 ranks"
[ -e dp3.st ] && [ ! -e dp3.st.rank0 ] || fail "not one file"
mpi 2 "$tp2" resume dp3.st 20 tp2.st || fail "resumed on 2 ranks"
timeout 120 "$one" resume dp3.st 20 one.st || fail "resumed on one process"
timeout 120 "$one" compare ref.st tp2.st || fail "3 then 2 ranks differ from one process"
timeout 120 "$one" compare ref.st one.st || fail "3 ranks then one process differ"
mpi 3 "$dp3" resume tp2.st 22 back.st || fail "the 2-rank file on 3 ranks"
timeout 120 "$one" resume ref.st 22 ref22.st || fail "22 steps"
timeout 120 "$one" compare ref22.st back.st || fail "3, 2, 3 ranks differ from one process"

"$tool" verify dp3.st || fail "verify"
"$tool" list dp3.st > list.txt || fail "list"
cat list.txt
grep -q "^step        10$" list.txt || fail "list: no step"
grep -q "^  w1  *F32 \[784,256\]  *802816 bytes$" list.txt || fail "list: no w1"
grep -q "^  w1__m  *F32" list.txt || fail "list: no optimizer state"
grep -q "^plan        mesh 3 (3 ranks), plan " list.txt || fail "list: no plan"
grep -q "^model hash  [0-9a-f]\{16\}$" list.txt || fail "list: no model hash"

size=$(wc -c < dp3.st)
cp dp3.st bad.st
printf '\377' | dd of=bad.st bs=1 seek=$((size - 100)) conv=notrunc 2>/dev/null
cmp -s bad.st dp3.st && fail "no byte changed"
"$tool" verify bad.st 2> err && fail "verify passed a corrupt file"
grep -q "is corrupt: its checksum is" err || fail "verify: $(cat err)"
timeout 120 "$one" refuse bad.st > out || fail "a corrupt file: $(cat out)"
grep -q "is corrupt" out || fail "no checksum message: $(cat out)"
mpi 2 "$tp2" refuse bad.st > out || fail "a corrupt file on 2 ranks"
[ "$(grep -c "refused: .*is corrupt" out)" -eq 2 ] || fail "not every rank refused: $(cat out)"
head -c $((size - 1000)) dp3.st > short.st
timeout 120 "$one" refuse short.st > out || fail "a truncated file"
grep -q "data_offsets outside the" out || fail "no message of the truncated file: $(cat out)"
"$tool" verify short.st 2>/dev/null && fail "verify passed a truncated file"

mpi 3 "$dp3" fail-save dp3.st saved.st > out 2>&1 || fail "a save failing on one rank: $(cat out)"
[ "$(grep -c "save failed: rank 2 failed: save: cannot write .*File too large" out)" -eq 3 ] ||
  fail "not every rank reported the failed write: $(cat out)"
ls saved.st.tmp.* 2>/dev/null && fail "a temporary file is left"
timeout 120 "$one" same dp3.st saved.st > /dev/null || fail "the last checkpoint changed"
mpi 3 "$dp3" die-save dp3.st dead.st > out 2>&1 && fail "a rank died and the job succeeded"
timeout 120 "$one" same dp3.st dead.st > /dev/null || fail "a rank died: the last checkpoint changed"

timeout 120 "$one" forward dp3.st x.raw train.raw || fail "forward"
timeout 120 "$infer" forward dp3.st x.raw infer.raw || fail "the inference build's load"
timeout 120 "$one" close train.raw infer.raw || fail "the inference build's logits"
timeout 120 "$one" export dp3.st exp.st || fail "export"
"$tool" list exp.st > list.txt || fail "list of the export"
grep -q "__" list.txt && fail "the export holds optimizer state"
timeout 120 "$infer" forward exp.st x.raw exp.raw || fail "the inference build loads the export"
timeout 120 "$one" close train.raw exp.raw || fail "the export's logits"
timeout 120 "$one" refuse exp.st > out || fail "the training build loaded the export"
grep -q "holds this model's params alone (an export).*NAME_load_params" out ||
  fail "no pointer to load_params: $(cat out)"
/usr/bin/python3 "$here/export_torch.py" exp.st x.raw train.raw || fail "PyTorch and the export"

timeout 120 "$one" params - exp.st 0 p_one.st || fail "load_params on one process"
mpi 2 "$tp2" params dp3.st exp.st 0 p_tp2.st || fail "load_params on 2 ranks"
mpi 3 "$dp3" params dp3.st exp.st 0 p_dp3.st || fail "load_params on 3 ranks"
timeout 120 "$one" same p_one.st p_tp2.st > /dev/null || fail "load_params: 2 ranks unlike one process"
timeout 120 "$one" same p_one.st p_dp3.st > /dev/null || fail "load_params: 3 ranks unlike one process"
mpi 2 "$tp2" params - exp.st 5 f_tp2.st || fail "5 steps from the weights on 2 ranks"
mpi 2 "$tp2" params dp3.st exp.st 5 t_tp2.st || fail "5 steps from the weights over a trained model"
timeout 120 "$one" same f_tp2.st t_tp2.st > /dev/null || fail "load_params kept some of the training"
mpi 2 "$tp2" refuse-params dp3.st > out || fail "a checkpoint as weights on 2 ranks"
[ "$(grep -c "refused: .*load_params: dp3.st does not fit the model; 8 extra: b1__m f32\[256\]" out)" -eq 2 ] ||
  fail "not every rank refused a checkpoint as weights: $(cat out)"
"$tool" import imp.st dp3.st exp.st || fail "dtc-ckpt import"
"$tool" verify imp.st | grep -q "ok, step 0" || fail "the import is not of step 0"
mpi 2 "$tp2" resume imp.st 5 imp5.st || fail "the import resumed on 2 ranks"
timeout 120 "$one" same f_tp2.st imp5.st > /dev/null || fail "the import resumes unlike load_params"
"$tool" import imp2.st dp3.st dp3.st 2> err && fail "imported a checkpoint as weights"
grep -q "8 extra: b1__m" err || fail "import: $(cat err)"
[ ! -e imp2.st ] || fail "a refused import wrote its output"

/usr/bin/python3 "$here/old_ckpt.py" dp3.st old.st 3 || fail "old_ckpt.py"
timeout 120 "$one" refuse old.st > out || fail "per-rank files loaded into one process"
grep -q "dtc-ckpt convert old.st old.st.rank0" out || fail "no pointer to convert: $(cat out)"
mpi 2 "$tp2" refuse old.st > out || fail "per-rank files of 3 ranks loaded on 2"
grep -q "dtc-ckpt convert" out || fail "no pointer to convert on 2 ranks: $(cat out)"
"$tool" convert conv.st old.st.rank2 old.st.rank0 2> err && fail "converted without rank 1"
grep -q "rank 2 of 3; 2 files given" err || fail "convert: $(cat err)"
"$tool" convert conv.st old.st.rank2 old.st.rank0 old.st.rank1 || fail "convert"
"$tool" verify conv.st || fail "verify of the converted file"
timeout 120 "$one" same dp3.st conv.st > /dev/null || fail "the converted file differs"
mpi 2 "$tp2" resume conv.st 20 conv20.st || fail "the converted file on 2 ranks"
timeout 120 "$infer" refuse conv.st > out || fail "the inference build loaded a converted file"
grep -q "does not say which of its tensors are params" out || fail "$(cat out)"
echo "ckpt: every layout loads every checkpoint"
