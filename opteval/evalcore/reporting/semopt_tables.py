"""The SemOPT paper's Tables 5-8 and 16, from the ledger, where the ledger holds what they need.

Why a module of its own: ``semopt.py`` has the run's own statistics (Pass@N, Best-of-N, gate,
calls); these are the paper's tables in its terms, each computed from the candidates the harness
annotates (``"semopt"`` transcript entries: critic score R, its execution, ``first_failed``,
``reflections``, ``critic``) graded against the answer keys, and from the trajectories' calls and
wall time. What a table needs that no sweep records is said in :data:`NOT_PRODUCED` and in the
report, never filled in:

* **Table 5** (critic discrimination, AUC / F1): per critic (method) and benchmark, over executed
  candidates with a critic score -- ``C_init`` (single-pass generation, the paper's test set) and
  all candidates; a candidate is positive when its own submission is correct. F1 predicts positive
  when R > tau (the gate's threshold; the paper does not state its F1 threshold).
* **Table 6** (evaluator x hierarchy, BoN accuracy): the SemOPT methods in the sweep, labelled by
  critic (the semantic reward model, or an LLM critic on the hierarchy -- the paper's "general LLM
  critic" row). RM-only reranking and Autoformulator-style MCTS + semantic RM are not opteval
  methods.
* **Table 7** (efficiency on the combined hard subsets): accuracy, wall seconds and model calls per
  trajectory for every method of the sweep on the Hard problems (difficulty from Direct's first
  three samples, else SemOPT's C_init). Self-Refinement and Beam Search are not opteval methods.
* **Table 8** (accuracy / API calls per benchmark): the SemOPT methods; Naive Search is not an
  opteval method.
* **Table 16** (syntactic error handling during search): per benchmark, evaluated nodes, the share
  that triggered at least one execution error, and of those the share reflection repaired (the rest
  score 0). Needs ``first_failed`` (ledgers written before it have no such rows).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import rankdata

from opteval.evalcore.grading import grade_parsed, parse_submission
from opteval.evalcore.reporting.difficulty import HARD, difficulty_labels
from opteval.evalcore.reporting.frame import Prepared, _nn

CRITIC_LABELS = {
    "llm": ("LLM critic on the generation backbone: the paper's critic ablation (5.3, Figure 4(a); Table 6's "
            "general-LLM-critic row), not its trained semantic reward model, which is not public"),
    "reward_model": "semantic reward model behind params.critic.url (the paper's critic, when it is the trained one)",
}
UNKNOWN_CRITIC = "critic not recorded (a ledger written before the harness recorded it)"
TAU_DEFAULT = 0.6  # paper E.1, and semopt.yaml's tau

NOT_PRODUCED = [
    "Table 5: the unfine-tuned reward-model backbone's row needs a sweep with that model as the critic "
    "(params.critic.kind: reward_model pointed at it); only the critics the sweep ran have rows.",
    "Table 6: RM-only reranking and Autoformulator-style MCTS + semantic RM are not opteval methods; "
    "their rows cannot come from a ledger.",
    "Table 7: Self-Refinement (SR) and Beam Search (BS) with budgets matched to SemOPT are not opteval methods; "
    "the table lists the sweep's own methods on the same hard subset instead (Reflexion is the nearest iterative one).",
    "Table 8: Naive Search (NS, 84 calls per instance over a fixed candidate space) is not an opteval method; "
    "only SemOPT's accuracy / calls columns are produced.",
]

KEYS = ["model", "method", "benchmark", "problem_id", "sample"]


def semopt_candidates(prep: Prepared, methods: Sequence[str], profile: str) -> pd.DataFrame:
    """One row per evaluated candidate of the committed trajectories of ``methods``: its own
    submission graded under ``profile``, and the harness's annotations."""
    t = prep.traj[prep.traj["method"].isin(list(methods)) & prep.traj["present"]]
    rows = []
    for row in t.itertuples(index=False):
        subs = row.semopt_subs or []
        for a in row.semopt_ann or []:
            e = a.get("exec")
            sub = subs[e] if isinstance(e, int) and 0 <= e < len(subs) else None
            correct = sub is not None and grade_parsed(parse_submission(sub), row.expected, profile)
            rows.append({**{k: getattr(row, k) for k in KEYS}, "candidate": a.get("candidate"),
                         "phase": a.get("phase"), "executed": bool(a.get("executed")), "R": a.get("R"),
                         "S": a.get("S"), "correct": bool(correct), "critic": a.get("critic"),
                         "first_failed": a.get("first_failed"), "reflections": a.get("reflections"),
                         "tau": a.get("tau")})
    cols = KEYS + ["candidate", "phase", "executed", "R", "S", "correct", "critic", "first_failed", "reflections", "tau"]
    return pd.DataFrame(rows, columns=cols)


