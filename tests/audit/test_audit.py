"""Issue 37: the answer-key audit's evidence, verdicts and files (fast tier: no Ray, no subprocess)."""
from __future__ import annotations

import random

import pandas as pd
import pytest

from opteval.evalcore import audit as A
from opteval.evalcore.problems import load_benchmark
from tests.audit.synth_audit import row, sim_rows, write_ledger

PINNED = ["benchmark", "problem_id", "key", "verdict", "alternative", "evidence", "support", "why"]


@pytest.fixture(scope="module")
def sample_keys() -> dict:
    return {pid: A.parse_key(v) for pid, v in load_benchmark("sample")[1].answers.items()}


def collect(rows) -> A.Collector:
    c = A.Collector()
    c.add_rows((r["model"], r["benchmark"], r["problem_id"], r["status"], r["submission_value"],
                r["submission_status"], r["grading_profile"], r["answer_source"], r["model_fingerprint"],
                r["reference_match"]) for r in rows)
    return c


def changed_keys(keys: dict, k: int, seed: int) -> tuple[dict, set]:
    rng = random.Random(seed)
    picked = rng.sample(sorted(keys), k)
    out = dict(keys)
    for pid in picked:
        out[pid] = 1234.5 if isinstance(out[pid], str) else out[pid] * 1.37 + 11
    return out, {("sample", pid) for pid in picked}


def test_right_keys_raise_no_suspect(sample_keys):
    rows = A.audit({"sample": sample_keys}, collect(sim_rows(sample_keys, seed=1)))
    assert [r.problem_id for r in rows if r.verdict == "suspect"] == []
    assert sum(r.verdict == "ok" for r in rows) >= 40


@pytest.mark.parametrize("seed", range(5))
def test_five_changed_keys_are_found_by_consensus_alone(sample_keys, seed):
    col = collect(sim_rows(sample_keys, seed=seed))
    keys, changed = changed_keys(sample_keys, 5, seed)
    rows = A.audit({"sample": keys}, col)
    recall, precision, flags = A.recall_precision(rows, changed, "consensus")
    assert recall >= 0.8 and precision >= 0.9, (recall, precision, flags)
    for r in rows:
        if "consensus" in r.evidence:  # the value it points to is the true one, and the reference agrees
            assert A.grade_parsed(A.parse_key(r.alternative), sample_keys[r.problem_id], "optagentbench")
            assert "reference" in r.evidence and r.support_formulations == 1 and r.support_models >= 2


def test_independence_counted_in_formulations_alone_misses_a_unique_formulation(sample_keys):
    """Why the default counts models too: every right answer has the one right formulation."""
    keys, changed = changed_keys(sample_keys, 5, 0)
    rows = A.audit({"sample": keys}, collect(sim_rows(sample_keys)), A.AuditSettings(independence="formulations"))
    assert A.recall_precision(rows, changed, "consensus")[0] == 0.0


def test_clones_sharing_a_wrong_program_are_not_consensus_while_the_key_is_reached():
    rows = [row(m, "direct", "b", "p1", s, 7.0, "mut") for m in ("x", "y", "z") for s in range(3)]
    rows += [row("x", "direct", "b", "p1", 9, 5.0, "ref")] * 3
    out = A.audit({"b": {"p1": 5.0}}, collect(rows))
    assert out[0].verdict == "ok" and out[0].key_trajectories == 3


def test_inconclusive_evidence_is_unknown_and_unsolved_answers_are_not_evidence():
    rows = [row("x", "direct", "b", "p1", s, 7.0, "f1") for s in range(5)]  # one model, one formulation
    rows += [row(m, "direct", "b", "p2", s, 7.0, None, source="unsolved") for m in "xyz" for s in range(3)]
    out = {r.problem_id: r for r in A.audit({"b": {"p1": 5.0, "p2": 5.0, "p3": 5.0}}, collect(rows))}
    assert out["p1"].verdict == "unknown" and "1 independent" in out["p1"].why
    assert out["p2"].verdict == "unknown" and out["p2"].why == "no solve-sourced answer"
    assert out["p3"].verdict == "unknown" and out["p3"].trajectories == 0


def test_older_ledgers_without_fingerprints_count_models():
    rows = [row(m, "direct", "b", "p1", s, 7.0, None, source=None) for m in ("x", "y") for s in range(2)]
    out = A.audit({"b": {"p1": 5.0}}, collect(rows), A.AuditSettings(independence="formulations"))[0]
    assert out.verdict == "suspect" and out.evidence == "consensus" and out.alternative == "7"


