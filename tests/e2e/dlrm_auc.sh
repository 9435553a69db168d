#!/bin/sh
# dlrm_auc.sh: examples/dlrm end to end. criteo_gen writes synthetic lines of
# Criteo's text format from a known model and prints the held-out ceiling
# (the AUC of the true click probabilities); train_dlrm trains
# examples/dlrm.dt on the rest and must end within 0.01 of that AUC, and its
# held-out log loss within 0.02 of the true probabilities'. Then a file with
# one malformed line must stop train_dlrm with exit status 1 and a message
# naming the file and the line, and a missing file likewise.
#
# Why 0.01 holds: with 80000 training lines, 26 tables of 11 values (10 and
# missing) and examples/dlrm.dt's Adam at 0.002 decaying by 0.3 an epoch over
# 4, the fitted model's AUC ended 0.0036 to 0.0060 below the ceiling on the
# data seeds 1 to 5 and 7 (0.0057 on seed 7, the one run here): the bound is
# 0.004 beyond the worst, four times the spread between seeds. The ceiling
# and the model are scored on the same 20000 held-out lines, so the labels'
# sampling noise (an AUC's standard error there, about 0.003) moves both
# alike and leaves the difference to the fit. The seeds fix every draw, so a
# run differs from another only by the order of float sums on another CPU,
# which moves the AUC by far less than that margin.
# usage: dlrm_auc.sh CRITEO_GEN TRAIN_DLRM
set -eu
gen=$1
train=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; cat "$tmp/out" "$tmp/err" 2>/dev/null; exit 1; }

"$gen" -o "$tmp/synth.txt" --lines 100000 --holdout 20000 --vocab 10 --seed 7 >"$tmp/ceiling"
cat "$tmp/ceiling"
"$train" --data "$tmp/synth.txt" --holdout 20000 --epochs 4 --lr 0.002 --decay 0.3 \
  >"$tmp/out" 2>"$tmp/err" || fail "train_dlrm failed"
cat "$tmp/out"
# ceiling: "held-out H of N lines: ceiling auc A log loss L"
# epochs:  "epoch E: train loss T, held-out log loss L auc A"
awk -v ceiling="$(cat "$tmp/ceiling")" '
  BEGIN { n = split(ceiling, c, " "); auc0 = c[8] + 0; loss0 = c[11] + 0 }
  /^epoch [0-9]+: / { loss = $9 + 0; auc = $11 + 0; epochs++ }
  END {
    gap = auc0 - auc
    printf "held-out auc %.6f, ceiling %.6f, gap %.6f; log loss %.6f against %.6f\n",
           auc, auc0, gap, loss, loss0
    exit !(epochs == 4 && auc0 > 0.7 && gap < 0.01 && gap > -0.01 &&
           loss - loss0 < 0.02 && loss - loss0 > -0.02)
  }' "$tmp/out" || fail "held-out AUC not within 0.01 of the ceiling"

# line 1234 loses its label's digit to a '2'; the lines before it are fine
awk 'NR == 1234 { $0 = "2" substr($0, 2) } { print }' "$tmp/synth.txt" >"$tmp/bad.txt"
if "$train" --data "$tmp/bad.txt" >"$tmp/out" 2>"$tmp/err"; then
  fail "a malformed line was accepted"
fi
grep -q "^train_dlrm: $tmp/bad.txt:1234:1: label '2' is not 0 or 1\$" "$tmp/err" ||
  fail "the malformed line's message"
# a field cut from line 77
awk -F '\t' -v OFS='\t' 'NR == 77 { NF = 39 } { print }' "$tmp/synth.txt" >"$tmp/bad.txt"
if "$train" --data "$tmp/bad.txt" >"$tmp/out" 2>"$tmp/err"; then
  fail "a short line was accepted"
fi
grep -q "^train_dlrm: $tmp/bad.txt:77: 39 tab-separated fields, expected 40" "$tmp/err" ||
  fail "the short line's message"
if "$train" --data "$tmp/absent.txt" >"$tmp/out" 2>"$tmp/err"; then
  fail "a missing file was accepted"
fi
grep -q "^train_dlrm: $tmp/absent.txt: cannot open" "$tmp/err" || fail "the missing file's message"
echo "dlrm_auc: within 0.01 of the ceiling; malformed lines refused with their line"
