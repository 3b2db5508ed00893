"""The gates of `fp8moe gate` (scenarios/gates.ini), read and applied in Python for the notebooks.

`fp8moe gate` (sim/sweep/gate.cpp) is what CI gates on. This module reads the same gates file and
applies the same rules, so the floors, identities and failing rows a notebook shows are the
gates', never a hand copy of them (tests/notebooks/check_gates.py holds the two to the same
failures on a real sweep):

    [gate.NAME]
    description = what the gate holds and its source
    level = op                 # match keys: any column of the cases table; values are globs
    strategy = !*contraction*  #   ('*', '?'; no [classes]) separated by ';', '!' negates; a row
    mode = !hp64               #   must match every match key
    expect = bitwise           # or: metric = sqnr_db | sqnr_vs_single_db, min_db = 27

A column is matched as text, as results/store.cpp's column_text writes it: strings as they are,
integers in decimal (`block = 128`, `block_aligned = 1`), doubles as %.17g or nan/inf/-inf. A
floor holds when metric >= min_db (NaN fails); `expect = bitwise` holds when
bitwise_equal_frac == 1 and sqnr_vs_single_db == +inf. A row with status `error` fails (gate
`status`) and its metrics are not checked; any other row must pass every gate it matches.

The file is found as ../scenarios/gates.ini from this module; FP8MOE_GATES or a `gates` argument
(a path, or gates already parsed) overrides it. A repeated key or section, which `fp8moe gate`
would merge, is refused here rather than guessed at.
"""
from __future__ import annotations

import configparser
import dataclasses
import difflib
import math
import os
import re
from pathlib import Path

import numpy as np
import pandas as pd

GATES_ENV = "FP8MOE_GATES"
DEFAULT_GATES = Path(__file__).resolve().parent.parent / "scenarios" / "gates.ini"
GATE_METRICS = ("sqnr_db", "sqnr_vs_single_db")
# The /cases columns of results/SCHEMA.md (schema_version 1), in the schema's order: the keys a
# gate may match on (results/store.hpp's FP8MOE_CASE_COLUMNS).
CASE_COLUMNS = ("case_id", "case_key", "scenario", "level", "mesh", "world", "plan", "placements",
                "strategy", "pass", "tensor", "backend", "mode", "format", "block", "pow2_scales",
                "pad", "experts", "tokens", "n", "k", "dim", "hidden", "routing", "offs", "dist",
                "seed", "fsdp_gather", "reduce_dtype", "reduce_order", "fp8_dispatch", "lr",
                "sqnr_db", "sqnr_vs_single_db", "rel_err", "max_abs_err", "max_ulp",
                "bitwise_equal_frac", "block_aligned", "underflow_frac", "saturated_frac",
                "nonfinite", "comm_bytes", "time_ms", "status", "message", "split_k")
_GATE_KEYS = ("description", "expect", "metric", "min_db")
_TRIM = " \t\r"  # scenarios/scenario.cpp's trim
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|[+-]?0[xX][0-9a-fA-F.]+([pP][+-]?\d+)?")


class GatesFileError(ValueError):
    """A gates file `fp8moe gate` refuses (or would merge: a repeated key or section)."""


@dataclasses.dataclass(frozen=True)
class GateMatch:
    """One match key: the column's text matches one of any_of (when any) and none of none_of."""
    column: str
    any_of: tuple = ()
    none_of: tuple = ()
    text: str = ""  # as written in the file

    def holds(self, text: str) -> bool:
        return ((not self.any_of or any(glob_match(p, text) for p in self.any_of))
                and not any(glob_match(p, text) for p in self.none_of))


@dataclasses.dataclass(frozen=True)
class Gate:
    name: str
    description: str = ""
    where: str = ""              # "gates.ini:12": the section header
    match: tuple = ()            # GateMatch, every one must hold; none: every row
    expect_bitwise: bool = False
    expect_identical: bool = False  # identical to a baseline run's row (fp8moe gate --baseline)
    metric: str = ""             # a floor: sqnr_db (vs hp64) or sqnr_vs_single_db
    min_db: float = math.nan

    @property
    def rule(self) -> str:
        return f"{self.name}: {self.description}" if self.description else self.name


