"""Reading fp8moe sweep results (HDF5, results/SCHEMA.md) for the notebooks in this folder.

The one helper the notebooks share, so nothing is loaded, judged or drawn twice:

    import fp8moe_results as fr
    df = fr.annotate(fr.load_cases("results/runs/ci.h5"))   # one row per case x pass x tensor
    fr.provenance("results/runs/ci.h5")["git_sha"]
    fr.load_blocks("results/runs/ci.h5", 12)                 # xarray.Dataset, dims named

Floors and bitwise identities are the gates `fp8moe gate` checks (reference/SPEC.md 9 as
scenarios/gates.ini writes them), read from that file and matched by fp8moe_gates.py as the
C++ checker matches them; `annotate(df, gates=PATH)` or $FP8MOE_GATES takes another gates file.
Needs h5py, numpy and pandas; xarray and matplotlib are optional (numpy dicts without xarray;
plotting functions import matplotlib when called).
"""
from __future__ import annotations

import os
import re
import warnings
from pathlib import Path

import h5py
import numpy as np
import pandas as pd

from fp8moe_gates import (CASE_COLUMNS, DEFAULT_GATES, GATES_ENV, Gate, GateMatch,  # noqa: F401
                          GatesFileError, floor_for, floors_for, floors_table, gate_columns,
                          gate_failures, gate_summary, gates_path, identity_for, load_gates,
                          parse_gates)

FORMAT = "fp8moe-sweep"
SCHEMA_VERSION = 2  # schema 1 (variable-length string attributes) reads the same here
UNQUANTIZED_MODES = ("hp64", "bf16")
# Columns that describe a case (the rest are metrics); the order labels are built in.
PARAM_COLUMNS = ("scenario", "level", "mesh", "world", "plan", "placements", "strategy", "backend",
                 "mode", "format", "block", "pow2_scales", "pad", "experts", "tokens", "n", "k",
                 "dim", "hidden", "routing", "offs", "dist", "seed", "fsdp_gather", "reduce_dtype",
                 "reduce_order", "fp8_dispatch", "lr")


class NotASweepResult(ValueError):
    """The file is not an fp8moe sweep result (root attribute `format` != 'fp8moe-sweep')."""


class IncompleteRunWarning(UserWarning):
    """The sweep was still running, was interrupted or failed: the file holds the cases done."""


# ----------------------------------------------------------------------------------- loading

def _py(value):
    """HDF5 attribute or cell -> plain Python (bytes decoded, numpy scalars unwrapped)."""
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, np.ndarray):
        return [_py(v) for v in value.tolist()] if value.ndim else _py(value[()])
    if isinstance(value, np.generic):
        return value.item()
    return value


def open_run(path) -> h5py.File:
    """Opens a sweep result read-only; NotASweepResult for any other file, a warning unless
    the sweep completed. Use as `with fr.open_run(path) as f: ...`."""
    path = os.fspath(path)
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise NotASweepResult(f"{path}: not an HDF5 file h5py can open ({e})") from e
    fmt = _py(f.attrs.get("format", None))
    if fmt != FORMAT:
        f.close()
        what = "no root attribute 'format'" if fmt is None else f"root attribute format={fmt!r}"
        raise NotASweepResult(f"{path}: not an fp8moe sweep result ({what}, expected "
                              f"{FORMAT!r}; see results/SCHEMA.md)")
    version = _py(f.attrs.get("schema_version", None))
    if version not in (1, SCHEMA_VERSION):
        warnings.warn(f"{path}: schema_version={version!r}, this helper reads {SCHEMA_VERSION}",
                      stacklevel=2)
    status = _py(f.attrs.get("status", None))
    if status != "complete":
        msg = _py(f.attrs.get("status_message", "")) or "no status_message"
        warnings.warn(f"{path}: status={status!r} ({msg}); cases_done="
                      f"{_py(f.attrs.get('cases_done', '?'))} of {_py(f.attrs.get('cases_total', '?'))}",
                      IncompleteRunWarning, stacklevel=2)
    return f


def provenance(path) -> dict:
    """The root attributes (argv, scenario text, versions, git sha, host, device, status...)."""
    with open_run(path) as f:
        return {k: _py(v) for k, v in f.attrs.items()}


