#!/usr/bin/env python3
"""Where a kernel's warps wait, per SASS instruction, from an Nsight Compute source page.

Input: `ncu -i REPORT --page source --csv --print-source sass > kernel_sass.csv` for a report
collected with `--section SourceCounters` (warp-state sampling per instruction). Output (markdown):

  1. the instructions with the most samples, each with its top stall reasons;
  2. the samples grouped by how often an instruction ran (instructions that run equally often
     belong to the same loop, so the consumer warps' mainloop, the producer's TMA loop and the
     epilogue fall apart);
  3. for one such group (--loop N, default: the group with the most samples), its samples per
     opcode with each opcode's stall reasons: in fp8moe's CUTLASS mainloops WARPGROUP.DEPBAR is
     the wait for a wgmma chain, FFMA/FMUL the fold, LDS the scale loads, SYNCS/BRA the pipeline's
     barriers.

    scripts/ncu_stalls.py fwd_sass.csv [--top 25] [--loop EXECUTIONS]
"""
import argparse
import collections
import csv
import sys


def load(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    # The page starts with a "Kernel Name" line, then the header row.
    start = next((i for i, r in enumerate(rows) if r and r[0] == "Address"), None)
    if start is None:
        sys.exit(f"ncu_stalls: {path} has no 'Address' header row: give the output of "
                 "`ncu -i REPORT --page source --csv --print-source sass`")
    header = rows[start]
    col = {h: i for i, h in enumerate(header)}
    for need in ("Source", "Warp Stall Sampling (All Samples)", "Instructions Executed"):
        if need not in col:
            sys.exit(f"ncu_stalls: {path} lacks the column '{need}': collect the report with --section SourceCounters")
    reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
    out = []
    for r in rows[start + 1:]:
        if len(r) != len(header):
            continue

        def num(h):
            v = r[col[h]].replace(",", "")
            return int(float(v)) if v not in ("", "-") else 0

        out.append({
            "sass": r[col["Source"]].strip(),
            "samples": num("Warp Stall Sampling (All Samples)"),
            "executed": num("Instructions Executed"),
            "stalls": {h[len("stall_"):]: num(h) for h in reasons},
        })
    return out


def opcode(sass):
    words = sass.split()
    if not words:
        return "?"
    op = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
    return op.split(".")[0]


def top_reasons(stalls, n=3):
    total = sum(stalls.values()) or 1
    best = sorted(stalls.items(), key=lambda kv: -kv[1])[:n]
    return ", ".join(f"{k} {100 * v / total:.0f} %" for k, v in best if v > 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--loop", type=int, default=None, help="the execution count of the loop to break down")
    a = ap.parse_args()
    ins = load(a.csv)
    total = sum(i["samples"] for i in ins)
    if total == 0:
        sys.exit(f"ncu_stalls: {a.csv} has no warp-state samples")
    print(f"{total} samples over {len(ins)} instructions\n")
    print("| samples | share | instruction | executed | stalls |\n|---:|---:|---|---:|---|")
    for i in sorted(ins, key=lambda i: -i["samples"])[:a.top]:
        print(f"| {i['samples']} | {100 * i['samples'] / total:.1f} % | `{i['sass'][:70]}` | {i['executed']} | "
              f"{top_reasons(i['stalls'])} |")
    groups = collections.Counter()
    for i in ins:
        groups[i["executed"]] += i["samples"]
    print("\n| executions | samples | share |\n|---:|---:|---:|")
    for e, s in groups.most_common(10):
        print(f"| {e} | {s} | {100 * s / total:.1f} % |")
    loop = a.loop if a.loop is not None else groups.most_common(1)[0][0]
    by_op = collections.defaultdict(lambda: [0, 0, collections.Counter()])
    for i in ins:
        if i["executed"] != loop:
            continue
        g = by_op[opcode(i["sass"])]
        g[0] += 1
        g[1] += i["samples"]
        g[2].update(i["stalls"])
    in_loop = sum(g[1] for g in by_op.values())
    print(f"\nThe loop run {loop} times: {in_loop} samples ({100 * in_loop / total:.1f} % of all)\n")
    print("| opcode | instructions | samples | share of the loop | stalls |\n|---|---:|---:|---:|---|")
    for op, (n, s, st) in sorted(by_op.items(), key=lambda kv: -kv[1][1]):
        print(f"| {op} | {n} | {s} | {100 * s / max(in_loop, 1):.1f} % | {top_reasons(st)} |")


if __name__ == "__main__":
    main()
