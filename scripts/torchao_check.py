#!/usr/bin/env python3
"""Check torchao's blockwise FP8 MoE grouped GEMM with `fp8moe check` (the torchao bridge).

Runs torchao's differentiable FP8 blockwise grouped GEMM
(torchao.prototype.moe_training.blockwise_fp8.grouped_mm, forward and backward) on one device and
under DTensor placements on a simulated mesh (PyTorch's single-process SPMD simulation,
torch.distributed._local_tensor.LocalTensorMode with the `fake` process group: every rank in this
process, on one GPU), writes its inputs and outputs in fp8moe's layout (README: "Replay your
tensors", "Check your kernel") and asks `fp8moe check`, pass by pass, which arithmetic each
output equals bit for bit under that placement. A placement torchao or DTensor refuses is reported
with its error text. Everything lands in OUT: inputs.h5, one outputs file per run, check_*.json,
and summary.json (plus a table on stdout).

  python3 scripts/torchao_check.py --out DIR [--fp8moe build/bin/fp8moe] [--kernel emulated|auto]
      [--offs 129,384,500] [--n 256] [--k 256] [--seed 0] [--world 2] [--placement A:W ...] [--no-pad]

A placement pair A:W is written in fp8moe's short spelling for a 1-D mesh of --world ranks:
R, S(d); A is (M,K) and W is (E,N,K), so R:S(1) is TP colwise (W on the output features) and
S(1):S(2) shards the contraction. The passes' placements given to fp8moe check are torch's own:
dgrad and wgrad take grad_out in the placement DTensor gave `out` (Partial read as Replicate, the
placement of its gradient).

`--selftest` needs no torch: it writes fp8moe's own outputs (`fp8moe run --save`) through the same
writer and check call and asserts the verdicts (CTest scripts.torchao_check_format).
Exit status: 0 when every run completed and was checked (whatever the verdicts), 1 when a check
could not run, 2 on bad arguments.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import traceback

try:
    import h5py
    import numpy as np
except ImportError as e:  # CTest reads 77 as Skipped
    print(f"torchao_check: {e}: install h5py and numpy (scripts/setup.sh: python3-h5py)", file=sys.stderr)
    sys.exit(77)

PASSES = ("fwd", "dgrad", "wgrad")
OUTPUT_OF = {"fwd": "out", "dgrad": "grad_A", "wgrad": "grad_W"}


# --------------------------------------------------------------------------------------------
# The file format side (no torch): fp8moe's layout for inputs and outputs.

def bf16_bits_of_f32(a: np.ndarray) -> np.ndarray:
    """The bf16 bits of float32 values that are bf16 values (refuses any that is not)."""
    a = np.ascontiguousarray(a, dtype=np.float32)
    bits = a.view(np.uint32)
    if np.any(bits & 0xFFFF):
        raise ValueError("values that are not bf16 values cannot be written as bf16 bits")
    return (bits >> 16).astype(np.uint16)


def write_h5(path: str, tensors: dict, attrs: dict | None = None) -> None:
    """Writes `tensors` (name -> float32 array, int32 array, or ('bf16', uint16 bits)) to `path`
    atomically: a temporary file in the same folder, renamed over `path` when complete."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".h5", dir=folder)
    os.close(fd)
    try:
        with h5py.File(tmp, "w") as f:
            for name, value in tensors.items():
                if isinstance(value, tuple) and value[0] == "bf16":
                    ds = f.create_dataset(name, data=value[1].astype(np.uint16))
                    ds.attrs["dtype"] = np.bytes_(b"bfloat16")
                else:
                    f.create_dataset(name, data=value)
            for k, v in (attrs or {}).items():
                f.attrs[k] = np.bytes_(str(v).encode()) if isinstance(v, str) else v
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def run_check(fp8moe: str, inputs: str, outputs: str, pass_: str, mesh: str | None, lhs: str | None,
              rhs: str | None, extra: list[str], json_path: str) -> dict:
    """`fp8moe check` on one pass; returns its JSON report (with the command line) and writes it."""
    cmd = [fp8moe, "check", "--inputs", inputs, "--outputs", outputs, "--level", "op", "--pass", pass_,
           "--format", "json"] + extra
    if mesh:
        cmd += ["--mesh", mesh, "--lhs", lhs, "--rhs", rhs]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}: {p.stderr.strip() or p.stdout.strip()}")
    report = json.loads(p.stdout)
    report["command"] = cmd
    with open(json_path, "w") as f:
        json.dump(report, f, indent=2)
    return report