# ------------------------------------------------------------------------ reading the file

def gates_path(path=None) -> Path:
    """The gates file: `path`, else $FP8MOE_GATES, else ../scenarios/gates.ini from here."""
    return Path(path if path is not None else os.environ.get(GATES_ENV) or DEFAULT_GATES)


def load_gates(path=None) -> tuple:
    """The gates of a gates file (gates_path(path)), in file order."""
    p = gates_path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise FileNotFoundError(f"cannot read gates file '{p}' ({e.strerror}): pass gates=PATH or set "
                                f"{GATES_ENV} (the shipped one is scenarios/gates.ini)") from e
    return parse_gates(text, str(p))


def as_gates(gates=None) -> tuple:
    """None (the default file), a path, or gates already parsed -> a tuple of Gate."""
    if gates is None or isinstance(gates, (str, os.PathLike)):
        return load_gates(gates)
    return tuple(gates)


def parse_gates(text: str, path: str = "gates.ini") -> tuple:
    """Gates from the text of a gates file, checked as sim/sweep/gate.cpp's parse_gates checks
    them; GatesFileError names the file and line."""
    base = os.path.basename(path)
    # Boost's config parser (which fp8moe uses) cuts every line at its first '#' and trims it;
    # doing that first leaves configparser no comments, inline or not, and no continuation lines.
    lines, header_line, key_line, section = [], {}, {}, None
    for n, raw in enumerate(text.split("\n"), 1):
        t = raw.split("#", 1)[0].strip(_TRIM)
        lines.append(t)
        if t.startswith("[") and (not t.endswith("]") or t == "[]"):
            raise GatesFileError(f"{base}:{n}: '{t}' is not a [section] header: write `key = value` "
                                 "lines under [gate.NAME] headers")
        if t.startswith("["):
            section = t[1:-1]
            header_line.setdefault(section, n)
        elif "=" in t:
            key_line.setdefault((section, t.split("=", 1)[0].strip(_TRIM)), n)
    cp = configparser.ConfigParser(delimiters=("=",), comment_prefixes=(), inline_comment_prefixes=None,
                                   strict=True, interpolation=None, default_section="\0no default")
    cp.optionxform = str  # keys are case-sensitive, as fp8moe's
    try:
        cp.read_string("\n".join(lines), source=base)
    except configparser.DuplicateOptionError as e:
        raise GatesFileError(f"{base}:{e.lineno}: key '{e.option}' given twice in [{e.section}]: fp8moe gate "
                             "would require both; write one ';'-separated list") from None
    except configparser.DuplicateSectionError as e:
        raise GatesFileError(f"{base}:{e.lineno}: section [{e.section}] given twice: fp8moe gate would merge "
                             "them; write one") from None
    except configparser.MissingSectionHeaderError as e:
        raise GatesFileError(f"{base}:{e.lineno}: {e.line.strip()!r} is outside any section: put it under a "
                             "[gate.NAME] header") from None
    except configparser.ParsingError as e:
        n = e.errors[0][0]
        raise GatesFileError(f"{base}:{n}: {lines[n - 1]!r} is not `key = value`: write `key = value` lines "
                             "under [gate.NAME] headers") from None
    return tuple(_gate(name, cp.items(name, raw=True), base, header_line.get(name, 0), key_line)
                 for name in cp.sections())


