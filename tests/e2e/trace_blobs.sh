#!/bin/sh
# trace_blobs.sh DTC BLOBS.dt TRAIN_BLOBS DIR: runs train_blobs with
# DTRT_TRACE=DIR/blobs_trace.json and checks the trace is a Chrome trace with
# one span per train_step and forward call, and inside each exactly one span
# per dtrt_k_* call of that function in the code dtc generates.
set -e
"$1" --emit=llvm "$2" -o "$4/blobs_trace.ll"
rm -f "$4/blobs_trace.json"
DTRT_TRACE="$4/blobs_trace.json" "$3" > /dev/null
python3 - "$4/blobs_trace.ll" "$4/blobs_trace.json" <<'PY'
import json, re, sys
calls, fn = {}, None
for line in open(sys.argv[1]):
    m = re.match(r'define internal i32 @\w+\.(train_step|forward)\(', line)
    if m:
        fn = m.group(1)
        calls[fn] = []
    elif line.startswith('}'):
        fn = None
    elif fn:
        calls[fn] += re.findall(r'call i32 @dtrt_k_(\w+)\(', line)
t = json.load(open(sys.argv[2]))
x = [e for e in t['traceEvents'] if e['ph'] == 'X']
steps = [e for e in x if e['cat'] == 'step']
kernels = sorted((e for e in x if e['cat'] != 'step'), key=lambda e: e['ts'])
assert [s['name'] for s in steps].count('train_step') == 300, 'train_step spans'
assert [s['name'] for s in steps].count('forward') == 10, 'forward spans'
used = 0
for s in steps:
    inside = [k['name'] for k in kernels
              if k['ts'] >= s['ts'] and k['ts'] + k['dur'] <= s['ts'] + s['dur'] + 0.002]
    assert inside == calls[s['name']], (s['name'], inside, calls[s['name']])
    used += len(inside)
assert used == len(kernels), 'kernel spans outside every step'
assert all(e['pid'] == 0 and e['dur'] >= 0 for e in x)
PY
