#!/usr/bin/env python3
"""Unit tests of notebooks/fp8moe_results.py on files written by make_synthetic_run.py (exactly
results/SCHEMA.md's layout): loading, provenance, refusing foreign files, dimension scales,
the gates (scenarios/gates.ini's reference/SPEC.md 9 floors and identities, and the matching rules of
`fp8moe gate` on gates written here), matching two runs.

usage: test_fp8moe_results.py WORKDIR     exit 0 pass, 1 fail, 77 skip (h5py/pandas missing)
"""
import math
import os
import re
import shutil
import subprocess
import sys
import unittest
import warnings
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "notebooks"))
try:
    import h5py
    import numpy as np
    import pandas as pd
    import fp8moe_results as fr
    import fp8moe_gates
except ImportError as e:  # CTest shows 77 as Skipped
    print(f"skipped: {e} (scripts/setup.sh installs python3-h5py python3-pandas)")
    sys.exit(77)

WORK = None
RUN0 = RUN1 = RUNNING = FOREIGN = None


def make(name, *args):
    path = os.path.join(WORK, name)
    subprocess.run([sys.executable, os.path.join(HERE, "make_synthetic_run.py"), path, *args], check=True)
    return path


def setUpModule():
    global RUN0, RUN1, RUNNING, FOREIGN
    os.makedirs(WORK, exist_ok=True)
    for f in os.listdir(WORK):
        if f.endswith((".h5", ".txt")):
            os.remove(os.path.join(WORK, f))
    RUN0 = make("run0.h5")
    RUN1 = make("run1.h5", "--seed", "1", "--no-blocks")
    RUNNING = os.path.join(WORK, "running.h5")  # run1 as a sweep interrupted after its last flush
    shutil.copy(RUN1, RUNNING)
    with h5py.File(RUNNING, "a") as f:
        f.attrs["status"], f.attrs["status_message"] = "interrupted", "SIGINT"
    FOREIGN = make("foreign.h5", "--foreign")


def rewritten_cases(name, edit):
    """RUN0's attributes and its /cases table as `edit(table)` returns it, in a new file."""
    path = os.path.join(WORK, name)
    with h5py.File(RUN0, "r") as src, h5py.File(path, "w") as dst:
        for k, v in src.attrs.items():
            dst.attrs[k] = v
        dst["cases"] = edit(src["cases"][()])
    return path


class Loading(unittest.TestCase):
    def test_cases_have_every_schema_column_and_decoded_strings(self):
        df = fr.load_cases(RUN0)
        self.assertEqual(list(df.columns), list(fr.CASE_COLUMNS))
        self.assertGreater(len(df), 100)
        for c in df.columns:
            if df[c].dtype == object:
                self.assertTrue(df[c].map(lambda v: isinstance(v, str)).all(), c)
        self.assertEqual(set(df["pass"]), {"fwd", "dgrad", "wgrad"})
        self.assertTrue(df["case_key"].str.startswith("level=").all())
        self.assertEqual(df.attrs["provenance"]["format"], "fp8moe-sweep")
        self.assertTrue(np.isposinf(df["sqnr_db"][df["mode"] == "hp64"]).all())

    def test_provenance_is_plain_python(self):
        p = fr.provenance(RUN0)
        self.assertEqual(p["format"], "fp8moe-sweep")
        self.assertEqual(p["status"], "complete")
        self.assertIsInstance(p["schema_version"], int)
        self.assertIsInstance(p["argv"], str)
        self.assertEqual(p["save_blocks"], 1)

    def test_foreign_files_are_refused_with_a_reason(self):
        with self.assertRaisesRegex(fr.NotASweepResult, "not an fp8moe sweep result.*something-else"):
            fr.load_cases(FOREIGN)
        text = os.path.join(WORK, "not_hdf5.txt")
        with open(text, "w") as f:
            f.write("hello")
        with self.assertRaisesRegex(fr.NotASweepResult, "not an HDF5 file"):
            fr.provenance(text)
        no_attr = os.path.join(WORK, "no_attr.h5")
        with h5py.File(no_attr, "w") as f:
            f["x"] = 1
        with self.assertRaisesRegex(fr.NotASweepResult, "no root attribute 'format'"):
            fr.load_cases(no_attr)

    def test_old_mode_spelling_reads_as_today_s(self):
        # Files written before 2026-12-05 say "hopper-tc/cublas" in mode and case_key.
        def edit(t):
            t["mode"][0] = b"hopper-tc/cublas"
            t["case_key"][0] = b"level=op mode=hopper-tc/cublas scenario=promote-fp32/x"
            t["mode"][1] = b"promote-fp32/deepgemm"
            return t
        df = fr.load_cases(rewritten_cases("old_spelling.h5", edit))
        self.assertEqual(list(df["mode"][:2]), ["hopper-tc:cublas", "promote-fp32:deepgemm"])
        self.assertEqual(df["case_key"][0], "level=op mode=hopper-tc:cublas scenario=promote-fp32/x")
        self.assertEqual(list(df["mode"][2:]), list(fr.load_cases(RUN0)["mode"][2:]))

    def test_missing_column_is_an_error(self):
        cut = rewritten_cases("cut.h5", lambda t: t[[n for n in t.dtype.names if n != "sqnr_vs_single_db"]])
        with self.assertRaisesRegex(ValueError, "lacks column.*sqnr_vs_single_db"):
            fr.load_cases(cut)

    def test_incomplete_run_warns_but_loads(self):
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            df = fr.load_cases(RUNNING)
        self.assertTrue(any(issubclass(x.category, fr.IncompleteRunWarning)
                            and "interrupted" in str(x.message) for x in w))
        self.assertGreater(len(df), 0)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            fr.load_cases(RUN0)
        self.assertFalse([x for x in w if issubclass(x.category, fr.IncompleteRunWarning)])

    def test_list_runs_skips_foreign_files(self):
        runs = fr.list_runs(WORK)
        self.assertLessEqual({"run0", "run1", "running"}, set(runs["name"]))
        self.assertNotIn("foreign", set(runs["name"]))
        self.assertEqual(runs.set_index("name").loc["run1", "save_blocks"], 0)