def _gate(section, items, base, line, key_line) -> Gate:
    where = f"{base}:{line}"
    if not section.startswith("gate.") or section == "gate.":
        raise GatesFileError(f"{where}: unknown section [{section}]: a gates file holds [gate.NAME] sections")
    fields = {"name": section[5:], "where": where, "match": []}
    has_min = False
    for key, value in items:
        at = f"{base}:{key_line.get((section, key), line)}"
        if not value:
            raise GatesFileError(f"{at}: key '{key}' has no value: write `{key} = VALUE`")
        if key == "description":
            fields["description"] = value
        elif key == "expect":
            if value not in ("bitwise", "identical"):
                raise GatesFileError(f"{at}: expect = {value}: expect bitwise (to the single device) or "
                                     "identical (to the baseline run), or give metric and min_db")
            fields["expect_bitwise" if value == "bitwise" else "expect_identical"] = True
        elif key == "metric":
            if value not in GATE_METRICS:
                raise GatesFileError(f"{at}: metric = {value}: use sqnr_db (vs hp64) or sqnr_vs_single_db "
                                     "(vs single device)")
            fields["metric"] = value
        elif key == "min_db":
            db = _number(value)
            if not math.isfinite(db):
                raise GatesFileError(f"{at}: min_db = {value}: give a number of dB")
            fields["min_db"], has_min = db, True
        elif key in CASE_COLUMNS:
            items_ = [s.strip(_TRIM) for s in value.split(";")]
            if key == "mode":  # the old spelling "hopper-tc/cublas" reads as "hopper-tc:cublas"
                items_ = [s.replace("/", ":") for s in items_]
            if "" in items_:
                raise GatesFileError(f"{at}: {key} has an empty entry")
            fields["match"].append(GateMatch(key, tuple(s for s in items_ if not s.startswith("!")),
                                             tuple(s[1:] for s in items_ if s.startswith("!")), value))
        else:
            near = difflib.get_close_matches(key, CASE_COLUMNS + _GATE_KEYS, n=1)
            hint = f" (did you mean '{near[0]}'?)" if near else ""
            raise GatesFileError(f"{at}: unknown key '{key}'{hint}: a gate takes description, expect, metric, "
                                 "min_db and columns of the cases table")
    bitwise = fields.get("expect_bitwise", False) or fields.get("expect_identical", False)
    if bitwise == bool(fields.get("metric") or has_min):
        raise GatesFileError(f"{where}: gate {fields['name']}: give either expect = bitwise|identical or metric "
                             "and min_db")
    if not bitwise and not (fields.get("metric") and has_min):
        raise GatesFileError(f"{where}: gate {fields['name']}: give both metric and min_db")
    fields["match"] = tuple(fields["match"])
    return Gate(**fields)


def _number(text: str) -> float:
    """std::stod of the whole text (decimal or hex); NaN when it is not one number."""
    if not _NUMBER.fullmatch(text):
        return math.nan
    try:
        return float.fromhex(text) if "x" in text.lower() else float(text)
    except ValueError:
        return math.nan


# ----------------------------------------------------------------------------- matching

def glob_match(pattern: str, s: str) -> bool:
    """sim/sweep/expand.cpp's glob_match, step for step: '*' and '?' only, so 'A=[S(1)]' is
    literal (fnmatch would read [S(1)] as a character class)."""
    pi = si = mark = 0
    star = -1
    while si < len(s):
        if pi < len(pattern) and (pattern[pi] == "?" or pattern[pi] == s[si]):
            pi, si = pi + 1, si + 1
        elif pi < len(pattern) and pattern[pi] == "*":
            star, mark, pi = pi, si, pi + 1
        elif star >= 0:
            mark += 1
            pi, si = star + 1, mark
        else:
            return False
    while pi < len(pattern) and pattern[pi] == "*":
        pi += 1
    return pi == len(pattern)


def column_text(value) -> str:
    """One cell as `fp8moe gate` matches it (results/store.cpp column_text): strings as they
    are, integers in decimal, doubles as %.17g or nan/inf/-inf. An integer column pandas holds
    as float (block 128.0) prints as %.17g does its integer: '128'."""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if value is None:
        return ""
    if isinstance(value, (bool, int, np.bool_, np.integer)):
        return str(int(value))
    v = float(value)
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return "%.17g" % v


