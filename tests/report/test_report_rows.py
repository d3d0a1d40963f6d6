"""Issue 44: ``opteval report`` reads transcripts only for the methods whose tables use them (SemOPT),
and holds what it derives from the JSON columns, not the columns."""
from __future__ import annotations

from opteval.evalcore.records import CallRecord, Submission, Trajectory
from opteval.jobs.report import report_rows, semopt_methods
from opteval.sweepcore.config import load_config, resolved, sweep_fingerprint
from opteval.sweepcore.ledger import Ledger, trajectory_row
from opteval.sweepcore.plan import expand_plan


def test_transcripts_read_for_semopt_rows_only(tmp_path):
    cfg = load_config([f"sweep.output_dir={tmp_path}", "sweep.name=rr", "methods=[direct,semopt]", "samples.default=1"])
    res = resolved(cfg)
    plan = expand_plan(cfg, {"sample": ["p0", "p1"]})
    led = Ledger.open(str(tmp_path), "rr", res, sweep_fingerprint(res))
    rows = []
    for p in plan:
        t = Trajectory(model=p.model, method=p.method, benchmark=p.benchmark, problem_id=p.problem_id,
                       sample=p.sample, seed=0, status="submitted", submission=Submission(raw=1.0),
                       calls=[CallRecord(0, "generate", 3, 2, None, 0.1, "stop")],
                       transcript=[{"call": 0, "semopt": {"candidate": 0}} if p.method == "semopt" else {"call": 0}])
        rows.append(trajectory_row(t, key=p.key, correct=True, profile="optagentbench", fingerprint=p.fingerprint,
                                   sweep="rr", parsed=1.0))
    led.commit(rows)
    assert semopt_methods(["direct", "semopt"]) == ["semopt"]
    df = report_rows(Ledger.open_existing(str(tmp_path), "rr"), ["direct", "semopt"])
    assert len(df) == len(plan)
    assert not {"calls", "execs", "transcript"} & set(df.columns)  # reduced as read: no JSON detail held
    by_method = {m: list(g["semopt_ann"]) for m, g in df.groupby("method")}
    assert all(x == [] for x in by_method["direct"])
    assert all(x == [{"candidate": 0}] for x in by_method["semopt"])
    assert (df["call_latencies"].map(len) == 1).all()  # what the other tables read is derived