class Blocks(unittest.TestCase):
    def test_dims_come_from_the_dimension_scales(self):
        ids = fr.block_case_ids(RUN0)
        self.assertTrue(ids)
        df = fr.load_cases(RUN0)
        fwd = df[(df["pass"] == "fwd") & df["case_id"].isin(ids)]["case_id"].iloc[0]
        ds = fr.load_blocks(RUN0, fwd)
        self.assertEqual(ds["out_tile_sqnr"].dims, ("out_tile_row", "out_tile_col"))
        self.assertEqual(ds["W_scale"].dims, ("expert", "W_brow", "W_bcol"))
        self.assertEqual(list(ds["out_tile_row"].values), [0, 128, 256, 384])
        self.assertEqual(int(ds.attrs["case_id"]), fwd)
        plain = fr.load_blocks(RUN0, fwd, as_xarray=False)
        values, dims, coords = fr.block_var(plain, "A_amax")
        self.assertEqual(dims, ("A_brow", "A_bcol"))
        np.testing.assert_array_equal(values, ds["A_amax"].values)
        self.assertEqual(fr.block_names(plain), fr.block_names(ds))
        wgrad = df[(df["pass"] == "wgrad") & df["case_id"].isin(ids)]["case_id"].iloc[0]
        self.assertEqual(fr.load_blocks(RUN0, wgrad)["grad_W_tile_sqnr"].dims,
                         ("expert", "grad_W_tile_row", "grad_W_tile_col"))

    def test_a_case_without_blocks_names_the_fix(self):
        with self.assertRaisesRegex(KeyError, "save-blocks"):
            fr.load_blocks(RUN1, 0)


# One row of /cases with every column (a gate on a column a row lacks is a KeyError): an aligned
# tp=2 replicate fwd of torchao's op-level case, bitwise equal to the single device.
TEMPLATE = dict(case_id=0, case_key="level=op", scenario="s", level="op", mesh="tp=2", world=2,
                plan="direct", placements="A=[R] W=[R]", strategy="tp:replicate", tensor="out",
                backend="reference", mode="torchao-emulated", format="e4m3", block=128,
                pow2_scales=0, pad=1, experts=3, tokens=500, n=256, k=256, dim=0, hidden=0,
                routing="explicit", offs="129,384,500", dist="normal", seed=0, fsdp_gather="bf16",
                reduce_dtype="fp32", reduce_order="ascending", fp8_dispatch=0, lr=0.0,
                sqnr_db=28.7, sqnr_vs_single_db=math.inf, rel_err=0.03, max_abs_err=0.1,
                max_ulp=2.0, bitwise_equal_frac=1.0, block_aligned=1, underflow_frac=0.0,
                saturated_frac=0.0, nonfinite=0, comm_bytes=0, time_ms=1.0, status="ok", message="")