def test_variants_matched_by_content_not_by_id_or_position():
    orig = {"o1": "A farm grows 3 crops on 100 acres with profit 5 and 7 per acre. Maximize profit.",
            "o2": "A factory makes chairs and tables using 40 hours of labour; a chair takes 2 hours.",
            "o3": "A shop sells 12 kinds of tea and 4 kinds of coffee at prices 3.5 and 6 dollars.",
            "o4": "Ships carry 20 containers across 9 ports with fuel cost 1,200 per trip in total."}
    var = {"v1": "A factory makes chairs and tables using 40 hours of labour; a chair takes 2 hours.",
           "v2": "A farm grows 3 crops on 100 acres with profit 5 and 7 per acre. Maximise profit.",
           "v3": "A shop sells 12 kinds of tea and 4 kinds of coffee at prices 3.5 and 8 dollars.",
           "v9": "Something else entirely: a nurse roster over 14 days and 6 shifts."}
    pairs = {p.original: p for p in A.match_variants(orig, var)}
    assert (pairs["o1"].variant, pairs["o1"].status) == ("v2", "matched")
    assert (pairs["o2"].variant, pairs["o2"].status) == ("v1", "matched")
    assert (pairs["o3"].variant, pairs["o3"].status) == ("v3", "changed")
    assert pairs["o4"].status == "none"
    keys = {"o1": 10.0, "o2": 20.0, "o3": 30.0, "o4": 40.0}
    vkeys = {"v1": 20.0, "v2": 11.0, "v3": 99.0, "v9": 1.0}
    rep = A.variant_report("b", "b@sirl", orig, keys, var, vkeys)
    assert rep.counts() == {"matched": 2, "changed": 1, "ambiguous": 0, "no_counterpart": 1}
    out = {r.problem_id: r for r in A.audit({"b": keys}, None, None, {"b": ("b@sirl", vkeys, rep)})}
    assert (out["o1"].verdict, out["o1"].evidence, out["o1"].alternative) == ("suspect", "variants", "11")
    assert out["o2"].verdict == "ok"
    assert out["o3"].verdict == "unknown"  # other data: a different key is no evidence
    back = {r.problem_id: r for r in A.audit({"b@sirl": vkeys}, None, None, {"b@sirl": ("b", keys, A.invert(rep))})}
    assert back["v2"].verdict == "suspect" and back["v2"].alternative == "10"


def test_an_ambiguous_match_is_refused_and_duplicates_are_found():
    q = "A bakery bakes bread and cake with 30 kg of flour and 12 ovens; bread needs 2 kg."
    pairs = A.match_variants({"o1": q}, {"v1": q.replace("bakes", "makes"), "v2": q.replace("bakes", "cooks")})
    assert pairs[0].status == "ambiguous" and pairs[0].variant is None
    dups = A.find_duplicates({"a": q, "b": q, "c": q.replace("30", "31")}, {"a": 1.0, "b": 2.0, "c": 3.0},
                             "optagentbench")
    assert dups == [("a", "b")]


def test_the_job_writes_the_pinned_files(tmp_path, sample_keys, capsys):
    from opteval.jobs import audit as job

    write_ledger(tmp_path, "synth", sim_rows(sample_keys, samples=3))
    out = tmp_path / "out"
    rc = job.main(["sweep.name=synth", f"sweep.output_dir={tmp_path}", "--out", str(out)])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    df = pd.read_parquet(out / "audit.parquet")
    assert list(df.columns[: len(PINNED)]) == PINNED
    assert len(df) == 46 and (df["verdict"] == "suspect").sum() == 0
    assert set(df["verdict"]) <= {"ok", "suspect", "unknown"}
    assert list(pd.read_csv(out / "audit.csv").columns) == list(df.columns)
    assert "| sample | 46 |" in (out / "audit.md").read_text()
    assert "audited 46 problems from 414 ledger rows" in cap.out


def test_bad_arguments_are_one_line_and_exit_2(tmp_path, capsys):
    from opteval.jobs import audit as job

    assert job.main(["sweep.name=x"]) == 2
    assert "--out DIR is required" in capsys.readouterr().err
    assert job.main([f"sweep.output_dir={tmp_path}", "sweep.name=nope", "--out", str(tmp_path / "o")]) == 2
    assert "no sweep 'nope'" in capsys.readouterr().err
    assert job.main(["--out", str(tmp_path / "o"), "--min-share", "lots", "--benchmarks", "sample"]) == 2
    assert "--min-share takes a number" in capsys.readouterr().err
    assert job.main(["--out", str(tmp_path / "o")]) == 2
    assert "nothing to audit" in capsys.readouterr().err
