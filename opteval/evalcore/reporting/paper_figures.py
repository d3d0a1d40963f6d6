"""The paper's Figures 2-5 (and the budget curve) as PNGs, from ``paper.py``'s frames.

Why apart from ``plots.py``: those are the single-sweep report's per-backbone plots; these are
the paper's cross-sweep figures, one file each, every one printing the sweeps and trajectory
counts it rests on at its foot (and the StepORLM caveat on Figure 4). matplotlib's object API
with the Agg canvas, as ``plots.py``: no pyplot global state.
"""
from __future__ import annotations

import textwrap
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from opteval.evalcore.reporting.plots import _save

COLORS = {"direct": "tab:gray", "opticycle": "tab:blue", "optistate": "tab:orange"}


def _foot(fig: Figure, rests_on: str, extra: list[str] | None = None, simulated: bool = False) -> None:
    lines = list(extra or [])
    if simulated:
        lines.append("SIMULATED policy: not a model's accuracy.")
    lines.append(rests_on)
    text = "\n".join(textwrap.fill(line, 110) for line in lines)
    fig.text(0.01, -0.2, text, fontsize=7, va="top", ha="left")  # below the rotated tick labels


def _grouped(ax: object, frame: pd.DataFrame, value: str) -> None:
    """Grouped bars: backbones on x, one bar per method; † / ‡ over the bars they concern."""
    models = list(dict.fromkeys(frame["model"]))
    methods = list(dict.fromkeys(frame["method"]))
    width = 0.8 / max(1, len(methods))
    for i, method in enumerate(methods):
        g = frame[frame["method"] == method].set_index("model")
        xs = [j + i * width for j, mm in enumerate(models) if mm in g.index]
        ys = [float(g.at[mm, value]) if pd.notna(g.at[mm, value]) else 0.0 for mm in models if mm in g.index]
        label = str(g["label"].iloc[0]) if "label" in g.columns else method
        ax.bar(xs, ys, width=width, label=label, color=COLORS.get(method))  # type: ignore[attr-defined]
        for x, y, mm in zip(xs, ys, [mm for mm in models if mm in g.index]):
            mark = ("†" if bool(g.at[mm, "dagger"]) else "") + ("‡" if g.at[mm, "budget"] is not None
                                                                 and pd.notna(g.at[mm, "budget"]) else "")
            if mark:
                ax.annotate(mark, (x, y), ha="center", va="bottom", fontsize=8)  # type: ignore[attr-defined]
    ax.set_xticks([j + width * (len(methods) - 1) / 2 for j in range(len(models))])  # type: ignore[attr-defined]
    ax.set_xticklabels(models, rotation=30, ha="right", fontsize=8)  # type: ignore[attr-defined]
    ax.legend(fontsize=8)  # type: ignore[attr-defined]


