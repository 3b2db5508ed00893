#!/usr/bin/env python3
"""Cross-check of notebooks/fp8moe_gates.py against `fp8moe gate` (sim/sweep/gate.cpp): both must
fail the same (case_id, pass, tensor, gate) and report the same counts, on a real sweep.

Sweeps SCENARIO once, then makes a perturbed copy (a NaN metric, a metric a hair below and one
exactly at a floor, two broken bitwise identities, a case with status error whose metrics are
also bad, a status `fail` row that passes its gates, the run marked interrupted). Each file is
gated by `fp8moe gate FILE` (the built-in gates; Python reads scenarios/gates.ini), by
`fp8moe gate FILE --gates G` for every G given (CTest passes tests/sim/sweep/gates_strict.ini,
a gate every row fails), and by a gates file written here that exercises the matching rules
(';' lists, '!', '?', literal brackets, integers and %.17g doubles as text, inf).

usage: check_gates.py FP8MOE_BIN SCENARIO.ini WORKDIR [--gates FILE]...
Exit 0 pass, 1 fail, 77 skip (python lacks h5py/pandas, or the binary has no `gate` command).
"""
import collections
import os
import re
import shutil
import subprocess
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "notebooks"))
try:
    import h5py
    import numpy as np
    import fp8moe_gates as fg
    import fp8moe_results as fr
except ImportError as e:  # CTest shows 77 as Skipped
    print(f"skipped: {e} (scripts/setup.sh installs python3-h5py python3-pandas)")
    sys.exit(77)

EDGE_GATES = """\
# Written by tests/notebooks/check_gates.py: gates that exercise fp8moe gate's matching rules.
[gate.lists_negation_globs]
description = ';' lists, '!' and '?' # both parsers cut a line at its first '#'
level = op
mode = torchao-*; promote-fp32?cublas
strategy = !*replicate*; !single-device
metric = sqnr_db
min_db = 28.7

[gate.brackets_are_literal]
# fnmatch would read [S(1)] as a class and also match 'dp: W1/W3 [R], W2 [R]; dp (dW all_reduce)'
placements = *[S(1)]*; A=[]*
metric = sqnr_db
min_db = 28.66

[gate.integers_as_text]
block = 1?8
world = 2
block_aligned = 1
fp8_dispatch = !1
status = !fail
metric = sqnr_vs_single_db
min_db = 60

[gate.doubles_as_17g]
# %.17g of a 2x dB value: 2 digits, the point, 15 digits (repr would print fewer)
sqnr_db = 2?.???????????????
lr = 0
metric = sqnr_db
min_db = 28.65

[gate.inf_and_ones_as_text]
sqnr_vs_single_db = inf
bitwise_equal_frac = !1
tensor = !y
expect = bitwise

[gate.layer_tp_bitwise]
level = layer
mesh = tp=2
expect = bitwise

[gate.matches_nothing]
level = none
metric = sqnr_db
min_db = 1000
"""

SUMMARY = re.compile(r"# gate: (?P<rows>\d+) rows, (?P<rows_gated>\d+) under a gate, (?P<checks>\d+) checks "
                     r"against (?P<gates>\d+) gates(?: and the baseline .*)?: (?P<failures>\d+) failures -> "
                     r"(?P<verdict>PASS|FAIL)$")
ROW = re.compile(r"case (?P<id>\d+) \[[^\]]*\] (?P<label>.*?): (?P<message>.*)$")


class Mismatch(Exception):
    pass


def run(cmd):
    print("+", " ".join(cmd), flush=True)
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def load(path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fr.IncompleteRunWarning)
        return fr.load_cases(path)


