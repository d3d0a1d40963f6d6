"""The viewer and `opteval show` over a real sweep's ledger: what a reader needs to see why a
trajectory scored as it did (calls, programs, outputs, the grading rule), missing and error rows
listed with their reasons, and bad arguments as one line."""
from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pandas as pd
import pyarrow as pa

from opteval.evalcore.reporting.view import page_name, write_site
from opteval.sweepcore.ledger import Ledger
from tests.view.conftest import SWEEP, args, opteval


def _rows(index: Path) -> list[dict]:
    text = index.read_text()
    blob = re.search(r'<script id="data" type="application/json">(.*?)</script>', text, re.S)
    assert blob, "index.html carries its rows"
    return json.loads(blob.group(1))


def test_view_writes_every_trajectory_and_a_page_each(demo):
    done = opteval("view", *args(demo))
    assert done.returncode == 0, done.stderr
    index = demo / SWEEP / "view" / "index.html"
    assert f"view written to {index}" in done.stdout
    rows = _rows(index)
    ledger = Ledger.open_existing(str(demo), SWEEP).read_table().to_pandas()
    assert sorted(r["key"] for r in rows) == sorted(ledger["key"])
    assert {r["method"] for r in rows} == {"direct", "opticycle"}
    for r in rows:
        assert r["page"] == page_name(r["key"]) and (index.parent / r["page"]).is_file()
        assert r["answer"] is not None  # the sample benchmark's answer key is present
    # one page: its calls' messages and replies, its programs with their output, the grade and why
    direct = next(r for r in rows if r["method"] == "direct" and r["status"] == "submitted")
    row = ledger[ledger["key"] == direct["key"]].iloc[0]
    page = (index.parent / direct["page"]).read_text()
    transcript = json.loads(row["transcript"])
    execs = json.loads(row["execs"])
    assert execs and execs[0]["code"], "the program that ran is kept in the ledger"
    assert html.escape(execs[0]["code"].splitlines()[0]) in page
    assert html.escape(transcript[0]["messages"][-1]["content"][:60]) in page
    assert "grading profile optagentbench" in page and f"answer {direct['answer']}" in page
    assert ("correct under" if row["correct"] else "wrong under") in page
    assert (index.parent / "compare.html").is_file()
    # the same problem under the other method is linked, with a side-by-side link
    other = next(r for r in rows if r["problem"] == direct["problem"] and r["method"] == "opticycle")
    assert other["page"] in page and f"compare.html?a={direct['page']}&amp;b={other['page']}" in page


def test_missing_and_error_rows_are_listed_with_their_reasons(demo, tmp_path):
    ledger = Ledger.open_existing(str(demo), SWEEP)
    table = ledger.read_table().to_pandas()
    plan_table = ledger.read_plan()
    assert plan_table is not None
    plan = plan_table.to_pandas()
    gone = table.iloc[0]["key"]
    broken = table.iloc[1].copy()
    broken["status"], broken["correct"], broken["error"] = "error", False, "executor lost after 3 attempts"
    table = pd.concat([table.iloc[2:], broken.to_frame().T], ignore_index=True)
    site = write_site(table, pa.Table.from_pandas(plan), tmp_path / "v", title="t")
    assert (site.trajectories, site.missing, site.errors) == (len(plan), 1, 1)
    rows = {r["key"]: r for r in _rows(site.index)}
    assert rows[gone]["status"] == "missing" and rows[gone]["error"] == "planned, not committed"
    assert "never committed" in (site.index.parent / page_name(gone)).read_text()
    assert "executor lost after 3 attempts" in (site.index.parent / page_name(str(broken["key"]))).read_text()


def test_max_pages_keeps_the_rows_a_reader_opens_first(demo, tmp_path):
    ledger = Ledger.open_existing(str(demo), SWEEP)
    table = ledger.read_table().to_pandas()
    worst = table.iloc[0]["key"]
    table.loc[0, ["status", "correct", "error"]] = ["error", False, "boom"]
    site = write_site(table, ledger.read_plan(), tmp_path / "v", max_pages=1)
    rows = _rows(site.index)
    assert site.pages == 1 and len(rows) == len(table)
    assert [r["key"] for r in rows if r["page"]] == [worst]
    assert len(list((tmp_path / "v").glob("traj-*.html"))) == 1


def test_text_is_escaped_not_rendered(tmp_path):
    """A model's reply is data: markup in it must not become the page's markup or script."""
    evil = "</script><script>alert(1)</script><b>x</b>"
    row = {"key": "m/direct/b/p1/0/abc", "model": "m", "method": "direct", "benchmark": "b", "problem_id": "p1",
           "sample": 0, "status": "no_submission", "correct": False, "error": evil, "submission": None,
           "transcript": json.dumps([{"call": 0, "turn": 0, "purpose": "generate", "messages":
                                      [{"role": "user", "content": evil}], "completion": evil}]),
           "calls": json.dumps([{"prompt_tokens": 1, "completion_tokens": 1}]), "execs": "[]"}
    site = write_site(pd.DataFrame([row]), None, tmp_path / "v")
    for path in (site.index, tmp_path / "v" / page_name(str(row["key"]))):
        text = path.read_text()
        assert "<script>alert(1)</script>" not in text and "<b>x</b>" not in text
    assert _rows(site.index)[0]["error"] == evil  # the JSON still round-trips the exact text