def match_matrix(df: pd.DataFrame, gates=None) -> np.ndarray:
    """(rows, gates) bool: where each gate's match keys all hold (gate.cpp gate_matches)."""
    gates = as_gates(gates)
    texts, out = {}, np.ones((len(df), len(gates)), dtype=bool)
    for j, g in enumerate(gates):
        for m in g.match:
            if m.column not in texts:
                if m.column not in df:
                    raise KeyError(f"gate {g.name} ({g.where}) matches on column '{m.column}', which these "
                                   "rows lack")
                texts[m.column] = [column_text(v) for v in df[m.column].tolist()]
            out[:, j] &= np.fromiter((m.holds(t) for t in texts[m.column]), dtype=bool, count=len(df))
    return out


def identity_holds(df: pd.DataFrame) -> np.ndarray:
    """What `expect = bitwise` asks of a row: every element equal to the single device's."""
    return ((df["bitwise_equal_frac"].astype(float) == 1.0) &
            np.isposinf(df["sqnr_vs_single_db"].astype(float))).to_numpy()


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The gates on a table of rows, as gate.cpp's check_gates decides: a row with status error
    fails on that alone; any other row fails every gate it matches whose floor or identity it
    does not meet."""
    gates: tuple
    matched: np.ndarray  # (rows, gates) bool: the gate's match keys hold
    unmet: np.ndarray    # (rows, gates) bool: its floor (NaN is below) or identity does not hold
    error: np.ndarray    # (rows,) bool: status error

    @property
    def failed(self) -> np.ndarray:  # (rows, gates) bool
        return self.matched & self.unmet & ~self.error[:, None]


def check(df: pd.DataFrame, gates=None) -> Verdict:
    gates = as_gates(gates)
    bitwise = identity_holds(df)
    unmet = np.zeros((len(df), len(gates)), dtype=bool)
    for j, g in enumerate(gates):
        if g.expect_identical:  # needs a baseline run, which a table alone is not: as fp8moe gate without one
            unmet[:, j] = True
            continue
        with np.errstate(invalid="ignore"):
            unmet[:, j] = ~bitwise if g.expect_bitwise else ~(df[g.metric].astype(float).to_numpy() >= g.min_db)
    return Verdict(gates, match_matrix(df, gates), unmet, (df["status"] == "error").to_numpy())


def _db(v: float) -> str:  # sim/runner/print_report.cpp format_db
    return column_text(v) if math.isnan(v) or math.isinf(v) else f"{v:.2f}"


def gate_failures(df: pd.DataFrame, gates=None) -> pd.DataFrame:
    """Every failure `fp8moe gate` reports for these rows, in its order (row by row, gates in
    file order): columns case_id, pass, tensor, gate (a gate's name, or `status` for a case that
    threw), message, and row (df's index)."""
    v = check(df, gates)
    out = []
    for i, (idx, r) in enumerate(df.iterrows()):
        key = {"case_id": r["case_id"], "pass": r["pass"], "tensor": r["tensor"]}
        if v.error[i]:
            out.append({**key, "gate": "status", "message": f"the case failed to run: {r['message']}",
                        "row": idx})
        for g in (v.gates[j] for j in np.flatnonzero(v.failed[i])):
            if g.expect_identical:
                msg = f"gate {g.name} is an identity against a baseline run: give --baseline (e.g. results/baselines/ci.h5)"
            elif g.expect_bitwise:
                msg = (f"expected bitwise equal to the single device, got {float(r['bitwise_equal_frac']):.4f}"
                       f" of elements equal, sqnr_vs_single {_db(float(r['sqnr_vs_single_db']))} dB")
            else:
                msg = f"{g.metric} = {_db(float(r[g.metric]))} dB, below the floor {_db(g.min_db)} dB"
            msg += f" ({g.description})" if g.description else ""
            out.append({**key, "gate": g.name, "message": msg, "row": idx})
    return pd.DataFrame(out, columns=["case_id", "pass", "tensor", "gate", "message", "row"])


def gate_summary(df: pd.DataFrame, gates=None) -> dict:
    """The counts `fp8moe gate` ends with: rows, rows_gated (under a gate), checks, gates,
    failures (of rows), incomplete (the run's provenance says it did not complete, which fails
    the run too) and passed."""
    v = check(df, gates)
    status = df.attrs.get("provenance", {}).get("status")
    incomplete = status is not None and status != "complete"
    failures = int(v.failed.sum() + v.error.sum())
    checked = v.matched[~v.error]
    return {"rows": len(df), "rows_gated": int(checked.any(axis=1).sum()), "checks": int(checked.sum()),
            "gates": len(v.gates), "failures": failures, "incomplete": incomplete,
            "passed": failures == 0 and not incomplete}


def gate_columns(df: pd.DataFrame, gates=None) -> pd.DataFrame:
    """Per row, what the gates say of it: floor_db / floor_single_db (the highest floor it
    matches on sqnr_db / sqnr_vs_single_db, NaN where none), floor_rule (those floor gates as
    `name: description`), below_floor (one of them not met; NaN is below), identity (the
    bitwise gates it matches, None where none), identity_ok, gate_fail (the gates it fails as
    `fp8moe gate` reports them, `status` for a case that threw; '' when it passes)."""
    v = check(df, gates)
    floor = np.array([not (g.expect_bitwise or g.expect_identical) for g in v.gates], dtype=bool)
    out = pd.DataFrame(index=df.index)
    for metric, col in (("sqnr_db", "floor_db"), ("sqnr_vs_single_db", "floor_single_db")):
        on = v.matched & np.array([g.metric == metric for g in v.gates], dtype=bool)
        out[col] = pd.DataFrame(np.where(on, [g.min_db for g in v.gates], np.nan), index=df.index).max(axis=1)

    def names(mask, text=lambda g: g.name):
        return ["; ".join(text(v.gates[j]) for j in np.flatnonzero(m)) for m in mask]
    out["floor_rule"] = names(v.matched & floor, lambda g: g.rule)
    out["below_floor"] = (v.matched & v.unmet & floor).any(axis=1)
    out["identity"] = [s or None for s in names(v.matched & ~floor)]
    out["identity_ok"] = identity_holds(df)
    out["gate_fail"] = np.where(v.error, "status", names(v.failed))
    return out


def floors_table(gates=None) -> pd.DataFrame:
    """The gates as a table: name, kind (floor or bitwise), metric, min_db, one column per match
    key any gate uses (the globs as written), description and where."""
    gates = as_gates(gates)
    used = [c for c in CASE_COLUMNS if any(m.column == c for g in gates for m in g.match)]
    rows = []
    for g in gates:
        keys = {c: "; ".join(m.text for m in g.match if m.column == c) for c in used}
        kind = "bitwise" if g.expect_bitwise else "identical" if g.expect_identical else "floor"
        rows.append({"name": g.name, "kind": kind,
                     "metric": g.metric or "bitwise_equal_frac == 1, sqnr_vs_single_db == inf",
                     "min_db": g.min_db, **keys, "description": g.description, "where": g.where})
    return pd.DataFrame(rows, columns=["name", "kind", "metric", "min_db", *used, "description", "where"])


def _one(row) -> pd.DataFrame:
    return pd.DataFrame([dict(row)])


def floors_for(row, gates=None) -> list:
    """The floor gates (not the bitwise ones) one row (a Series or dict) matches."""
    gates = as_gates(gates)
    m = match_matrix(_one(row), gates)[0]
    return [g for g, hit in zip(gates, m) if hit and not (g.expect_bitwise or g.expect_identical)]


def floor_for(row, metric: str = "sqnr_db", gates=None) -> float:
    """The floor (dB) the gates set on `metric` of this row (the highest, since it must pass
    every one); NaN where none."""
    return max((g.min_db for g in floors_for(row, gates) if g.metric == metric), default=math.nan)


def identity_for(row, gates=None) -> str | None:
    """The names of the bitwise gates this row matches ('; '-joined), or None."""
    gates = as_gates(gates)
    m = match_matrix(_one(row), gates)[0]
    return "; ".join(g.name for g, hit in zip(gates, m) if hit and g.expect_bitwise) or None
