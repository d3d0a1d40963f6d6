"""A sweep as lm-evaluation-harness output: per (model, method) a ``results_<date>.json``
(lm-eval's ``EvalResults`` keys: per task = benchmark ``acc,none`` and ``acc_stderr,none``,
``n-samples``, ``configs``, ``config``, ``git_hash``, ``date``) and one
``samples_<benchmark>_<date>.jsonl`` per benchmark (lm-eval's ``SampleResult``, with
``doc_hash`` / ``prompt_hash`` / ``target_hash`` computed as lm-eval does: sha256 hex of the
doc's JSON with indent 2, of the prompt, of ``str(target)``). Leaderboard scripts that read
``--log_samples`` output read these. The method is part of the "model" lm-eval names
(``<model>__<method>``): a harness is what a row of opteval's tables compares."""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from opteval.evalcore.exports.cells import Cell, Group

METRIC = "acc"
FILTER = "none"


def hash_string(text: str) -> str:
    """lm-eval's ``hash_string``: sha256 hex digest of the UTF-8 text."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def mean_stderr(values: list[float]) -> float:
    """lm-eval's ``mean_stderr``: sample standard deviation (n - 1) over sqrt(n); NaN below 2."""
    n = len(values)
    if n < 2:
        return float("nan")
    mu = sum(values) / n
    return math.sqrt(sum((v - mu) ** 2 for v in values) / (n - 1) / n)


def sanitize(name: str) -> str:
    """lm-eval's ``sanitize_model_name``."""
    return re.sub(r"[\"<>:/|\\?*\[\]]+", "__", name)


def sample_record(index: int, cell: Cell, question: str | None, answer: Any) -> dict[str, Any]:
    """One ``samples_*.jsonl`` line; ``acc`` is 1.0 or 0.0 (a missing trajectory 0.0)."""
    row = cell.row or {}
    doc = {"problem_id": cell.problem_id, "sample": cell.sample, "question": question}
    target = "" if answer is None else str(answer)
    prompt, completion = cell.prompt(), cell.completion()
    submission = "" if row.get("submission") is None else str(row["submission"])
    return {
        "doc_id": index, "doc": doc, "target": target,
        "arguments": {"gen_args_0": {"arg_0": prompt, "arg_1": {}}},
        "resps": [[completion]], "filtered_resps": [submission], "filter": FILTER, "metrics": [METRIC],
        "doc_hash": hash_string(json.dumps(doc, indent=2, ensure_ascii=False, default=str)),
        "prompt_hash": hash_string(prompt), "target_hash": hash_string(target),
        METRIC: 1.0 if cell.correct else 0.0,
        "opteval_key": cell.key, "status": row.get("status", "not run"),
        "grading_profile": row.get("grading_profile"), "simulated": bool(row.get("simulated")),
    }


def results(model: str, method: str, by_benchmark: Mapping[str, list[Cell]], *, sweep: str,
            git_hash: str | None, date: float, config: Mapping[str, Any]) -> dict[str, Any]:
    """The results JSON of one (model, method)."""
    res, configs, n_samples = {}, {}, {}
    for bench, cells in by_benchmark.items():
        accs = [1.0 if c.correct else 0.0 for c in cells]
        n = len(accs)
        stderr = mean_stderr(accs)
        res[bench] = {"alias": bench, "name": bench, "sample_len": n,
                      f"{METRIC},{FILTER}": sum(accs) / n if n else 0.0,
                      f"{METRIC}_stderr,{FILTER}": "N/A" if math.isnan(stderr) else stderr}
        configs[bench] = {"task": bench, "output_type": "generate_until", "dataset_path": bench,
                          "description": f"opteval sweep {sweep}: method {method}", "should_decontaminate": False}
        n_samples[bench] = {"original": n, "effective": n}
    name = f"{model}__{method}"
    return {
        "results": res, "group_subtasks": {b: [] for b in res}, "configs": configs,
        "versions": dict.fromkeys(res, None), "n-shot": dict.fromkeys(res, 0),
        "higher_is_better": {b: {METRIC: True} for b in res}, "n-samples": n_samples,
        "config": {"model": "opteval", "model_args": {"model": model, "method": method, "sweep": sweep},
                   "batch_size": None, "device": None, "limit": None, **config},
        "git_hash": git_hash or "unknown", "date": date,
        "model_name": name, "model_name_sanitized": sanitize(name),
    }


def write(groups: Mapping[Group, list[Cell]], out: Path, *, sweep: str, git_hash: str | None,
          questions: Mapping[tuple[str, str], str] | None = None,
          answers: Mapping[tuple[str, str], Any] | None = None,
          config: Mapping[str, Any] | None = None, now: _dt.datetime | None = None) -> list[Path]:
    """Write every (model, method)'s results and samples under ``out/<model>__<method>/``."""
    now = now or _dt.datetime.now(_dt.UTC)
    stamp = now.strftime("%Y-%m-%dT%H-%M-%S.%f")
    questions, answers = questions or {}, answers or {}
    per_run: dict[tuple[str, str], dict[str, list[Cell]]] = {}
    for (model, method, bench), cells in groups.items():
        per_run.setdefault((model, method), {})[bench] = cells
    paths = []
    for (model, method), by_bench in per_run.items():
        folder = out / sanitize(f"{model}__{method}")
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"results_{stamp}.json"
        path.write_text(json.dumps(results(model, method, by_bench, sweep=sweep, git_hash=git_hash,
                                           date=now.timestamp(), config=config or {}), indent=2, default=str))
        paths.append(path)
        for bench, cells in by_bench.items():
            spath = folder / f"samples_{bench}_{stamp}.jsonl"
            with spath.open("w", encoding="utf-8") as fh:
                for i, c in enumerate(cells):
                    rec = sample_record(i, c, questions.get((bench, c.problem_id)), answers.get((bench, c.problem_id)))
                    fh.write(json.dumps(rec, ensure_ascii=False, default=str) + "\n")
            paths.append(spath)
    return paths