def parse_gate_output(out, df, gate_names):
    """`fp8moe gate` stdout (sim/cli/cmd_report.cpp cmd_gate) -> (Counter of (case_id, pass,
    tensor, gate), incomplete, summary dict). Every line must be understood: '# gate FILE: ...',
    'FAIL <gate>: case <id> [<scenario>] <level> <mesh> <placements or plan> <pass> <tensor>
    <mode> <backend>: <message>', 'FAIL status: the sweep is ...', '# gate: N rows, ...'."""
    names = sorted(set(gate_names) | {"status"}, key=len, reverse=True)  # a name may hold ': '
    by_case = {cid: g for cid, g in df.groupby("case_id")}
    fails, incomplete, summary = collections.Counter(), False, None
    for line in out.splitlines():
        if not line.strip() or (line.startswith("# gate ") and summary is None):
            continue
        if m := SUMMARY.match(line):
            if summary is not None:
                raise Mismatch(f"two summary lines: {line!r}")
            summary = {k: (v if k == "verdict" else int(v)) for k, v in m.groupdict().items()}
            continue
        gate = next((n for n in names if line.startswith(f"FAIL {n}: ")), None)
        if gate is None or summary is not None:
            raise Mismatch(f"cannot read this line of fp8moe gate (cmd_gate's format changed?): {line!r}")
        rest = line[len(f"FAIL {gate}: "):]
        if gate == "status" and rest.startswith("the sweep is "):
            incomplete = True
            continue
        m = ROW.match(rest)
        rows = by_case.get(int(m["id"])) if m else None
        if rows is None:
            raise Mismatch(f"no row of the file has this line's case id: {line!r}")
        # The label ends `<pass> <tensor> <mode> <backend>` (gate.cpp row_label); rows of one case
        # differ in (pass, tensor) only.
        hit = [(r["pass"], r["tensor"]) for _, r in rows.iterrows()
               if f" {r['pass']} {r['tensor']} {r['mode']} {r['backend']}" in f" {m['label']}"]
        if len(hit) != 1:
            raise Mismatch(f"{len(hit)} rows of case {m['id']} fit this line's label: {line!r}")
        fails[(int(m["id"]), *hit[0], gate)] += 1
    if summary is None:
        raise Mismatch("fp8moe gate printed no summary line")
    return fails, incomplete, summary


def cross_check(binary, path, gates_file):
    """One `fp8moe gate` run against the Python helper; returns the C++ failures."""
    what = f"{os.path.basename(path)} against {gates_file or 'the built-in gates'}"
    cmd = [binary, "gate", path] + (["--gates", gates_file] if gates_file else [])
    r = run(cmd)
    if r.returncode not in (0, 1):
        raise Mismatch(f"{what}: fp8moe gate exited {r.returncode}: {r.stderr.strip()}")
    df = load(path)
    gates = fg.load_gates(gates_file or fg.DEFAULT_GATES)  # not $FP8MOE_GATES: the built-in ones
    cpp, cpp_incomplete, summary = parse_gate_output(r.stdout, df, [g.name for g in gates])
    failures = fg.gate_failures(df, gates)
    py = collections.Counter(zip(failures["case_id"].astype(int), failures["pass"], failures["tensor"],
                                 failures["gate"]))
    s = fg.gate_summary(df, gates)
    problems = []
    if cpp != py:
        for name, only in (("fp8moe gate only", cpp - py), ("fp8moe_gates.py only", py - cpp)):
            problems += [f"{name}: case {k[0]} {k[1]} {k[2]} gate {k[3]}" for k in sorted(only)]
    for key in ("rows", "rows_gated", "checks", "gates"):
        if summary[key] != s[key]:
            problems.append(f"{key}: fp8moe gate {summary[key]}, fp8moe_gates.py {s[key]}")
    if summary["failures"] != s["failures"] + s["incomplete"] or cpp_incomplete != s["incomplete"]:
        problems.append(f"failures: fp8moe gate {summary['failures']} (incomplete {cpp_incomplete}), "
                        f"fp8moe_gates.py {s['failures']} (incomplete {s['incomplete']})")
    if (r.returncode == 0) != s["passed"] or (summary["verdict"] == "PASS") != s["passed"]:
        problems.append(f"verdict: fp8moe gate exit {r.returncode} {summary['verdict']}, "
                        f"fp8moe_gates.py passed={s['passed']}")
    if sum(cpp.values()) != summary["failures"] - cpp_incomplete:
        problems.append(f"fp8moe gate printed {sum(cpp.values())} row failures but counts "
                        f"{summary['failures']}")
    if problems:
        print(r.stdout[-4000:])
        raise Mismatch(f"{what}:\n  " + "\n  ".join(problems))
    print(f"ok: {what}: {sum(py.values())} failures of {s['rows']} rows, {s['checks']} checks agree"
          + (", run incomplete" if s["incomplete"] else ""), flush=True)
    return cpp


