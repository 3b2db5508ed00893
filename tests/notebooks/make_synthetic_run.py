#!/usr/bin/env python3
"""Writes a small fp8moe sweep result exactly as results/SCHEMA.md lays it out, computed with a
numpy model of the op-level passes (reference/SPEC.md 3.1 scale formula, 4.1 block layouts, 6.1
passes; e4m3/e5m2 by rounding the mantissa, torch.chunk shards), plus a few made-up layer-level
rows. A fixture for tests/notebooks/test_fp8moe_results.py and for developing the notebooks
without `fp8moe sweep`; its numbers are a model's, not fp8moe's.

usage: make_synthetic_run.py OUT.h5 [--seed S] [--status complete|running|...] [--no-blocks]
       make_synthetic_run.py OUT.h5 --foreign     (an HDF5 file that is not a sweep result)
"""
import argparse
import sys
import time

import h5py
import numpy as np

E, OFFS, N, K, B = 3, (129, 384, 500), 256, 256, 128
M = OFFS[-1]
MODES = ("hp64", "bf16", "exact", "torchao-emulated")
FMT_MAX = {"e4m3": 448.0, "e5m2": 57344.0}
FMT_BITS = {"e4m3": (3, -6), "e5m2": (2, -14)}  # mantissa bits, min normal exponent


def bf16(x):
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32).astype(np.float64)


def fp8(x, fmt):
    mbits, emin = FMT_BITS[fmt]
    e = np.floor(np.log2(np.maximum(np.abs(x), 2.0 ** -30)))
    q = 2.0 ** (np.maximum(e, emin) - mbits)
    return np.clip(np.round(x / q) * q, -FMT_MAX[fmt], FMT_MAX[fmt])


def sqnr(ref, x):
    err = np.linalg.norm((ref - x).ravel())
    return np.inf if err == 0 else 20 * np.log10(np.linalg.norm(ref.ravel()) / err)


