"""Ledger: atomic commits, resume, duplicates, changed configs, s3 via moto."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from opteval.evalcore.ledger_detail import calls_of, error_message
from opteval.evalcore.records import LEDGER_SCHEMA, CallRecord, ExecRecord, Submission, Trajectory
from opteval.sweepcore.config import load_config, resolved, sweep_fingerprint
from opteval.sweepcore.ledger import (
    LEDGER_FORMAT,
    ConfigChangedError,
    DamagedFileError,
    DuplicateKeyError,
    Ledger,
    LedgerError,
    error_row,
    trajectory_row,
)
from opteval.sweepcore.plan import expand_plan, remaining
from tests.sweepcore.ledger_reads import manifest_of, plan_of

REPO = Path(__file__).resolve().parents[2]
IDS = {"sample": [f"p{i}" for i in range(5)]}


def _setup(out, *extra):
    cfg = load_config([f"sweep.output_dir={out}", "methods=[direct,opticycle]", "samples.default=2", *extra])
    res = resolved(cfg)
    return cfg, res, sweep_fingerprint(res), expand_plan(cfg, IDS)


def _row(item, correct=True, tokens=(10, 5)):
    t = Trajectory(model=item.model, method=item.method, benchmark=item.benchmark, problem_id=item.problem_id,
                   sample=item.sample, seed=42 + item.sample, status="submitted", submission=Submission(raw=7.0),
                   calls=[CallRecord(0, "generate", tokens[0], tokens[1], None, 0.1, "stop")],
                   execs=[ExecRecord(0, "ok", 0.1, 0.1, 0, submission=7.0)], simulated=True)
    return trajectory_row(t, key=item.key, correct=correct, profile="optagentbench", fingerprint=item.fingerprint,
                          sweep="demo", parsed=7.0)


def test_rows_match_schema_and_tokens_none_stay_null(tmp_path):
    cfg, res, fp, plan = _setup(tmp_path)
    led = Ledger.open(str(tmp_path), "demo", res, fp)
    r = _row(plan[0], tokens=(None, 5))
    assert set(r) == set(LEDGER_SCHEMA.names)
    led.commit([r, error_row(plan[1], "worker died", 3, sweep="demo")])
    t = led.read_table().to_pylist()
    by = {x["key"]: x for x in t}
    assert by[plan[0].key]["prompt_tokens"] is None and by[plan[0].key]["completion_tokens"] == 5
    assert by[plan[0].key]["submission"] == "7.0" and by[plan[0].key]["exec_ok"] == 1
    assert calls_of(by[plan[0].key]["calls"])[0]["completion_tokens"] == 5
    assert by[plan[1].key]["status"] == "error" and by[plan[1].key]["correct"] is False
    assert error_message(by[plan[1].key]["error"]) == "worker died" and by[plan[1].key]["attempts"] == 3
    assert by[plan[1].key]["error"] == {"kind": "infrastructure", "where": "worker", "message": "worker died"}


def test_resume_skips_committed_and_duplicates_refused(tmp_path):
    cfg, res, fp, plan = _setup(tmp_path)
    led = Ledger.open(str(tmp_path), "demo", res, fp)
    led.record_plan(plan)
    led.commit([_row(p) for p in plan[:7]])
    with pytest.raises(DuplicateKeyError):
        led.commit([_row(plan[3])])  # committed in this process
    led2 = Ledger.open(str(tmp_path), "demo", res, fp)
    assert led2.committed_keys() == {p.key for p in plan[:7]}
    assert remaining(plan, led2.committed_keys()) == plan[7:]
    with pytest.raises(DuplicateKeyError):
        led2.commit([_row(plan[0])])  # committed on disk
    with pytest.raises(DuplicateKeyError):
        led2.commit([_row(plan[8]), _row(plan[8])])
    assert plan_of(led2).num_rows == len(plan)
    assert manifest_of(led2)["plan"]["total"] == len(plan)


def test_crash_between_write_and_rename_leaves_nothing_visible(tmp_path, monkeypatch):
    cfg, res, fp, plan = _setup(tmp_path)
    led = Ledger.open(str(tmp_path), "demo", res, fp)
    led.commit([_row(plan[0])])

    def crash(tmp, final):
        raise KeyboardInterrupt("killed between write and rename")

    monkeypatch.setattr(led, "_publish", crash)
    with pytest.raises(KeyboardInterrupt):
        led.commit([_row(p) for p in plan[1:5]])
    leftovers = [f for _, _, fs in os.walk(tmp_path / "demo") for f in fs if f.endswith(".tmp")]
    assert leftovers  # the whole temporary was written ...
    again = Ledger.open(str(tmp_path), "demo", res, fp, read_only=True)
    assert again.committed_keys() == {plan[0].key}  # ... but never became visible
    assert again.read_table().num_rows == 1
    Ledger.open(str(tmp_path), "demo", res, fp)  # a writable open removes the stray temporary
    assert not [f for _, _, fs in os.walk(tmp_path / "demo") for f in fs if f.endswith(".tmp")]


def test_duplicate_on_disk_names_both_files(tmp_path):
    cfg, res, fp, plan = _setup(tmp_path)
    led = Ledger.open(str(tmp_path), "demo", res, fp)
    [a] = led.commit([_row(plan[0])])
    copy = os.path.join(os.path.dirname(a), "part-99999999-abcdef.parquet")
    pq.write_table(pq.read_table(a), copy)
    with pytest.raises(DuplicateKeyError) as err:
        Ledger.open(str(tmp_path), "demo", res, fp)
    assert os.path.basename(a) in str(err.value) and "part-99999999-abcdef.parquet" in str(err.value)


def test_changed_config_refused_with_diff_unless_allowed(tmp_path):
    cfg, res, fp, plan = _setup(tmp_path)
    Ledger.open(str(tmp_path), "demo", res, fp).commit([_row(plan[0])])
    cfg2, res2, fp2, _ = _setup(tmp_path, "sampling.temperature=0.7", "cluster.workers=7")
    with pytest.raises(ConfigChangedError) as err:
        Ledger.open(str(tmp_path), "demo", res2, fp2)
    msg = str(err.value)
    assert "sampling.temperature: 0.6 -> 0.7" in msg and "cluster" not in msg
    led = Ledger.open(str(tmp_path), "demo", res2, fp2, allow_config_change=True)
    assert led.committed_keys() == {plan[0].key}
    assert manifest_of(led)["fingerprint"] == fp2 and manifest_of(led)["history"][-1]["changes"]
    # operational changes only: same fingerprint, no refusal
    _, res3, fp3, _ = _setup(tmp_path, "sampling.temperature=0.7", "cluster.workers=1", "progress.interval_s=3")
    assert fp3 == fp2
    Ledger.open(str(tmp_path), "demo", res3, fp3)


def test_compaction_merges_parts_and_survives_a_crash(tmp_path, monkeypatch):
    cfg, res, fp, plan = _setup(tmp_path)
    led = Ledger.open(str(tmp_path), "demo", res, fp, compact_every=4)
    direct = [p for p in plan if p.method == "direct"]
    for p in direct[:6]:
        led.commit([_row(p)])
    names = [os.path.basename(f) for f in led.files()]
    assert sum(n.startswith("compact-") for n in names) == 1 and sum(n.startswith("part-") for n in names) == 2
    assert led.committed_keys() == {p.key for p in direct[:6]}
    # crash after writing a compacted file, before deleting its inputs
    def crash(path):
        raise OSError("crash before deleting the compacted inputs")

    monkeypatch.setattr(led, "_delete", crash)
    with pytest.raises(OSError):
        led.compact()
    assert sum(os.path.basename(f).startswith("compact-") for f in led._list()) == 2
    again = Ledger.open(str(tmp_path), "demo", res, fp, read_only=True)  # no duplicate error
    assert again.committed_keys() == {p.key for p in direct[:6]}
    assert again.read_table().num_rows == 6


def test_read_only_open_writes_nothing(tmp_path):
    cfg, res, fp, plan = _setup(tmp_path)
    led = Ledger.open(str(tmp_path), "fresh", res, fp, read_only=True)
    assert led.committed_keys() == set() and not (tmp_path / "fresh").exists()
    with pytest.raises(LedgerError):
        led.commit([_row(plan[0])])


def test_readme_snippets_read_the_ledger_with_pandas_and_duckdb(tmp_path):
    """docs/results.md's ways to read results work on a real ledger (several partitions, a compacted file)."""
    import duckdb
    import pandas as pd

    cfg, res, fp, plan = _setup(tmp_path)
    led = Ledger.open(str(tmp_path), "demo", res, fp, compact_every=2)
    for i in range(0, len(plan), 3):
        led.commit([_row(p, correct=(j % 2 == 0)) for j, p in enumerate(plan[i:i + 3])])
    traj = tmp_path / "demo" / "trajectories"
    df = pd.read_parquet(traj, partitioning=None)  # the files carry model and method themselves
    assert sorted(df["key"]) == sorted(p.key for p in plan)
    assert set(df["method"]) == {"direct", "opticycle"} and df["model"].dtype != "category"
    rel = duckdb.sql(f"""SELECT model, method, avg(correct::INT) AS acc, count(*) AS n
                         FROM read_parquet('{traj}/**/*.parquet', hive_partitioning=true)
                         GROUP BY ALL ORDER BY ALL""")
    assert rel is not None
    acc = rel.fetchall()
    expect = df.groupby(["model", "method"]).correct.agg(["mean", "size"]).reset_index().values.tolist()
    assert [[m, x, pytest.approx(a), n] for m, x, a, n in acc] == expect