def test_site_files_are_readable_by_the_group(tmp_path):
    """Colleagues sharing a results folder open the viewer: files follow the umask (0644 under 022), not 0600."""
    import os
    import stat

    old = os.umask(0o022)
    try:
        row = {"key": "m/direct/b/p1/0/abc", "model": "m", "method": "direct", "benchmark": "b", "problem_id": "p1",
               "sample": 0, "status": "no_submission", "correct": False, "error": None, "submission": None,
               "transcript": "[]", "calls": "[]", "execs": "[]"}
        site = write_site(pd.DataFrame([row]), None, tmp_path / "v")
    finally:
        os.umask(old)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in site.index.parent.iterdir() if p.is_file()}
    assert modes and set(modes.values()) == {0o644}, modes


def test_show_prints_one_trajectory_by_key_prefix(demo):
    ledger = Ledger.open_existing(str(demo), SWEEP).read_table().to_pandas()
    row = ledger[ledger["method"] == "opticycle"].iloc[0]
    prefix = row["key"].rsplit("/", 1)[0]  # model/method/benchmark/problem/sample
    done = opteval("show", prefix, *args(demo))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert f"key {row['key']}" in out and "grade: " in out and "[reply]" in out
    code = json.loads(row["execs"])[0]["code"]
    assert "[program]" in out and code.splitlines()[0] in out
    assert out.count("call ") >= int(row["n_calls"])
    # issue 36: each verdict, and the captured model as an algebraic listing when one was stored
    assert f"answer_source: {row['answer_source']}" in out and "reference_match: " in out
    if row["model_fingerprint"]:
        assert "captured model" in out and "subject to" in out


def test_show_and_view_bad_arguments_are_one_line(demo, tmp_path):
    ambiguous = opteval("show", "sim-fast/direct", *args(demo))
    assert ambiguous.returncode == 2 and "trajectory keys start with 'sim-fast/direct'" in ambiguous.stderr
    absent = opteval("show", "nope/", *args(demo))
    assert absent.returncode == 2 and absent.stderr.startswith("error: no trajectory key starts with 'nope/'")
    assert "Traceback" not in absent.stderr + ambiguous.stderr
    bad_out = opteval("view", *args(demo), "--out", "/proc/nope/view")
    assert bad_out.returncode == 2 and "--out /proc/nope/view: cannot write there" in bad_out.stderr
    bad_n = opteval("view", *args(demo), "--max-pages", "many")
    assert bad_n.returncode == 2 and "--max-pages takes an integer, got 'many'" in bad_n.stderr
    unknown = opteval("view", "sweep.name=never-ran", f"sweep.output_dir={tmp_path}")
    assert unknown.returncode == 2 and unknown.stderr.count("\n") == 1


def test_view_attaches_to_the_sweeps_mlflow_run(demo, tmp_path):
    from mlflow.tracking import MlflowClient

    done = opteval("view", *args(demo), "--out", str(tmp_path / "v"), "--mlflow")
    assert done.returncode == 0, done.stderr
    client = MlflowClient(tracking_uri=f"sqlite:///{demo}/mlflow.db")
    exp = client.get_experiment_by_name("opteval")
    assert exp is not None
    parent = next(r for r in client.search_runs([exp.experiment_id]) if r.data.tags.get("opteval.role") == "parent")
    names = {Path(a.path).name for a in client.list_artifacts(parent.info.run_id, "view")}
    assert "index.html" in names and len(names) == len(list((tmp_path / "v").glob("*.html")))


def test_simulated_rows_say_so_on_every_page_and_files_are_world_readable(tmp_path):
    """Issue 41: the simulated policy's perturbed reference program read as a model's REPLY, and the
    viewer's files were 0600 beside a 0644 report and ledger."""
    import stat

    base = {"model": "sim-small", "method": "direct", "benchmark": "b", "sample": 0, "status": "submitted",
            "correct": False, "error": None, "submission": None, "calls": "[]", "execs": "[]",
            "transcript": json.dumps([{"call": 0, "turn": 0, "purpose": "generate",
                                       "messages": [{"role": "user", "content": "q"}], "completion": "x = 1"}])}
    sim = {**base, "key": "sim-small/direct/b/p1/0/a", "problem_id": "p1", "simulated": True}
    real = {**base, "key": "real/direct/b/p2/0/b", "model": "real", "problem_id": "p2", "simulated": False}
    site = write_site(pd.DataFrame([sim, real]), None, tmp_path / "v")
    out = tmp_path / "v"
    sim_page, real_page = out / page_name(str(sim["key"])), out / page_name(str(real["key"]))
    for path in (site.index, out / "compare.html", sim_page):
        assert "<strong>SIMULATED</strong>" in path.read_text(), path
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, path
    assert "SIMULATED reply" in sim_page.read_text()
    assert "SIMULATED" not in real_page.read_text()  # a real model's page is not labelled