TEMPLATE["pass"] = "fwd"


def row(**kw):
    kw = {("pass" if k == "pass_" else k): v for k, v in kw.items()}
    assert set(kw) <= set(TEMPLATE), set(kw) - set(TEMPLATE)
    return pd.Series({**TEMPLATE, **kw})


def rows(*kws):
    return pd.DataFrame([row(**kw) for kw in kws]).assign(case_id=lambda d: range(len(d)))


def gates(text):
    return fr.parse_gates(text, "/some/dir/test_gates.ini")


TWO_FLOORS = gates("""
[gate.low]
description = every fwd
pass = fwd
metric = sqnr_db
min_db = 20
[gate.high]
pass = fwd
mode = exact; torchao-*
metric = sqnr_db
min_db = 27
[gate.same]
description = equal to the single device
strategy = !*contraction*
expect = bitwise
""")


class ShippedGates(unittest.TestCase):
    """SPEC.md 9's floors and identities, as scenarios/gates.ini writes them."""

    def test_the_helper_reads_scenarios_gates_ini(self):
        self.assertEqual(fr.DEFAULT_GATES, Path(HERE).parent.parent / "scenarios" / "gates.ini")
        with open(fr.DEFAULT_GATES) as f:
            sections = re.findall(r"(?m)^\[gate\.([^\]]+)\]", f.read())
        table = fr.floors_table()
        self.assertEqual(list(table["name"]), sections)
        self.assertLessEqual({"name", "kind", "metric", "min_db", "level", "pass", "mode", "description",
                              "where"}, set(table.columns))
        op_fwd = table.set_index("name").loc["op_fwd_floor"]
        self.assertEqual((op_fwd["kind"], op_fwd["min_db"], op_fwd["pass"]), ("floor", 27.0, "fwd"))
        self.assertRegex(op_fwd["where"], r"^gates\.ini:\d+$")

    def test_op_floors(self):
        self.assertEqual(fr.floor_for(row(pass_="fwd")), 27.0)
        self.assertEqual(fr.floor_for(row(pass_="dgrad")), 26.0)
        self.assertEqual(fr.floor_for(row(pass_="wgrad")), 26.0)
        self.assertEqual(fr.floor_for(row(pass_="fwd", mode="promote-fp32:cublas")), 27.0)
        self.assertTrue(math.isnan(fr.floor_for(row(pass_="fwd", mode="hp64"))))
        self.assertTrue(math.isnan(fr.floor_for(row(pass_="fwd", mode="bf16"))))
        self.assertTrue(math.isnan(fr.floor_for(row(pass_="fwd", dist="outliers"))))
        self.assertTrue(math.isnan(fr.floor_for(row(pass_="fwd", format="e5m2"))))
        self.assertTrue(math.isnan(fr.floor_for(row(pass_="fwd", block=64))))
        self.assertTrue(math.isnan(fr.floor_for(row(pass_="fwd"), "sqnr_vs_single_db")))
        contraction = row(pass_="dgrad", strategy="tp:contraction")
        self.assertEqual(fr.floor_for(contraction, "sqnr_vs_single_db"), 35.0)
        misaligned = row(pass_="dgrad", strategy="tp:contraction", block_aligned=0)
        self.assertTrue(math.isnan(fr.floor_for(misaligned, "sqnr_vs_single_db")))
        self.assertEqual([g.name for g in fr.floors_for(contraction)],
                         ["op_bwd_floor", "op_contraction_reduced"])

    def test_layer_floors(self):
        layer = dict(level="layer", placements="", strategy="")
        tp_y = row(plan="tp", tensor="y", **layer)
        self.assertEqual(fr.floor_for(tp_y, "sqnr_vs_single_db"), 23.0)
        self.assertEqual(fr.floor_for(tp_y), 23.0)
        self.assertEqual(fr.floor_for(row(plan="fsdp+tp", tensor="dx", pass_="dgrad", **layer),
                                      "sqnr_vs_single_db"), 20.0)
        fsdp_dw = row(plan="fsdp", tensor="dw2", pass_="wgrad", **layer)
        self.assertEqual(fr.floor_for(fsdp_dw, "sqnr_vs_single_db"), 30.0)
        self.assertEqual(fr.floor_for(fsdp_dw), 22.0)
        bf16_reduce = row(plan="fsdp", tensor="dw2", pass_="wgrad", reduce_dtype="bf16", **layer)
        self.assertTrue(math.isnan(fr.floor_for(bf16_reduce, "sqnr_vs_single_db")))
        ep_fp8 = row(plan="ep", fp8_dispatch=1, tensor="dx", **layer)
        self.assertEqual(fr.floor_for(ep_fp8, "sqnr_vs_single_db"), 20.0)

    def test_identities(self):
        self.assertEqual(fr.identity_for(row(strategy="tp:out-feature")), "op_no_partial_bitwise")
        self.assertIsNone(fr.identity_for(row(strategy="tp:out-feature", block_aligned=0)))
        self.assertIsNotNone(fr.identity_for(row(pass_="wgrad", strategy="dp:replicate,tp:wgrad-k")))
        self.assertIsNone(fr.identity_for(row(strategy="tp:contraction")))
        self.assertIsNone(fr.identity_for(row(strategy="tp:out-feature", mode="hp64")))
        layer = dict(level="layer", placements="", strategy="", tensor="y")
        self.assertEqual(fr.identity_for(row(plan="ep", **layer)), "ep_exact")
        self.assertEqual(fr.identity_for(row(plan="dp+ep", **layer)), "dp_forward_bitwise")
        self.assertEqual(fr.identity_for(row(plan="fsdp", **layer)), "dp_forward_bitwise")
        self.assertIsNone(fr.identity_for(row(plan="ep", fp8_dispatch=1, **layer)))

    def test_annotate_flags_nan_and_low_rows(self):
        df = fr.annotate(fr.load_cases(RUN0))
        for col in ("floor_db", "floor_single_db", "floor_rule", "below_floor", "identity", "identity_ok",
                    "gate_fail", "case", "column"):
            self.assertIn(col, df)
        self.assertTrue((df["gate_fail"][df["mode"] == "hp64"] == "").all())
        fwd = df.index[(df["mode"] == "exact") & (df["pass"] == "fwd") & (df["dist"] == "normal")
                       & (df["format"] == "e4m3")]
        i, j = fwd[0], fwd[1]
        self.assertFalse(df.loc[[i, j], "below_floor"].any())
        self.assertIn("op_fwd_floor: torchao op-level floor", df.loc[i, "floor_rule"])
        df.loc[i, "sqnr_db"] = np.nan
        df.loc[j, "sqnr_db"] = 26.9
        again = fr.annotate(df)
        self.assertTrue(again.loc[[i, j], "below_floor"].all())
        self.assertEqual(set(again.loc[[i, j], "gate_fail"]), {"op_fwd_floor"})
        bad = fr.failing(again)
        self.assertLessEqual({df.loc[i, "case_id"], df.loc[j, "case_id"]}, set(bad["case_id"]))
        self.assertTrue((bad["gate_fail"] != "").all())
        # The fixture's fsdp+tp dx is made 19.2 dB vs single, under its 20 dB floor (tp_grads).
        layer = again[(again["plan"] == "fsdp+tp") & (again["tensor"] == "dx") & (again["mode"] != "bf16")]
        self.assertTrue(layer["below_floor"].all())
        self.assertTrue((layer["gate_fail"] == "tp_grads").all())
        self.assertTrue((layer["floor_single_db"] == 20.0).all())
        # failing() is gate_failures() by row.
        failures = fr.gate_failures(again)
        self.assertEqual(set(zip(failures["case_id"], failures["pass"], failures["tensor"])),
                         set(zip(bad["case_id"], bad["pass"], bad["tensor"])))