# -- the format version in the manifest -----------------------------------------------------------


def _set_format(root, value):
    path = root / "demo" / "manifest.json"
    man = json.loads(path.read_text())
    if value is None:
        man.pop("format")
    else:
        man["format"] = value
    path.write_text(json.dumps(man))
    return path


def test_a_new_manifest_states_the_current_format(tmp_path):
    cfg, res, fp, plan = _setup(tmp_path)
    led = Ledger.open(str(tmp_path), "demo", res, fp)
    led.close()
    assert manifest_of(led)["format"] == LEDGER_FORMAT == 2


def test_a_newer_format_is_refused_in_one_line_naming_the_file(tmp_path):
    cfg, res, fp, plan = _setup(tmp_path)
    led = Ledger.open(str(tmp_path), "demo", res, fp)
    led.commit([_row(plan[0])])
    led.close()
    path = _set_format(tmp_path, LEDGER_FORMAT + 1)
    for opener in (lambda: Ledger.open(str(tmp_path), "demo", res, fp),
                   lambda: Ledger.open(str(tmp_path), "demo", res, fp, read_only=True),
                   lambda: Ledger.open_existing(str(tmp_path), "demo")):
        with pytest.raises(LedgerError) as err:
            opener()
        msg = str(err.value)
        assert "\n" not in msg and str(path) in msg and f"format {LEDGER_FORMAT + 1}" in msg, msg
        assert not isinstance(err.value, DamagedFileError)  # sweep.repair must never quarantine it
    assert json.loads(path.read_text())["format"] == LEDGER_FORMAT + 1  # refused, not rewritten
    with pytest.raises(LedgerError, match="newer"):
        Ledger.open(str(tmp_path), "demo", res, fp, repair=True)