def load_cases(path) -> pd.DataFrame:
    """The `/cases` table, strings decoded; df.attrs holds `path` and `provenance`."""
    with open_run(path) as f:
        prov = {k: _py(v) for k, v in f.attrs.items()}
        if "cases" not in f:
            raise NotASweepResult(f"{path}: no /cases table (results/SCHEMA.md)")
        table = f["cases"][()]  # structured array; vlen strings come back as bytes
    missing = [c for c in CASE_COLUMNS if c not in (table.dtype.names or ())]
    if missing:
        raise ValueError(f"{path}: /cases lacks column(s) {', '.join(missing)} of results/SCHEMA.md")
    df = pd.DataFrame(table)
    for c in df.columns:
        if df[c].dtype == object:
            df[c] = df[c].map(_py)
    # Files written before 2026-12-05 spell a promoted mode "hopper-tc/cublas"; read it as
    # fp8moe writes it now, "hopper-tc:cublas" (as the C++ reader does).
    df["mode"] = df["mode"].str.replace(r"^(promote-fp32|hopper-tc)/", r"\1:", regex=True)
    df["case_key"] = df["case_key"].str.replace(r"(\bmode=(?:promote-fp32|hopper-tc))/", r"\1:", regex=True)
    df.attrs.update(path=os.fspath(path), provenance=prov)
    return df


def list_runs(folder, pattern="*.h5") -> pd.DataFrame:
    """The sweep results in a folder (newest first); other HDF5 files are left out."""
    rows = []
    for p in sorted(Path(folder).glob(pattern)):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", IncompleteRunWarning)
                prov = provenance(p)
        except NotASweepResult:
            continue
        rows.append({"path": str(p), "name": p.stem,
                     **{k: prov.get(k) for k in ("status", "cases_done", "cases_total",
                                                  "started_utc", "git_sha", "scenario_files",
                                                  "backend_override", "save_blocks")}})
    cols = ["path", "name", "status", "cases_done", "cases_total", "started_utc", "git_sha",
            "scenario_files", "backend_override", "save_blocks"]
    out = pd.DataFrame(rows, columns=cols)
    return out.sort_values("started_utc", ascending=False, kind="stable").reset_index(drop=True)


def block_case_ids(path) -> list[int]:
    """Case ids that have a /blocks group (runs saved with --save-blocks)."""
    with open_run(path) as f:
        if "blocks" not in f:
            return []
        return sorted(int(_py(g.attrs.get("case_id", name.split("_")[-1])))
                      for name, g in f["blocks"].items())


def load_blocks(path, case_id: int, as_xarray: bool | None = None):
    """Per-block datasets of one case (`<tensor>_tile_sqnr`, `<operand>_scale`, ...).

    An xarray.Dataset whose dims and coords are the HDF5 dimension scales (`out_tile_row`,
    `A_bcol`, `expert`), or, without xarray (or as_xarray=False), a dict
    name -> {"values", "dims", "coords"}; `block_var` reads either the same way."""
    group = f"blocks/case_{int(case_id):06d}"
    with open_run(path) as f:
        if group not in f:
            have = "no /blocks group (run the sweep with --save-blocks)" if "blocks" not in f \
                else f"cases with blocks: {block_case_ids(path)[:10]}..."
            raise KeyError(f"{path}: no {group}; {have}")
        g = f[group]
        attrs = {k: _py(v) for k, v in g.attrs.items()}
        variables = {}
        for name, d in g.items():
            if not isinstance(d, h5py.Dataset) or h5py.h5ds.is_scale(d.id):
                continue  # dimension scales become coordinates of the variables they label
            dims, coords = [], {}
            for i, dim in enumerate(d.dims):
                if len(dim):
                    scale = dim[0]
                    label = scale.name.rsplit("/", 1)[-1]
                    coords[label] = scale[()]
                else:
                    label = dim.label or f"{name}_dim{i}"
                dims.append(label)
            variables[name] = {"values": d[()], "dims": tuple(dims), "coords": coords}
    if as_xarray is not False:
        try:
            import xarray as xr
        except ImportError:
            if as_xarray:
                raise
        else:
            coords = {k: v for var in variables.values() for k, v in var["coords"].items()}
            return xr.Dataset({n: (v["dims"], v["values"]) for n, v in variables.items()},
                              coords=coords, attrs=attrs)
    variables["attrs"] = attrs
    return variables


def block_var(blocks, name):
    """(values, dims, coords) of one per-block variable of `load_blocks`' result, either kind."""
    if isinstance(blocks, dict):
        v = blocks[name]
        return v["values"], v["dims"], v["coords"]
    da = blocks[name]
    return da.values, da.dims, {d: da[d].values for d in da.dims if d in da.coords}


