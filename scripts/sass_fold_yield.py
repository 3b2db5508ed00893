#!/usr/bin/env python3
"""Sets the scheduling bits of the promotion fold's FFMAs in a compiled CUTLASS unit (in place).

fp8moe's mainloops fold each 128-K block's wgmma partial into the accumulator with one run of
FFMAs (acc = fma(partial, sa*sb, acc), 48 to 96 a thread). nvcc writes each FFMA's control bits
itself; two of them steer the warp scheduler, not the arithmetic:
  * the yield bit (bit 45 of the instruction's high word; 0 = yield): whether, after issuing this
    instruction, the SM sub-partition's scheduler may move on to another warp (the other
    warpgroup's fold or wgmma issue, the producer's TMA) instead of staying on this one;
  * the operand-reuse bits (bits 58-61): keep an operand in the reuse cache for the next
    instruction of the same warp, which a yield would break, so a yielding FFMA reuses nothing.
nvcc 13.0 alternates them in a fold (every other FFMA yields: the ones that reuse nothing).
DeepGEMM's kernels rewrite them (the "FFMA interleave" of its README) and report 10 % and more for
fine-grained-scaled FP8 GEMMs. This script writes one of three patterns over every fold run:
  yield_all   every FFMA of the run yields and reuses nothing;
  yield_none  no FFMA of the run yields (reuse bits as compiled): a warp issues its whole fold;
  yield_head  the run's first half as yield_all, its second half as nvcc wrote it (DeepGEMM's
              rewrite is of this kind: it patches the first 9/16 of a run).
Neither touches an opcode, a register, a stall count or a barrier, so the arithmetic (and its bits)
is the compiled kernel's; the stall counts stay minimums, so clearing reuse and adding yields only
lengthens waits. The device test (tests/kernels/test_kernels_cutlass) checks every built kernel
bitwise against the model.

What it reads: the host object's .nv_fatbin section; in it every embedded sm_90 cubin (ELF64,
EM_CUDA); in each, every .text.<kernel> section, 16 bytes an instruction. A fold run is a maximal
run of at least MIN_RUN unpredicated register-form FFMAs (opcode 0x223). The patch is idempotent
(the build runs it before archiving, again on an object already patched when only the archive is
redone). It fails, leaving the file as it was, where it finds no fold run or a malformed file.

Usage: sass_fold_yield.py {yield_all|yield_none|yield_head} OBJECT [OBJECT...]   (also: --check MODE OBJECT...,
which changes nothing and fails unless every fold run already has MODE's bits; --modes, which prints
the modes, one a line: kernels/CMakeLists.txt checks cutlass_kernels.def's sass column against it)
"""
import os
import struct
import sys
import tempfile

EM_CUDA = 190
MIN_RUN = 32
YIELD = 1 << 45          # high word: set = do not yield
REUSE = 0xF << 58        # high word: the four operand-reuse bits
FFMA_OPCODE = 0x223      # low word bits 0-11: FFMA Rd, Ra, Rb, Rc
PRED_PT = 0x7            # low word bits 12-14: the guard predicate PT (bit 15: negation)


class Malformed(Exception):
    pass


def sections(elf, base, size):
    """The (name, file offset, size) of each section of the ELF64 LE image at elf[base:base+size]."""
    if size < 64 or elf[base:base + 4] != b"\x7fELF" or elf[base + 4] != 2 or elf[base + 5] != 1:
        raise Malformed("not an ELF64 little-endian image")
    e_machine, = struct.unpack_from("<H", elf, base + 18)
    e_shoff, = struct.unpack_from("<Q", elf, base + 40)
    e_shentsize, e_shnum, e_shstrndx = struct.unpack_from("<HHH", elf, base + 58)
    if e_shentsize != 64 or e_shoff + e_shnum * 64 > size or e_shstrndx >= e_shnum:
        raise Malformed("section headers outside the image")
    heads = []
    for i in range(e_shnum):
        h = base + e_shoff + 64 * i
        name, _type, _flags, _addr, off, sz = struct.unpack_from("<IIQQQQ", elf, h)
        heads.append((name, off, sz, _type))
    _n, stroff, strsz, _t = heads[e_shstrndx]
    out = []
    for name, off, sz, typ in heads:
        if typ == 8:  # SHT_NOBITS: no bytes in the file
            continue
        if off + sz > size or name >= strsz:
            raise Malformed("a section outside the image")
        end = elf.index(b"\0", base + stroff + name)
        out.append((elf[base + stroff + name:end].decode("ascii", "replace"), base + off, sz))
    return e_machine, out