def perturb(src, dst):
    """dst: src with rows made to fail (or pass at the edge) the built-in gates. Returns
    {(case_id, pass, tensor): True if it must fail the built-in gates, False if it must pass}."""
    shutil.copy(src, dst)
    df = load(src)
    verdict = fg.check(df, fg.load_gates(fg.DEFAULT_GATES))
    gates, matched = verdict.gates, verdict.matched
    if verdict.failed.any() or verdict.error.any():
        raise Mismatch(f"{src}: the sweep already fails the built-in gates; perturbing it tests less")
    floor = {g.metric: [j for j, h in enumerate(gates) if h.metric == g.metric] for g in gates if g.metric}
    bitwise = [j for j, g in enumerate(gates) if g.expect_bitwise]
    taken, expect = set(), {}

    def pick(columns, avoid=()):
        """A row under one of these gates and none of `avoid`, not yet perturbed (its position)."""
        under = matched[:, columns].any(axis=1) & ~matched[:, list(avoid)].any(axis=1)
        hits = [i for i in np.flatnonzero(under) if i not in taken]
        if not hits:
            raise Mismatch(f"{src}: no row under gates {[gates[j].name for j in columns]} to perturb")
        taken.add(hits[0])
        return hits[0]

    with h5py.File(dst, "a") as f:
        t = f["cases"][()]

        def mark(i, fails):
            expect[(int(t["case_id"][i]), t["pass"][i].decode(), t["tensor"][i].decode())] = fails

        def top_floor(i, metric):
            return max(gates[j].min_db for j in floor[metric] if matched[i, j])
        for metric in floor:
            i = pick(floor[metric])
            t[metric][i] = np.nan
            mark(i, True)
            i = pick(floor[metric])
            t[metric][i] = np.nextafter(top_floor(i, metric), -np.inf)  # one ulp below: fails
            mark(i, True)
            i = pick(floor[metric], avoid=bitwise)  # a bitwise row would fail on sqnr_vs_single_db
            t[metric][i] = top_floor(i, metric)  # exactly at the floor: passes (>=)
            mark(i, False)
        i = pick(bitwise)
        t["bitwise_equal_frac"][i] = 0.999  # sqnr_vs_single_db still inf
        mark(i, True)
        i = pick(bitwise)
        t["sqnr_vs_single_db"][i] = 99.0  # every element equal, but not +inf
        mark(i, True)
        i = pick(floor["sqnr_db"])
        t["status"][i], t["message"][i], t["sqnr_db"][i] = "error", "synthetic: the case threw", np.nan
        mark(i, True)
        i = pick(floor["sqnr_db"])
        t["status"][i], t["message"][i] = "fail", "synthetic: the sweep's own check"
        mark(i, False)  # status fail is not a gate failure
        f["cases"][...] = t
        # Fixed-length, as fp8moe writes them (schema 2).
        f.attrs["status"], f.attrs["status_message"] = np.bytes_(b"interrupted"), np.bytes_(b"synthetic SIGINT")
    return expect


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    binary, scenario, work = argv[0], argv[1], os.path.abspath(argv[2])
    extra = [argv[i + 1] for i, a in enumerate(argv) if a == "--gates"]
    probe = subprocess.run([binary, "gate", "--help"], capture_output=True, text=True)
    if "unknown command 'gate'" in probe.stdout + probe.stderr:
        print(f"skipped: {binary} has no `gate` command yet (issue 4)")
        return 77
    os.makedirs(work, exist_ok=True)
    run_h5, perturbed = os.path.join(work, "run.h5"), os.path.join(work, "perturbed.h5")
    edge = os.path.join(work, "edge_gates.ini")
    with open(edge, "w") as f:
        f.write(EDGE_GATES)
    for p in (run_h5, perturbed):
        if os.path.exists(p):
            os.remove(p)
    r = run([binary, "sweep", scenario, "--out", run_h5])
    if r.returncode != 0:
        print(r.stdout[-3000:], r.stderr[-3000:])
        return 1
    try:
        expect = perturb(run_h5, perturbed)
        for path in (run_h5, perturbed):
            for gates_file in (None, *extra, edge):
                cpp = cross_check(binary, path, gates_file)
                if path == perturbed and gates_file is None:
                    failing = {k[:3] for k in cpp}
                    wrong = {k: v for k, v in expect.items() if (k in failing) != v}
                    if wrong:
                        raise Mismatch(f"the perturbed rows do not fail as meant: {wrong} (True: must fail)")
                    print(f"ok: the {len(expect)} perturbed rows fail (or pass) as meant", flush=True)
    except Mismatch as e:
        print(f"FAIL: {e}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