def block_names(blocks) -> list[str]:
    keys = blocks.keys() if isinstance(blocks, dict) else blocks.data_vars
    return sorted(k for k in keys if k != "attrs")


# ------------------------------------------------------------ floors and identities: the gates
# Read from scenarios/gates.ini (or $FP8MOE_GATES, or a `gates` argument) by fp8moe_gates, with
# the matching rules of `fp8moe gate`; floors_table, floors_for, floor_for, identity_for,
# gate_failures and gate_summary are imported above.

def annotate(df: pd.DataFrame, gates=None) -> pd.DataFrame:
    """Adds what the gates say of each row (fp8moe_gates.gate_columns: floor_db,
    floor_single_db, floor_rule, below_floor, identity, identity_ok, gate_fail) and the labels
    `case` (placement scenario) and `column` (pass, or pass:tensor at layer level)."""
    df = df.copy()
    for col, values in gate_columns(df, gates).items():
        df[col] = values
    df["case"] = case_labels(df)
    df["column"] = df["pass"].where(df["level"] == "op", df["pass"] + ":" + df["tensor"])
    return df


def failing(df: pd.DataFrame, gates=None) -> pd.DataFrame:
    """The rows `fp8moe gate` fails: below a floor (NaN too), a broken bitwise identity, or a
    case that threw (status error); gate_fail names the gates. df from `annotate` (annotated
    here when it is not, or when `gates` is given)."""
    if gates is not None or "gate_fail" not in df:
        df = annotate(df, gates)
    cols = ["case_id", "scenario", "mesh", "placements", "strategy", "pass", "tensor", "backend",
            "mode", "sqnr_db", "floor_db", "sqnr_vs_single_db", "floor_single_db",
            "bitwise_equal_frac", "identity", "status", "gate_fail", "floor_rule", "message"]
    return df.loc[df["gate_fail"] != "", cols].sort_values(["case_id", "pass", "tensor"])


# ---------------------------------------------------------------------------- labels

def case_labels(df: pd.DataFrame, facets=("backend", "mode", "pass", "tensor")) -> pd.Series:
    """One label per placement scenario: scenario, mesh, strategy (op) or plan (layer), and
    every other parameter that varies within that scenario (outside the facets)."""
    skip = {"scenario", "mesh", "strategy", "plan", "placements", "level", "world", "offs", *facets}
    extra = {name: [c for c in PARAM_COLUMNS if c in df and c not in skip and g[c].nunique() > 1]
             for name, g in df.groupby("scenario")}

    def label(r):
        how = r["plan"] if r["level"] == "layer" else (
            r["strategy"] + (" (redistributed)" if r["plan"] == "redistribute" else ""))
        return " ".join([r["scenario"], r["mesh"], how] +
                        [f"{c}={r[c]}" for c in extra[r["scenario"]]])
    return df.apply(label, axis=1) if len(df) else pd.Series([], dtype=object)


def grid(df: pd.DataFrame, value: str, rows="case", cols="column", agg="min") -> pd.DataFrame:
    """rows x cols table of `value`, the worst (min) where several rows share a cell."""
    order = [c for c in ("fwd", "dgrad", "wgrad", "sgd") if (df["pass"] == c).any()]
    table = df.pivot_table(index=rows, columns=cols, values=value, aggfunc=agg, dropna=False)
    table = table.reindex(df[rows].drop_duplicates())  # rows in case order, not sorted
    key = [next((i for i, p in enumerate(order) if str(c).startswith(p)), 99) for c in table.columns]
    return table[[c for _, c in sorted(zip(key, table.columns))]]


def facets(df: pd.DataFrame, modes=None) -> list[tuple[str, str]]:
    """(backend, mode) pairs in the run, quantized modes first."""
    pairs = df[["backend", "mode"]].drop_duplicates()
    if modes is not None:
        pairs = pairs[pairs["mode"].isin(modes)]
    return sorted(map(tuple, pairs.values), key=lambda p: (p[1] in UNQUANTIZED_MODES, p))


# ------------------------------------------------------------------------- comparing runs