def critic_labels(cands: pd.DataFrame, methods: Sequence[str]) -> dict[str, str]:
    """method -> what its critic is (the label the SemOPT section prints)."""
    out = {}
    for m in methods:
        kinds = sorted({str(k) for k in cands.loc[cands["method"] == m, "critic"] if _nn(k) is not None})
        out[m] = "; ".join(f"`{k}`: {CRITIC_LABELS.get(k, k)}" for k in kinds) if kinds else UNKNOWN_CRITIC
    return out


def auc(scores: Sequence[float], labels: Sequence[bool]) -> float | None:
    """Area under the ROC curve (Mann-Whitney; ties count one half); None without both classes."""
    y = np.asarray(labels, dtype=bool)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if not n_pos or not n_neg:
        return None
    ranks = rankdata(np.asarray(scores, dtype=float))
    return float((ranks[y].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def f1(scores: Sequence[float], labels: Sequence[bool], tau: float) -> float | None:
    """F1 of "R > tau" against correctness; None when there is nothing to score."""
    pred = np.asarray(scores, dtype=float) > tau
    y = np.asarray(labels, dtype=bool)
    tp, fp, fn = int((pred & y).sum()), int((pred & ~y).sum()), int((~pred & y).sum())
    return None if 2 * tp + fp + fn == 0 else 2 * tp / (2 * tp + fp + fn)


def _per_benchmark(df: pd.DataFrame, fn: Callable[[pd.DataFrame], dict[str, Any]],
                   by: Sequence[str] = ("model", "method")) -> pd.DataFrame:
    rows = []
    for key, g in df.groupby(list(by), sort=True):
        head = dict(zip(by, key if isinstance(key, tuple) else (key,)))
        for b, gb in g.groupby("benchmark", sort=True):
            rows.append({**head, "benchmark": b, **fn(gb)})
        rows.append({**head, "benchmark": "all", **fn(g)})
    return pd.DataFrame(rows)


def table5(cands: pd.DataFrame) -> pd.DataFrame:
    """AUC / F1 of each critic on its executed, scored candidates (C_init, and all)."""
    scored = cands[cands["executed"] & cands["R"].notna()]

    def fn(g: pd.DataFrame) -> dict[str, Any]:
        taus = [float(x) for x in g["tau"] if _nn(x) is not None]
        tau = taus[0] if taus else TAU_DEFAULT
        out: dict[str, Any] = {"tau": tau}
        for name, part in (("c_init", g[g["phase"] == "gate"]), ("all", g)):
            r, y = part["R"].astype(float).tolist(), part["correct"].tolist()
            a, f = auc(r, y), f1(r, y, tau)
            out.update({f"{name}_n": len(part), f"{name}_positives": int(sum(y)),
                        f"{name}_auc": None if a is None else round(a, 3), f"{name}_f1": None if f is None else round(f, 3)})
        return out

    return _per_benchmark(scored, fn) if len(scored) else pd.DataFrame()


def table6(t: pd.DataFrame, labels: dict[str, str]) -> pd.DataFrame:
    """Best-of-N accuracy (%) per SemOPT method (its critic named) and benchmark."""
    if not len(t):
        return pd.DataFrame()
    rows = []
    for (m, x), g in t.groupby(["model", "method"], sort=True):
        row: dict[str, Any] = {"model": m, "method": x, "critic": labels.get(x, UNKNOWN_CRITIC).split(":")[0].strip("`")}
        for b, gb in g.groupby("benchmark", sort=True):
            row[b] = round(100.0 * float(gb["best_of_n"].mean()), 2)
        row["all"] = round(100.0 * float(g["best_of_n"].mean()), 2)
        rows.append(row)
    return pd.DataFrame(rows)


def hard_labels(prep: Prepared, t: pd.DataFrame, profile: str) -> tuple[pd.DataFrame, str]:
    """(model, benchmark, problem_id) of the Hard problems and where the labels come from."""
    if (prep.traj["method"] == "direct").any():
        lab = difficulty_labels(prep, profile, "direct")
        return lab[lab["difficulty"] == HARD][["model", "benchmark", "problem_id"]], "direct (first 3 samples)"
    first = t[t["sample"] < 3].groupby(["model", "benchmark", "problem_id"])["init_ok"].sum()
    hard = first[first == 0].reset_index()[["model", "benchmark", "problem_id"]]
    return hard, "semopt C_init (first 3 samples)"


def table7(prep: Prepared, t: pd.DataFrame, profile: str) -> tuple[pd.DataFrame, str]:
    """Every method of the sweep on the combined Hard subset: accuracy (%), seconds and calls per
    trajectory (planned trajectories; a missing one is wrong and has no time or calls)."""
    hard, source = hard_labels(prep, t, profile)
    if not len(hard):
        return pd.DataFrame(), source
    sub = prep.traj.merge(hard.drop_duplicates(), on=["model", "benchmark", "problem_id"], how="inner")
    rows = []
    for (m, x), g in sub.groupby(["model", "method"], sort=True):
        ran = g[g["present"]]
        rows.append({"model": m, "method": x, "problems": int(g["problem_id"].nunique()), "trajectories": len(g),
                     "accuracy": round(100.0 * float(g[f"ok_{profile}"].fillna(False).astype(bool).mean()), 2),
                     "wall_s_mean": round(float(ran["wall_s"].astype(float).mean()), 3) if len(ran) else None,
                     "calls_mean": round(float(ran["n_calls"].astype(float).mean()), 2) if len(ran) else None})
    return pd.DataFrame(rows), source


def table8(t: pd.DataFrame) -> pd.DataFrame:
    """SemOPT's side of Table 8: per benchmark, Best-of-N accuracy (%) / mean calls."""
    if not len(t):
        return pd.DataFrame()

    def fn(g: pd.DataFrame) -> dict[str, Any]:
        acc, calls = 100.0 * float(g["best_of_n"].mean()), float(g["n_calls"].mean())
        return {"accuracy": round(acc, 2), "calls_mean": round(calls, 2), "cell": f"{acc:.1f} / {calls:.1f}"}

    return _per_benchmark(t, fn)


def table16(cands: pd.DataFrame) -> pd.DataFrame:
    """Per benchmark: evaluated nodes, error rate (%) over them, and over the nodes that triggered
    repair the share reflection repaired and the share that still failed (score 0)."""
    known = cands[cands["first_failed"].notna()]
    if not len(known):
        return pd.DataFrame()

    def fn(g: pd.DataFrame) -> dict[str, Any]:
        trig = g[g["first_failed"].astype(bool)]
        fixed = trig[trig["executed"]]
        return {"nodes": len(g), "triggered": len(trig),
                "error_rate": round(100.0 * len(trig) / len(g), 2) if len(g) else None,
                "repaired": round(100.0 * len(fixed) / len(trig), 2) if len(trig) else None,
                "failed": round(100.0 * (len(trig) - len(fixed)) / len(trig), 2) if len(trig) else None,
                "reflections_mean_repaired": round(float(fixed["reflections"].astype(float).mean()), 2)
                if len(fixed) else None}

    return _per_benchmark(known, fn)


__all__ = ["semopt_candidates", "critic_labels", "auc", "f1", "table5", "table6", "table7", "table8", "table16",
           "NOT_PRODUCED", "CRITIC_LABELS", "hard_labels"]
