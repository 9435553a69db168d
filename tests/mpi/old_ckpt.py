# old_ckpt.py: writes a checkpoint of dtc-ckpt's format (NEW) as the per-rank
# files an earlier dtc wrote for N ranks (OUT.rank0 ..): each tensor of rank
# 1 or more with at least N rows split by rows (a "block:NAME" key saying
# where), the others whole on every rank; the checksum as that format had it
# (CRC-32 of the data, then of the table in data order, the hash, the step).
# usage: old_ckpt.py NEW OUT N
import json, struct, sys, zlib

new, out, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
raw = open(new, 'rb').read()
hl = struct.unpack('<Q', raw[:8])[0]
head = json.loads(raw[8:8 + hl])
meta = head.pop('__metadata__')
data = raw[8 + hl:]
code = {'F32': 1, 'I32': 2}

def i64(v):
    return struct.pack('<q', v)

for r in range(n):
    body, table, blocks, at = b'', [], {}, 0
    for name in sorted(head):
        t = head[name]
        b, e = t['data_offsets']
        whole, shape = data[b:e], list(t['shape'])
        begin = None
        if shape and shape[0] >= n:
            rows, row = shape[0], (e - b) // shape[0]
            lo, hi = rows * r // n, rows * (r + 1) // n
            whole, begin = whole[lo * row:hi * row], [lo] + [0] * (len(shape) - 1)
            blocks['block:' + name] = json.dumps({'full': shape, 'begin': begin},
                                                 separators=(',', ':'))
            shape = [hi - lo] + shape[1:]
        table.append((name, t['dtype'], shape, at, at + len(whole), t['shape'], begin))
        body += whole
        at += len(whole)
    h = '%s plan old-plan rank %d of %d' % (meta['model_hash'], r, n)
    crc = zlib.crc32(body)
    for name, dt, shape, b, e, full, begin in table:
        crc = zlib.crc32(name.encode() + b'\0', crc)
        crc = zlib.crc32(i64(code[dt]) + i64(len(shape)) + b''.join(i64(d) for d in shape) +
                         i64(b) + i64(e), crc)
        if begin is not None:
            crc = zlib.crc32(b''.join(i64(f) + i64(s) for f, s in zip(full, begin)), crc)
    crc = zlib.crc32(h.encode() + b'\0' + i64(int(meta['step'])), crc)
    m = {'model_hash': h, 'step': meta['step'], 'checksum': 'crc32:%08x' % crc}
    m.update(blocks)
    hdr = {'__metadata__': m}
    for name, dt, shape, b, e, full, begin in table:
        hdr[name] = {'dtype': dt, 'shape': shape, 'data_offsets': [b, e]}
    text = json.dumps(hdr, separators=(',', ':')).encode()
    text += b' ' * (-len(text) % 8)
    with open('%s.rank%d' % (out, r), 'wb') as f:
        f.write(struct.pack('<Q', len(text)) + text + body)