def match_key(df: pd.DataFrame, ignore=()) -> pd.Series:
    """case_key without the `key=value` items named in `ignore` (e.g. backend for CPU vs GPU,
    seed for two seeds), so rows of two runs line up."""
    if not ignore:
        return df["case_key"]
    drop = tuple(f"{k}=" for k in ignore)
    # Items start at `key=`; a value with spaces ("[R, S(1)]") stays in one item.
    return df["case_key"].map(lambda key: " ".join(
        t for t in re.split(r"\s+(?=[A-Za-z_][A-Za-z0-9_]*=)", key) if not t.startswith(drop)))


def _delta(b: pd.Series, a: pd.Series) -> pd.Series:
    d = b - a
    return d.mask(np.isinf(a) & np.isinf(b) & (np.sign(a) == np.sign(b)), 0.0)


def compare_runs(a: pd.DataFrame, b: pd.DataFrame, ignore=()) -> pd.DataFrame:
    """Rows of two runs matched on case_key (minus `ignore`) + pass + tensor, with
    d_sqnr_db / d_single_db (b - a; -inf: lost an equality) and bitwise changes; rows only in
    one run have `_merge` left_only / right_only."""
    keys = ["match_key", "pass", "tensor"]
    a = a.assign(match_key=match_key(a, ignore))
    b = b.assign(match_key=match_key(b, ignore))
    for name, d in (("first", a), ("second", b)):
        dup = d.duplicated(keys)
        if dup.any():
            raise ValueError(f"{name} run: {dup.sum()} rows share a match key; ignore fewer keys "
                             f"(e.g. {d.loc[dup, 'match_key'].iloc[0]!r})")
    m = a.merge(b, on=keys, how="outer", suffixes=("_a", "_b"), indicator=True)
    m["d_sqnr_db"] = _delta(m["sqnr_db_b"], m["sqnr_db_a"])
    m["d_single_db"] = _delta(m["sqnr_vs_single_db_b"], m["sqnr_vs_single_db_a"])
    bit_a, bit_b = m["bitwise_equal_frac_a"] == 1.0, m["bitwise_equal_frac_b"] == 1.0
    both = m["_merge"] == "both"
    m["bitwise_change"] = np.select([both & bit_a & ~bit_b, both & ~bit_a & bit_b],
                                    ["lost", "gained"], "")
    return m


def regressions(m: pd.DataFrame, threshold_db: float) -> pd.DataFrame:
    """Matched rows whose SQNR (vs hp64 or vs single) dropped by more than threshold_db, that
    lost bitwise equality, became non-finite or whose status went from ok to fail/error."""
    both = m["_merge"] == "both"
    newly_nan = m["sqnr_db_b"].isna() & m["sqnr_db_a"].notna()
    worse = (m["d_sqnr_db"] < -threshold_db) | (m["d_single_db"] < -threshold_db) | newly_nan
    status = (m["status_a"] == "ok") & m["status_b"].isin(["fail", "error"])
    cols = ["case_id_a", "case_id_b", "scenario_a", "mesh_a", "strategy_a", "pass", "tensor",
            "mode_a", "backend_a", "backend_b", "sqnr_db_a", "sqnr_db_b", "d_sqnr_db",
            "sqnr_vs_single_db_a", "sqnr_vs_single_db_b", "d_single_db", "bitwise_change",
            "status_a", "status_b"]
    r = m.loc[both & (worse | (m["bitwise_change"] == "lost") | status), cols]
    return r.sort_values("d_sqnr_db")


# ---------------------------------------------------------------------------- plotting

def savefig(fig, fig_dir, name: str) -> str:
    """Writes fig as FIG_DIR/name.png (the notebooks' figures; CI checks they exist)."""
    os.makedirs(fig_dir, exist_ok=True)
    path = os.path.join(fig_dir, f"{name}.png")
    fig.savefig(path, dpi=110, bbox_inches="tight")
    return path


def show(fig, fig_dir, name: str) -> str:
    """Saves fig as a PNG (savefig), closes it and displays the PNG: the executed notebook
    and FIG_DIR hold the same picture whatever the matplotlib backend (CI runs with Agg)."""
    import matplotlib.pyplot as plt
    path = savefig(fig, fig_dir, name)
    plt.close(fig)
    try:
        from IPython.display import Image, display
        display(Image(filename=path))
    except ImportError:
        print(path)
    return path


def slug(*parts) -> str:
    """A file-name piece from labels: ('op', 'promote-fp32:cublas') -> 'op_promote-fp32-cublas'."""
    return "_".join(re.sub(r"[^A-Za-z0-9_.+-]+", "-", str(p)).strip("-") for p in parts)