def cubin_texts(obj):
    """(kernel, file offset, size) of every .text section of every cubin in the object's fatbin."""
    _m, secs = sections(obj, 0, len(obj))
    fat = [(off, sz) for name, off, sz in secs if name == ".nv_fatbin"]
    if not fat:
        raise Malformed("no .nv_fatbin section (not a CUDA object?)")
    texts = []
    for off, sz in fat:
        at = obj.find(b"\x7fELF", off, off + sz)
        while at >= 0:
            try:
                machine, csecs = sections(obj, at, off + sz - at)
            except Malformed:
                machine, csecs = None, []
            if machine == EM_CUDA:
                texts += [(name[len(".text."):], o, s) for name, o, s in csecs if name.startswith(".text.")]
            at = obj.find(b"\x7fELF", at + 4, off + sz)
    if not texts:
        raise Malformed("no cubin with code in .nv_fatbin (compressed? build with --compress-mode=none)")
    return texts


def is_ffma(lo):
    return (lo & 0xFFF) == FFMA_OPCODE and ((lo >> 12) & 0xF) == PRED_PT


def fold_runs(obj, off, size):
    """Each maximal run of >= MIN_RUN consecutive FFMAs in the code at obj[off:off+size]: (start, count)."""
    runs, start, n = [], None, size // 16
    for i in range(n + 1):
        ffma = i < n and is_ffma(struct.unpack_from("<Q", obj, off + 16 * i)[0])
        if ffma and start is None:
            start = i
        elif not ffma and start is not None:
            if i - start >= MIN_RUN:
                runs.append((off + 16 * start, i - start))
            start = None
    return runs


MODES = ("yield_all", "yield_none", "yield_head")


def patched(hi, mode, j, count):
    """The high word of the run's j-th of `count` FFMAs under `mode`."""
    if mode == "yield_all" or (mode == "yield_head" and j < count // 2):
        return hi & ~(YIELD | REUSE)
    if mode == "yield_none":
        return hi | YIELD
    return hi


def patch_file(path, mode, check):
    obj = bytearray(open(path, "rb").read())
    total_runs = total_ffma = changed = wrong = 0
    for kernel, off, size in cubin_texts(obj):
        for start, count in fold_runs(obj, off, size):
            total_runs += 1
            total_ffma += count
            for j in range(count):
                at = start + 16 * j + 8
                hi, = struct.unpack_from("<Q", obj, at)
                new = patched(hi, mode, j, count)
                if new != hi:
                    wrong += 1
                    if not check:
                        struct.pack_into("<Q", obj, at, new)
                        changed += 1
    if total_runs == 0:
        raise Malformed(f"no fold run (>= {MIN_RUN} consecutive FFMAs) in any kernel: nothing to patch "
                        "(did the mainloop's fold change? kernels/cutlass_overlap.cuh)")
    if check:
        if wrong:
            raise Malformed(f"{wrong} of {total_ffma} fold FFMAs lack {mode}'s bits")
        print(f"sass_fold_yield: {os.path.basename(path)}: {total_runs} fold runs, {total_ffma} FFMAs, all {mode}")
        return
    if changed:
        # Written beside and renamed over: an interrupted build never leaves half a patched object.
        # mkstemp creates it 0600: the patched object keeps the original's permission bits.
        mode_bits = os.stat(path).st_mode & 0o7777
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix=".sass_fold_yield.")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(obj)
            os.chmod(tmp, mode_bits)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    print(f"sass_fold_yield: {os.path.basename(path)}: {total_runs} fold runs, {total_ffma} FFMAs, "
          f"{changed} set to {mode}")


def main(argv):
    if argv == ["--modes"]:
        print("\n".join(MODES))
        return 0
    check = bool(argv) and argv[0] == "--check"
    args = argv[1:] if check else argv
    if len(args) < 2 or args[0] not in MODES:
        print(__doc__[__doc__.index("Usage:"):].strip(), file=sys.stderr)
        print(f"sass_fold_yield: want a mode ({', '.join(MODES)}) and at least one object file", file=sys.stderr)
        return 2
    for path in args[1:]:
        try:
            patch_file(path, args[0], check)
        except (Malformed, struct.error, ValueError, OSError) as e:
            print(f"sass_fold_yield: {path}: {e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
