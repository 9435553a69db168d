# export_torch.py: the file NAME_export wrote (EXPORTED) read by PyTorch
# without dtc, as a plain safetensors file (through the safetensors package
# when it is there, else by its format: an 8-byte little-endian header length,
# the JSON header, the raw data), and examples/mlp.dt's forward computed by
# torch on the batch X (raw f32 [64, 784]) from those params must give dtc's
# logits (LOGITS, raw f32 [64, 10]) within 1e-4 of their largest magnitude.
# Prints "skipped" and exits 0 when torch cannot be imported.
# usage: export_torch.py EXPORTED X LOGITS
import json, struct, sys

try:
    import torch
except ImportError:
    print('export_torch: skipped: /usr/bin/python3 cannot import torch')
    sys.exit(0)

path, xpath, lpath = sys.argv[1:4]
try:
    from safetensors.torch import load_file
    params, how = load_file(path), 'safetensors'
except ImportError:
    raw = open(path, 'rb').read()
    n = struct.unpack('<Q', raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    head.pop('__metadata__', None)
    params, how = {}, 'the format'
    for name, t in head.items():
        assert t['dtype'] == 'F32', t
        b, e = t['data_offsets']
        params[name] = torch.frombuffer(bytearray(raw[8 + n + b:8 + n + e]),
                                        dtype=torch.float32).reshape(t['shape'])
assert sorted(params) == ['b1', 'b2', 'w1', 'w2'], sorted(params)
assert list(params['w1'].shape) == [784, 256] and list(params['w2'].shape) == [256, 10]
x = torch.frombuffer(bytearray(open(xpath, 'rb').read()), dtype=torch.float32).reshape(64, 784)
want = torch.frombuffer(bytearray(open(lpath, 'rb').read()), dtype=torch.float32).reshape(64, 10)
got = torch.relu(x @ params['w1'] + params['b1']) @ params['w2'] + params['b2']
diff = (got - want).abs().max().item()
scale = max(1.0, want.abs().max().item())
print('export_torch: read by %s; logits max |diff| %.3g of %.3g' % (how, diff, scale))
sys.exit(0 if diff <= 1e-4 * scale else 1)