def quantize(x, br, bc, fmt):
    """Blockwise quantize-dequantize of a 2-D x with (br, bc) groups from its own origin
    (a shard quantizes from its first element). Returns deq and per-block amax, s_inv, sqnr."""
    R, C = x.shape
    rows, cols = -(-R // br), -(-C // bc)
    xp = np.zeros((rows * br, cols * bc))
    xp[:R, :C] = x  # ragged edges zero-filled (SPEC.md 4.2)
    blk = xp.reshape(rows, br, cols, bc)
    amax = np.maximum(np.abs(blk).max(axis=(1, 3)).astype(np.float32), np.float32(1e-12))
    scale = (FMT_MAX[fmt] / amax.astype(np.float64)).astype(np.float32)
    scaled = (blk * scale[:, None, :, None]).astype(np.float32)
    q = fp8(np.clip(scaled, -FMT_MAX[fmt], FMT_MAX[fmt]).astype(np.float64), fmt)
    sinv = (np.float32(1.0) / scale).astype(np.float32)
    dq = q * sinv[:, None, :, None].astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        bsq = 20 * np.log10(np.sqrt((blk ** 2).sum(axis=(1, 3))) / np.sqrt(((blk - dq) ** 2).sum(axis=(1, 3))))
    under = np.count_nonzero((q == 0) & (blk != 0))
    sat = np.count_nonzero(np.abs(q) == FMT_MAX[fmt])
    return dq.reshape(rows * br, cols * bc)[:R, :C], (amax.astype(np.float64), sinv.astype(np.float64), bsq), under, sat


def operand(x, br, bc, mode, fmt):
    if mode == "hp64":
        return x, None, 0, 0
    if mode == "bf16":
        return bf16(x), None, 0, 0
    deq, stats, u, s = quantize(x, br, bc, fmt)
    return (bf16(deq) if mode == "torchao-emulated" else deq), stats, u, s


def chunks(n, world):
    size = -(-n // world)  # torch.chunk
    return [(s, min(s + size, n)) for s in range(0, n, size)]


def run_pass(p, mode, fmt, A, W, dO, shard, world):
    """Returns (result, operand stats of the single-device quantization, under, sat, aligned).
    fwd/dgrad: out = lhs . rhs_e^T (lhs 1xB along the contraction, rhs BxB); wgrad: dW_e =
    dOut_e^T . A_e (both Bx1 along tokens). shard: None, 'out' (rhs rows), 'contraction'."""
    rnd = (lambda v: v) if mode == "hp64" else bf16
    groups = list(zip((0,) + OFFS[:-1], OFFS))
    if p == "wgrad":
        out = np.zeros((E, N, K))
        st_d, st_a, under, sat = [], [], 0, 0
        for e, (s, t) in enumerate(groups):
            d_q, sd, u1, s1 = operand(dO[s:t], B, 1, mode, fmt)
            a_q, sa, u2, s2 = operand(A[s:t], B, 1, mode, fmt)
            out[e] = rnd(d_q.T @ a_q)  # N or K shards of (B, 1) groups move no block
            st_d.append(sd), st_a.append(sa)
            under, sat = under + u1 + u2, sat + s1 + s2
        stats = None if st_d[0] is None else {
            "dOut": tuple(np.concatenate([x[i] for x in st_d]) for i in range(3)),
            "A": tuple(np.concatenate([x[i] for x in st_a]) for i in range(3))}
        return out, stats, under, sat, True
    lhs, rhs, names = (A, W, ("A", "W")) if p == "fwd" else (dO, W.transpose(0, 2, 1), ("dOut", "W"))
    C, O = lhs.shape[1], rhs.shape[1]
    parts_c = chunks(C, world) if shard == "contraction" else [(0, C)]
    parts_o = chunks(O, world) if shard == "out" else [(0, O)]
    aligned = all(s % B == 0 for s, _ in parts_c + parts_o)
    out = np.zeros((M, O))
    for cs, ct in parts_c:
        partial = np.zeros((M, O))
        lq, _, _, _ = operand(lhs[:, cs:ct], 1, B, mode, fmt)
        for os_, ot in parts_o:
            for e, (s, t) in enumerate(groups):
                rq, _, _, _ = operand(rhs[e, os_:ot, cs:ct], B, B, mode, fmt)
                partial[s:t, os_:ot] = lq[s:t] @ rq.T
        out += rnd(partial) if len(parts_c) > 1 else partial  # Partial rounded before the reduce
    out = rnd(out.astype(np.float32) if mode != "hp64" and len(parts_c) > 1 else out)
    _, ls, u1, s1 = operand(lhs, 1, B, mode, fmt)
    rs = [operand(rhs[e], B, B, mode, fmt) for e in range(E)]
    stats = None if ls is None else {
        names[0]: ls, names[1]: tuple(np.stack([r[1][i] for r in rs]) for i in range(3))}
    return out, stats, u1 + sum(r[2] for r in rs), s1 + sum(r[3] for r in rs), aligned


def tiles(ref, x):
    """SQNR of each B x B tile of the last two dims."""
    lead = ref.shape[:-2]
    rt, ct = -(-ref.shape[-2] // B), -(-ref.shape[-1] // B)
    t = np.empty(lead + (rt, ct))
    for idx in np.ndindex(*lead, rt, ct):
        *e, i, j = idx
        sl = tuple(e) + (slice(i * B, (i + 1) * B), slice(j * B, (j + 1) * B))
        t[idx] = sqnr(ref[sl], x[sl])
    return t


# (pass, mesh, world, lhs, rhs, strategy, shard)
PLACEMENTS = [
    ("fwd", "A=[R] W=[R]", "replicate", None), ("fwd", "A=[R] W=[S(1)]", "out-feature", "out"),
    ("fwd", "A=[S(1)] W=[S(2)]", "contraction", "contraction"),
    ("dgrad", "dOut=[R] W=[R]", "replicate", None),
    ("dgrad", "dOut=[R] W=[S(2)]", "out-feature", "out"),
    ("dgrad", "dOut=[S(1)] W=[S(1)]", "contraction", "contraction"),
    ("wgrad", "dOut=[R] A=[R]", "replicate", None), ("wgrad", "dOut=[R] A=[S(1)]", "wgrad-k", "k"),
    ("wgrad", "dOut=[S(1)] A=[R]", "wgrad-n", "n"),
]
TENSOR = {"fwd": "out", "dgrad": "grad_A", "wgrad": "grad_W"}


def op_cases(seed):
    """(scenario, mesh, world, dist, fmt, pass, placements, strategy, shard) in sweep order."""
    for scenario, meshes, dist, fmt, passes in (("tp_ops", (("tp=2", 2), ("tp=4", 4)), "normal", "e4m3", None),
                                                ("outliers", (("tp=4", 4),), "outliers", "e4m3", ("fwd", "wgrad")),
                                                ("e5m2", (("tp=2", 2),), "normal", "e5m2", ("dgrad",))):
        for mesh, world in meshes:
            for p, placements, strategy, shard in PLACEMENTS:
                if passes is None or p in passes:
                    yield scenario, mesh, world, dist, fmt, p, placements, strategy, shard


def data(seed, dist):
    rng = np.random.default_rng(seed)
    A = bf16(rng.standard_normal((M, K)))
    if dist == "outliers":  # a few hot channels along K (SPEC.md 13.2's outlier distribution)
        A[:, rng.choice(K, 4, replace=False)] *= 60.0
        A = bf16(A)
    return A, bf16(rng.standard_normal((E, N, K)) / 16.0), bf16(rng.standard_normal((M, N)))


def write(path, seed, status, save_blocks):
    t_start = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    str_t = h5py.string_dtype("utf-8")
    S = lambda n: (n, str_t)
    dtype = np.dtype([("case_id", "i8"), S("case_key"), S("scenario"), S("level"), S("mesh"),
                      ("world", "i4"), S("plan"), S("placements"), S("strategy"), S("pass"),
                      S("tensor"), S("backend"), S("mode"), S("format"), ("block", "i4"),
                      ("pow2_scales", "i1"), ("pad", "i1"), ("experts", "i4"), ("tokens", "i8"),
                      ("n", "i8"), ("k", "i8"), ("dim", "i8"), ("hidden", "i8"), S("routing"),
                      S("offs"), S("dist"), ("seed", "u8"), S("fsdp_gather"), S("reduce_dtype"),
                      S("reduce_order"), ("fp8_dispatch", "i1"), ("lr", "f8"), ("sqnr_db", "f8"),
                      ("sqnr_vs_single_db", "f8"), ("rel_err", "f8"), ("max_abs_err", "f8"),
                      ("max_ulp", "f8"), ("bitwise_equal_frac", "f8"), ("block_aligned", "i1"),
                      ("underflow_frac", "f8"), ("saturated_frac", "f8"), ("nonfinite", "i8"),
                      ("comm_bytes", "i8"), ("time_ms", "f8"), S("status"), S("message"),
                      S("split_k")])
    rows, blocks = [], {}
    cache = {}
    cid = 0
    for scenario, mesh, world, dist, fmt, p, placements, strategy, shard in op_cases(seed):
        once = lambda key, make: cache[key] if key in cache else cache.setdefault(key, make())
        A, W, dO = once(("data", dist), lambda: data(seed, dist))
        truth = once(("hp64", dist, p), lambda: run_pass(p, "hp64", fmt, A, W, dO, None, 1)[0])
        for mode in MODES:
            t0 = time.perf_counter()
            single, stats, under, sat, _ = once(
                (mode, dist, fmt, p), lambda: run_pass(p, mode, fmt, A, W, dO, None, 1))
            out, _, _, _, aligned = run_pass(p, mode, fmt, A, W, dO, shard, world)
            ms = (time.perf_counter() - t0) * 1e3
            tensor = TENSOR[p]
            lhs, rhs = (x.split("=", 1)[1] for x in placements.split())
            key = (f"level=op mesh={mesh} pass={p} lhs={lhs} rhs={rhs} backend=reference "
                   f"mode={mode} format={fmt} block={B} pow2_scales=0 pad=auto experts={E} "
                   f"tokens={M} n={N} k={K} offs={','.join(map(str, OFFS))} dist={dist} seed={seed}")
            s_vs_single = sqnr(single, out)
            n_in = (A.size + W.size) if p == "fwd" else (dO.size + (W.size if p == "dgrad" else A.size))
            notes = [] if aligned else [f"misaligned: a {strategy} shard of {256 // world} is not a multiple of block {B}"]
            if shard == "contraction":
                notes.append("Partial: bf16 local outputs, fp32 ascending reduce")
            ok = np.isfinite(sqnr(truth, out)) or mode == "hp64"
            bits = np.mean(out.astype(np.float32).view(np.uint32) == single.astype(np.float32).view(np.uint32))
            rows.append((cid, key, scenario, "op", mesh, world, "direct", placements,
                         f"tp:{strategy}", p, tensor, "reference", mode, fmt, B, 0, 1, E, M, N, K,
                         0, 0, "explicit", ",".join(map(str, OFFS)), dist, seed, "bf16", "fp32",
                         "ascending", 0, 0.0, sqnr(truth, out), s_vs_single,
                         np.linalg.norm(truth - out) / np.linalg.norm(truth),
                         np.abs(truth - out).max(),
                         float(np.abs(np.round((bf16(truth) - out) / np.maximum(np.abs(truth), 1e-30) * 128)).max()),
                         float(bits), int(aligned), under / n_in, sat / n_in, 0,
                         0 if shard is None else out.size * 2 // world, ms,
                         "ok" if ok else "fail", "; ".join(notes), ""))
            if save_blocks and stats is not None:
                blocks[cid] = (key, tensor, tiles(truth, out), tiles(single, out), stats)
            cid += 1
    # Layer-level rows: made-up numbers of the shape SPEC.md 9.1 describes, to exercise the
    # layer floors (one grad of fsdp+tp below its 20 dB floor).
    rng = np.random.default_rng(seed + 1)
    for mesh, world, plan in (("1", 1, "single"), ("dp=2", 2, "fsdp"), ("tp=2", 2, "tp"),
                              ("dp=2,tp=2", 4, "fsdp+tp")):
        for mode in ("bf16", "torchao-emulated"):
            for p, tensor in (("fwd", "y"), ("dgrad", "dx"), ("wgrad", "dw1"), ("wgrad", "dw2"), ("wgrad", "dw3")):
                q = mode != "bf16"
                base = (26.0 if tensor == "y" else 24.0) if q else 52.0
                vs_single = {"single": np.inf, "fsdp": 41.0, "tp": 31.0, "fsdp+tp": 27.0}[plan]
                if plan == "fsdp+tp" and tensor == "dx" and q:
                    vs_single = 19.2
                key = (f"level=layer mesh={mesh} plan={plan} backend=reference mode={mode} "
                       f"format=e4m3 block=128 experts=2 tokens=256 dim=256 hidden=256 seed={seed}")
                rows.append((cid, key, "layer_plans", "layer", mesh, world, plan, "w1=[S(0)]" if "fsdp" in plan else "w1=[R]",
                             plan, p, tensor, "reference", mode, "e4m3", 128, 0, 1, 2, 256, 0, 0,
                             256, 256, "explicit", "128,256", "normal", seed, "bf16", "fp32", "ascending",
                             0, 0.0, base + rng.normal(0, 0.3), vs_single + (0 if plan == "single" else rng.normal(0, 0.3)),
                             0.05, 0.1, 3.0, 1.0 if plan == "single" else 0.4, 1, 0.0, 0.0, 0, 4096 * world,
                             1.0, "ok", "", ""))
            cid += 1
    with h5py.File(path, "w") as f:
        a = f.attrs
        a["format"], a["schema_version"], a["status"] = "fp8moe-sweep", np.int64(2), "running"
        a["status_message"] = ""
        a["cases_total"], a["cases_done"] = np.int64(cid), np.int64(cid)
        a["argv"] = f"fp8moe sweep synthetic.ini --save-blocks --seed {seed} (synthetic: {sys.argv[0]})"
        a["scenario_text"] = "# file: synthetic.ini\n[scenario.tp_ops]\nlevel = op\nmesh = tp=2\nmesh = tp=4\n"
        a["scenario_files"], a["only"], a["backend_override"] = "synthetic.ini", "", ""
        a["seed"], a["tool_version"], a["git_sha"], a["git_dirty"] = str(seed), "synthetic", "unknown", np.int64(-1)
        a["build"], a["host"], a["cpu"], a["cpu_cores"] = "numpy model", "synthetic", "synthetic", np.int64(1)
        a["started_utc"], a["finished_utc"] = t_start, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        for k in ("device_name", "device_uuid", "device_sm", "driver_version", "cuda_runtime"):
            a[k] = "none"
        for k in ("hdf5_version", "eigen_version", "boost_version", "fmt_version", "nccl_version"):
            a[k] = "synthetic"
        a["nccl_env"], a["save_blocks"], a["save_tensors"] = "", np.int64(save_blocks), np.int64(0)
        table = np.array(rows, dtype=dtype)
        f.create_dataset("cases", data=table, maxshape=(None,), chunks=(64,))
        if save_blocks:
            for cid_, (key, tensor, t_hp, t_single, stats) in blocks.items():
                g = f.create_group(f"blocks/case_{cid_:06d}")
                g.attrs["case_id"], g.attrs["case_key"] = np.int64(cid_), key
                dims = [f"{tensor}_tile_row", f"{tensor}_tile_col"]
                if t_hp.ndim == 3:
                    dims = ["expert"] + dims
                for name, v in ((f"{tensor}_tile_sqnr", t_hp), (f"{tensor}_tile_sqnr_single", t_single)):
                    _dataset(g, name, v, dims, B)
                for op, (amax, sinv, bsq) in stats.items():
                    br, bc = (1, B) if op in ("A", "dOut") and tensor != "grad_W" else (B, B)
                    if tensor == "grad_W":
                        br, bc = B, 1
                    d = [f"{op}_brow", f"{op}_bcol"] if amax.ndim == 2 else ["expert", f"{op}_brow", f"{op}_bcol"]
                    for suffix, v in (("amax", amax), ("scale", sinv), ("block_sqnr", bsq)):
                        _dataset(g, f"{op}_{suffix}", v, d, (br, bc))
        f.attrs["status"] = status  # written last, as the sweep does
        if status != "complete":
            f.attrs["status_message"] = f"synthetic {status}"
        fix_strings(f)


def fix_strings(obj):
    """fp8moe writes string attributes fixed-length (schema 2, results/SCHEMA.md); h5py writes str
    as variable-length, so every str attribute is rewritten as numpy bytes, here and below."""
    for k, v in list(obj.attrs.items()):
        if isinstance(v, str):
            obj.attrs[k] = np.bytes_(v.encode("utf-8"))
    if isinstance(obj, h5py.Group):
        for child in obj.values():
            fix_strings(child)


def _dataset(g, name, values, dims, step):
    d = g.create_dataset(name, data=np.asarray(values, np.float64))
    steps = (step, step) if np.isscalar(step) else step
    steps = (1,) * (len(dims) - 2) + tuple(steps)
    for i, (dim, n, s) in enumerate(zip(dims, values.shape, steps)):
        if dim not in g:
            g[dim] = np.arange(n, dtype=np.int64) * s  # first element index of each tile/block
            g[dim].make_scale(dim)
        d.dims[i].attach_scale(g[dim])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--status", default="complete")
    ap.add_argument("--no-blocks", action="store_true")
    ap.add_argument("--foreign", action="store_true", help="write an HDF5 file that is not a sweep result")
    args = ap.parse_args()
    if args.foreign:
        with h5py.File(args.out, "w") as f:
            f["A"] = np.zeros((4, 4))
            f.attrs["format"] = "something-else"
        return
    write(args.out, args.seed, args.status, not args.no_blocks)


if __name__ == "__main__":
    main()
