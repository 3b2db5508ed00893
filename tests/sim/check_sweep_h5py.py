#!/usr/bin/env python3
"""fp8moe sweep, end to end, read back with h5py (issue 4 items 2-4).

  check_sweep_h5py.py FP8MOE SCENARIO_DIR WORK_DIR [SEED]

1. A full sweep of small.ini (with --save-blocks --save-tensors): h5py reads the cases table
   (every documented column), the provenance attributes, status complete, the one-line pandas load
   of results/SCHEMA.md, the per-block datasets with their dimension scales, and the tensors.
2. Determinism: a second run, on one thread, gives the same table and bitwise the same cases
   (time_ms aside).
3. SIGKILL at random moments (seeded; the seed is printed): the file opens with h5py and holds
   every completed case, each equal to the full run's; --resume ends with exactly its table.
4. SIGINT: the current case finishes, status interrupted, exit 130; --resume completes it.
Exit 0 all good, 1 a check failed, 77 h5py/numpy missing (CTest: Skipped).
"""
import os
import random
import signal
import subprocess
import sys
import time

try:
    import h5py
    import numpy as np
except ImportError as e:  # pragma: no cover
    print(f"skipped: {e} (apt-get install python3-h5py)")
    sys.exit(77)

FP8MOE, SCEN, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
SEED = int(sys.argv[4]) if len(sys.argv) > 4 else random.SystemRandom().randrange(1 << 30)
SMALL = os.path.join(SCEN, "small.ini")
SCHEMA = os.path.join(os.path.dirname(os.path.dirname(SCEN)), "..", "results", "SCHEMA.md")
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print(f"FAIL: {what} (seed {SEED})", flush=True)


def table_lines(stdout):
    """The case rows of the stdout table (comments, header and summary start with '#')."""
    return [l for l in stdout.splitlines() if l and not l.startswith("#")]


def sweep(*args, check_rc=0):
    p = subprocess.run([FP8MOE, "sweep", *args], capture_output=True, text=True)
    if check_rc is not None and p.returncode != check_rc:
        print(p.stdout[-3000:], p.stderr[-3000:])
        check(False, f"fp8moe sweep {' '.join(args)} exited {p.returncode}, expected {check_rc}")
    return p


def cases(path):
    with h5py.File(path, "r") as f:
        t = f["cases"][()]
        n = int(f.attrs["rows_committed"])
        # String attributes are fixed-length UTF-8 (bytes in h5py): decoded here.
        return t[:n], {k: v.decode("utf-8") if isinstance(v, bytes) else v for k, v in f.attrs.items()}


def same_rows(a, b, what):
    """Every column but time_ms bitwise equal (NaN equal to NaN), rows in the same order."""
    if a.shape != b.shape:
        check(False, f"{what}: {a.shape[0]} rows vs {b.shape[0]}")
        return
    for name in a.dtype.names:
        if name == "time_ms":
            continue
        x, y = a[name], b[name]
        if x.dtype.kind == "f":
            eq = (x.view(np.uint64) == y.view(np.uint64)) | (np.isnan(x) & np.isnan(y))
        else:
            eq = x == y
        if not np.all(eq):
            i = int(np.argmin(eq))
            check(False, f"{what}: column {name} differs first at row {i}: {x[i]!r} vs {y[i]!r}")


def wait_for_row(p, deadline_s=60):
    """Reads p's stdout until the first table row (the file then exists); returns lines read."""
    lines, t0 = [], time.time()
    while time.time() - t0 < deadline_s:
        line = p.stdout.readline()
        if not line:
            break
        lines.append(line)
        if not line.startswith("#"):
            return lines
    return lines


def h5_opens(path):
    try:
        with h5py.File(path, "r") as f:
            return "cases" in f
    except OSError:
        return False


os.makedirs(WORK, exist_ok=True)
full = os.path.join(WORK, "full.h5")
print(f"# check_sweep_h5py seed {SEED}", flush=True)

# ---- 1. full run, read back -----------------------------------------------------------------
p = sweep(SMALL, "--out", full, "--force", "--save-blocks", "--save-tensors", "-q")
ref_table = table_lines(p.stdout)
check(len(ref_table) > 10, f"the full sweep printed {len(ref_table)} table rows")
check(p.stdout.splitlines()[-1].startswith("# summary:"), "the sweep ends with a summary line")
ref, attrs = cases(full)
check(attrs.get("status") == "complete", f"status {attrs.get('status')!r}")
for a in ("format", "schema_version", "tool_version", "git_sha", "host", "cpu", "cpu_cores", "hdf5_version",
          "argv", "scenario_text", "seed", "started_utc", "finished_utc", "cases_total", "cases_done",
          "rows_committed", "mesh_runtime"):
    check(a in attrs, f"root attribute {a} missing")
columns = ("case_id case_key scenario level mesh world plan placements strategy pass tensor backend mode format "
           "block pow2_scales pad experts tokens n k dim hidden routing offs dist seed fsdp_gather reduce_dtype "
           "reduce_order fp8_dispatch lr sqnr_db sqnr_vs_single_db rel_err max_abs_err max_ulp bitwise_equal_frac "
           "block_aligned underflow_frac saturated_frac nonfinite comm_bytes time_ms status message split_k "
           "lhs_scale_min lhs_scale_max lhs_scale_std lhs_dynamic_range lhs_underflow lhs_overflow lhs_nonfinite "
           "lhs_empty_blocks rhs_scale_min rhs_scale_max rhs_scale_std rhs_dynamic_range rhs_underflow rhs_overflow "
           "rhs_nonfinite rhs_empty_blocks").split()
