#!/usr/bin/env python3
"""Executes the notebooks headless on given sweep results, papermill-style: after each
notebook's cell tagged `parameters` a cell tagged `injected-parameters` sets the values given
here, then every cell runs top to bottom on a fresh kernel (nbclient). An exception in any cell
fails the run (exit 1, the cell and its traceback printed). Executed notebooks go to OUT/ and
their PNG figures to OUT/figures/; each notebook must write the figures listed in FIGURES.

usage: run_notebooks.py --run A.h5 [--run-b B.h5] [--ignore-keys seed,...] --out DIR
                        [--only overview,blocks,compare] [--timeout 300]
compare.ipynb needs --run-b: without it, it is left out with a note (comparing a run with
itself shows nothing). Exit 2 when nbclient, ipykernel or a library the notebooks import is
missing, naming them and the interpreter (the CTest wrapper tests/notebooks/check_notebooks.py
checks first and reports those as Skipped).
"""
import argparse
import glob
import json
import os
import re
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
NOTEBOOKS = ("overview", "blocks", "compare")
# Figure name patterns each notebook must write (fp8moe_results.show(fig, FIG_DIR, name)).
FIGURES = {
    "overview": ("overview_sqnr_*.png", "overview_by_placement_*.png", "overview_scatter.png", "overview_identities.png"),
    "blocks": ("blocks_tiles.png", "blocks_scales.png", "blocks_outliers.png",
               "blocks_outlier_tiles.png"),
    "compare": ("compare_scatter.png", "compare_delta_*.png"),
}
REQUIRED = ("nbformat", "nbclient", "ipykernel", "h5py", "numpy", "pandas", "matplotlib")


def missing_modules():
    out = []
    for m in REQUIRED:
        try:
            __import__(m)
        except ImportError:
            out.append(m)
    return out


def inject(nb, params):
    """Adds the `injected-parameters` cell after the `parameters` cell (papermill's layout)."""
    import nbformat
    where = next((i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", [])), None)
    if where is None:
        raise ValueError("the notebook has no cell tagged 'parameters'")
    text = "# Parameters injected by notebooks/run_notebooks.py\n" + "".join(
        f"{k} = {v!r}\n" for k, v in params.items())
    cell = nbformat.v4.new_code_cell(text)
    cell.metadata["tags"] = ["injected-parameters"]
    nb.cells.insert(where + 1, cell)


def kernel_dir(out):
    """A kernelspec for this interpreter, so the kernel imports what this process imports
    (a `python3` earlier on PATH may lack h5py)."""
    spec = os.path.join(out, "jupyter", "kernels", "fp8moe-python")
    os.makedirs(spec, exist_ok=True)
    with open(os.path.join(spec, "kernel.json"), "w") as f:
        json.dump({"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                   "display_name": "fp8moe notebooks (python3)", "language": "python"}, f)
    return os.path.join(out, "jupyter")


def execute(name, params, out, timeout):
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError
    src = os.path.join(HERE, f"{name}.ipynb")
    nb = nbformat.read(src, as_version=4)
    inject(nb, params)
    client = NotebookClient(nb, timeout=timeout, kernel_name="fp8moe-python",
                            resources={"metadata": {"path": out}})
    dest = os.path.join(out, f"{name}.ipynb")
    t0 = time.monotonic()
    try:
        client.execute()
    except CellExecutionError as e:
        nbformat.write(nb, dest)  # the executed part, for reading the failure
        plain = re.sub(r"\x1b\[[0-9;]*m", "", str(e))  # the kernel's traceback without colours
        print(f"FAIL: {name}.ipynb: a cell raised (executed notebook: {dest})\n{plain}", file=sys.stderr)
        return False
    nbformat.write(nb, dest)
    fig_dir = params["FIG_DIR"]
    missing = [p for p in FIGURES[name] if not glob.glob(os.path.join(fig_dir, p))]
    if missing:
        print(f"FAIL: {name}.ipynb wrote no {', '.join(missing)} in {fig_dir}", file=sys.stderr)
        return False
    print(f"ok: {name}.ipynb in {time.monotonic() - t0:.1f} s -> {dest}")
    return True


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", required=True, help="sweep result for every notebook (compare: A)")
    ap.add_argument("--run-b", help="second run for compare.ipynb (B)")
    ap.add_argument("--ignore-keys", default="", help="compare.ipynb IGNORE_KEYS, comma separated")
    ap.add_argument("--threshold-db", type=float, default=0.5, help="compare.ipynb THRESHOLD_DB")
    ap.add_argument("--out", required=True, help="folder for executed notebooks and figures/")
    ap.add_argument("--only", default=",".join(NOTEBOOKS))
    ap.add_argument("--timeout", type=int, default=300, help="seconds per cell")
    args = ap.parse_args(argv)
    missing = missing_modules()
    if missing:
        print(f"run_notebooks: python {sys.executable} lacks {', '.join(missing)}: install them "
              "(scripts/setup.sh does, for /usr/bin/python3), or run this script with the python that has them",
              file=sys.stderr)
        return 2
    out = os.path.abspath(args.out)
    fig_dir = os.path.join(out, "figures")
    os.makedirs(fig_dir, exist_ok=True)
    for old in glob.glob(os.path.join(fig_dir, "*.png")):
        os.remove(old)  # a figure from an earlier run must not satisfy FIGURES
    # The kernel inherits this environment: the helper module importable, no GUI backend.
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [HERE, os.environ.get("PYTHONPATH")]))
    os.environ["MPLBACKEND"] = "Agg"
    os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")  # ipykernel debugger noise
    os.environ["JUPYTER_PATH"] = os.pathsep.join(filter(None, [kernel_dir(out), os.environ.get("JUPYTER_PATH")]))
    run, run_b = os.path.abspath(args.run), os.path.abspath(args.run_b) if args.run_b else None
    params = {
        "overview": {"RUN": run, "FIG_DIR": fig_dir},
        "blocks": {"RUN": run, "FIG_DIR": fig_dir},
        "compare": {"RUN_A": run, "RUN_B": run_b, "FIG_DIR": fig_dir,
                    "IGNORE_KEYS": [k for k in args.ignore_keys.split(",") if k],
                    "THRESHOLD_DB": args.threshold_db},
    }
    names = [n for n in args.only.split(",") if n]
    unknown = set(names) - set(NOTEBOOKS)
    if unknown:
        ap.error(f"unknown notebook(s) {sorted(unknown)}; choose from {NOTEBOOKS}")
    if run_b is None and "compare" in names:
        names.remove("compare")
        print("run_notebooks: compare.ipynb left out: it compares two runs, give the second with --run-b B.h5")
    ok = [execute(n, params[n], out, args.timeout) for n in names]
    return 0 if all(ok) else 1


if __name__ == "__main__":
    sys.exit(main())
