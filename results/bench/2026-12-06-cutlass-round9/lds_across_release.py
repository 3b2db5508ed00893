"""Usage: lds_across_release.py FILE.sass... (cuobjdump -sass output)

Flags shared-memory loads (LDS*) that are in flight across an mbarrier arrive (SYNCS.ARRIVE*):
the load is issued before the arrive and its destination is first read after it, so nothing makes
the warp wait for the load's data before the stage is released."""
import re, sys

ins_re = re.compile(r'/\*([0-9a-f]{4,})\*/\s+(.*?);')
reg_re = re.compile(r'\bR(\d+)\b')

def parse(path):
    funcs, cur = {}, None
    for line in open(path):
        m = re.search(r'Function : (\S+)', line)
        if m:
            cur = m.group(1); funcs[cur] = []; continue
        m = ins_re.search(line)
        if m and cur:
            funcs[cur].append((m.group(1), m.group(2).strip()))
    return funcs

def split(text):
    t = re.sub(r'^@!?U?P\w+\s+', '', text)
    parts = t.split(None, 1)
    op = parts[0]
    ops = [o.strip() for o in parts[1].split(',')] if len(parts) > 1 else []
    return op, ops

def dests(op, ops):
    if not ops or op.startswith(('ST', 'SYNCS', 'BRA', 'BAR', 'WARPGROUP', 'RED', 'ATOM')):
        return set()
    m = reg_re.fullmatch(ops[0].replace('.reuse', ''))
    if not m: return set()
    n = int(m.group(1))
    width = 4 if '.128' in op else 2 if '.64' in op else 1
    return set(range(n, n + width))

def reads(op, ops):
    src = ops if op.startswith(('ST', 'SYNCS', 'RED', 'ATOM')) else ops[1:]
    # a wide source (a 64-bit operand) counts as its first register only
    return {int(m.group(1)) for o in src for m in reg_re.finditer(o)}

def check(path):
    found = 0
    for fn, body in parse(path).items():
        dec = [(a,) + split(t) for a, t in body]
        mma = [k for k, (_, o, _) in enumerate(dec) if o.startswith(('QGMMA', 'HGMMA'))]
        if not mma: continue
        for i, (addr, op, ops) in enumerate(dec):
            if not op.startswith('SYNCS.ARRIVE'): continue
            if not (mma[0] < i < mma[-1] + 300): continue  # the mainloop's releases only
            for j in range(max(0, i - 60), i):
                a2, op2, ops2 = dec[j]
                if not op2.startswith('LDS'): continue
                d = dests(op2, ops2)
                if any(d & reads(o, s) for _, o, s in dec[j + 1:i]): continue   # consumed before the arrive
                if any(d & dests(o, s) for _, o, s in dec[j + 1:i]): continue   # overwritten before it
                for _, o, s in dec[i + 1:i + 400]:
                    if d & reads(o, s):
                        found += 1
                        print(f'{path.split("/")[-1]}: {fn[:60]}...: {op2} at {a2} read after the arrive at {addr} ({o} {", ".join(s)})')
                        break
                    if d & dests(o, s): break
    return found

total = sum(check(p) for p in sys.argv[1:])
print(f'{total} load(s) in flight across a release')