def figure2_left(frame: pd.DataFrame, path: Path, rests_on: str) -> Path:
    """OptiState - OptiCycle Macro (points) per backbone, across backbones."""
    fig = Figure(figsize=(max(5.0, 0.7 * len(frame)), 4))
    ax = fig.add_subplot(1, 1, 1)
    vals = [float(v) for v in frame["delta_points"]]
    ax.bar(range(len(vals)), vals, color=["tab:green" if v >= 0 else "tab:red" for v in vals])
    for i, r in enumerate(frame.to_dict("records")):
        mark = ("†" if r["dagger"] else "") + ("‡" if r["matched"] else "")
        if mark:
            ax.annotate(mark, (i, vals[i]), ha="center", va="bottom", fontsize=8)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(vals)))
    ax.set_xticklabels(list(frame["model"]), rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("OptiState - OptiCycle, Macro avg@k (points)")
    ax.set_title("Figure 2 (left): OptiState over OptiCycle per backbone")
    ax.grid(axis="y", alpha=0.3)
    _foot(fig, rests_on, simulated=bool(frame["simulated"].any()))
    return _save(fig, path)


def figure2_right(frame: pd.DataFrame, path: Path, rests_on: str) -> Path:
    """Thousand input + output tokens per trajectory per method, grouped by backbone."""
    fig = Figure(figsize=(max(6.0, 1.2 * frame["model"].nunique() * max(1, frame["method"].nunique()) / 3), 4))
    ax = fig.add_subplot(1, 1, 1)
    _grouped(ax, frame, "tokens_k")
    ax.set_ylabel("thousand tokens per trajectory (input + output)")
    ax.set_title("Figure 2 (right): tokens per trajectory")
    ax.grid(axis="y", alpha=0.3)
    _foot(fig, rests_on, simulated=bool(frame["simulated"].any()))
    return _save(fig, path)


def figure3(frame: pd.DataFrame, path: Path, rests_on: str) -> Path:
    """Macro against model size (log x), one panel per family, one line per method."""
    fams = list(dict.fromkeys(frame["family"]))
    fig = Figure(figsize=(4.5 * len(fams), 4))
    for i, fam in enumerate(fams):
        ax = fig.add_subplot(1, len(fams), i + 1)
        g = frame[frame["family"] == fam]
        for method, gm in g.groupby("method", sort=False):
            gm = gm.sort_values("size_b")
            ax.plot(gm["size_b"], gm["macro_pct"], marker="o", label=str(gm["label"].iloc[0]),
                    color=COLORS.get(str(method)))
        ax.set_xscale("log")
        ax.set_xlabel("model size (B parameters)")
        ax.set_ylabel("Macro avg@k (%)")
        ax.set_title(f"Figure 3: {fam}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    _foot(fig, rests_on, simulated=bool(frame["simulated"].any()))
    return _save(fig, path)


def figure4(frame: pd.DataFrame, path: Path, rests_on: str) -> Path:
    """Frozen backbone with the harnesses against post-trained models under their protocols;
    every protocol caveat (StepORLM under Direct) printed on the figure."""
    fig = Figure(figsize=(max(5.0, 0.9 * len(frame)), 4))
    ax = fig.add_subplot(1, 1, 1)
    labels = [f"{m}\n{lab}" for m, lab in zip(frame["model"], frame["label"])]
    vals = [0.0 if v is None or pd.isna(v) else float(v) for v in frame["macro_pct"]]
    ax.bar(range(len(vals)), vals, color=[COLORS.get(x, "tab:purple") for x in frame["method"]])
    for i, r in enumerate(frame.to_dict("records")):
        mark = ("†" if r["dagger"] else "") + ("‡" if r["budget"] is not None and pd.notna(r["budget"]) else "") + \
            ("*" if isinstance(r["note"], str) else "")
        if mark:
            ax.annotate(mark, (i, vals[i]), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(vals)))
    ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("Macro avg@k (%)")
    ax.set_title("Figure 4: harnesses vs post-trained models")
    ax.grid(axis="y", alpha=0.3)
    notes = [f"* {n}" for n in dict.fromkeys(n for n in frame["note"] if isinstance(n, str))]
    _foot(fig, rests_on, notes, simulated=bool(frame["simulated"].any()))
    return _save(fig, path)


def figure5(frame: pd.DataFrame, path: Path, rests_on: str) -> Path:
    """Macro per method on the non-Qwen backbones."""
    fig = Figure(figsize=(max(5.0, 1.5 * frame["model"].nunique()), 4))
    ax = fig.add_subplot(1, 1, 1)
    _grouped(ax, frame, "macro_pct")
    ax.set_ylabel("Macro avg@k (%)")
    ax.set_ylim(0, 100)
    ax.set_title("Figure 5: non-Qwen backbones")
    ax.grid(axis="y", alpha=0.3)
    _foot(fig, rests_on, simulated=bool(frame["simulated"].any()))
    return _save(fig, path)


def budget_curve(frame: pd.DataFrame, path: Path, rests_on: str) -> Path:
    """Macro against the matched budget, one line per (model, method)."""
    fig = Figure(figsize=(5.5, 4))
    ax = fig.add_subplot(1, 1, 1)
    for (model, method), g in frame.groupby(["model", "method"], sort=False):
        g = g.sort_values("budget")
        ax.plot(g["budget"], g["macro_pct"], marker="o", label=f"{model} {g['label'].iloc[0]}",
                color=COLORS.get(str(method)))
    kinds = sorted(set(frame["match"]))
    ax.set_xlabel(f"matched budget per trajectory ({', '.join(kinds)})")
    ax.set_ylabel("Macro avg@k (%)")
    ax.set_title("Accuracy against a matched budget")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    _foot(fig, rests_on, simulated=bool(frame["simulated"].any()))
    return _save(fig, path)
