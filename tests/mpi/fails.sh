#!/bin/sh
# fails.sh TEXT CMD...: runs CMD and passes when it ends with a non-zero
# status of its own (124 is timeout's: a hang) and its output holds TEXT.
text=$1
shift
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out"
if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ]; then
  echo "fails.sh: exit status $rc, expected a failure of its own" >&2
  exit 1
fi
printf '%s\n' "$out" | grep -qF -- "$text" || { echo "fails.sh: no '$text' in the output" >&2; exit 1; }