class GateRules(unittest.TestCase):
    """sim/sweep/gate.cpp's rules on gates written here (tests/notebooks/check_gates.py holds the
    helper to `fp8moe gate` itself on a real sweep)."""

    def test_a_mode_in_the_old_spelling_matches_today_s(self):
        g = gates("[gate.m]\nmode = hopper-tc/cublas; !promote-fp32/deepgemm\nmetric = sqnr_db\nmin_db = 1\n")[0]
        (m,) = g.match
        self.assertEqual((m.any_of, m.none_of), (("hopper-tc:cublas",), ("promote-fp32:deepgemm",)))
        self.assertTrue(m.holds("hopper-tc:cublas"))
        self.assertFalse(m.holds("promote-fp32:deepgemm"))

    def test_parse_reads_every_field(self):
        g = gates("""
# a comment
[gate.one]   # a comment after a header
description = words; with a semicolon # cut here, as Boost cuts it
level = op
mode = exact; !hp64 ; promote-fp32*
metric = sqnr_vs_single_db
min_db = 3.5e1

[gate.two]
expect = bitwise
""")
        self.assertEqual([x.name for x in g], ["one", "two"])
        one, two = g
        self.assertEqual(one.description, "words; with a semicolon")
        self.assertEqual(one.where, "test_gates.ini:3")
        self.assertEqual([(m.column, m.any_of, m.none_of) for m in one.match],
                         [("level", ("op",), ()), ("mode", ("exact", "promote-fp32*"), ("hp64",))])
        self.assertEqual((one.metric, one.min_db, one.expect_bitwise), ("sqnr_vs_single_db", 35.0, False))
        self.assertEqual((two.expect_bitwise, two.match, two.metric), (True, (), ""))

    def test_refuses_what_fp8moe_gate_refuses(self):
        ok = "[gate.g]\nmetric = sqnr_db\nmin_db = 1\n"
        self.assertEqual(len(gates(ok)), 1)
        for text, why in (
                ("[scenario.g]\nexpect = bitwise\n", r"test_gates.ini:1: unknown section \[scenario.g\]"),
                ("[gate.]\nexpect = bitwise\n", r"unknown section \[gate.\]"),
                (ok + "mdoe = exact\n", r":4: unknown key 'mdoe' \(did you mean 'mode'\?\)"),
                ("[gate.g]\nexpect = equal\n", r":2: expect = equal"),
                ("[gate.g]\nmetric = rel_err\nmin_db = 1\n", r"metric = rel_err"),
                ("[gate.g]\nmetric = sqnr_db\nmin_db = lots\n", r"min_db = lots"),
                ("[gate.g]\nmetric = sqnr_db\nmin_db = inf\n", r"min_db = inf"),
                ("[gate.g]\nmetric = sqnr_db\nmin_db = 1_000\n", r"min_db = 1_000"),
                ("[gate.g]\nmetric = sqnr_db\n", r"give both metric and min_db"),
                ("[gate.g]\nlevel = op\n", r"give either expect = bitwise\|identical or metric and min_db"),
                ("[gate.g]\nexpect = bitwise\nmin_db = 3\n", r"give either"),
                (ok + "mode = exact;;bf16\n", r"mode has an empty entry"),
                (ok + "mode =\n", r"key 'mode' has no value"),
                (ok + "mode = exact\nmode = bf16\n", r":5: key 'mode' given twice"),
                (ok + ok, r"section \[gate.g\] given twice"),
                ("level = op\n" + ok, r"test_gates.ini:1: 'level = op' is outside any section"),
                ("[gate.g] junk\nexpect = bitwise\n", r":1: .*not a \[section\] header"),
                (ok + "mode exact\n", r"test_gates.ini:4: 'mode exact' is not `key = value`"),
        ):
            with self.subTest(text=text):
                with self.assertRaisesRegex(fr.GatesFileError, why):
                    gates(text)

    def test_globs_are_fp8moes_not_fnmatch(self):
        g = fp8moe_gates.glob_match
        self.assertTrue(g("promote-fp32*", "promote-fp32:cublas"))
        self.assertTrue(g("dw*", "dw1") and g("w*_new", "w1_new") and g("?w?", "dw1"))
        self.assertFalse(g("fwd", "fwd2") or g("fwd", "xfwd") or g("?", ""))
        self.assertTrue(g("*[S(1)]*", "A=[R] W=[S(1)]"))
        self.assertFalse(g("*[S(1)]*", "dp: W1/W3 [R], W2 [R]; dp (dW all_reduce)"))  # fnmatch: True
        self.assertTrue(g("", "") and g("*", "") and not g("", "x"))

    def test_columns_compare_as_fp8moe_writes_them(self):
        t = fp8moe_gates.column_text
        self.assertEqual([t(128), t(np.int32(128)), t(np.int8(1)), t(True), t(np.uint64(7))],
                         ["128", "128", "1", "1", "7"])
        self.assertEqual([t(0.0), t(128.0), t(0.1), t(1 / 3), t(1e-5)],  # %.17g, not repr
                         ["0", "128", "0.10000000000000001", "0.33333333333333331", "1.0000000000000001e-05"])
        self.assertEqual([t(math.nan), t(math.inf), t(-math.inf), t("A=[R]")],
                         ["nan", "inf", "-inf", "A=[R]"])
        g = gates("[gate.b]\nblock = 128.0\nexpect = bitwise\n"
                  "[gate.c]\nblock = 12?\nlr = 0\nsqnr_vs_single_db = inf\nexpect = bitwise\n")
        self.assertEqual(fr.identity_for(row(), g), "c")  # block 128 is "128", never "128.0"
        self.assertEqual(fr.identity_for(row(block=128.0), g), "c")  # as pandas holds it after a merge
        self.assertIsNone(fr.identity_for(row(block=1280), g))
        self.assertIsNone(fr.identity_for(row(lr=0.001), g))
        self.assertIsNone(fr.identity_for(row(sqnr_vs_single_db=80.0), g))

    def test_a_row_must_pass_every_gate_it_matches(self):
        df = rows(dict(sqnr_db=28.0), dict(sqnr_db=25.0), dict(sqnr_db=25.0, mode="bf16"),
                  dict(sqnr_db=19.0, mode="bf16"), dict(sqnr_db=27.0), dict(pass_="wgrad", sqnr_db=1.0))
        a = fr.annotate(df, TWO_FLOORS)
        self.assertEqual(list(a["floor_db"].fillna(-1)), [27.0, 27.0, 20.0, 20.0, 27.0, -1])
        self.assertEqual(list(a["gate_fail"]), ["", "high", "", "low", "", ""])  # 27.0 >= 27: passes
        self.assertEqual(list(a["below_floor"]), [False, True, False, True, False, False])
        self.assertEqual(a.loc[0, "floor_rule"], "low: every fwd; high")
        self.assertEqual(list(fr.failing(df, TWO_FLOORS)["case_id"]), [1, 3])
        s = fr.gate_summary(df, TWO_FLOORS)
        self.assertEqual((s["rows"], s["rows_gated"], s["checks"], s["gates"], s["failures"], s["passed"]),
                         (6, 6, 3 + 3 + 2 + 2 + 3 + 1, 3, 2, False))
        self.assertTrue(fr.gate_summary(df.iloc[[0, 2, 4, 5]], TWO_FLOORS)["passed"])

    def test_nan_fails_a_floor_and_bitwise_needs_both(self):
        df = rows(dict(sqnr_db=math.nan), dict(sqnr_db=-math.inf), dict(bitwise_equal_frac=0.999),
                  dict(sqnr_vs_single_db=99.0), dict(strategy="tp:contraction", bitwise_equal_frac=0.5,
                                                     sqnr_vs_single_db=40.0))
        a = fr.annotate(df, TWO_FLOORS)
        self.assertEqual(list(a["gate_fail"]), ["low; high", "low; high", "same", "same", ""])
        self.assertEqual(list(a["identity"]), ["same"] * 4 + [None])
        self.assertEqual(list(a["identity_ok"]), [True, True, False, False, False])
        f = fr.gate_failures(df, TWO_FLOORS)
        self.assertEqual(list(zip(f["case_id"], f["gate"])),
                         [(0, "low"), (0, "high"), (1, "low"), (1, "high"), (2, "same"), (3, "same")])
        self.assertIn("sqnr_db = nan dB, below the floor 20.00 dB (every fwd)", f["message"].iloc[0])
        self.assertIn("got 0.9990 of elements equal", f["message"].iloc[4])

    def test_status_error_fails_alone_and_status_fail_is_not_a_gate(self):
        df = rows(dict(status="error", message="threw", sqnr_db=math.nan), dict(status="fail", sqnr_db=28.0),
                  dict(status="error", message="threw", level="layer"))
        a = fr.annotate(df, TWO_FLOORS)
        self.assertEqual(list(a["gate_fail"]), ["status", "", "status"])
        f = fr.gate_failures(df, TWO_FLOORS)
        self.assertEqual(list(zip(f["case_id"], f["gate"], f["message"])),
                         [(0, "status", "the case failed to run: threw"),
                          (2, "status", "the case failed to run: threw")])
        s = fr.gate_summary(df, TWO_FLOORS)
        self.assertEqual((s["rows_gated"], s["checks"], s["failures"]), (1, 3, 2))  # error rows: unchecked

    def test_incomplete_run_fails_the_summary(self):
        df = fr.load_cases(RUN0).iloc[:0]
        self.assertTrue(fr.gate_summary(df)["passed"])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", fr.IncompleteRunWarning)
            running = fr.load_cases(RUNNING).iloc[:0]
        s = fr.gate_summary(running)
        self.assertEqual((s["failures"], s["incomplete"], s["passed"]), (0, True, False))

    def test_a_gate_on_a_missing_column_names_it(self):
        with self.assertRaisesRegex(KeyError, "gate high .*test_gates.ini:7.* column 'mode'"):
            fr.annotate(rows(dict()).drop(columns="mode"), TWO_FLOORS)

    def test_gates_file_from_argument_env_or_default(self):
        path = os.path.join(WORK, "one_gate.ini")
        with open(path, "w") as f:
            f.write("[gate.everything]\nmetric = sqnr_db\nmin_db = 100\n")
        self.assertEqual(fr.gates_path(), fr.DEFAULT_GATES)
        self.assertEqual(list(fr.floors_table(path)["name"]), ["everything"])
        self.assertEqual(fr.floor_for(row(), gates=path), 100.0)
        self.assertEqual(list(fr.failing(rows(dict()), path)["gate_fail"]), ["everything"])
        old = os.environ.get(fr.GATES_ENV)
        os.environ[fr.GATES_ENV] = path
        try:
            self.assertEqual(fr.gates_path(), Path(path))
            self.assertEqual(list(fr.annotate(rows(dict()))["gate_fail"]), ["everything"])
            os.environ[fr.GATES_ENV] = os.path.join(WORK, "no_such_gates.ini")
            with self.assertRaisesRegex(FileNotFoundError, "no_such_gates.ini.*FP8MOE_GATES"):
                fr.floors_table()
        finally:
            if old is None:
                del os.environ[fr.GATES_ENV]
            else:
                os.environ[fr.GATES_ENV] = old
        self.assertEqual(fr.floor_for(row()), 27.0)


