#!/usr/bin/env python3
"""trace_collectives.py: each collective of a step across the ranks of one host.

    bench/trace_collectives.py [--sim SIM.json] [--skip N] TRACE.json.rank0 TRACE.json.rank1 ...

The traces are what the runtime wrote of one job's ranks on one host
(DTRT_TRACE=TRACE.json, docs/RUNTIME.md, Traces); their clock_origin_us puts
their spans on the host's one clock. For the k-th collective of a step
(shard_slice, which moves nothing, left out), over the steps (--step:
train_step, the default, or forward) after the first --skip (default 3), the medians of: each rank's arrival before the last
rank's (us), each rank's end after the last arrival (us), and the
collective's time from the last arrival to the last end, which is what the
simulator prices (with --sim, the k-th collective of that name on the
simulated device 0). A rank that ends long after the others lost its core
(docs/PERFORMANCE.md, "Collectives on a shared core")."""
import argparse
import json
import statistics


def load(path):
    with open(path) as f:
        ev = json.load(f)["traceEvents"]
    meta = [e for e in ev if e.get("ph") == "M" and e["name"] == "process_name"]
    args = meta[0]["args"] if meta else {}
    if "clock_origin_us" not in args:
        raise SystemExit(f"{path}: no clock_origin_us (a trace of an older libdtrt)")
    return args, [e for e in ev if e.get("ph") == "X"]


def per_step(ev, origin, skip, name):
    steps = sorted((e for e in ev if e.get("tid") == 2 and e["name"] == name),
                   key=lambda e: e["ts"])[skip:]
    comm = sorted((e for e in ev if e.get("tid") == 1 and e["name"] != "shard_slice"),
                  key=lambda e: e["ts"])
    out = []
    for s in steps:
        out.append([(c["name"], origin + c["ts"], origin + c["ts"] + c["dur"]) for c in comm
                    if s["ts"] <= c["ts"] < s["ts"] + s["dur"]])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sim")
    ap.add_argument("--skip", type=int, default=3)
    ap.add_argument("--step", default="train_step", help="train_step (default) or forward")
    ap.add_argument("traces", nargs="+")
    a = ap.parse_args()
    ranks = []
    for t in a.traces:
        args, ev = load(t)
        ranks.append((args.get("host", ""), per_step(ev, args["clock_origin_us"], a.skip, a.step)))
    if len(set(h for h, _ in ranks)) != 1:
        raise SystemExit("the traces are of different hosts: their clocks differ")
    steps = min(len(s) for _, s in ranks)
    if not steps:
        raise SystemExit(f"no step after the first {a.skip}")
    calls = [s for _, s in ranks]
    n = len(calls[0][0])
    if any(len(c[i]) != n for c in calls for i in range(steps)):
        raise SystemExit("the ranks' steps have different collectives")
    pred = {}
    if a.sim:
        with open(a.sim) as f:
            sim = [e for e in json.load(f)["traceEvents"]
                   if e.get("ph") == "X" and e.get("cat") == "comm" and e.get("pid") == 0]
        for e in sorted(sim, key=lambda e: e["ts"]):
            pred.setdefault(e["name"].split()[0], []).append(e["dur"])
    seen = {}
    print(f"{'k':>3} {'collective':16} {'arrival before last, us':>26} "
          f"{'end after last arrival, us':>28} {'measured':>9} {'predicted':>9}")
    for k in range(n):
        name = calls[0][0][k][0]
        arrive = [[] for _ in calls]
        end = [[] for _ in calls]
        took = []
        for i in range(steps):
            last = max(c[i][k][1] for c in calls)
            for r, c in enumerate(calls):
                arrive[r].append(last - c[i][k][1])
                end[r].append(c[i][k][2] - last)
            took.append(max(c[i][k][2] for c in calls) - last)
        j = seen[name] = seen.get(name, -1) + 1
        p = pred.get(name, [])
        ptext = f"{p[j]:9.1f}" if j < len(p) else "        -"
        print(f"{k:3} {name:16} {' '.join(f'{statistics.median(x):8.1f}' for x in arrive):>26} "
              f"{' '.join(f'{statistics.median(x):8.1f}' for x in end):>28} "
              f"{statistics.median(took):9.1f} {ptext}")


if __name__ == "__main__":
    main()
