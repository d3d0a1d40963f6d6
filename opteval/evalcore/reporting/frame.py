"""One row per *planned* trajectory: the ledger rows joined onto the plan, regraded.

Every view of the report starts here, so the missing-score rule is applied once: a planned
trajectory absent from the ledger ("not run") or committed with status ``error`` is wrong
and stays in every denominator. Grading is redone from the ``submission`` text against the
answer keys (so any profile can be asked for); a benchmark without an answer key falls
back to the stored ``correct`` column, which is only valid for the profile it was graded
under.

The plan is given either as counts ``{(model, method, benchmark): n}`` or as the plan
table (``key, model, method, benchmark, problem_id, sample``). With counts, the grid of
(problem, sample) cells is rebuilt from the answer key when ``n`` is a multiple of its
problem count (all problems x samples 0..n/p-1); otherwise from the rows seen, and the
missing cells can only be counted, not named.
"""
from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from opteval.evalcore.finish_reasons import trajectory_counts
from opteval.evalcore.grading import PROFILES, Parsed, grade_parsed, parse_submission
from opteval.evalcore.ledger_detail import calls_of, error_message, execs_of, transcript_of
from opteval.evalcore.problems import AnswerKey
from opteval.evalcore.records import LEDGER_SCHEMA, STATUS_ERROR

GROUP = ["model", "method", "benchmark"]
NOT_RUN = "not run"
PROFILE_NAMES = tuple(PROFILES)

# Failure categories of a planned trajectory (paper 003's split plus the missing rule).
CORRECT, NO_SUBMISSION, SYNTACTIC, SEMANTIC, MISSING = "correct", "no_submission", "syntactic", "semantic", "missing"
CATEGORIES = (CORRECT, NO_SUBMISSION, SYNTACTIC, SEMANTIC, MISSING)


class ReportError(ValueError):
    """The ledger, plan and answer keys do not fit together; the message names the group/key."""


@dataclass
class Prepared:
    """``traj``: one row per planned trajectory (grid cell or, for an unknown grid, each
    committed row). ``planned``: the denominators. ``missing``: key/reason per missing
    trajectory. ``unnamed_missing``: groups whose missing cells could not be named."""

    traj: pd.DataFrame
    planned: dict[tuple[str, str, str], int]
    missing: pd.DataFrame
    unnamed_missing: dict[tuple[str, str, str], int] = field(default_factory=dict)
    grid_known: dict[tuple[str, str, str], bool] = field(default_factory=dict)
    profiles: tuple[str, ...] = PROFILE_NAMES


def _nn(v: Any) -> Any:
    """pandas null (NaN/NA/None) -> None."""
    if v is None:
        return None
    if isinstance(v, float) and math.isnan(v):
        return None
    try:
        if v is pd.NA or v is pd.NaT:
            return None
    except TypeError:
        pass
    return v


def number(v: Any) -> float | None:
    """A cell as a float; None for a null, NaN or anything that is not a number (pd.NA included)."""
    if v is None:
        return None
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(x) else x


def to_frame(table: Any, reduce: bool = False) -> pd.DataFrame:
    """A ledger table (pyarrow or pandas) as pandas with every LEDGER_SCHEMA column,
    absent ones filled with nulls; duplicate keys keep the last committed row (a retry
    replaces its archived attempt). ``reduce`` (the report): the detail columns (``calls``,
    ``execs``, ``transcript``) replaced by what the report derives from them (:func:`reduce_rows`;
    a table already reduced, as ``opteval report`` streams it, is kept). ``error`` is its text in
    either ledger format (``opteval.evalcore.ledger_detail.error_message``): every report reads it so."""
    df = table.to_pandas() if hasattr(table, "to_pandas") and not isinstance(table, pd.DataFrame) else pd.DataFrame(table)
    if "error" in df.columns and df["error"].dtype == object:
        df["error"] = [error_message(v) for v in df["error"]]
    if reduce:
        df = reduce_rows(df) if not is_reduced(df) else df.copy()
    else:
        df = df.copy()
    for name in LEDGER_SCHEMA.names:
        if name not in df.columns and not (reduce and name in RAW_DETAIL):
            df[name] = None
    if len(df) and df["key"].duplicated().any():
        if df["committed_at"].notna().all():
            df = df.sort_values("committed_at", kind="stable")
        df = df.drop_duplicates("key", keep="last")
    return df.reset_index(drop=True)


