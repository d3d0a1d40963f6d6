"""PNG plots through matplotlib's object API with the Agg canvas.

``matplotlib.figure.Figure`` + ``FigureCanvasAgg`` never touch pyplot's global state or
the process-wide backend, so a report can be built inside any process (a notebook, a
Ray driver) without side effects.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from opteval.evalcore.reporting.tables import MACRO, value_columns


def safe_name(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", str(s)).strip("_") or "x"


def _save(fig: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(fig)
    fig.savefig(path, format="png", dpi=110, bbox_inches="tight")
    return path


def _sim_note(sim: bool) -> str:
    return " [SIMULATED]" if sim else ""


def acc_vs_tokens(main: pd.DataFrame, tokens: pd.DataFrame, out_dir: Path) -> list[Path]:
    """One PNG per backbone: macro accuracy (%) against macro tokens per trajectory, one
    point per method (methods without a token macro are left out)."""
    paths = []
    j = main.merge(tokens[["model", "method", MACRO]].rename(columns={MACRO: "tok"}), on=["model", "method"], how="left")
    for model, g in j.groupby("model", sort=True):
        g = g[g[MACRO].notna() & g["tok"].notna()]
        if not len(g):
            continue
        fig = Figure(figsize=(5, 4))
        ax = fig.add_subplot(1, 1, 1)
        for r in g.itertuples(index=False):
            x, y = float(r.tok) / 1000.0, 100 * float(getattr(r, MACRO))
            ax.scatter([x], [y], s=40)
            ax.annotate(str(r.method), (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
        ax.set_xlabel("tokens per trajectory (thousands, input + output)")
        ax.set_ylabel("macro avg@k (%)")
        ax.set_title(f"{model}: accuracy vs tokens{_sim_note(bool(g['simulated'].any()))}")
        ax.grid(alpha=0.3)
        paths.append(_save(fig, out_dir / f"acc_vs_tokens_{safe_name(model)}.png"))
    return paths


def acc_vs_size(main: pd.DataFrame, model_meta: Mapping[str, Mapping[str, Any]] | None, out_dir: Path) -> list[Path]:
    """One PNG per model family: macro accuracy against model size (B params, log x), one
    line per method. Models without meta are left out."""
    if not model_meta:
        return []
    rows = []
    for r in main.itertuples(index=False):
        meta = model_meta.get(r.model)
        mac = getattr(r, MACRO)
        if not meta or meta.get("size_b") is None or mac is None or pd.isna(mac):
            continue
        rows.append({"family": str(meta.get("family") or r.model), "size": float(meta["size_b"]),
                     "method": r.method, "acc": 100 * float(mac), "sim": bool(r.simulated)})
    df = pd.DataFrame(rows)
    paths: list[Path] = []
    if not len(df):
        return paths
    for fam, g in df.groupby("family", sort=True):
        fig = Figure(figsize=(5, 4))
        ax = fig.add_subplot(1, 1, 1)
        for method, gm in g.groupby("method", sort=True):
            gm = gm.sort_values("size")
            ax.plot(gm["size"], gm["acc"], marker="o", label=str(method))
        ax.set_xscale("log")
        ax.set_xlabel("model size (B parameters)")
        ax.set_ylabel("macro avg@k (%)")
        ax.set_title(f"{fam}: accuracy vs size{_sim_note(bool(g['sim'].any()))}")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
        paths.append(_save(fig, out_dir / f"acc_vs_size_{safe_name(fam)}.png"))
    return paths


def _pct(v: Any) -> float:
    return 0.0 if v is None or pd.isna(v) else 100 * float(v)


def benchmark_bars(main: pd.DataFrame, out_dir: Path) -> list[Path]:
    """One PNG per backbone: grouped bars, benchmarks (and Macro) on x, one bar per method."""
    paths = []
    cols = value_columns(main)
    for model, g in main.groupby("model", sort=True):
        methods = list(g["method"])
        fig = Figure(figsize=(max(5, 1.1 * len(cols) * max(1, len(methods)) / 2), 4))
        ax = fig.add_subplot(1, 1, 1)
        width = 0.8 / max(1, len(methods))
        for i, r in enumerate(g.to_dict("records")):
            vals = [_pct(r.get(c)) for c in cols]
            # the 95% interval of each bar (the report's problem-level bootstrap); none where absent
            lows = [max(0.0, v - _pct(r.get(f"{c}:low", v / 100))) for v, c in zip(vals, cols)]
            highs = [max(0.0, _pct(r.get(f"{c}:high", v / 100)) - v) for v, c in zip(vals, cols)]
            ax.bar([j + i * width for j in range(len(cols))], vals, width=width, label=str(methods[i]),
                   yerr=[lows, highs], capsize=2, error_kw={"elinewidth": 0.8})
        ax.set_xticks([j + width * (len(methods) - 1) / 2 for j in range(len(cols))])
        ax.set_xticklabels(cols, rotation=30, ha="right", fontsize=8)
        ax.set_ylabel("avg@k (%), 95% CI")
        ax.set_ylim(0, 100)
        ax.set_title(f"{model}: per benchmark{_sim_note(bool(g['simulated'].any()))}")
        ax.legend(fontsize=8)
        paths.append(_save(fig, out_dir / f"benchmarks_{safe_name(model)}.png"))
    return paths


def fig2_left(paired: pd.DataFrame, out_dir: Path, confidence: float = 0.95) -> list[Path]:
    """The paper's Figure 2 (left), one PNG per backbone: OptiState - OptiCycle accuracy
    (points) per benchmark and Macro, paired by problem (``difficulty.paired_table``), with
    the paired interval as error bars. The pooled ``all`` row is left out (not in the figure)."""
    paths: list[Path] = []
    if not len(paired):
        return paths
    for model, g in paired[paired["benchmark"] != "all"].groupby("model", sort=True):
        rows = g.to_dict("records")
        vals = [_pct(r["net_gain"]) for r in rows]
        lows = [max(0.0, v - _pct(r["low"])) for v, r in zip(vals, rows)]
        highs = [max(0.0, _pct(r["high"]) - v) for v, r in zip(vals, rows)]
        fig = Figure(figsize=(max(5, 0.7 * len(rows)), 4))
        ax = fig.add_subplot(1, 1, 1)
        ax.bar(range(len(rows)), vals, yerr=[lows, highs], capsize=3,
               color=["tab:green" if v >= 0 else "tab:red" for v in vals])
        ax.axhline(0, color="black", linewidth=0.8)
        ax.set_xticks(range(len(rows)))
        ax.set_xticklabels([str(r["benchmark"]) for r in rows], rotation=30, ha="right", fontsize=8)
        ax.set_ylabel(f"OptiState - OptiCycle (points), {round(100 * confidence)}% paired CI")
        ax.set_title(f"{model}: OptiState vs OptiCycle, paired by problem")
        ax.grid(axis="y", alpha=0.3)
        paths.append(_save(fig, out_dir / f"fig2_left_{safe_name(model)}.png"))
    return paths
