# port_torch.py: what nanogpt_torch.py and resnet_torch.py share: writing
# torch's weights as a safetensors file, running port_steps on them, and
# comparing its logits and losses with torch's in float32 and float64.
#
# The comparison of the losses: torch's float32 run is the reference while
# it tracks its own float64 run; where it drifts (float32 rounding grown by
# 20 optimizer steps: Adam divides small gradients by their own size, batch
# norm divides by small variances), dtc's loss must be as close to float64
# as float32 torch is, times 2, or within TOL of it. Either way a wrong
# gradient, update or schedule shows: each moves the loss by far more
# (a warm-up of 5 steps for 4 in nanogpt.dt: 2e-3 from step 1 on).
#
# TOL: a loss is a mean of log-softmaxes over at most 64 rows of at most
# V = 64 logits, each a float32 dot product of at most 4 D = 128 terms
# (nanogpt.dt; resnet.dt's convolutions sum 144), within k 2^-24 ~ 8e-6
# of its sum at worst, far less in practice (rounding errors cancel):
# 1e-5 relative bounds one step's. The logits after training follow 20
# updates of float32 rounding, so they are held to logits_tol (1e-4) or
# twice float32 torch's distance from float64, whichever is larger: a
# batch norm's momentum of 0.11 for 0.1 moves resnet.dt's by 3e-2.
import json
import os
import struct
import subprocess

import numpy as np
import torch

TOL = 1e-5


def save_safetensors(path, tensors):
    """safetensors.torch.save_file without the package."""
    header, data, off = {}, b"", 0
    for name, t in tensors.items():
        raw = t.detach().contiguous().float().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape),
                        "data_offsets": [off, off + len(raw)]}
        data += raw
        off += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


def rel(got, want):
    """The largest difference over the largest magnitude of want."""
    want = np.asarray(want, dtype=np.float64).ravel()
    got = np.asarray(got, dtype=np.float64).ravel()
    if got.shape != want.shape:
        return float("inf")
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))


def run_steps(exe, kind, weights, data_dir, steps):
    """port_steps's logits0, losses and logits1, or None after a message."""
    run = subprocess.run([exe, kind, weights, data_dir, str(steps)], capture_output=True,
                         text=True)
    if run.returncode:
        print(f"{kind}_torch: {exe} failed: {run.stderr.strip()}")
        return None
    out = {"loss": []}
    for line in run.stdout.splitlines():
        w = line.split()
        if w[0] == "loss":
            out["loss"].append(float(w[2]))
        else:
            out[w[0]] = np.array([float(v) for v in w[1:]])
    if len(out["loss"]) != steps or "logits0" not in out or "logits1" not in out:
        print(f"{kind}_torch: {exe} printed {len(out['loss'])} losses of {steps}")
        return None
    return out


def compare(kind, got, t32, t64, logits_tol):
    """Checks got (run_steps's) against the float32 and float64 runs of
    torch, each a dict of logits0, loss (a list) and logits1. Prints one
    line of figures; True when they agree."""
    ok = True
    e0 = rel(got["logits0"], t64["logits0"])
    e1 = rel(got["logits1"], t64["logits1"])
    t1 = rel(t32["logits1"], t64["logits1"])
    if e0 > TOL:
        print(f"{kind}_torch: initial logits off by {e0:.3g} relative > {TOL}")
        ok = False
    if e1 > max(logits_tol, 2 * t1):
        print(f"{kind}_torch: logits after training off by {e1:.3g} relative, float32 torch "
              f"{t1:.3g}")
        ok = False
    w32 = w64 = d32 = 0.0
    for s, (g, a, b) in enumerate(zip(got["loss"], t32["loss"], t64["loss"])):
        e32, e64, drift = abs(g - a) / abs(a), abs(g - b) / abs(b), abs(a - b) / abs(b)
        w32, w64, d32 = max(w32, e32), max(w64, e64), max(d32, drift)
        if e32 > TOL and e64 > max(TOL, 2 * drift):
            print(f"{kind}_torch: step {s}: dtc loss {g:.9g}, torch {a:.9g} (float64 {b:.9g}): "
                  f"off by {e32:.3g} relative > {TOL}, {e64:.3g} from float64 where float32 "
                  f"torch is {drift:.3g}")
            ok = False
    n = len(got["loss"])
    print(f"{kind}_torch: initial logits within {e0:.2g} of float64 torch; {n} losses "
          f"{got['loss'][0]:.6g} .. {got['loss'][-1]:.6g}: within {w32:.2g} relative of "
          f"float32 torch, {w64:.2g} of float64 torch (float32 torch: {d32:.2g}); logits "
          f"after training within {e1:.2g} of float64 (float32 torch {t1:.2g})"
          + ("" if ok else ": FAIL"))
    return ok


def save_batches(d, arrays):
    """Each array as DIR/NAME.npy, f32 or i32."""
    os.makedirs(d, exist_ok=True)
    for name, v in arrays.items():
        v = v.numpy()
        v = v.astype("<i4") if np.issubdtype(v.dtype, np.integer) else v.astype("<f4")
        np.save(os.path.join(d, name + ".npy"), v)