# -- reduced rows: what the report needs from the JSON detail columns ----------------------------

# The ledger's detail columns a report row is reduced from (issue 44: a reader holds what it derives,
# never the calls, executions or transcripts themselves; the transcripts are 95% of a row's bytes).
RAW_DETAIL = ("calls", "execs", "transcript")
SEMOPT_STAGES = ("generate", "reflect", "expand", "critic")
# per-row derived columns (absent trajectories: :data:`ABSENT`)
DERIVED = ("last_exec_outcome", "first_outcome", "final_model", "solver_infeasible", "call_latencies",
           "truncated_calls", "rejected_calls", "ended_truncated", "ended_rejected", "exec_runs", "exec_uncontained",
           "semopt_ann", "semopt_subs", "semopt_stages", "semopt_n_calls")
# the values of an absent (planned, never committed) trajectory, as the raw path derived them from nulls
ABSENT: dict[str, Any] = {"last_exec_outcome": None, "first_outcome": None, "final_model": None,
                          "solver_infeasible": False, "call_latencies": [], "truncated_calls": 0, "rejected_calls": 0,
                          "ended_truncated": 0, "ended_rejected": 0, "exec_runs": 0, "exec_uncontained": 0,
                          "semopt_ann": [], "semopt_subs": None, "semopt_stages": (0, 0, 0, 0), "semopt_n_calls": 0}
# low-cardinality text columns shared as one object per value across record batches
_INTERN = ("sweep", "model", "method", "benchmark", "problem_id", "status", "extraction", "grading_profile",
           "first_exec_outcome", "answer_source", "reference_match", "submission_status")


def is_reduced(df: Any) -> bool:
    return "exec_runs" in getattr(df, "columns", ())


def semopt_annotations(transcript: Any, calls: Any = None) -> list[dict[str, Any]]:
    """The harness's ``"semopt"`` candidate annotations of one transcript, in its order (format 2
    keeps them with the calls: pass the row's ``calls`` too)."""
    entries = transcript_of(calls, transcript)
    return [e["semopt"] for e in entries if isinstance(e, dict) and isinstance(e.get("semopt"), dict)]


