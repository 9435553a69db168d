#!/bin/sh
# trace_ranks.sh FILE N COMMAND...: runs COMMAND (an SPMD job of N ranks) with
# DTRT_TRACE=FILE and checks that every rank R wrote FILE.rankR, a Chrome
# trace with pid R, as many train_step spans as every other rank, and its
# collectives on tid 1 inside its step spans (train_step or forward), and
# one counter "memory": the most libdtrt held for the model (positive) and
# the growth of the peak resident set (known on Linux). Ranks of one host
# share the clock: the clock_origin_us of each trace lines their spans up,
# and no rank ends a collective that needs every rank's data before the
# last rank has started it.
set -e
file=$1 n=$2
shift 2
rm -f "$file" "$file".rank*
DTRT_TRACE="$file" "$@"
python3 - "$file" "$n" <<'PY'
import json, sys
path, n = sys.argv[1], int(sys.argv[2])
steps = set()
lined = []
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
    meta = [e for e in json.load(open('%s.rank%d' % (path, r)))['traceEvents']
            if e['ph'] == 'M' and e['name'] == 'process_name'][0]['args']
    assert meta['clock_origin_us'] > 0 and meta['host'], meta
    whole = ('all_reduce', 'all_gather', 'reduce_scatter', 'all_to_all')
    lined.append((meta['host'], [(c['name'], meta['clock_origin_us'] + c['ts'], c['dur'])
                                  for c in comm if c['name'] in whole]))
    mem = [e for e in json.load(open('%s.rank%d' % (path, r)))['traceEvents'] if e['ph'] == 'C']
    assert len(mem) == 1 and mem[0]['name'] == 'memory', 'rank %d: no memory counter' % r
    assert mem[0]['args']['peak_bytes'] > 0 and mem[0]['args']['rss_growth'] >= 0, mem
assert len(steps) == 1, 'ranks ran different numbers of steps'
if len(set(h for h, _ in lined)) == 1:
    calls = [c for _, c in lined]
    assert calls[0] and all(len(c) == len(calls[0]) for c in calls), 'collectives differ'
    for j in range(len(calls[0])):
        assert len(set(c[j][0] for c in calls)) == 1, 'collective %d differs' % j
        last = max(c[j][1] for c in calls)
        for r, c in enumerate(calls):
            assert c[j][1] + c[j][2] >= last - 1, \
                'rank %d ended %s %d %.1f us before the last rank started it' % (r, c[j][0], j, last - c[j][1] - c[j][2])
PY
# bench/trace_collectives.py reads the same traces: a row per collective of
# a step, no rank ending one before the last arrival
here=$(dirname "$0")
ranks=$(seq 0 $((n - 1)) | sed "s|^|$file.rank|")
# shellcheck disable=SC2086
python3 "$here/../../bench/trace_collectives.py" --skip 1 $ranks | python3 -c '
import sys
rows = [l.split() for l in sys.stdin.read().splitlines()[1:]]
assert rows and all(r[1] in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send", "bcast") for r in rows), rows
n = int(sys.argv[1])
assert all(len(r) == 2 + 2 * n + 2 and min(map(float, r[2 + n:2 + 2 * n])) >= -1 for r in rows), rows
' "$n"