class Compare(unittest.TestCase):
    def test_match_key_keeps_values_with_spaces(self):
        df = pd.DataFrame({"case_key": ["level=op placements=A=[R] W=[S(1)] seed=3 mode=exact"]})
        self.assertEqual(fr.match_key(df, ["seed"]).iloc[0], "level=op placements=A=[R] W=[S(1)] mode=exact")

    def test_regressions(self):
        a, b = fr.load_cases(RUN0), fr.load_cases(RUN1)
        self.assertTrue((fr.compare_runs(a, b)["_merge"] != "both").all())  # seeds differ
        m = fr.compare_runs(a, b, ["seed"])
        self.assertTrue((m["_merge"] == "both").all())
        self.assertTrue(fr.regressions(fr.compare_runs(a, a), 0.01).empty)
        worse = a.copy()
        fwd_exact = worse.index[(worse["mode"] == "exact") & (worse["pass"] == "fwd")]
        worse.loc[fwd_exact[0], "sqnr_db"] -= 2.0
        bit = worse.index[(worse["bitwise_equal_frac"] == 1.0) & (worse["pass"] == "wgrad")][0]
        worse.loc[bit, ["bitwise_equal_frac", "sqnr_vs_single_db"]] = [0.5, 40.0]
        r = fr.regressions(fr.compare_runs(a, worse), 1.0)
        self.assertEqual(set(r["case_id_a"]), {a.loc[fwd_exact[0], "case_id"], a.loc[bit, "case_id"]})
        self.assertEqual(fr.compare_runs(a, worse).loc[lambda d: d["case_id_a"] == a.loc[bit, "case_id"],
                                                        "bitwise_change"].tolist(), ["lost"])


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    WORK = os.path.abspath(sys.argv.pop(1))
    sys.exit(0 if unittest.main(exit=False, verbosity=2).result.wasSuccessful() else 1)
