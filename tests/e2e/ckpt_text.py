# ckpt_text.py: checkpoints of dtc-ckpt's format whose text is hostile: a
# model name that forges a line, escape sequences in the model, a tensor
# name and the plan, no model at all, and a tensor name holding \u0000.
# usage: ckpt_text.py DIR
import json, struct, sys, zlib

def write(path, model, names, plan='one process'):
    meta = {'format': 'dtc-1'}
    if model is not None:
        meta['model'] = model
    meta.update({'model_hash': '0123456789abcdef', 'step': '7', 'plan': plan,
                 'checksum': 'crc32:00000000'})
    head, data = {'__metadata__': meta}, b''
    for n in sorted(names):
        head[n] = {'dtype': 'F32', 'shape': [2], 'data_offsets': [len(data), len(data) + 8]}
        data += struct.pack('<2f', 1.5, -2.0)
    text = json.dumps(head, separators=(',', ':')).encode()
    text += b' ' * (-len(text) % 8)
    crc = '%08x' % zlib.crc32(text + data)
    text = text.replace(b'"checksum":"crc32:00000000"', b'"checksum":"crc32:' + crc.encode() + b'"')
    with open(path, 'wb') as f:
        f.write(struct.pack('<Q', len(text)) + text + data)

d = sys.argv[1]
write(d + '/forged.st', 'mlp\nstep        999', ['w'])
write(d + '/clear.st', '\x1b[2J\x1b[Hmlp', ['w\x1b[31m', 'b\u202eb'], 'mesh 2\nw: r0 \x1b[2J')
write(d + '/nomodel.st', None, ['w', 'b\u00e9'])
write(d + '/nul.st', 'mlp', ['w', 'b1\x00x'])
