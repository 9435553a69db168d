#!/usr/bin/env python3
"""trace_vs_sim.py: a measured step against the simulator's, op by op.

    bench/trace_vs_sim.py --sim SIM.json [--device D] TRACE.json [TRACE.json ...]

SIM.json is `dtc --emit=sim -o SIM.json` of the model, TRACE.json what the
runtime wrote of one process's steps (DTRT_TRACE=TRACE.json, docs/RUNTIME.md,
Traces). For each trace, each step after the first --skip (default 3) is
split by kernel name: the sum of its kernels' spans of that name, and
`generated`, the step less all its kernels (the generated loops and GEMM);
the median over the steps, then over the traces. The predicted side sums the
simulated ops' durations by op name; the ops that run in generated code
(no kernel of that name in the traces) count as `generated`. Prints one line
per name: measured us, predicted us and their ratio, largest first, then the
predicted parts of `generated`. With --device D, the predicted side is
device D's alone (the simulator's pid D, the mesh's device D; give the trace
of the rank that runs it), else every device's summed."""
import argparse
import json
import statistics


def events(path):
    with open(path) as f:
        return [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]


def measured(path, skip):
    ev = events(path)
    steps = sorted((e for e in ev if e.get("tid") == 2), key=lambda e: e["ts"])[skip:]
    kernels = [e for e in ev if e.get("tid") in (0, 1)]
    per_step = []
    for s in steps:
        d = {}
        for k in kernels:
            if s["ts"] <= k["ts"] < s["ts"] + s["dur"]:
                d[k["name"]] = d.get(k["name"], 0) + k["dur"]
        d["generated"] = s["dur"] - sum(d.values())
        d["step"] = s["dur"]
        per_step.append(d)
    if not per_step:
        raise SystemExit(f"{path}: no step after the first {skip}")
    names = set().union(*per_step)
    return {n: statistics.median(p.get(n, 0) for p in per_step) for n in names}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sim", required=True)
    ap.add_argument("--skip", type=int, default=3)
    ap.add_argument("--device", type=int)
    ap.add_argument("traces", nargs="+")
    a = ap.parse_args()
    runs = [measured(t, a.skip) for t in a.traces]
    meas = {n: statistics.median(r.get(n, 0) for r in runs) for n in set().union(*runs)}
    by_op = {}
    for e in events(a.sim):
        if a.device is not None and e.get("pid") != a.device:
            continue
        op = e["name"].split()[0]
        by_op[op] = by_op.get(op, 0) + e["dur"]
    gen = {n: v for n, v in by_op.items() if n not in meas}
    pred = {n: v for n, v in by_op.items() if n in meas}
    pred["generated"] = sum(gen.values())
    pred["step"] = sum(by_op.values())
    print(f"{'op':24} {'measured us':>12} {'predicted us':>13} {'ratio':>6}")
    for n in sorted(meas, key=lambda n: -meas[n]):
        p = pred.get(n, 0)
        ratio = f"{meas[n] / p:6.2f}" if p else "     -"
        print(f"{n:24} {meas[n]:12.1f} {p:13.1f} {ratio}")
    print("generated, predicted:",
          ", ".join(f"{n} {v:.0f}" for n, v in sorted(gen.items(), key=lambda x: -x[1])))


if __name__ == "__main__":
    main()