check(list(ref.dtype.names) == columns, f"cases columns {ref.dtype.names}")
check(len(ref) == len(ref_table), f"{len(ref)} rows in the file, {len(ref_table)} in the table")
check(all(s == b"ok" for s in ref["status"]), "every row ok")
check(np.all(np.isfinite(ref["sqnr_db"])), "finite SQNRs")
check(int(attrs["cases_done"]) == len(set(ref["case_id"].tolist())), "cases_done counts the cases")
for a in ("git_dirty", "cpu_cores", "omp_threads", "launch_world"):  # counts are numbers, not text
    check(isinstance(attrs.get(a), (int, np.integer)), f"root attribute {a} is {attrs.get(a)!r}, not an integer")

# The one-line pandas load of SCHEMA.md, as written there.
try:
    import pandas as pd  # noqa: F401
    src = [l for l in open(SCHEMA).read().splitlines() if l.startswith("df = pd.DataFrame(")]
    check(len(src) == 1, "SCHEMA.md has one pandas one-liner")
    env = {"h5py": h5py, "pd": pd}
    exec(src[0].replace("results/runs/default.h5", full), env)
    df = env["df"]
    check(len(df) == len(ref) and df["status"].eq("ok").all(), "the pandas one-liner loads the table, strings decoded")
except ImportError:
    print("# pandas missing: one-liner not checked")

with h5py.File(full, "r") as f:
    blocks, tensors = f["blocks"], f["tensors"]
    check(len(blocks) == len(set(ref["case_id"].tolist())), f"{len(blocks)} /blocks groups")
    g = blocks[sorted(blocks)[0]]
    tile = [k for k in g if k.endswith("_tile_sqnr")]
    amax = [k for k in g if k.endswith("_amax")]
    check(tile and amax, f"block datasets in {g.name}: {list(g)}")
    for k in tile + amax:
        d = g[k]
        check(all(len(d.dims[i]) == 1 for i in range(d.ndim)), f"{d.name} has a dimension scale on every dim")
        check(d[()].size > 0, f"{d.name} not empty")
    scale = g[amax[0].replace("_amax", "_scale")][()]
    check(np.all(np.isfinite(scale)) and np.all(scale >= 0), "scales finite and >= 0")
    t = tensors[sorted(tensors)[0]]
    outs = [k for k in t if k + "_hp64" in t and k + "_single" in t]
    check(outs, f"tensors with their references in {t.name}: {list(t)}")
    for k in outs:
        check(t[k].shape == t[k + "_hp64"].shape and np.all(np.isfinite(t[k][()])), f"{t.name}/{k} shape and values")

# ---- 2. determinism ------------------------------------------------------------------------
again = os.path.join(WORK, "again.h5")
# On one thread: the numbers may not depend on the machine's core count.
p2 = sweep(SMALL, "--out", again, "--force", "-q", "--threads", "1")
check(table_lines(p2.stdout) == ref_table, "a second run (one thread) prints the same table")
same_rows(ref, cases(again)[0], "a second run (one thread)")

# ---- 3. SIGKILL at random moments, then --resume -----------------------------------------------
rng = random.Random(SEED)
for i in range(3):
    out = os.path.join(WORK, f"killed{i}.h5")
    if os.path.exists(out):
        os.remove(out)
    proc = subprocess.Popen([FP8MOE, "sweep", SMALL, "--out", out, "-q"], stdout=subprocess.PIPE, text=True)
    wait_for_row(proc)
    delay = rng.uniform(0.0, 1.5)
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    print(f"# kill {i}: SIGKILL {delay:.3f} s after the first row", flush=True)
    check(h5_opens(out), f"kill {i}: h5py opens the killed file")
    if not h5_opens(out):
        continue
    got, a = cases(out)
    if a.get("status") == "complete":
        print(f"# kill {i}: the sweep had finished before the kill")
    # Every committed case equals the full run's first rows.
    same_rows(ref[: len(got)], got, f"kill {i}: the committed rows")
    done = len(set(got["case_id"].tolist()))
    check(int(a["cases_done"]) == done, f"kill {i}: cases_done {a['cases_done']} vs {done} committed")
    r = sweep("--resume", out, "-q")
    check(table_lines(r.stdout) == ref_table, f"kill {i}: the resumed run prints the uninterrupted table")
    fin, fa = cases(out)
    check(fa.get("status") == "complete", f"kill {i}: resumed status {fa.get('status')!r}")
    same_rows(ref, fin, f"kill {i}: the resumed file")

# ---- 4. SIGINT ----------------------------------------------------------------------------
out = os.path.join(WORK, "sigint.h5")
if os.path.exists(out):
    os.remove(out)
proc = subprocess.Popen([FP8MOE, "sweep", SMALL, "--out", out, "-q"], stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE, text=True)
wait_for_row(proc)
proc.send_signal(signal.SIGINT)
_, err = proc.communicate()
if proc.returncode == 0:
    print("# SIGINT arrived after the last case: nothing to interrupt")
else:
    check(proc.returncode == 130, f"SIGINT: exit {proc.returncode}, expected 130")
    check("--resume" in err, f"SIGINT: stderr says how to resume: {err[-300:]!r}")
    got, a = cases(out)
    check(a.get("status") == "interrupted", f"SIGINT: status {a.get('status')!r}")
    same_rows(ref[: len(got)], got, "SIGINT: the committed rows")
    r = sweep("--resume", out, "-q")
    check(table_lines(r.stdout) == ref_table, "SIGINT: the resumed run prints the uninterrupted table")
    same_rows(ref, cases(out)[0], "SIGINT: the resumed file")

print(f"# {len(failures)} failures (seed {SEED})")
sys.exit(1 if failures else 0)
