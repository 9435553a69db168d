#!/bin/sh
# trace_ranks.sh FILE N COMMAND...: runs COMMAND (an SPMD job of N ranks) with
# DTRT_TRACE=FILE and checks that every rank R wrote FILE.rankR, a Chrome
# trace with pid R, as many train_step spans as every other rank, and its
# collectives on tid 1 inside its step spans (train_step or forward), and
# one counter "memory": the most libdtrt held for the model (positive) and
# the growth of the peak resident set (known on Linux).
set -e
file=$1 n=$2
shift 2
rm -f "$file" "$file".rank*
DTRT_TRACE="$file" "$@"
python3 - "$file" "$n" <<'PY'
import json, sys
path, n = sys.argv[1], int(sys.argv[2])
steps = set()
for r in range(n):
    x = [e for e in json.load(open('%s.rank%d' % (path, r)))['traceEvents'] if e['ph'] == 'X']
    assert x and all(e['pid'] == r for e in x), 'rank %d: pid' % r
    spans = [e for e in x if e['tid'] == 2]
    st = [e for e in spans if e['name'] == 'train_step']
    comm = [e for e in x if e['tid'] == 1]
    assert st and comm, 'rank %d: no steps or no collectives' % r
    assert all(any(s['ts'] <= c['ts'] and c['ts'] + c['dur'] <= s['ts'] + s['dur'] + 0.002
                   for s in spans) for c in comm), 'rank %d: a collective outside the steps' % r
    steps.add(len(st))
    mem = [e for e in json.load(open('%s.rank%d' % (path, r)))['traceEvents'] if e['ph'] == 'C']
    assert len(mem) == 1 and mem[0]['name'] == 'memory', 'rank %d: no memory counter' % r
    assert mem[0]['args']['peak_bytes'] > 0 and mem[0]['args']['rss_growth'] >= 0, mem
assert len(steps) == 1, 'ranks ran different numbers of steps'
PY