def _fmt_db(v: float) -> str:
    if np.isnan(v):
        return "nan"
    return "\u221e" if np.isposinf(v) else ("-\u221e" if np.isneginf(v) else f"{v:.1f}")


def heatmap(ax, values: pd.DataFrame, floors: pd.DataFrame | None = None, title="",
            span_db=15.0, missing="", hatch_below: float | None = None):
    """Cells coloured by dB above their floor (diverging, centred on the floor: red below,
    blue above, cells below the floor hatched) where a floor applies, by absolute dB in greys
    where none does; each cell shows its value (+inf: equal). hatch_below: hatch cells below
    this value instead of below the floor (compare: colour centred on 0, hatch regressions)."""
    import matplotlib.colors as mcolors
    import matplotlib.patches as mpatches
    v = values.to_numpy(dtype=float)
    fl = np.full_like(v, np.nan) if floors is None else \
        floors.reindex(index=values.index, columns=values.columns).to_numpy(dtype=float)
    present = ~np.isnan(v) | values.notna().to_numpy()
    div = mcolors.TwoSlopeNorm(vmin=-span_db, vcenter=0.0, vmax=span_db)
    rgba = np.ones(v.shape + (4,))
    with np.errstate(invalid="ignore"):
        margin = np.clip(np.nan_to_num(v - fl, nan=-span_db, posinf=span_db, neginf=-span_db),
                         -span_db, span_db)
        grey = np.clip(np.nan_to_num(v, posinf=80.0, neginf=0.0) / 80.0, 0, 1)
    cmap, greys = _cmap("RdBu"), _cmap("Greys")
    for i, j in np.ndindex(v.shape):
        if not present[i, j]:
            continue
        rgba[i, j] = cmap(div(margin[i, j])) if not np.isnan(fl[i, j]) else greys(0.1 + 0.35 * (1 - grey[i, j]))
    ax.imshow(rgba, aspect="auto", interpolation="nearest")
    for i, j in np.ndindex(v.shape):
        if not present[i, j]:
            ax.text(j, i, missing, ha="center", va="center", fontsize=7, color="0.6")
            continue
        below = (not np.isnan(fl[i, j]) and not v[i, j] >= fl[i, j]) if hatch_below is None \
            else not v[i, j] >= hatch_below
        if below:
            ax.add_patch(mpatches.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="///",
                                            edgecolor="black", linewidth=1.5))
        ax.text(j, i, _fmt_db(v[i, j]), ha="center", va="center", fontsize=8,
                color="white" if abs(margin[i, j]) > 0.7 * span_db and not np.isnan(fl[i, j]) else "black",
                fontweight="bold" if below else "normal")
    ax.set_xticks(range(v.shape[1]), [str(c) for c in values.columns], rotation=30, ha="right")
    ax.set_yticks(range(v.shape[0]), [str(r) for r in values.index], fontsize=8)
    ax.set_title(title, fontsize=10)
    return div


def sqnr_heatmap(ax, values: pd.DataFrame, floors: pd.DataFrame | None = None, title="",
                 vmax_db=80.0, missing=""):
    """Cells coloured by their absolute SQNR (viridis, 0 to vmax_db dB; +inf, bitwise equal, at
    the top of the scale and written as such), so 23.5 and 28.8 dB look different; a cell below
    its floor is hatched with a red edge and its value bold; a NaN (an error) is red. The floors
    are the thresholds sqnr_colorbar marks."""
    import matplotlib.colors as mcolors
    import matplotlib.patches as mpatches
    v = values.to_numpy(dtype=float)
    fl = np.full_like(v, np.nan) if floors is None else \
        floors.reindex(index=values.index, columns=values.columns).to_numpy(dtype=float)
    present = ~np.isnan(v) | values.notna().to_numpy()
    norm = mcolors.Normalize(vmin=0.0, vmax=vmax_db)
    cmap = _cmap("viridis")
    rgba = np.ones(v.shape + (4,))
    for i, j in np.ndindex(v.shape):
        if not present[i, j]:
            continue
        rgba[i, j] = (0.85, 0.2, 0.2, 1.0) if np.isnan(v[i, j]) else cmap(norm(np.clip(v[i, j], 0.0, vmax_db)))
    ax.imshow(rgba, aspect="auto", interpolation="nearest")
    for i, j in np.ndindex(v.shape):
        if not present[i, j]:
            ax.text(j, i, missing, ha="center", va="center", fontsize=7, color="0.6")
            continue
        below = not np.isnan(fl[i, j]) and not v[i, j] >= fl[i, j]
        if below:
            ax.add_patch(mpatches.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="xx",
                                            edgecolor="red", linewidth=2.0))
        r, g, b, _ = rgba[i, j]
        dark = 0.299 * r + 0.587 * g + 0.114 * b < 0.5
        text = "\u221e bitwise" if np.isposinf(v[i, j]) else _fmt_db(v[i, j])
        ax.text(j, i, text, ha="center", va="center", fontsize=9,
                color="white" if dark else "black", fontweight="bold" if below else "normal")
    ax.set_xticks(range(v.shape[1]), [str(c) for c in values.columns], rotation=30, ha="right")
    ax.set_yticks(range(v.shape[0]), [str(r) for r in values.index], fontsize=9)
    ax.set_title(title, fontsize=11)
    return norm


