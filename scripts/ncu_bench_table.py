#!/usr/bin/env python3
"""Table of Nsight Compute text logs of the backend's CUTLASS kernels on `fp8moe bench`.

Reads the logs of
  ncu --clock-control none --kernel-name-base mangled -k regex:FoldMainloop [sections] \
      fp8moe bench --no-quant --warmup 0 --runs 1
(in launch order; several logs when the launches were split with --launch-skip/--launch-count),
groups the profiled launches three per bench shape and pass (the `cutlass` row's check and timed
call, the `re-init` row's timed call: with --warmup 0 --runs 1 the bench makes no others of these
kernels) and prints a markdown row per shape and pass with the medians of the three: duration,
SM clock, the busiest pipeline, issue slots, Mem Busy, L2 hit rate, DRAM throughput, and the
persistent grid's tiles, waves and tail loss for the backend's tile (kernels/cutlass_grouped.cpp's
cutlass_choose: 128x192 in fwd/dgrad, 128x128 in wgrad; edit tiles_n in main for another choice).
Usage: scripts/ncu_bench_table.py LOG [LOG ...]
"""
import math
import re
import statistics
import sys

# fp8moe bench's GEMM shapes (E, rows per expert, N, K), in its order (kernels/bench/bench_gemm.cu).
SHAPES = [(8, 4096, 4096, 7168), (8, 4096, 7168, 2048), (4, 8192, 4096, 7168), (16, 2048, 5120, 8192),
          (16, 2048, 3072, 4096)]
SMS = 132


def parse(paths):
    blocks, cur = [], None
    for path in paths:
        for line in open(path, errors="replace"):
            if line.startswith("  void device_kernel") or line.startswith("  _ZN7cutlass13device_kernel"):
                cur = {}
                blocks.append(cur)
                continue
            if cur is None:
                continue
            m = re.match(r"^\s{4}(\S.*?)\s{2,}(\S+)?\s+([\d,.]+)\s*$", line)
            if m:
                value = float(m.group(3).replace(",", ""))
                if m.group(1) == "Duration" and m.group(2) == "us":
                    value /= 1000
                cur.setdefault(m.group(1), value)
            m = re.search(r"(\w+) is the highest-utilized pipeline \(([\d.]+)%\)", line)
            if m:
                cur["pipe"] = (m.group(1), float(m.group(2)))
    return blocks


def main(argv):
    tiles_n = {"fwd": 192, "dgrad": 192, "wgrad": 128}
    paths = [a for a in argv if not a.startswith("--")]
    if not paths:
        sys.exit(__doc__)
    blocks = parse(paths)
    if len(blocks) != 3 * 3 * len(SHAPES):
        print(f"warning: {len(blocks)} profiled launches, expected {9 * len(SHAPES)}", file=sys.stderr)
    print("| pass | (E, Me, N, K) | ms (ncu) | SM GHz | busiest pipe | issue busy | Mem Busy | L2 hit | DRAM "
          "| tiles (waves of 132) | tail loss |")
    print("|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    i = 0
    for (e, me, n, k) in SHAPES:
        for p in ("fwd", "dgrad", "wgrad"):
            group = blocks[i:i + 3]
            i += 3
            if not group:
                return
            med = lambda key: statistics.median(b.get(key, float("nan")) for b in group)
            rows, cols = {"fwd": (me, n), "dgrad": (me, k), "wgrad": (n, k)}[p]
            tiles = e * math.ceil(rows / 128) * math.ceil(cols / tiles_n[p])
            waves = tiles / SMS
            tail = (math.ceil(waves) - waves) / math.ceil(waves)
            pipe = group[0].get("pipe", ("?", 0.0))[0]
            pipe_pct = statistics.median(b.get("pipe", ("?", float("nan")))[1] for b in group)
            print(f"| {p} | ({e}, {me}, {n}, {k}) | {med('Duration'):.2f} | {med('SM Frequency'):.2f} | "
                  f"{pipe} {pipe_pct:.1f} % | {med('Issue Slots Busy'):.1f} % | {med('Mem Busy'):.1f} % | "
                  f"{med('L2 Hit Rate'):.1f} % | {med('DRAM Throughput'):.1f} % | {tiles} ({waves:.2f}) | "
                  f"{100 * tail:.1f} % |")


if __name__ == "__main__":
    main(sys.argv[1:])