def reduce_rows(df: pd.DataFrame, annotations: Mapping[str, list[dict[str, Any]]] | None = None) -> pd.DataFrame:
    """``df`` (ledger rows as pandas) with ``calls``, ``execs`` and ``transcript`` replaced by the
    :data:`DERIVED` columns every report table reads. ``annotations``: SemOPT's candidate
    annotations by key, when the transcripts were read apart (``opteval report`` reads them only for
    SemOPT methods); otherwise they come from a ``transcript`` column, if any."""
    n = len(df)
    calls_col = df["calls"] if "calls" in df.columns else [None] * n
    execs_col = df["execs"] if "execs" in df.columns else [None] * n
    fo_col = df["first_exec_outcome"] if "first_exec_outcome" in df.columns else [None] * n
    st_col = df["status"] if "status" in df.columns else [None] * n
    if annotations is not None:
        ann_col: Any = [annotations.get(k, []) for k in df["key"]]
    elif "transcript" in df.columns:
        ann_col = [semopt_annotations(x, c) for x, c in zip(df["transcript"], calls_col)]
    else:
        ann_col = [[] for _ in range(n)]
    cols: dict[str, list[Any]] = {c: [] for c in DERIVED}
    for raw_ca, raw_ex, fo, st, ann in zip(calls_col, execs_col, fo_col, st_col, ann_col):
        ex, ca = execs_of(raw_ex), calls_of(raw_ca)
        outs = [e.get("outcome") for e in ex if isinstance(e, dict)]
        cols["last_exec_outcome"].append(outs[-1] if outs else None)
        cols["first_outcome"].append(_nn(fo) if _nn(fo) is not None else (outs[0] if outs else None))
        cols["final_model"].append(_final_model(ex))
        last_models = (ex[-1].get("models") or []) if ex and isinstance(ex[-1], dict) else []
        cols["solver_infeasible"].append(any(isinstance(m, dict) and str(m.get("status", "")).lower() == "infeasible"
                                             for m in last_models))
        cols["call_latencies"].append([float(c["latency_s"]) for c in ca
                                       if isinstance(c, dict) and c.get("latency_s") is not None])
        for name, v in trajectory_counts([c for c in ca if isinstance(c, dict)], _nn(st)).items():
            cols[name].append(v)
        runs = [e for e in ex if isinstance(e, dict)]
        cols["exec_runs"].append(len(runs))
        cols["exec_uncontained"].append(sum(1 for e in runs if e.get("contained") is False))
        cols["semopt_ann"].append(ann)
        cols["semopt_subs"].append([e.get("submission") if isinstance(e, dict) else None for e in ex] if ann else None)
        stages = [c.get("stage") for c in ca if isinstance(c, dict)]
        cols["semopt_stages"].append(tuple(stages.count(s) for s in SEMOPT_STAGES))
        cols["semopt_n_calls"].append(len(ca))
    out = df.drop(columns=[c for c in RAW_DETAIL if c in df.columns])
    for name in _INTERN:
        if name in out.columns and out[name].dtype == object:
            out[name] = [sys.intern(v) if isinstance(v, str) else v for v in out[name]]
    for name in DERIVED:
        out[name] = cols[name]
    return out


# -- per-row features ------------------------------------------------------------------------