def sqnr_colorbar(fig, axes, floors=(), vmax_db=80.0):
    """The absolute-dB colour scale of sqnr_heatmap with each floor in `floors` drawn on it as a
    red threshold line (the cells below it are the hatched ones)."""
    import matplotlib.cm as cm
    import matplotlib.colors as mcolors
    sm = cm.ScalarMappable(norm=mcolors.Normalize(vmin=0.0, vmax=vmax_db), cmap=_cmap("viridis"))
    cb = fig.colorbar(sm, ax=axes, shrink=0.85, pad=0.02)
    marks = sorted({float(x) for x in floors if np.isfinite(x)})
    for f in marks:
        cb.ax.axhline(f, color="red", linewidth=2.0)
    # The floors as red tick labels among the decades (a plain tick hidden where a floor sits close).
    labelled = []  # floors closer than 2.5 dB share the first one's label (their lines all drawn)
    for f in marks:
        if not labelled or f - labelled[-1] >= 2.5:
            labelled.append(f)
    plain = [t for t in np.arange(0.0, vmax_db + 1e-9, 10.0) if all(abs(t - f) > 3.0 for f in labelled)]
    ticks = sorted(plain + labelled)
    cb.set_ticks(ticks)
    cb.set_ticklabels([f"{t:g}" if t not in labelled else f"floor {t:g}" for t in ticks])
    for label in cb.ax.get_yticklabels():
        if label.get_text().startswith("floor"):
            label.set_color("red")
            label.set_fontsize(7)
    cb.set_label("SQNR (dB); top: \u221e, bitwise equal\nred lines: the SPEC.md 9.2 floors (cells below: hatched)",
                 fontsize=8)
    return cb


def sqnr_by_placement(df: pd.DataFrame, mode: str, backend: str | None = None, metric="sqnr_db",
                      floor="floor_db"):
    """SQNR against placement, one panel per pass (placements down the side, so their labels read
    across): a point per placement at the worst seed, a bar from the worst to the best seed (the
    spread across seeds), the pass's floor as a dashed red line; +inf (bitwise equal) drawn as a
    triangle at the right edge. Returns the figure."""
    import matplotlib.pyplot as plt
    sub = df[(df["mode"] == mode) & ((df["backend"] == backend) if backend else True)]
    cols = list(grid(sub, metric).columns)
    cases = list(sub["case"].drop_duplicates())
    fig, axes = plt.subplots(1, max(1, len(cols)), figsize=(min(4.0 * max(1, len(cols)) + 4.0, 18),
                             min(18.0, max(3.0, 1.2 + 0.28 * len(cases)))),
                             sharey=True, constrained_layout=True, squeeze=False)
    vals = sub[metric].replace([np.inf, -np.inf], np.nan)
    floors = sub[floor].dropna()
    lows = ([float(vals.min())] if vals.notna().any() else []) + ([float(floors.min())] if not floors.empty else [])
    lo_all = min(lows, default=0.0)
    hi_all = float(vals.max()) if vals.notna().any() else 40.0
    left, edge = max(0.0, lo_all - 3.0), hi_all + 4.0
    y = {c: i for i, c in enumerate(cases)}
    for ax, col in zip(axes[0], cols):
        c = sub[sub["column"] == col]
        worst = c.groupby("case", sort=False)[metric].min()
        best = c.groupby("case", sort=False)[metric].max()
        ys = [y[k] for k in worst.index]
        ax.hlines(ys, worst.clip(upper=edge), best.clip(upper=edge), color="0.55", linewidth=4, alpha=0.5)
        fin = np.isfinite(worst.to_numpy(dtype=float))
        ax.scatter(worst[fin], np.array(ys)[fin], s=24, zorder=3, color="C0", label="worst seed")
        if (~fin).any():
            ax.scatter(np.full((~fin).sum(), edge), np.array(ys)[~fin], marker=">", s=40, zorder=3, color="C2",
                       label="\u221e bitwise")
        for f in c[floor].dropna().unique():
            ax.axvline(f, color="red", ls="--", lw=1.2)
            ax.text(f, -0.8, f"floor {f:g}", color="red", fontsize=7, ha="center", va="bottom")
        ax.set_xlim(left, edge + 1.0)
        ax.set_title(str(col), fontsize=10)
        ax.set_xlabel(f"{metric} (dB)")
        ax.grid(axis="x", color="0.9")
    axes[0][0].set_yticks(range(len(cases)), cases, fontsize=7)
    axes[0][0].invert_yaxis()
    handles, labels = axes[0][-1].get_legend_handles_labels()
    if handles:
        axes[0][-1].legend(handles, labels, fontsize=7, loc="lower right")
    fig.suptitle(f"{metric} by placement, mode {mode}" + (f", backend {backend}" if backend else "")
                 + " (point: worst seed; bar: spread across seeds)", fontsize=10)
    return fig