def verdict(report: dict) -> tuple[list[str], str]:
    t = report["tensors"][0]
    return t["equal"], t["reading"]


# --------------------------------------------------------------------------------------------
# The torch side.

def parse_placement(text: str):
    from torch.distributed.tensor import Replicate, Shard
    text = text.strip()
    if text in ("R", "Replicate()"):
        return Replicate()
    m = re.fullmatch(r"S\((\d)\)|Shard\((?:dim=)?(\d)\)", text)
    if m:
        return Shard(int(m.group(1) or m.group(2)))
    raise SystemExit(f"torchao_check: placement '{text}': write R or S(d) (Replicate() or Shard(dim=d))")


def dtensor_spelling(p) -> str:
    from torch.distributed.tensor import Partial, Replicate, Shard
    if isinstance(p, Shard):
        return f"Shard(dim={p.dim})"
    if isinstance(p, (Replicate, Partial)):
        return "Replicate()"  # a Partial output's gradient is Replicate
    raise ValueError(f"unexpected placement {p!r}")


def grouped_mm(kernel: str):
    from torchao.prototype.moe_training.blockwise_fp8.grouped_mm import _to_fp8_blockwise_then_scaled_grouped_mm
    from torchao.quantization.quantize_.common import KernelPreference
    pref = KernelPreference.EMULATED if kernel == "emulated" else KernelPreference.AUTO
    return lambda a, w, offs, pad: _to_fp8_blockwise_then_scaled_grouped_mm(
        a, w.transpose(-2, -1), offs, out_dtype=a.dtype, pad_token_groups_for_grouped_mm=pad, kernel_preference=pref)


def bf16_bits(t) -> np.ndarray:
    import torch
    assert t.dtype == torch.bfloat16, t.dtype
    return t.detach().contiguous().view(torch.int16).cpu().numpy().view(np.uint16)


def run_single(op, A, W, G, offs, pad):
    a = A.clone().requires_grad_(True)
    w = W.clone().requires_grad_(True)
    out = op(a, w, offs, pad)
    out.backward(G)
    return {"out": out.detach(), "grad_A": a.grad, "grad_W": w.grad}, None


def plain(t):
    """A DTensor's global value (every rank's copy after full_tensor must agree) as a tensor."""
    import torch
    from torch.distributed.tensor import DTensor
    if isinstance(t, DTensor):
        t = t.full_tensor()
    locals_ = getattr(t, "_local_tensors", None)
    if locals_ is None:
        return t
    vals = [locals_[r] for r in sorted(locals_)]
    for r, v in enumerate(vals[1:], 1):
        if not torch.equal(v.view(torch.int16), vals[0].view(torch.int16)):
            raise RuntimeError(f"ranks 0 and {r} hold different global values after full_tensor()")
    return vals[0].clone()


def run_placed(op, A, W, G, offs, pad, world, pa, pw):
    import torch.distributed as dist
    from torch.distributed._local_tensor import LocalTensorMode
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, distribute_tensor
    from torch.testing._internal.distributed.fake_pg import FakeStore
    if not dist.is_initialized():
        dist.init_process_group(backend="fake", rank=0, world_size=world, store=FakeStore())
    with LocalTensorMode(world):
        mesh = init_device_mesh("cuda", (world,), mesh_dim_names=("tp",))
        a = distribute_tensor(A, mesh, [pa]).detach().requires_grad_(True)
        w = distribute_tensor(W, mesh, [pw]).detach().requires_grad_(True)
        o = distribute_tensor(offs, mesh, [Replicate()])
        out = op(a, w, o, pad)
        gout_placement = [Replicate() if p.is_partial() else p for p in out.placements]
        g = distribute_tensor(G, mesh, gout_placement)
        out.backward(g)
        result = {"out": plain(out.detach()), "grad_A": plain(a.grad), "grad_W": plain(w.grad)}
        placements = {"out": [str(p) for p in out.placements], "grad_A": [str(p) for p in a.grad.placements],
                      "grad_W": [str(p) for p in w.grad.placements]}
    return result, {"gout": dtensor_spelling(gout_placement[0]), "placements": placements}


