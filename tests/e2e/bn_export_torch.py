# bn_export_torch.py EXPORTED X LOGITS: the file bn_model.dt's NAME_export
# wrote, loaded by PyTorch into the same network written with torch.nn
# modules (conv1: Conv2d without bias, bn1: BatchNorm2d) by load_state_dict,
# strict (BatchNorm2d takes a state without num_batches_tracked). In evaluation mode its logits on the batch X (raw f32
# [16, 1, 6, 6]) must be dtc's (LOGITS, raw f32 [16, 4]) within 1e-5 of their
# largest magnitude. Prints "skipped" and exits 0 when torch is missing.
import json, struct, sys

try:
    import torch
except ImportError:
    print('bn_export_torch: skipped: /usr/bin/python3 cannot import torch')
    sys.exit(0)

path, xpath, lpath = sys.argv[1:4]
raw = open(path, 'rb').read()
n = struct.unpack('<Q', raw[:8])[0]
head = json.loads(raw[8:8 + n])
head.pop('__metadata__', None)
state = {}
for name, t in head.items():
    assert t['dtype'] == 'F32', t
    b, e = t['data_offsets']
    state[name] = torch.frombuffer(bytearray(raw[8 + n + b:8 + n + e]),
                                   dtype=torch.float32).reshape(t['shape'])
net = torch.nn.Module()
net.conv1 = torch.nn.Conv2d(1, 4, 3, padding=1, bias=False)
net.bn1 = torch.nn.BatchNorm2d(4)
net.load_state_dict(state)
net.eval()
x = torch.frombuffer(bytearray(open(xpath, 'rb').read()), dtype=torch.float32).reshape(16, 1, 6, 6)
want = torch.frombuffer(bytearray(open(lpath, 'rb').read()), dtype=torch.float32).reshape(16, 4)
with torch.no_grad():
    got = torch.relu(net.bn1(net.conv1(x))).mean([2, 3])
diff = (got - want).abs().max().item()
scale = max(1.0, want.abs().max().item())
print('bn_export_torch: %s loaded; eval logits max |diff| %.3g of %.3g'
      % (sorted(state), diff, scale))
sys.exit(0 if diff <= 1e-5 * scale else 1)
