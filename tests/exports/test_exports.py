"""A demo sweep exported for other tools and read back with their own readers: inspect_ai's
``read_eval_log``, lm-eval's documented result keys and hashes, and an OpenAI batch-output file
regraded to the ledger's grades. The versions it ran with are in its manifest and MLflow run."""
from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import pytest
from inspect_ai.log import read_eval_log

from opteval.evalcore.ledger_detail import transcript_of
from opteval.evalcore.models.batch import response_row
from opteval.evalcore.problems import load_benchmark
from opteval.jobs import regrade
from opteval.sweepcore.ledger import Ledger
from opteval.sweepcore.tracking.names import ROLE_TAG
from tests.exports.conftest import SWEEP, opteval, sweep_args

pytestmark = pytest.mark.ray


def ledger_rows(out: Path) -> dict[str, dict]:
    led = Ledger.open_existing(str(out), SWEEP)
    cols = ["key", "method", "problem_id", "sample", "correct", "prompt_tokens", "completion_tokens", "calls", "transcript"]
    return {r["key"]: r for r in led.read_table(columns=cols).to_pylist()}


def test_inspect_logs_hold_every_trajectory_with_the_ledgers_scores_and_tokens(demo, tmp_path):
    done = opteval("export", "inspect", *sweep_args(demo), "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    rows = ledger_rows(demo)
    seen = {}
    logs = sorted(tmp_path.glob("*.eval"))
    assert len(logs) == 2  # one per (model, method, benchmark)
    for path in logs:
        log = read_eval_log(str(path))
        samples, results = log.samples or [], log.results
        assert log.status == "success" and log.eval.model == "sim-fast" and results is not None
        for s in samples:
            seen[s.metadata["opteval_key"]] = s
        correct = sum((s.scores or {})["correct"].value == "C" for s in samples)
        assert results.scores[0].metrics["accuracy"].value == pytest.approx(correct / len(samples))
    assert set(seen) == set(rows)
    for key, row in rows.items():
        s = seen[key]
        assert ((s.scores or {})["correct"].value == "C") == row["correct"]
        usage = s.model_usage["sim-fast"]
        assert (usage.input_tokens, usage.output_tokens) == (row["prompt_tokens"], row["completion_tokens"])
        assert s.id == row["problem_id"] and s.epoch == row["sample"] + 1 and s.error is None
        assert [m.role for m in s.messages][-1] == "assistant"


# lm-eval 0.4.13's lm_eval/result_schema.py: EvalResults and SampleResult, the keys we write
RESULT_KEYS = {"results", "group_subtasks", "configs", "versions", "n-shot", "higher_is_better", "n-samples",
               "config", "git_hash", "date", "model_name", "model_name_sanitized"}
SAMPLE_KEYS = {"doc_id", "doc", "target", "arguments", "resps", "filtered_resps", "filter", "metrics",
               "doc_hash", "prompt_hash", "target_hash"}


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_lm_eval_results_and_samples_follow_lm_evals_schema(demo, tmp_path):
    done = opteval("export", "lm-eval", *sweep_args(demo), "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    rows = ledger_rows(demo)
    _, key = load_benchmark("sample")
    for method in ("direct", "opticycle"):
        folder = tmp_path / f"sim-fast__{method}"
        [results_file] = folder.glob("results_*.json")
        res = json.loads(results_file.read_text())
        assert RESULT_KEYS <= set(res) and set(res) <= RESULT_KEYS
        assert isinstance(res["date"], float) and isinstance(res["git_hash"], str)
        task = res["results"]["sample"]
        mine = [r for r in rows.values() if r["method"] == method]
        accs = [1.0 if r["correct"] else 0.0 for r in mine]
        mean = sum(accs) / len(accs)
        assert task["acc,none"] == pytest.approx(mean)
        assert task["acc_stderr,none"] == pytest.approx(
            math.sqrt(sum((a - mean) ** 2 for a in accs) / (len(accs) - 1) / len(accs)))
        assert task["alias"] == "sample" and task["sample_len"] == len(mine)
        assert res["n-samples"]["sample"] == {"original": len(mine), "effective": len(mine)}
        assert res["higher_is_better"]["sample"] == {"acc": True}
        assert all(isinstance(v, (str, bool, type(None))) for v in res["configs"]["sample"].values())
        [samples_file] = folder.glob("samples_sample_*.jsonl")
        lines = [json.loads(x) for x in samples_file.read_text().splitlines()]
        assert len(lines) == len(mine)
        for rec in lines:
            assert SAMPLE_KEYS <= set(rec)
            assert rec["doc_hash"] == sha(json.dumps(rec["doc"], indent=2, ensure_ascii=False))
            assert rec["prompt_hash"] == sha(rec["arguments"]["gen_args_0"]["arg_0"])
            assert rec["target"] == str(key[rec["doc"]["problem_id"]]) and rec["target_hash"] == sha(rec["target"])
            assert rec["doc"]["question"] and rec["arguments"]["gen_args_0"]["arg_0"]
            assert rec["acc"] == (1.0 if rows[rec["opteval_key"]]["correct"] else 0.0)


def test_a_batch_output_file_regrades_to_the_ledgers_grades(demo, tmp_path, capsys):
    rows = [r for r in ledger_rows(demo).values() if r["method"] == "direct"]
    batch = tmp_path / "output.jsonl"
    with batch.open("w") as fh:
        for r in rows:
            [call] = transcript_of(r["calls"], r["transcript"])
            fh.write(json.dumps(response_row(r["key"], call["completion"], {"prompt_tokens": 1})) + "\n")
    _, key = load_benchmark("sample")
    answers = tmp_path / "answers.jsonl"
    answers.write_text("".join(json.dumps({"id": r["problem_id"], "answer": key[r["problem_id"]]}) + "\n"
                               for r in rows))
    details = tmp_path / "details.jsonl"
    assert regrade.main(["--completions", str(batch), "--answers", str(answers), "--details", str(details),
                         "--workers", "1"]) == 0
    got = {(d["id"], d["sample"]): d["reason"] == "correct" for d in map(json.loads, details.read_text().splitlines())}
    assert got == {(r["problem_id"], r["sample"]): r["correct"] for r in rows}
    assert f"accuracy {sum(r['correct'] for r in rows)}/{len(rows)}" in capsys.readouterr().out


def test_batch_input_lists_every_recorded_call(demo, tmp_path):
    done = opteval("export", "batch-input", *sweep_args(demo), "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    lines = [json.loads(x) for x in (tmp_path / "requests.jsonl").read_text().splitlines()]
    calls = sum(len(transcript_of(r["calls"], r["transcript"])) for r in ledger_rows(demo).values())
    assert len(lines) == calls
    assert all(x["method"] == "POST" and x["url"] == "/v1/chat/completions" and x["body"]["messages"] for x in lines)


def test_the_manifest_and_mlflow_run_list_the_resolved_versions(demo):
    import mlflow

    man = json.loads((demo / SWEEP / "manifest.json").read_text())
    deps = man["dependencies"]
    assert deps["pulp"].startswith("3.") and deps["python"] and deps["ray"]
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{demo}/mlflow.db")
    experiments = [e.experiment_id for e in client.search_experiments()]
    [parent] = [r for r in client.search_runs(experiments) if r.data.tags.get(ROLE_TAG) == "parent"]
    assert parent.data.tags["dep.pulp"] == deps["pulp"]
