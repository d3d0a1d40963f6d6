"""Issue 39: a matched-budget sweep of two methods at one token budget runs on the sample (real
Serve, workers, sandbox and ledger; simulated policy), every trajectory records the matched budget
and stops at it as at its own, and the merged report marks the matched cells."""
from __future__ import annotations

import json

import pytest

from opteval.cluster.driver import run_sweep
from opteval.sweepcore.config import load_config

pytestmark = pytest.mark.ray

LIMIT = 4


def _tokens(calls_json: str) -> list[int]:
    return [(c.get("prompt_tokens") or 0) + (c.get("completion_tokens") or 0) for c in json.loads(calls_json)]


def test_a_matched_budget_sweep_stops_at_the_budget_and_is_marked(ray_cluster, h, tmp_path, capsys):
    _, port = ray_cluster
    common = ("tracking.enabled=false",)
    own = h.sweep_args(tmp_path, "own", port, *common, methods="[direct,opticycle]", limit=LIMIT)
    assert run_sweep(load_config(own)) == 0
    base = h.ledger_frame(tmp_path, "own")
    cyc = base[base["method"] == "opticycle"]
    per_traj = cyc["calls"].map(lambda s: sum(_tokens(s)))
    # a budget that binds: below what the longest OptiCycle trajectory spent under its own budget
    budget = int(per_traj.max() * 0.6)
    assert budget > 0 and (cyc["n_calls"] > 1).any(), cyc[["key", "n_calls"]].to_string()

    matched = h.sweep_args(tmp_path, "matched", port, *common, "budgets.match=tokens",
                           f"budgets.match_to={budget}", methods="[direct,opticycle]", limit=LIMIT)
    assert run_sweep(load_config(matched)) == 0
    df = h.ledger_frame(tmp_path, "matched")
    assert len(df) == len(base) == 2 * LIMIT and (df["status"] != "error").all()
    for b in df["budgets"].map(json.loads):
        assert b["max_total_tokens"] == budget and b["match"] == "tokens", b
    for key, calls in zip(df["key"], df["calls"]):
        spent = _tokens(calls)
        assert sum(spent[:-1]) < budget, (key, spent, budget)  # no call made once the budget was spent
    stopped = df[(df["method"] == "opticycle") & (df["calls"].map(lambda s: sum(_tokens(s))) >= budget)]
    assert len(stopped) >= 1, "the budget never bound"
    assert df.loc[df["method"] == "opticycle", "n_calls"].sum() < cyc["n_calls"].sum()

    capsys.readouterr()
    from opteval.jobs.report import main as report

    out = tmp_path / "merged"
    assert report(["sweep.name=matched,own", f"sweep.output_dir={tmp_path}", "--out", str(out)]) == 0
    md = (out / "table2.md").read_text()
    assert f"‡: run under a matched budget (tokens={budget} per trajectory, every method)." in md, md
    row = next(line for line in md.splitlines() if line.startswith("| sim-fast"))
    assert row.count("‡") == 2, row  # Direct and OptiCycle, both from the matched sweep (named first)