def run_local(op, A, W, G, offs, pad, world, ta, tw):
    """Each rank runs torchao's op on its own shards (torch.chunk, as DTensor slices), the way a
    tensor-parallel plan with local inputs calls it; the global results are assembled by the
    placements: Shard concatenated, Partial summed in rank order in bf16 (DTensor's all-reduce of a
    bf16 tensor). Token (A S(0)) and expert (W S(0)) sharding need per-rank offsets: not here."""
    import torch

    from torch.distributed.tensor import Shard

    def dim_of(t):
        p = parse_placement(t)
        return p.dim if isinstance(p, Shard) else None

    da, dw = dim_of(ta), dim_of(tw)
    if da == 0 or dw == 0:
        raise ValueError("token or expert sharding needs per-rank offsets (the dp and ep plans): not run per rank")
    # out's placement: W on N gives Shard(1); A and W both on K gives Partial; else Replicate.
    if dw == 1 and da is None:
        out_shard = 1
    elif da == 1 and dw == 2:
        out_shard = "partial"
    elif da is None and dw is None:
        out_shard = None
    else:
        raise ValueError(f"A {ta} with W {tw}: no sharding strategy takes this pair without redistribution")
    chunk = lambda t, d, r: t if d is None else torch.chunk(t, world, dim=d)[r].contiguous()
    outs, gas, gws = [], [], []
    for r in range(world):
        a = chunk(A, da, r).clone().requires_grad_(True)
        w = chunk(W, dw, r).clone().requires_grad_(True)
        g = G if out_shard in (None, "partial") else chunk(G, out_shard, r)
        o = op(a, w, offs, pad)
        o.backward(g)
        outs.append(o.detach())
        gas.append(a.grad)
        gws.append(w.grad)

    def assemble(parts, how):
        if how is None:
            return parts[0]
        if how == "partial":
            total = parts[0]
            for p in parts[1:]:
                total = total + p
            return total
        return torch.cat(parts, dim=how)

    grad_a_how = "partial" if out_shard == 1 else (1 if out_shard == "partial" else None)
    res = {"out": assemble(outs, out_shard), "grad_A": assemble(gas, grad_a_how), "grad_W": assemble(gws, dw)}
    gout = "Replicate()" if out_shard in (None, "partial") else f"Shard(dim={out_shard})"
    return res, {"gout": gout, "placements": {"out": str(out_shard), "grad_A": str(grad_a_how), "grad_W": str(dw)}}


