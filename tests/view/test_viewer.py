"""The viewer and `opteval show` over a real sweep's ledger: what a reader needs to see why a
trajectory scored as it did (calls, programs, outputs, the grading rule), missing and error rows
listed with their reasons, and bad arguments as one line."""
from __future__ import annotations

import html
import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest

from opteval.evalcore.ledger_detail import execs_of, transcript_of
from opteval.evalcore.reporting.view import TableSource, page_name, write_site
from opteval.sweepcore.ledger import Ledger
from tests.view.conftest import SWEEP, args, opteval
from tests.view.sites import facets, shard, site_rows, synthetic

_rows = site_rows


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
    transcript = transcript_of(row["calls"], row["transcript"])
    execs = execs_of(row["execs"])
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
    assert _rows(site.index)[0]["error"] == evil  # the shard's JSON still round-trips the exact text


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
    code = execs_of(row["execs"])[0]["code"]
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
    assert "index.html" in names and names == {p.name for p in (tmp_path / "v").glob("*.html")} | {"shards"}
    shards = {Path(a.path).name for a in client.list_artifacts(parent.info.run_id, "view/shards")}
    assert shards and shards == {p.name for p in (tmp_path / "v" / "shards").glob("*.js")}


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


def test_rows_are_sharded_under_the_byte_limit_and_every_row_is_in_one(tmp_path):
    """Issue 44: one inlined JSON blob made a 212 MB index at the paper's size. Rows go to shards of one
    (model, method, benchmark) cell each, split to stay under the limit; the index inlines only each
    shard's cell and counts, which agree with the rows."""
    table, plan = synthetic(problems=60)
    limit = 3_000
    site = write_site(table, plan, tmp_path / "v", max_pages=10, shard_bytes=limit)
    out = tmp_path / "v"
    files = sorted((out / "shards").glob("*.js"))
    f = facets(site.index)
    assert len(files) == len(f["shards"]) > len(f["cells"]) == 8  # 2 models x 2 methods x 2 benchmarks, split
    assert max(p.stat().st_size for p in files) <= limit
    assert site.index.stat().st_size < 100_000  # the facets, not the rows
    rows = site_rows(site.index)
    assert len(rows) == site.trajectories == plan.num_rows and len({r["key"] for r in rows}) == len(rows)
    assert [r["key"] for r in rows] == sorted(plan.column("key").to_pylist())  # model, method, benchmark, problem
    for n, (cell, count, counts) in enumerate(f["shards"]):
        _, shard_rows = shard(out / "shards" / f"s{n}.js")
        model, method, benchmark = f["cells"][cell]
        assert all(r[0].startswith(f"{model}/{method}/{benchmark}/") for r in shard_rows)
        got: dict[str, list[int]] = {}
        for r in shard_rows:
            got.setdefault(r[3], [0, 0])[int(r[4])] += 1
        assert got == counts and sum(map(sum, counts.values())) == count
    assert site.missing == sum(r["status"] == "missing" for r in rows) == plan.num_rows - table.num_rows
    assert sum(r["page"] is not None for r in rows) == site.pages == 10
    # a smaller site written over it leaves no stale shard behind
    small = write_site(table.slice(0, 3), None, out, shard_bytes=limit)
    assert len(list((out / "shards").glob("*.js"))) == len(facets(small.index)["shards"]) == 1


def test_a_row_larger_than_the_shard_limit_is_refused(tmp_path):
    table, plan = synthetic(problems=2)
    with pytest.raises(ValueError, match="smaller than one index row"):
        write_site(table, plan, tmp_path / "v", shard_bytes=50)


class Spy(TableSource):
    """A row source that records what each read asked for, and whose transcripts must never be read
    unless a row gets a page."""

    def __init__(self, table: pa.Table) -> None:
        super().__init__(table)
        self.reads: list[tuple[list[str], object]] = []

    def scan(self, columns, batch_rows=8192, filter=None):
        self.reads.append((list(columns), filter))
        return super().scan(columns, batch_rows, filter)


def test_the_writer_reads_transcripts_only_for_the_paged_rows(tmp_path):
    table, plan = synthetic(problems=30)
    spy = Spy(table)
    site = write_site(spy, plan, tmp_path / "none", max_pages=0)
    assert site.pages == 0 and site.trajectories == plan.num_rows
    assert len(spy.reads) == 1 and not {"transcript", "calls", "execs"} & set(spy.reads[0][0])
    assert spy.reads[0][1] is None
    # pages for the 5 first by priority (errors): one filtered read of their detail columns
    spy = Spy(table)
    site = write_site(spy, plan, tmp_path / "five", max_pages=5, page_batch=2)
    assert site.pages == 5 and len(spy.reads) == 2
    columns, keys = spy.reads[1]
    assert "transcript" in columns and keys is not None
    paged = [r for r in site_rows(site.index) if r["page"]]
    assert len(paged) == 5 and {r["status"] for r in paged} == {"error"}
    assert all(r["key"] in str(keys) for r in paged)
    assert len(list((tmp_path / "five").glob("traj-*.html"))) == 5


def test_the_writer_streams_a_ledger(tmp_path):
    """A real ledger as the source: its rows read in record batches, never its whole table."""
    from opteval.sweepcore.ledger import Ledger

    table, plan = synthetic(models=1, methods=("direct",), benchmarks=1, problems=10)
    led = Ledger.open(str(tmp_path), "s", {"x": 1}, "fp")
    rows = table.to_pylist()
    led.commit(rows[:4])
    led.commit(rows[4:])
    calls: list[list[str]] = []
    real_scan = led.scan

    def scan(columns, batch_rows=8192, filter=None):
        calls.append(list(columns))
        return real_scan(columns, batch_rows, filter)

    led.scan = scan  # type: ignore[method-assign]
    led.read_table = None  # type: ignore[assignment]  # never the whole table
    site = write_site(led, plan, tmp_path / "v", max_pages=3, batch_rows=3)
    assert site.trajectories == plan.num_rows and site.pages == 3 and len(calls) == 2
    assert [r["key"] for r in site_rows(site.index)] == sorted(plan.column("key").to_pylist())
    led.close()


def test_a_key_committed_twice_shows_its_last_attempt(tmp_path):
    table, plan = synthetic(models=1, methods=("direct",), benchmarks=1, problems=3, skip_every=99)
    df = table.to_pandas()
    df["committed_at"] = pd.Timestamp("2025-01-01", tz="UTC")
    retry = df.iloc[[0]].copy()
    retry[["status", "correct", "error", "committed_at"]] = ["submitted", True, None, pd.Timestamp("2025-01-02", tz="UTC")]
    df.loc[0, ["status", "error"]] = ["error", "first attempt lost"]
    site = write_site(pd.concat([retry, df], ignore_index=True), plan, tmp_path / "v")
    rows = {r["key"]: r for r in site_rows(site.index)}
    assert len(rows) == site.trajectories == 3 and site.errors == 1  # p002's, not the retried p000's
    first = str(df.loc[0, "key"])
    assert rows[first]["status"] == "submitted" and rows[first]["correct"] is True
    assert "first attempt lost" not in (tmp_path / "v" / page_name(first)).read_text()
