#!/usr/bin/env python3
"""h5py interop of `fp8moe quantize`: inputs written with h5py the way PyTorch users store them
(float32, bf16 bits as uint16 marked dtype="bfloat16", float16), outputs read back with h5py.
Checks dtypes, shapes and attribute types a notebook relies on, and that decode(code) * s_inv is
within half an FP8 ulp (at the format's top binade) of the input.

usage: check_quantize_h5py.py FP8MOE_BIN WORKDIR
Exit 0 pass, 1 fail, 77 skip (no h5py or numpy in this interpreter).
"""
import os
import subprocess
import sys

try:
    import h5py
    import numpy as np
except ImportError as e:  # CTest reports 77 as Skipped (SKIP_RETURN_CODE)
    print(f"skipped: {e} (install python3-h5py)")
    sys.exit(77)

FAILURES = []


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print(f"FAIL: {what}")


def fp8_table(fmt):
    """Value of every code, computed from the format's fields (reference/SPEC.md 2.1)."""
    mant_bits, bias = (3, 7) if fmt == "e4m3" else (2, 15)
    vals = np.empty(256, dtype=np.float64)
    for code in range(256):
        s, e, m = code >> 7, (code >> mant_bits) & ((1 << (7 - mant_bits)) - 1), code & ((1 << mant_bits) - 1)
        if fmt == "e4m3" and e == 15 and m == 7 or fmt == "e5m2" and e == 31:
            v = np.nan
        elif e == 0:
            v = m * 2.0 ** (1 - bias - mant_bits)
        else:
            v = (1 + m / 2 ** mant_bits) * 2.0 ** (e - bias)
        vals[code] = -v if s else v
    return vals


# Half an ulp in the top binade: the largest rounding error of a scaled element, in code units.
HALF_ULP_MAX = {"e4m3": 16.0, "e5m2": 4096.0}


def run(fp8moe, args):
    # --force: the work folder is reused from run to run (quantize refuses to overwrite without it).
    r = subprocess.run([fp8moe, "quantize", *args, "--force"], capture_output=True, text=True)
    check(r.returncode == 0, f"fp8moe quantize {' '.join(args)} exited {r.returncode}: {r.stderr.strip()}")
    check(len(r.stdout.splitlines()) == 1, f"one summary line expected, got {r.stdout!r}")


def check_output(path, x, recipe, block, fmt, pow2, scale_shape, source, dataset):
    with h5py.File(path, "r") as f:
        codes, scales = f["codes"], f["scales"]
        check(codes.dtype == np.uint8, f"{path}: codes dtype {codes.dtype}")
        check(scales.dtype == np.float32, f"{path}: scales dtype {scales.dtype}")
        check(codes.shape == x.shape, f"{path}: codes shape {codes.shape} != {x.shape}")
        check(scales.shape == scale_shape, f"{path}: scales shape {scales.shape} != {scale_shape}")
        a = f.attrs
        # fp8moe writes fixed-length UTF-8 string attributes (no global-heap strings: results/h5.hpp),
        # which h5py returns as numpy bytes.
        def text(k):
            v = a.get(k)
            return v.decode("utf-8") if isinstance(v, bytes) else None
        for k, v in {"recipe": recipe, "format": fmt, "pow2_scales": "true" if pow2 else "false",
                     "source_file": source, "source_dataset": dataset, "status": "complete"}.items():
            check(text(k) == v, f"{path}: attribute {k} = {a.get(k)!r}, expected {v!r} (fixed-length)")
        check(bool(text("version")), f"{path}: version attribute {a.get('version')!r}")
        for k in ("block", "elements", "nonfinite_inputs", "underflow", "saturated", "zero_blocks"):
            check(isinstance(a.get(k), np.integer), f"{path}: attribute {k} should be an integer, got {a.get(k)!r}")
        check(a["block"] == block, f"{path}: block {a['block']}")
        check(a["elements"] == x.size and a["nonfinite_inputs"] == 0, f"{path}: counts {dict(a)}")
        c, s = codes[...], scales[...]

    # Broadcast each block's s_inv over its elements.
    if recipe == "1x128":
        s_full = np.repeat(s, block, axis=-1)
    elif recipe == "128x1":
        s_full = np.repeat(s, block, axis=0)[: x.shape[0]]
    else:
        s_full = np.repeat(np.repeat(s, block, axis=-1), block, axis=-2)
    deq = fp8_table(fmt)[c] * s_full.astype(np.float64)
    err = np.abs(deq - x.astype(np.float64))
    bound = HALF_ULP_MAX[fmt] * s_full * (1 + 1e-5) + 1e-6 * np.abs(x)
    check(np.all(err <= bound), f"{path}: dequantized error above half an ulp, worst {np.max(err - bound)}")
    if pow2:
        mant, _ = np.frexp(s)
        check(np.all(mant == 0.5), f"{path}: --pow2-scales gave scales that are not powers of two")


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    fp8moe, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    seed = int(os.environ.get("FP8MOE_TEST_SEED", "0")) or int.from_bytes(os.urandom(8), "little")
    print(f"seed {seed} (FP8MOE_TEST_SEED={seed} repeats this data)")
    rng = np.random.default_rng(seed)

    src = os.path.join(work, "inputs.h5")
    x32 = rng.standard_normal((256, 384)).astype(np.float32)
    xb = rng.standard_normal((2, 128, 256)).astype(np.float32)
    xb_bits = (xb.view(np.uint32) >> 16).astype(np.uint16)  # bf16 by truncation, as a torch .view would store it
    xb = (xb_bits.astype(np.uint32) << 16).view(np.float32)
    xh = (rng.standard_normal((200, 128)) * 4).astype(np.float16)
    with h5py.File(src, "w") as f:
        f["x32"] = x32
        f["xb"] = xb_bits
        f["xb"].attrs["dtype"] = "bfloat16"
        f["xh"] = xh

    out = os.path.join(work, "q_x32.h5")
    run(fp8moe, ["--in", src, "--dataset", "x32", "--recipe", "1x128", "--out", out])
    check_output(out, x32, "1x128", 128, "e4m3", False, (256, 3), src, "x32")

    out = os.path.join(work, "q_xb.h5")
    run(fp8moe, ["--in", src, "--dataset", "xb", "--recipe", "128x128", "--out", out])
    check_output(out, xb, "128x128", 128, "e4m3", False, (2, 1, 2), src, "xb")

    out = os.path.join(work, "q_xh.h5")
    run(fp8moe, ["--in", src, "--dataset", "xh", "--recipe", "128x1", "--format", "e5m2", "--pow2-scales",
                 "--out", out])
    check_output(out, xh.astype(np.float32), "128x1", 128, "e5m2", True, (2, 128), src, "xh")

    print(f"{len(FAILURES)} failure(s)" if FAILURES else "ok")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