def torch_main(args) -> int:
    import torch
    import torchao
    if not torch.cuda.is_available():
        print("torchao_check: no CUDA device: torchao's FP8 kernels need one (use --selftest for the format side)",
              file=sys.stderr)
        return 77
    offs_list = [int(x) for x in args.offs.split(",")]
    E, M = len(offs_list), offs_list[-1]
    gen = torch.Generator(device="cuda").manual_seed(args.seed)
    A = torch.randn(M, args.k, device="cuda", generator=gen).to(torch.bfloat16)
    W = torch.randn(E, args.n, args.k, device="cuda", generator=gen).to(torch.bfloat16)
    G = torch.randn(M, args.n, device="cuda", generator=gen).to(torch.bfloat16)
    offs = torch.tensor(offs_list, dtype=torch.int32, device="cuda")
    os.makedirs(args.out, exist_ok=True)
    inputs = os.path.join(args.out, "inputs.h5")
    write_h5(inputs, {"A": ("bf16", bf16_bits(A)), "W": ("bf16", bf16_bits(W)), "grad_out": ("bf16", bf16_bits(G)),
                      "offs": np.asarray(offs_list, dtype=np.int32)},
             {"source": "scripts/torchao_check.py", "seed": args.seed})
    op = grouped_mm(args.kernel)
    backend = args.kernel
    if args.kernel == "auto":
        try:
            import deep_gemm  # noqa: F401
            backend = "auto (DeepGEMM importable)"
        except ImportError:
            backend = "auto (DeepGEMM not installed: torchao falls back to its emulated kernel)"
    env = {"torch": torch.__version__, "torchao": torchao.__version__, "device": torch.cuda.get_device_name(),
           "kernel": backend, "pad_token_groups": args.pad, "E": E, "M": M, "N": args.n, "K": args.k,
           "offs": offs_list, "seed": args.seed}
    print(f"# torchao_check: torch {env['torch']}, torchao {env['torchao']}, {env['device']}, kernel {backend}, "
          f"E={E} M={M} N={args.n} K={args.k} offs={args.offs} pad={args.pad}")
    # Each placement twice: through DTensor (torchao's own sharding support), and per rank on local
    # shards (what a tensor-parallel plan with local inputs runs).
    runs = [("single", None, None, None)]
    for a, w in args.placement:
        runs += [(f"tp{args.world}_{a}_{w}_dtensor", a, w, "dtensor"), (f"tp{args.world}_{a}_{w}_local", a, w, "local")]
    summary = {"env": env, "runs": []}
    failed = 0
    for name, ta, tw, how in runs:
        entry = {"run": name, "A": ta, "W": tw, "how": how or "single device"}
        try:
            if ta is None:
                res, info = run_single(op, A, W, G, offs, args.pad)
            elif how == "local":
                res, info = run_local(op, A, W, G, offs, args.pad, args.world, ta, tw)
            else:
                res, info = run_placed(op, A, W, G, offs, args.pad, args.world, parse_placement(ta),
                                       parse_placement(tw))
        except Exception as e:  # torchao or DTensor refusing the placement: report its words
            entry["refused"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
            entry["traceback_tail"] = traceback.format_exc().strip().splitlines()[-6:]
            print(f"{name:<30} refused: {entry['refused']}")
            summary["runs"].append(entry)
            continue
        outputs = os.path.join(args.out, f"outputs_{name}.h5")
        write_h5(outputs, {k: ("bf16", bf16_bits(v)) for k, v in res.items()}, {"run": name, **{k: str(v) for k, v in env.items()}})
        if info:
            entry["dtensor_placements"] = info["placements"]
        for p in PASSES:
            mesh = lhs = rhs = None
            if ta is not None:
                pa, pw = dtensor_spelling(parse_placement(ta)), dtensor_spelling(parse_placement(tw))
                mesh = f"tp={args.world}"
                lhs, rhs = {"fwd": (pa, pw), "dgrad": (info["gout"], pw), "wgrad": (info["gout"], pa)}[p]
            tensor = OUTPUT_OF[p]
            try:
                # Partial sums: torch's reduction of bf16 outputs sums bf16 partials.
                extra = ["--reduce-dtype", "bf16"] if ta is not None else []
                rep = run_check(args.fp8moe, inputs, outputs, p, mesh, lhs, rhs, extra,
                                os.path.join(args.out, f"check_{name}_{p}.json"))
                equal, reading = verdict(rep)
                entry[p] = {"tensor": tensor, "lhs": lhs, "rhs": rhs, "equal": equal, "reading": reading}
                print(f"{name:<30} {p:<6} {tensor:<7} equal={','.join(equal) or 'none':<30} {reading}")
            except Exception as e:
                failed += 1
                entry[p] = {"tensor": tensor, "error": str(e)}
                print(f"{name:<30} {p:<6} {tensor:<7} check failed: {e}")
        summary["runs"].append(entry)
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    return 1 if failed else 0


# --------------------------------------------------------------------------------------------
# The self-test: fp8moe's own outputs through the bridge's writer and check call.

def selftest(args) -> int:
    os.makedirs(args.out, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    offs_list = [int(x) for x in args.offs.split(",")]
    E, M = len(offs_list), offs_list[-1]

    def bf16(shape):  # random bf16 values (round to nearest even from float32), as float32 and bits
        f = rng.standard_normal(shape).astype(np.float32)
        u = f.view(np.uint32).astype(np.uint64)
        u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
        return u

    bits = {"A": bf16((M, args.k)), "W": bf16((E, args.n, args.k)), "grad_out": bf16((M, args.n))}
    inputs = os.path.join(args.out, "inputs.h5")
    write_h5(inputs, {**{k: ("bf16", v) for k, v in bits.items()}, "offs": np.asarray(offs_list, dtype=np.int32)})
    problems = []
    # (pass, mesh, lhs, rhs, mode): fp8moe's result under that case, written back as bf16 bits,
    # must be recognised as that mode; one flipped bit must not.
    cases = [("fwd", None, None, None, "torchao-emulated"), ("dgrad", None, None, None, "bf16"),
             ("wgrad", None, None, None, "hopper-tc:cublas"),
             ("fwd", "tp=2", "Replicate()", "Shard(dim=1)", "promote-fp32:deepgemm"),
             ("dgrad", "tp=2", "Shard(dim=1)", "Shard(dim=1)", "torchao-emulated")]
    for i, (p, mesh, lhs, rhs, mode) in enumerate(cases):
        saved = os.path.join(args.out, f"saved_{i}.h5")
        cmd = [args.fp8moe, "run", "--level", "op", "--pass", p, "--inputs", inputs, "--mode", mode, "--save", saved,
               "--force", "--mesh", mesh or "1"]
        if mesh:
            cmd += ["--lhs", lhs, "--rhs", rhs, "--reduce-dtype", "bf16"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            problems.append(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip()}")
            continue
        tensor = OUTPUT_OF[p]
        with h5py.File(saved, "r") as f:
            group = mode.replace(":", "/") if mode.replace(":", "/") in f else next(k for k in f if isinstance(f[k], h5py.Group))
            value = f[group][tensor][...]
        outputs = os.path.join(args.out, f"outputs_{i}.h5")
        write_h5(outputs, {tensor: ("bf16", bf16_bits_of_f32(value))})
        rep = run_check(args.fp8moe, inputs, outputs, p, mesh, lhs, rhs, ["--reduce-dtype", "bf16"] if mesh else [],
                        os.path.join(args.out, f"check_{i}.json"))
        equal, reading = verdict(rep)
        print(f"{p:<6} {mesh or '1':<5} {mode:<24} equal={','.join(equal)}: {reading}")
        if mode not in equal:
            problems.append(f"case {i} ({p}, mesh {mesh or 1}, {mode}): check says equal={equal}: {reading}")
        flipped = bf16_bits_of_f32(value)
        flipped.reshape(-1)[flipped.size // 3] ^= 1
        write_h5(outputs, {tensor: ("bf16", flipped)})
        rep = run_check(args.fp8moe, inputs, outputs, p, mesh, lhs, rhs, ["--reduce-dtype", "bf16"] if mesh else [],
                        os.path.join(args.out, f"check_{i}_flipped.json"))
        equal, reading = verdict(rep)
        if mode in equal or "1 element" not in reading:
            problems.append(f"case {i} flipped: check says equal={equal}: {reading} (expected: equal to {mode} except 1 element)")
    for p in problems:
        print(f"torchao_check selftest: FAIL: {p}", file=sys.stderr)
    print(f"torchao_check selftest: {len(cases)} cases, {len(problems)} problem(s)"
          f"{'' if problems else ': each recognised as its mode, each flipped bit caught'}")
    return 1 if problems else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="folder for inputs.h5, outputs_*.h5, check_*.json, summary.json")
    ap.add_argument("--fp8moe", default=os.path.join(os.path.dirname(__file__), "..", "build", "bin", "fp8moe"))
    ap.add_argument("--kernel", choices=("emulated", "auto"), default="emulated",
                    help="torchao's kernel preference: its emulated kernel, or AUTO (DeepGEMM when installed)")
    ap.add_argument("--offs", default="129,384,500", help="cumulative token offsets (E of them; M is the last)")
    ap.add_argument("--n", type=int, default=256)
    ap.add_argument("--k", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--world", type=int, default=2, help="ranks of the simulated 1-D mesh")
    ap.add_argument("--placement", action="append", metavar="A:W",
                    help="placements of A and W (repeatable; default R:R, R:S(1), S(1):S(2))")
    ap.add_argument("--no-pad", dest="pad", action="store_false", help="torchao's pad_token_groups_for_grouped_mm=False")
    ap.add_argument("--selftest", action="store_true", help="the format side without torch (CTest)")
    args = ap.parse_args()
    if not os.access(args.fp8moe, os.X_OK):
        print(f"torchao_check: --fp8moe {args.fp8moe}: not an executable (build fp8moe first)", file=sys.stderr)
        return 2
    pairs = args.placement or ["R:R", "R:S(1)", "S(1):S(2)"]
    args.placement = []
    for pair in pairs:
        if pair.count(":") != 1:
            print(f"torchao_check: --placement '{pair}': write A:W, e.g. R:S(1)", file=sys.stderr)
            return 2
        args.placement.append(tuple(pair.split(":")))
    return selftest(args) if args.selftest else torch_main(args)


if __name__ == "__main__":
    sys.exit(main())