def test_a_manifest_without_format_reads_as_format_1(tmp_path):
    cfg, res, fp, plan = _setup(tmp_path)
    led = Ledger.open(str(tmp_path), "demo", res, fp, new_format=1)
    led.commit([_row(p) for p in plan[:3]])
    led.close()
    _set_format(tmp_path, None)
    again = Ledger.open(str(tmp_path), "demo", res, fp)
    assert again.committed_keys() == {p.key for p in plan[:3]} and again.format == 1
    again.commit([_row(plan[3])])
    again.close()
    old = Ledger.open_existing(str(tmp_path), "demo")
    assert old.committed_keys() == {p.key for p in plan[:4]} and old.format == 1
    assert old.read_table().schema.field("calls").type == "string"


def test_a_malformed_format_is_damage(tmp_path):
    cfg, res, fp, plan = _setup(tmp_path)
    Ledger.open(str(tmp_path), "demo", res, fp).close()
    _set_format(tmp_path, "two")
    with pytest.raises(DamagedFileError, match="format must be a positive integer"):
        Ledger.open_existing(str(tmp_path), "demo")


def test_the_sweep_command_exits_2_on_a_newer_format(tmp_path):
    out = tmp_path / "out"
    args = [f"sweep.output_dir={out}", "sweep.name=demo", "limit_problems=2", "methods=[direct]"]
    cfg = load_config(args)
    res = resolved(cfg)
    Ledger.open(str(out), "demo", res, sweep_fingerprint(res)).close()
    path = _set_format(out, LEDGER_FORMAT + 1)
    proc = subprocess.run([sys.executable, str(REPO / "jobs" / "sweep.py"), "plan_only=true", *args], cwd=REPO,
                          env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and "newer" in lines[0], proc.stderr


def test_readers_read_only_the_columns_and_rows_they_ask_for(tmp_path):
    """Issue 44: a reader that scores never reads the transcripts; scan yields record batches."""
    import pyarrow.compute as pc

    from opteval.sweepcore.ledger import DETAIL_COLUMNS, columns_without

    cfg, res, fp, plan = _setup(tmp_path)
    led = Ledger.open(str(tmp_path), "demo", res, fp)
    led.commit([_row(p) for p in plan[:7]])
    slim = led.read_table(columns=columns_without(*DETAIL_COLUMNS))
    assert slim.num_rows == 7 and not set(DETAIL_COLUMNS) & set(slim.column_names)
    direct = led.read_table(columns=["key", "transcript"], filter=pc.field("method").isin(["direct"]))
    assert set(direct.column("key").to_pylist()) == {p.key for p in plan[:7] if p.method == "direct"}
    batches = list(led.scan(["key", "status"], batch_rows=3))
    assert all(b.schema.names == ["key", "status"] and b.num_rows <= 3 for b in batches)
    assert sum(b.num_rows for b in batches) == 7
    empty = Ledger.open(str(tmp_path), "other", res, fp)
    assert list(empty.scan(["key"])) == [] and empty.read_table(columns=["key"]).num_rows == 0