def _final_model(execs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The captured model behind the answer: the last model of the last execution that
    submitted, else the last model captured at all (errors from the capture are skipped)."""
    def last_ok(models: Any) -> dict[str, Any] | None:
        good = [m for m in (models or []) if isinstance(m, dict) and "error" not in m]
        return good[-1] if good else None

    for e in reversed(execs):
        if isinstance(e, dict) and e.get("submission") is not None:
            m = last_ok(e.get("models"))
            if m is not None:
                return m
    for e in reversed(execs):
        if isinstance(e, dict):
            m = last_ok(e.get("models"))
            if m is not None:
                return m
    return None


def classify(parsed: Parsed, expected: Parsed, correct: bool, status: str | None,
             last_outcome: str | None, solver_infeasible: bool) -> str:
    """Failure category of one committed trajectory (paper 003, Section 2).

    ``missing``: status error. ``correct``. ``syntactic``: the final execution failed, or
    the solver/submission said infeasible where the answer is a number. ``no_submission``:
    nothing parseable was submitted although the code (if any) ran. ``semantic``: it ran
    and submitted a wrong answer.
    """
    if status == STATUS_ERROR:
        return MISSING
    if correct:
        return CORRECT
    numeric_answer = isinstance(expected, float)
    if last_outcome is not None and last_outcome != "ok":
        return SYNTACTIC
    if numeric_answer and (parsed == "infeasible" or (parsed is None and solver_infeasible)):
        return SYNTACTIC
    if parsed is None:
        return NO_SUBMISSION
    return SEMANTIC


def _features(df: pd.DataFrame) -> pd.DataFrame:
    """The derived columns of every planned trajectory (an absent one: :data:`ABSENT`)."""
    out = pd.DataFrame(index=df.index)
    present = list(df["present"])
    for name in DERIVED:
        out[name] = [v if pres else ABSENT[name] for v, pres in zip(df[name], present)]
    return out


# -- the plan grid ------------------------------------------------------------------------------


def _plan_counts(planned: Any) -> tuple[dict[tuple[str, str, str], int], pd.DataFrame | None]:
    if isinstance(planned, Mapping):
        return {tuple(k): int(v) for k, v in planned.items()}, None
    arrow = hasattr(planned, "to_pandas") and not isinstance(planned, pd.DataFrame)
    plan = planned.to_pandas() if arrow else pd.DataFrame(planned)
    need = {"model", "method", "benchmark", "problem_id", "sample"}
    if not need <= set(plan.columns):
        raise ReportError(f"plan table lacks columns {sorted(need - set(plan.columns))}")
    counts = {k: int(n) for k, n in plan.groupby(GROUP, sort=True).size().items()}
    return counts, plan


def _isin(values: pd.Series, among: pd.Series) -> np.ndarray:
    """``values.isin(among)`` through Arrow's hash set: pandas hashes the plan's keys as Python
    objects (~380 MB for the paper's 589,116 keys, issue 44), Arrow as one buffer."""
    try:
        found = pc.is_in(pa.Array.from_pandas(values), value_set=pa.Array.from_pandas(among))
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):  # keys not all strings
        return values.isin(among).to_numpy(bool)
    return found.fill_null(False).to_numpy(zero_copy_only=False)


def prepare(table: Any, answer_keys: Mapping[str, AnswerKey], planned: Any,
            profiles: tuple[str, ...] = PROFILE_NAMES) -> Prepared:
    """Join ledger rows onto the plan and grade each planned trajectory under ``profiles``."""
    df = to_frame(table, reduce=True)
    counts, plan = _plan_counts(planned)
    if plan is not None and "key" in plan.columns and len(df):
        df = df[_isin(df["key"], plan["key"])].reset_index(drop=True)
    groups_seen = set(map(tuple, df[GROUP].drop_duplicates().itertuples(index=False, name=None))) if len(df) else set()
    extra = sorted(groups_seen - set(counts))
    if extra:
        raise ReportError(f"ledger has rows for {'/'.join(extra[0])} but no planned count for it "
                          f"({len(extra)} such groups)")
    df["sample"] = df["sample"].astype(int) if len(df) else df["sample"]

    cells, grid_known, unnamed = [], {}, {}
    by_group = {k: v for k, v in df.groupby(GROUP, sort=False)} if len(df) else {}
    by_plan = {k: v for k, v in plan.groupby(GROUP, sort=False)} if plan is not None else {}
    for g, n in sorted(counts.items()):
        model, method, bench = g
        sub = by_group.get(g, df.iloc[0:0])
        if len(sub) > n:
            raise ReportError(f"{model}/{method}/{bench}: {len(sub)} committed trajectories but only {n} planned")
        if plan is not None:
            p = by_plan[g]
            grid = p[["problem_id", "sample"] + (["key"] if "key" in p.columns else [])].copy()
            grid_known[g] = True
        else:
            key = answer_keys.get(bench)
            ids = sorted(key.answers) if key is not None else []
            if ids and n % len(ids) == 0:
                spp = n // len(ids)
                grid = pd.DataFrame([(pid, s) for pid in ids for s in range(spp)], columns=["problem_id", "sample"])
                grid_known[g] = True
            else:
                grid = sub[["problem_id", "sample"]].copy()
                grid_known[g] = len(sub) == n
                if len(sub) < n:
                    unnamed[g] = n - len(sub)
        grid = grid.assign(model=model, method=method, benchmark=bench)
        cells.append(grid)
    cols = GROUP + ["problem_id", "sample"]
    grid_all = pd.concat(cells, ignore_index=True) if cells else pd.DataFrame(columns=cols)
    grid_all["sample"] = grid_all["sample"].astype(int)
    plan_key = grid_all.pop("key") if "key" in grid_all.columns else None
    traj = grid_all.merge(df, on=cols, how="left", indicator=True, validate="one_to_one")
    traj["present"] = traj.pop("_merge") == "both"
    if plan_key is not None:
        traj["key"] = traj["key"].where(traj["present"], plan_key.values)
    orphans = len(df) - int(traj["present"].sum())
    if orphans:
        bad = df.merge(grid_all, on=cols, how="left", indicator=True)
        row = bad[bad["_merge"] == "left_only"].iloc[0]
        raise ReportError(f"ledger row {row['key']} ({row['problem_id']}, sample {row['sample']}) "
                          f"is not a planned cell ({orphans} such rows)")
    traj = _grade(traj, answer_keys, profiles)
    missing = _missing(traj)
    return Prepared(traj=traj, planned=counts, missing=missing, unnamed_missing=unnamed,
                    grid_known=grid_known, profiles=profiles)


def _grade(traj: pd.DataFrame, answer_keys: Mapping[str, AnswerKey], profiles: tuple[str, ...]) -> pd.DataFrame:
    traj = traj.reset_index(drop=True)
    feats = _features(traj)
    traj = pd.concat([traj.drop(columns=list(DERIVED)), feats], axis=1)
    parsed, expected = [], []
    for bench, pid, sub, present in zip(traj["benchmark"], traj["problem_id"], traj["submission"], traj["present"]):
        key = answer_keys.get(bench)
        expected.append(parse_submission(key.answers[pid]) if key is not None and pid in key.answers else None)
        if key is not None and pid not in key.answers:
            raise ReportError(f"answer key {bench!r} has no problem {pid!r}")
        parsed.append(parse_submission(_nn(sub)) if present else None)
    traj["parsed"] = parsed
    traj["expected"] = expected
    has_key = traj["benchmark"].map(lambda b: b in answer_keys)
    status = traj["status"].where(traj["present"], None)
    for prof in profiles:
        vals: list[bool | None] = []
        for p, e, hk, st, pres, stored, gp in zip(parsed, expected, has_key, status, traj["present"],
                                                   traj["correct"], traj["grading_profile"]):
            if not pres or st == STATUS_ERROR:
                vals.append(False)
            elif hk:
                vals.append(grade_parsed(p, e, prof))
            elif _nn(gp) in (None, prof):
                vals.append(bool(_nn(stored)))
            else:
                vals.append(None)  # no key and graded under another profile: unknown
        traj[f"ok_{prof}"] = vals
    return traj


def _missing(traj: pd.DataFrame) -> pd.DataFrame:
    """Key and reason of every missing trajectory. Only the columns it names are taken from ``traj``
    (most planned trajectories of a sweep begun are missing: a copy of every column was its peak)."""
    mask = ((~traj["present"]) | (traj["status"] == STATUS_ERROR)).to_numpy(bool)
    m = traj.loc[mask, ["key", "present", "error", *GROUP, "problem_id", "sample"]]
    reasons = [NOT_RUN if not pres else (_nn(err) or "error") for pres, err in zip(m["present"], m["error"])]
    key = m["key"]
    unnamed = np.fromiter((not _nn(k) for k in key), bool, len(key))
    if unnamed.any():  # a plan given as counts names no key: its cell's coordinates instead
        key = key.astype(object).copy()
        key[unnamed] = [f"{a}/{b}/{c}/{d}/{e}" for a, b, c, d, e in
                        m.loc[unnamed, [*GROUP, "problem_id", "sample"]].itertuples(index=False, name=None)]
    return pd.DataFrame({"key": key.values, "model": m["model"].values, "method": m["method"].values,
                         "benchmark": m["benchmark"].values, "problem_id": m["problem_id"].values,
                         "sample": m["sample"].values, "reason": reasons}).reset_index(drop=True)


def category_column(traj: pd.DataFrame, profile: str) -> pd.Series:
    """The failure category of every planned trajectory under ``profile``."""
    out = []
    for pres, st, p, e, ok, lo, inf in zip(traj["present"], traj["status"], traj["parsed"], traj["expected"],
                                           traj[f"ok_{profile}"], traj["last_exec_outcome"], traj["solver_infeasible"]):
        out.append(MISSING if not pres else classify(p, e, bool(ok), st, _nn(lo), bool(inf)))
    return pd.Series(out, index=traj.index, dtype=object)


def percentile(vals: list[float] | np.ndarray, q: float) -> float | None:
    arr = np.asarray([v for v in vals if v is not None and not (isinstance(v, float) and math.isnan(v))], dtype=float)
    return float(np.percentile(arr, q)) if arr.size else None
