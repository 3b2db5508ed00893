#!/usr/bin/env python3
"""scripts/sass_fold_yield.py on synthetic objects: a host ELF whose .nv_fatbin holds a cubin
(EM_CUDA) with a fold run, a short FFMA run, a predicated FFMA and other instructions, their
control bits drawn at random (the seed is printed on failure). The oracle is this file's own
reading of the encoding: bit 45 of the high word is the yield bit (0 = yield), bits 58-61 the
reuse bits; nothing else in the file may change. The script's modes must be those of
CutlassSass in kernels/cutlass_gemm.hpp (less as_compiled): the .def's sass column names both.
Usage: test_sass_fold_yield.py SCRIPT CUTLASS_GEMM_HPP"""
import os
import random
import re
import stat
import struct
import subprocess
import sys
import tempfile

SCRIPT, ENUM_HEADER = sys.argv[1], sys.argv[2]
SEED = int(os.environ.get("FP8MOE_SEED", random.randrange(1 << 30)))
rng = random.Random(SEED)
YIELD, REUSE = 1 << 45, 0xF << 58
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print(f"FAIL: {what} (seed {SEED}; rerun with FP8MOE_SEED={SEED})")


def elf(machine, named_sections):
    """An ELF64 LE relocatable image with these (name, bytes) sections after the null one."""
    names = b"\0" + b"".join(n.encode() + b"\0" for n, _ in named_sections) + b".shstrtab\0"
    body, heads, at = b"", [], 64
    for n, data in named_sections + [(".shstrtab", names)]:
        pad = (-at) % 16
        body += b"\0" * pad
        at += pad
        heads.append((names.index(n.encode() + b"\0"), at, len(data)))
        body += data
        at += len(data)
    pad = (-at) % 8
    body += b"\0" * pad
    shoff = at + pad
    hdr = b"\x7fELF" + bytes([2, 1, 1]) + b"\0" * 9
    hdr += struct.pack("<HHIQQQIHHHHHH", 1, machine, 1, 0, 0, shoff, 0, 64, 0, 0, 64, len(heads) + 1, len(heads))
    sh = b"\0" * 64
    for name, off, size in heads:
        sh += struct.pack("<IIQQQQIIQQ", name, 1, 0, 0, off, size, 0, 0, 16, 0)
    return hdr + body + sh


def hi_word(reg):
    return (rng.getrandbits(23) << 41) | (rng.getrandbits(8) << 8) | reg  # random control bits


def ffma(reg, pred=0x7):
    return struct.pack("<QQ", 0x000000D318007223 & ~0xF000 | (pred << 12) | (reg << 16), hi_word(reg))


def other(opcode):
    return struct.pack("<QQ", 0x7000 | opcode, hi_word(0))


FOLD = 40
code = (other(0x9C5) + b"".join(ffma(r) for r in range(FOLD)) + other(0x947)  # the fold run: patched
        + b"".join(ffma(r) for r in range(8)) + other(0x20C)                  # too short: untouched
        + b"".join(ffma(r) for r in range(20)) + ffma(3, pred=0x2) + b"".join(ffma(r) for r in range(20)))
fold_at = 16  # instruction offsets of the fold run's FFMAs within .text.k
cubin = elf(190, [(".text.k", code), (".nv.info", os.urandom(32))])
host = elf(62, [(".text", os.urandom(48)), (".nv_fatbin", os.urandom(16) + cubin + os.urandom(8))])


def run(*args):
    p = subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def fold_his(data):
    k = data.index(code[:16], data.index(cubin[:64]))  # .text.k within the cubin within the object
    return k, [struct.unpack_from("<Q", data, k + fold_at + 16 * i + 8)[0] for i in range(FOLD)]


rc, out = run("--modes")
modes = out.split()
enum = re.search(r"enum class CutlassSass \{([^}]*)\}", open(ENUM_HEADER).read())
check(enum is not None, f"{ENUM_HEADER} declares enum class CutlassSass")
if enum:
    enumerators = [e.strip() for e in enum.group(1).split(",") if e.strip()]
    check(rc == 0 and enumerators[0] == "as_compiled" and modes == enumerators[1:],
          f"--modes {modes} are CutlassSass's enumerators after as_compiled {enumerators}")

with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "unit.cu.o")
    for n, mode in enumerate(modes):
        open(path, "wb").write(host)
        perm = (0o644, 0o664, 0o600)[n % 3]
        os.chmod(path, perm)
        rc, out = run("--check", mode, path)
        check(rc == 1 and "lack" in out, f"{mode}: --check fails on an unpatched object ({rc}: {out.strip()})")
        rc, out = run(mode, path)
        check(rc == 0 and "1 fold runs, 40 FFMAs" in out, f"{mode}: patches one run of 40 ({rc}: {out.strip()})")
        got = open(path, "rb").read()
        check(len(got) == len(host), f"{mode}: same size")
        got_perm = stat.S_IMODE(os.stat(path).st_mode)
        check(got_perm == perm, f"{mode}: the object keeps its permission bits ({got_perm:o}, want {perm:o})")
        k, his = fold_his(got)
        _, was = fold_his(host)
        for i, (h, w) in enumerate(zip(his, was)):
            if mode == "yield_all" or (mode == "yield_head" and i < FOLD // 2):
                want = w & ~(YIELD | REUSE)
            else:
                want = w | YIELD if mode == "yield_none" else w
            check(h == want, f"{mode}: fold FFMA {i}: high word {h:#018x}, want {want:#018x}")
        changed = [i for i in range(len(host)) if host[i] != got[i]]
        allowed = {k + fold_at + 16 * i + 8 + b for i in range(FOLD) for b in range(8)}
        check(all(i in allowed for i in changed), f"{mode}: only the fold's high words change "
                                                  f"({len([i for i in changed if i not in allowed])} bytes elsewhere)")
        rc, out = run(mode, path)
        check(rc == 0 and open(path, "rb").read() == got and "0 set to" in out,
              f"{mode}: a second run changes nothing ({out.strip()})")
        rc, out = run("--check", mode, path)
        check(rc == 0, f"{mode}: --check passes once patched ({out.strip()})")

    # Refusals: one message, exit 1, the file as it was.
    bad = {
        "no fold run": elf(62, [(".nv_fatbin", elf(190, [(".text.k", b"".join(ffma(r) for r in range(8)))]))]),
        "no .nv_fatbin": elf(62, [(".text", code)]),
        "not an ELF": b"not an object file at all" * 8,
        "truncated": host[: len(host) // 2],
    }
    for what, data in bad.items():
        open(path, "wb").write(data)
        rc, out = run("yield_all", path)
        check(rc == 1 and out.strip().startswith("sass_fold_yield: ") and open(path, "rb").read() == data,
              f"{what}: refused with a message, file unchanged ({rc}: {out.strip()})")
    rc, out = run("yield_some", path)
    check(rc == 2, f"an unknown mode is a usage error ({rc})")
    rc, out = run("yield_all", os.path.join(d, "missing.o"))
    check(rc == 1 and "missing.o" in out, f"a missing file is named ({rc}: {out.strip()})")

print(f"test_sass_fold_yield: {'FAIL' if failures else 'PASS'} ({len(failures)} failures, seed {SEED})")
sys.exit(1 if failures else 0)
