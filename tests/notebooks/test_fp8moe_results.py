#!/usr/bin/env python3
"""Unit tests of notebooks/fp8moe_results.py on files written by make_synthetic_run.py (exactly
results/SCHEMA.md's layout): loading, provenance, refusing foreign files, dimension scales,
the DESIGN.md 3.8 floors and identities, matching two runs.

usage: test_fp8moe_results.py WORKDIR     exit 0 pass, 1 fail, 77 skip (h5py/pandas missing)
"""
import math
import os
import shutil
import subprocess
import sys
import unittest
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "notebooks"))
try:
    import h5py
    import numpy as np
    import pandas as pd
    import fp8moe_results as fr
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

    def test_missing_column_is_an_error(self):
        cut = os.path.join(WORK, "cut.h5")
        with h5py.File(RUN0, "r") as src, h5py.File(cut, "w") as dst:
            for k, v in src.attrs.items():
                dst.attrs[k] = v
            t = src["cases"][()]
            names = [n for n in t.dtype.names if n != "sqnr_vs_single_db"]
            dst["cases"] = t[names]
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


def row(**kw):
    base = dict(level="op", mode="torchao-emulated", format="e4m3", plan="direct",
                strategy="tp:replicate", tensor="out", block_aligned=1, block=128,
                dist="normal")
    base.update(kw)
    return pd.Series(base)


class Floors(unittest.TestCase):
    def test_op_floors(self):
        self.assertEqual(fr.floor_for(row(**{"pass": "fwd"})), 27.0)
        self.assertEqual(fr.floor_for(row(**{"pass": "dgrad"})), 26.0)
        self.assertEqual(fr.floor_for(row(**{"pass": "wgrad"})), 26.0)
        self.assertTrue(math.isnan(fr.floor_for(row(**{"pass": "fwd", "mode": "hp64"}))))
        self.assertTrue(math.isnan(fr.floor_for(row(**{"pass": "fwd", "dist": "outliers"}))))
        self.assertTrue(math.isnan(fr.floor_for(row(**{"pass": "fwd"}), "sqnr_vs_single_db")))
        contraction = row(**{"pass": "dgrad", "strategy": "tp:contraction"})
        self.assertEqual(fr.floor_for(contraction, "sqnr_vs_single_db"), 35.0)
        misaligned = row(**{"pass": "dgrad", "strategy": "tp:contraction", "block_aligned": 0})
        self.assertTrue(math.isnan(fr.floor_for(misaligned, "sqnr_vs_single_db")))

    def test_layer_floors(self):
        tp_y = row(level="layer", plan="tp", tensor="y", **{"pass": "fwd"})
        self.assertEqual(fr.floor_for(tp_y, "sqnr_vs_single_db"), 23.0)
        self.assertEqual(fr.floor_for(tp_y), 23.0)
        fsdp_dw = row(level="layer", plan="fsdp", tensor="dw2", **{"pass": "wgrad"})
        self.assertEqual(fr.floor_for(fsdp_dw, "sqnr_vs_single_db"), 30.0)
        self.assertEqual(fr.floor_for(fsdp_dw), 22.0)

    def test_identities(self):
        self.assertIsNotNone(fr.identity_for(row(**{"pass": "fwd", "strategy": "tp:out-feature"})))
        self.assertIsNone(fr.identity_for(row(**{"pass": "fwd", "strategy": "tp:out-feature",
                                                 "block_aligned": 0})))
        self.assertIsNotNone(fr.identity_for(row(**{"pass": "wgrad", "strategy": "dp:replicate,tp:wgrad-k"})))
        self.assertIsNone(fr.identity_for(row(**{"pass": "fwd", "strategy": "tp:contraction"})))

    def test_annotate_flags_nan_and_low_rows(self):
        df = fr.annotate(fr.load_cases(RUN0))
        for col in ("floor_db", "floor_single_db", "below_floor", "identity", "identity_ok", "case", "column"):
            self.assertIn(col, df)
        i = df.index[(df["mode"] == "exact") & (df["pass"] == "fwd")][0]
        df.loc[i, "sqnr_db"] = np.nan
        df.loc[i + 1, "sqnr_db"] = 20.0
        again = fr.annotate(df)
        self.assertTrue(again.loc[i, "below_floor"])
        self.assertIn(df.loc[i, "case_id"], set(fr.failing(again)["case_id"]))
        # The fixture's fsdp+tp dx is made 19.2 dB vs single, under its 20 dB floor.
        layer = again[(again["plan"] == "fsdp+tp") & (again["tensor"] == "dx") & (again["mode"] != "bf16")]
        self.assertTrue(layer["below_floor"].all())


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
