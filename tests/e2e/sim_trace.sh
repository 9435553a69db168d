#!/bin/sh
# sim_trace.sh DTC MODEL.dt OUT.json: dtc --emit=sim prints the per-device
# summary and writes a Chrome trace that is valid JSON with "X" events.
set -e
"$1" --emit=sim "$2" -o "$3" > "$3.txt"
grep -q '^predicted step: [0-9.]* ms (bottleneck: device [0-9]*)$' "$3.txt"
python3 -c '
import json, sys
t = json.load(open(sys.argv[1]))
x = [e for e in t["traceEvents"] if e["ph"] == "X"]
assert x and all(e["tid"] in (0, 1) and e["dur"] >= 0 for e in x)
' "$3"