def _cmap(name):
    import matplotlib
    return matplotlib.colormaps[name]


def floor_colorbar(fig, axes, span_db=15.0):
    import matplotlib.cm as cm
    import matplotlib.colors as mcolors
    sm = cm.ScalarMappable(norm=mcolors.TwoSlopeNorm(vmin=-span_db, vcenter=0.0, vmax=span_db),
                           cmap=_cmap("RdBu"))
    cb = fig.colorbar(sm, ax=axes, shrink=0.8, pad=0.02)
    cb.set_label("dB above the SPEC.md 9.2 floor\n(hatched: below; grey: no floor)", fontsize=8)
    return cb


def status_grid(ax, table: pd.DataFrame, title=""):
    """A pass/fail grid: True green 'pass', False red 'FAIL', NaN blank."""
    import matplotlib.colors as mcolors
    v = table.to_numpy(dtype=float)
    codes = np.where(np.isnan(v), 0, np.where(v > 0.5, 1, 2))
    ax.imshow(codes, cmap=mcolors.ListedColormap(["white", "#9fd49f", "#e07070"]), vmin=0, vmax=2,
              aspect="auto", interpolation="nearest")
    for i, j in np.ndindex(v.shape):
        if codes[i, j]:
            ax.text(j, i, "pass" if codes[i, j] == 1 else "FAIL", ha="center", va="center",
                    fontsize=8, fontweight="bold" if codes[i, j] == 2 else "normal")
    ax.set_xticks(range(v.shape[1]), [str(c) for c in table.columns], rotation=30, ha="right")
    ax.set_yticks(range(v.shape[0]), [str(r) for r in table.index], fontsize=8)
    ax.set_title(title, fontsize=10)


def block_map(ax, blocks, name, expert=None, title=None, **imshow):
    """One per-block variable as an image over its (row, col) coords (one expert of a 3-D one);
    +inf (equal) shown white. Returns the image for a colorbar."""
    values, dims, coords = block_var(blocks, name)
    three_d = values.ndim == 3
    if three_d:
        expert = 0 if expert is None else expert
        values, dims = values[expert], dims[1:]
    img = np.ma.masked_invalid(np.where(np.isposinf(values), np.nan, values))
    rows, cols = coords.get(dims[0]), coords.get(dims[1])
    extent = None
    if rows is not None and cols is not None and len(rows) and len(cols):
        dr = rows[1] - rows[0] if len(rows) > 1 else 1
        dc = cols[1] - cols[0] if len(cols) > 1 else 1
        extent = (cols[0], cols[-1] + dc, rows[-1] + dr, rows[0])
    im = ax.imshow(img, aspect="auto", interpolation="nearest", extent=extent, **imshow)
    ax.set_xlabel(f"{dims[1]} (element index)")
    ax.set_ylabel(f"{dims[0]} (element index)")
    ax.set_title(title or name + (f" [expert {expert}]" if three_d else ""), fontsize=9)
    return im
